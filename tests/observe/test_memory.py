"""Peak memory of the process tree counts children, not only this process."""

from __future__ import annotations

import subprocess
import sys
import time

from legorl.observe.memory import TreeMemory, tree_rss_bytes, tree_usage


def test_a_child_holding_memory_raises_the_tree_peak():
    hold = 300 * 2**20
    alone = tree_usage()
    code = f"b = bytearray({hold}); b[::4096] = b'x' * len(b[::4096]); import time; time.sleep(30)"
    with TreeMemory(interval=0.05) as mem:
        child = subprocess.Popen([sys.executable, "-c", code])
        try:
            deadline = time.monotonic() + 20
            while mem.peak_bytes < alone.pss_bytes + hold and time.monotonic() < deadline:
                time.sleep(0.1)
        finally:
            child.kill()
            child.wait()
    # the child's touched pages (its own: counted whole in both measures)
    assert mem.peak_bytes >= alone.pss_bytes + hold
    assert mem.peak_rss_bytes >= alone.rss_bytes + hold
    assert tree_rss_bytes() < alone.rss_bytes + hold  # and are gone with it; the peak remembers them
    assert mem.peak_gib == mem.peak_bytes / 2**30 and mem.peak_processes >= 2


def test_proportional_memory_counts_shared_pages_once():
    """Children of one parent share its pages after fork: summed RSS counts them in each child,
    the proportional sum once."""
    code = "import time; time.sleep(30)"
    children = [subprocess.Popen([sys.executable, "-c", code]) for _ in range(4)]
    try:
        time.sleep(1.0)
        usage = tree_usage()
    finally:
        for c in children:
            c.kill()
            c.wait()
    assert usage.processes >= 5
    assert usage.pss_bytes < usage.rss_bytes  # the interpreters' shared code counted once, not five times


def test_the_watcher_takes_at_most_its_share_of_a_core(monkeypatch):
    """A sample that costs 50 ms of CPU, a 10% ceiling: the watcher waits 0.5 s after each one,
    however short ``interval`` is."""
    calls = []

    def costly_sample(self):
        calls.append(time.monotonic())
        t0 = time.thread_time()
        while time.thread_time() - t0 < 0.05:
            pass

    monkeypatch.setattr(TreeMemory, "sample", costly_sample)
    with TreeMemory(interval=0.01, max_duty=0.1):
        time.sleep(1.6)
    watched = calls[1:-1]  # the first and last samples are the block's own, at its start and end
    assert 2 <= len(watched) <= 4, len(watched)
    assert all(b - a >= 0.5 for a, b in zip(watched, watched[1:]))
