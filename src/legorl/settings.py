"""Machine settings from the environment: the one place a ``LEGORL_*`` knob is read.

The run config (:mod:`legorl.config`) says what a run does; these say where this machine keeps its
caches and what its kernel allows, so they are not part of a config file. :func:`settings` reads
``os.environ`` on every call (cheap; tests and callers may change the environment between calls).

=========================== ========================== ===============================================
variable                    field                      meaning
=========================== ========================== ===============================================
``LEGORL_HOME``             ``legorl_home``            caches: models, images, sandboxes, task sources,
                                                       npm/pip caches (default ``~/.cache/legorl``)
``LEGORL_IMAGE_CACHE_BYTES`` ``image_cache_bytes``     LRU bound of the image cache (default 20 GiB)
``LEGORL_NO_CGROUPS``       ``cgroups_enabled``        ``1``: bwrap sandboxes use rlimits only, no
                                                       per-sandbox pids/memory cgroup
``LEGORL_BWRAP_USERNS``     ``bwrap_userns``           ``0``: bwrap sandboxes run without a user
                                                       namespace (default: one when bwrap can make it)
``LEGORL_ALLOCATOR``         ``allocator``              ``jemalloc`` (default: the `legorl` program
                                                       re-executes itself under jemalloc where the
                                                       machine has it, :mod:`legorl.allocator`) or
                                                       ``system`` (glibc's malloc)
``LEGORL_SWEBENCH_DIR``     ``swebench_dir``           SWE-bench's parquet files and ``repos/`` bundles
                                                       (default: ``../shared/data/swebench`` beside a
                                                       source checkout when present, else
                                                       ``$LEGORL_HOME/swebench``)
=========================== ========================== ===============================================

Variables the project sets for its own programs inside a sandbox (``LEGORL_SESSION_TOKEN``,
``LEGORL_API_KEY``, ``LEGORL_RUNNER``, ...) are plumbing, not settings.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from legorl.errors import ConfigError

DEFAULT_IMAGE_CACHE_BYTES = 20 * 1024**3
ALLOCATORS = ("jemalloc", "system")
# src/legorl/settings.py -> the source checkout (meaningful for a checkout, harmless for a wheel)
_CHECKOUT = Path(__file__).resolve().parents[2]
_TRUE = ("1", "true", "yes", "on")
_FALSE = ("", "0", "false", "no", "off")


def _flag(env: Mapping[str, str], name: str, default: bool) -> bool:
    raw = env.get(name)
    if raw is None:
        return default
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ConfigError(f"{name}={raw!r}: expected one of {', '.join(_TRUE)} or {', '.join(v for v in _FALSE if v)}")


@dataclass(frozen=True)
class Settings:
    legorl_home: Path
    image_cache_bytes: int = DEFAULT_IMAGE_CACHE_BYTES
    cgroups_enabled: bool = True
    bwrap_userns: bool = True  # False: never; True: when bwrap can create a user namespace here
    swebench_dir: Path = Path()
    allocator: str = "jemalloc"  # or "system"

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        env = os.environ if env is None else env
        home = Path(env.get("LEGORL_HOME") or Path.home() / ".cache" / "legorl").expanduser()
        raw_bytes = env.get("LEGORL_IMAGE_CACHE_BYTES")
        if raw_bytes:
            try:
                cache_bytes = int(raw_bytes)
            except ValueError:
                raise ConfigError(f"LEGORL_IMAGE_CACHE_BYTES={raw_bytes!r}: expected a whole number of bytes") from None
            if cache_bytes < 0:
                raise ConfigError(f"LEGORL_IMAGE_CACHE_BYTES={raw_bytes!r}: must not be negative")
        else:
            cache_bytes = DEFAULT_IMAGE_CACHE_BYTES
        swebench = env.get("LEGORL_SWEBENCH_DIR")
        if swebench:
            swebench_dir = Path(swebench).expanduser()
        else:
            beside_checkout = _CHECKOUT.parent / "shared" / "data" / "swebench"
            swebench_dir = beside_checkout if beside_checkout.is_dir() else home / "swebench"
        allocator = (env.get("LEGORL_ALLOCATOR") or "jemalloc").strip().lower()
        if allocator not in ALLOCATORS:
            raise ConfigError(f"LEGORL_ALLOCATOR={env['LEGORL_ALLOCATOR']!r}: expected one of {', '.join(ALLOCATORS)}")
        return cls(
            legorl_home=home,
            allocator=allocator,
            swebench_dir=swebench_dir,
            image_cache_bytes=cache_bytes,
            cgroups_enabled=not _flag(env, "LEGORL_NO_CGROUPS", False),
            bwrap_userns=_flag(env, "LEGORL_BWRAP_USERNS", True),
        )


def settings() -> Settings:
    """The settings as the environment says now."""
    return Settings.from_env()


def legorl_home() -> Path:
    """``$LEGORL_HOME`` (default ``~/.cache/legorl``): the root of every cache."""
    return settings().legorl_home


__all__ = ["ALLOCATORS", "DEFAULT_IMAGE_CACHE_BYTES", "Settings", "legorl_home", "settings"]
