"""The heap allocator of the `legorl` program: jemalloc where the machine has it, else glibc's.

Why: glibc's malloc keeps a training step's freed activations resident in a fragmented heap. On the
trainer bench (SmolLM2-135M fp32, 16 × 94 tokens, gradient checkpointing) a LoRA step peaks at
2.7 GB RSS under glibc and at 1.3 GB under jemalloc, full fine-tuning at 3.4 GB against 2.7 GB
(docs/lora.md). An allocator is chosen before a process starts (``LD_PRELOAD``), so the program
re-executes itself once with it (:func:`reexec_with_jemalloc`); its children inherit the choice, as
in vLLM's CPU images. ``LEGORL_ALLOCATOR=system`` keeps glibc's (:mod:`legorl.settings`).
"""

from __future__ import annotations

import ctypes.util
import os
import sys
from collections.abc import Mapping
from pathlib import Path

__all__ = ["allocator_in_use", "jemalloc_library", "reexec_with_jemalloc", "with_jemalloc"]

# set on the re-executed process: never try twice (a library the loader refused stays refused)
_REEXEC_MARK = "LEGORL_ALLOCATOR_REEXEC"
# jemalloc keeps freed pages for reuse instead of returning them 10 s later (its default): a training
# step frees and reallocates the same sizes every few seconds, and returned pages fault back in zeroed
_JEMALLOC_CONF = "background_thread:true,dirty_decay_ms:-1,muzzy_decay_ms:-1"


def jemalloc_library() -> str | None:
    """The shared library the loader knows as jemalloc (Debian: ``libjemalloc.so.2``), or None."""
    return ctypes.util.find_library("jemalloc")


def allocator_in_use(maps: Path = Path("/proc/self/maps")) -> str:
    """``jemalloc`` if this process has jemalloc mapped, else ``system``."""
    try:
        return "jemalloc" if "libjemalloc" in maps.read_text() else "system"
    except OSError:
        return "system"


def with_jemalloc(env: Mapping[str, str], library: str) -> dict[str, str]:
    """``env`` with ``library`` preloaded ahead of what ``LD_PRELOAD`` had, and jemalloc's tuning
    unless ``MALLOC_CONF`` already says something."""
    out = dict(env)
    out["LD_PRELOAD"] = ":".join(p for p in (library, env.get("LD_PRELOAD", "")) if p)  # as vLLM joins it
    out.setdefault("MALLOC_CONF", _JEMALLOC_CONF)
    return out


def reexec_with_jemalloc() -> None:
    """Replace this process by itself under jemalloc, when the settings ask for it, the machine has
    it and this process is not under it yet; otherwise return and run as is."""
    from legorl.settings import settings

    if settings().allocator != "jemalloc" or os.environ.get(_REEXEC_MARK) or allocator_in_use() == "jemalloc":
        return
    library = jemalloc_library()
    if library is None:
        return
    env = with_jemalloc(os.environ, library) | {_REEXEC_MARK: "1"}
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, sys.orig_argv, env)
