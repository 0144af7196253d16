"""A per-sandbox cgroup: ``pids.max`` and a memory limit (no swap) that hold for root too, where
rlimits do not (real root ignores ``RLIMIT_NPROC``).

Created under this process's own cgroup (``<own>/legorl/<sandbox>``) when the cgroup filesystem is
writable here: root on cgroup v1 (the ``pids`` and ``memory`` controllers) or a delegated v2 subtree.
Elsewhere, or with ``LEGORL_NO_CGROUPS=1`` (:mod:`legorl.settings`), there is none and the backend
relies on rlimits only. An exec joins the cgroup before its sandbox starts through
:meth:`SandboxCgroup.join_prefix`: a ``sh`` shim writes its own pid to each ``cgroup.procs`` and then
``exec`` s the command (exit status 125 when it cannot), so nothing of the exec runs outside it.
:meth:`SandboxCgroup.counters` tells, by their difference before and after an exec, whether the pids
limit refused a fork or the memory limit killed a process.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path

from legorl.settings import settings

CGROUP_ROOT = Path("/sys/fs/cgroup")
JOIN_FAILED = 125  # exit status of the shim when the exec cannot join the cgroup
_SHIM = f'for f in "$@"; do [ "$f" = -- ] && break; echo $$ > "$f" || exit {JOIN_FAILED}; shift; done; shift; exec "$@"'


def _own_cgroups() -> dict[str, str] | None:
    """controller (``""`` for v2) → this process's cgroup path, from ``/proc/self/cgroup``."""
    own: dict[str, str] = {}
    try:
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, ctrls, path = line.split(":", 2)
            for c in ctrls.split(","):
                own[c] = path
    except OSError:
        return None
    return own


class SandboxCgroup:
    """The cgroup directories of one sandbox (v1: one per controller; v2: one)."""

    def __init__(self, dirs: dict[str, Path], max_pids: int, memory_bytes: int):
        self.dirs = dirs
        self.max_pids = max_pids
        self.memory_bytes = memory_bytes

    @classmethod
    def create(cls, name: str, max_pids: int, memory_mb: int) -> SandboxCgroup | None:
        """The cgroup ``name`` with these limits, or None where cgroups are off or not writable."""
        if os.geteuid() != 0 or not settings().cgroups_enabled:
            return None
        own = _own_cgroups()
        if own is None:
            return None
        memory_bytes = memory_mb * 1024 * 1024
        dirs: dict[str, Path] = {}
        try:
            if (CGROUP_ROOT / "pids" / "cgroup.procs").exists():  # v1
                for ctrl in ("pids", "memory"):
                    if ctrl not in own:
                        continue
                    d = CGROUP_ROOT / ctrl / own[ctrl].lstrip("/") / "legorl" / name
                    d.mkdir(parents=True, exist_ok=True)
                    dirs[ctrl] = d
                if "pids" in dirs:
                    (dirs["pids"] / "pids.max").write_text(str(max_pids))
                if "memory" in dirs:
                    (dirs["memory"] / "memory.limit_in_bytes").write_text(str(memory_bytes))
                    with contextlib.suppress(OSError):
                        (dirs["memory"] / "memory.memsw.limit_in_bytes").write_text(str(memory_bytes))
            elif "" in own and (CGROUP_ROOT / "cgroup.controllers").exists():  # v2 (delegated)
                parent = CGROUP_ROOT / own[""].lstrip("/") / "legorl"
                parent.mkdir(exist_ok=True)
                with contextlib.suppress(OSError):
                    (parent / "cgroup.subtree_control").write_text("+pids +memory")
                d = parent / name
                d.mkdir(exist_ok=True)
                dirs["v2"] = d
                (d / "pids.max").write_text(str(max_pids))
                (d / "memory.max").write_text(str(memory_bytes))
                with contextlib.suppress(OSError):
                    (d / "memory.swap.max").write_text("0")
        except OSError:
            cls(dirs, max_pids, memory_bytes).remove()
            return None
        return cls(dirs, max_pids, memory_bytes) if dirs else None

    @property
    def procs_files(self) -> list[str]:
        return [str(d / "cgroup.procs") for d in self.dirs.values()]

    def join_prefix(self) -> list[str]:
        """Command prefix that moves the command into this cgroup, then runs it."""
        return ["/bin/sh", "-c", _SHIM, "sh", *self.procs_files, "--"]

    def counters(self) -> tuple[int, int]:
        """(times the pids limit refused a fork, OOM kills)."""
        pids_hits = ooms = 0
        for d in self.dirs.values():
            for fname, field in (
                ("pids.events", "max"),
                ("memory.oom_control", "oom_kill"),
                ("memory.events", "oom_kill"),
            ):
                with contextlib.suppress(OSError, ValueError):
                    for line in (d / fname).read_text().splitlines():
                        k, _, v = line.partition(" ")
                        if k == field:
                            if fname == "pids.events":
                                pids_hits += int(v)
                            else:
                                ooms += int(v)
        return pids_hits, ooms

    def kill_all(self) -> None:
        for d in self.dirs.values():
            with contextlib.suppress(OSError, ValueError):
                for pid in (d / "cgroup.procs").read_text().split():
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.kill(int(pid), signal.SIGKILL)

    def remove(self) -> None:
        """Remove the cgroup, killing what is still in it (retried: a killed process leaves late)."""
        for d in self.dirs.values():
            for _ in range(50):
                try:
                    d.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    self.kill_all()
                    time.sleep(0.02)


__all__ = ["JOIN_FAILED", "SandboxCgroup"]
