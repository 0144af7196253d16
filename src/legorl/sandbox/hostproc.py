"""Waiting on a host-side sandbox process with a deadline, shared by the sandbox backends.

``Popen.wait(timeout=...)`` polls with a sleep that doubles up to 50 ms, so a command that ends
after 3 ms is noticed tens of milliseconds later — most of a sandbox exec's latency on a hit.
:func:`wait_with_deadline` blocks in ``waitpid`` instead and lets a timer thread act at the
deadline.
"""

from __future__ import annotations

import subprocess
import threading
from typing import Callable


def wait_with_deadline(proc: subprocess.Popen, timeout: float, on_timeout: Callable[[], None]) -> bool:
    """Wait for ``proc``; at ``timeout`` seconds call ``on_timeout`` (which must make it exit, e.g.
    kill its process group) and keep waiting. Returns whether the deadline was hit."""
    fired = threading.Event()

    def expire() -> None:
        fired.set()
        on_timeout()

    timer = threading.Timer(timeout, expire)
    timer.daemon = True
    timer.start()
    try:
        proc.wait()
    finally:
        timer.cancel()
    return fired.is_set()
