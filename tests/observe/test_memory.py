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
