"""CPU time of the miner and of everything it starts, sandboxes included.

``getrusage(RUSAGE_CHILDREN)`` cannot see a sandbox: bwrap's PID namespace reaps the processes
inside, and their time never reaches the process that started bwrap. Where this process may write
the ``cpuacct`` cgroup hierarchy (root on cgroup v1, as here), :func:`cpu_seconds` moves it into a
cgroup of its own, ``<own>/legorl-cpu-<pid>``, once: every process it starts afterwards — sandboxes
join other controllers' cgroups only (:mod:`legorl.sandbox.cgroup`) — stays in it, and
``cpuacct.usage`` counts them all. The process moves back and the cgroup goes at exit. Elsewhere it
falls back to ``getrusage`` of the process and its waited children (:data:`SOURCE` says which).
"""

from __future__ import annotations

import atexit
import os
import resource
import threading
from pathlib import Path

_ROOT = Path("/sys/fs/cgroup/cpuacct")
_lock = threading.Lock()
_group: Path | None = None
_tried = False
SOURCE = {"value": "rusage"}  # "cpuacct" once the cgroup is in place


def _own_path() -> str | None:
    try:
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, controllers, path = line.split(":", 2)
            if "cpuacct" in controllers.split(","):
                return path
    except OSError:
        return None
    return None


def _enter() -> Path | None:
    own = _own_path()
    if own is None or os.geteuid() != 0 or not (_ROOT / "cgroup.procs").exists():
        return None
    parent = _ROOT / own.lstrip("/")
    group = parent / f"legorl-cpu-{os.getpid()}"
    try:
        group.mkdir(exist_ok=True)
        (group / "cgroup.procs").write_text(str(os.getpid()))
    except OSError:
        return None

    def leave() -> None:
        try:
            (parent / "cgroup.procs").write_text(str(os.getpid()))
            group.rmdir()
        except OSError:
            pass

    atexit.register(leave)
    return group


def cpu_seconds() -> float:
    """User + system CPU seconds of this process and everything it started since the first call."""
    global _group, _tried
    with _lock:
        if not _tried:
            _tried = True
            _group = _enter()
            if _group is not None:
                SOURCE["value"] = "cpuacct"
    if _group is not None:
        try:
            return int((_group / "cpuacct.usage").read_text()) / 1e9
        except (OSError, ValueError):
            pass
    me, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + children.ru_utime + children.ru_stime
