"""Peak memory of the process tree counts children, not only this process."""

from __future__ import annotations

import subprocess
import sys
import time

from legorl.observe.memory import TreeMemory, tree_rss_bytes


def test_a_child_holding_memory_raises_the_tree_peak():
    hold = 300 * 2**20
    alone = tree_rss_bytes()
    code = f"b = bytearray({hold}); b[::4096] = b'x' * len(b[::4096]); import time; time.sleep(30)"
    with TreeMemory(interval=0.05) as mem:
        child = subprocess.Popen([sys.executable, "-c", code])
        try:
            deadline = time.monotonic() + 20
            while mem.peak_bytes < alone + hold and time.monotonic() < deadline:
                time.sleep(0.1)
        finally:
            child.kill()
            child.wait()
    assert mem.peak_bytes >= alone + hold  # the child's touched pages were counted
    assert tree_rss_bytes() < alone + hold  # and are gone with it; the peak remembers them
    assert mem.peak_gb == mem.peak_bytes / 2**30
