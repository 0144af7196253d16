"""Resident memory of a whole process tree — this process, its engine and trainer threads, and
every child it starts (harness programs, sandboxes, graders) — and handing freed memory back.

``getrusage`` reports one process's peak (or the largest child's), not what the machine had to
hold at once, so a background thread samples the summed RSS of the tree every ``interval``
seconds and keeps the maximum. The sum counts pages that processes share (libraries mapped by
several) once per process: an upper bound of what the tree needs, the safe side for a budget.
"""

from __future__ import annotations

import ctypes
import gc
import threading
from types import TracebackType

import psutil

__all__ = ["TreeMemory", "release_free_memory", "tree_rss_bytes"]


def release_free_memory() -> None:
    """Hand memory the process has freed back to the OS. glibc keeps freed heap in its per-thread
    arenas: without this, a training step's gigabytes of activations and gradients (freed once the
    optimiser has stepped) would stay resident through the next rollouts, and grow with each step."""
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc (macOS, musl): nothing to trim
        pass


def tree_rss_bytes(root: psutil.Process | None = None) -> int:
    """Summed resident memory of ``root`` (default: this process) and all its descendants now."""
    root = root or psutil.Process()
    total = 0
    for p in [root, *root.children(recursive=True)]:
        try:
            total += p.memory_info().rss
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue  # ended between listing and reading: it holds nothing now
    return total


class TreeMemory:
    """``with TreeMemory() as mem: ...`` then ``mem.peak_bytes``: the largest summed RSS of this
    process tree seen while the block ran (sampled every ``interval`` s, and at its start and end)."""

    def __init__(self, interval: float = 0.5) -> None:
        self.interval = interval
        self.peak_bytes = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._root = psutil.Process()

    def sample(self) -> int:
        now = tree_rss_bytes(self._root)
        self.peak_bytes = max(self.peak_bytes, now)
        return now

    def _watch(self) -> None:
        while not self._stop.wait(self.interval):
            self.sample()

    def __enter__(self) -> TreeMemory:
        self.sample()
        self._thread = threading.Thread(target=self._watch, name="legorl-tree-memory", daemon=True)
        self._thread.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.sample()

    @property
    def peak_gb(self) -> float:
        return self.peak_bytes / 2**30
