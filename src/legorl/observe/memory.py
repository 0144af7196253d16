"""Resident memory of a whole process tree — this process, its engine and trainer threads, and
every child it starts (harness programs, sandboxes, graders) — and handing freed memory back.

``getrusage`` reports one process's peak (or the largest child's), not what the machine had to
hold at once, so a background thread samples the tree every ``interval`` seconds and keeps two
maxima of what the tree holds together:

* **proportional** (PSS, Linux): each page counted once across the processes that map it (a page
  shared by n processes counts 1/n in each). Summed over the tree this is the memory the tree
  holds: what the machine must have. The figure a budget is checked against.
* **summed RSS**: every process's resident set added up, so a page that 32 sandboxed Python
  interpreters share (the interpreter's own code, its libraries) counts 32 times. An upper bound,
  reported beside it; it is also the fallback where PSS cannot be read.
"""

from __future__ import annotations

import ctypes
import gc
import threading
import time
from dataclasses import dataclass
from types import TracebackType

import psutil

__all__ = ["TreeMemory", "TreeUsage", "release_free_memory", "tree_rss_bytes", "tree_usage"]


def release_free_memory() -> None:
    """Hand memory the process has freed back to the OS. glibc keeps freed heap in its per-thread
    arenas: without this, a training step's gigabytes of activations and gradients (freed once the
    optimiser has stepped) would stay resident through the next rollouts, and grow with each step."""
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc (macOS, musl): nothing to trim
        pass


@dataclass(frozen=True)
class TreeUsage:
    """One sample of a process tree: summed RSS and summed PSS (bytes), and how many processes."""

    rss_bytes: int
    pss_bytes: int
    processes: int


def _tree(root: psutil.Process | None) -> list[psutil.Process]:
    root = root or psutil.Process()
    try:
        return [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def tree_usage(root: psutil.Process | None = None) -> TreeUsage:
    """Summed RSS and PSS of ``root`` (default: this process) and all its descendants now. PSS
    falls back to RSS for a process whose proportional size cannot be read (not Linux)."""
    rss = pss = n = 0
    for p in _tree(root):
        try:
            full = p.memory_full_info()
        except (psutil.NoSuchProcess, psutil.ZombieProcess):
            continue  # ended between listing and reading: it holds nothing now
        except psutil.AccessDenied:
            try:
                r = p.memory_info().rss
            except psutil.Error:
                continue
            rss, pss, n = rss + r, pss + r, n + 1
            continue
        rss += full.rss
        pss += getattr(full, "pss", full.rss)
        n += 1
    return TreeUsage(rss, pss, n)


def tree_rss_bytes(root: psutil.Process | None = None) -> int:
    """Summed resident memory of ``root`` (default: this process) and all its descendants now."""
    total = 0
    for p in _tree(root):
        try:
            total += p.memory_info().rss
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue  # ended between listing and reading: it holds nothing now
    return total


class TreeMemory:
    """``with TreeMemory() as mem: ...`` then ``mem.peak_bytes`` (proportional, the tree's own
    memory) and ``mem.peak_rss_bytes`` (summed RSS, shared pages once per process): the largest
    values seen while the block ran (sampled every ``interval`` s, and at its start and end).

    Reading a tree's proportional sizes walks every process's page tables (tens of milliseconds for
    a trainer and its sandboxes): the wait after a sample is at least ``1 / max_duty`` times what it
    cost, so the watcher never takes more than that share of a core from the run it measures."""

    def __init__(self, interval: float = 0.5, max_duty: float = 0.02) -> None:
        self.interval = interval
        self.max_duty = max_duty
        self.peak_bytes = 0
        self.peak_rss_bytes = 0
        self.peak_processes = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._root = psutil.Process()

    def sample(self) -> TreeUsage:
        now = tree_usage(self._root)
        self.peak_bytes = max(self.peak_bytes, now.pss_bytes)
        self.peak_rss_bytes = max(self.peak_rss_bytes, now.rss_bytes)
        self.peak_processes = max(self.peak_processes, now.processes)
        return now

    def _watch(self) -> None:
        wait = self.interval
        while not self._stop.wait(wait):
            t0 = time.thread_time()  # this thread's CPU: the sample's cost to the run, not its wall time
            self.sample()
            wait = max(self.interval, (time.thread_time() - t0) / self.max_duty)

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
    def peak_gib(self) -> float:
        return self.peak_bytes / 2**30

    @property
    def peak_rss_gib(self) -> float:
        return self.peak_rss_bytes / 2**30
