"""The host-side process of one sandbox exec (``bwrap ...``, ``podman exec ...``): started in its own
session, fed its stdin, its stdout and stderr drained with a cap, waited for with a deadline.

:func:`run_captured` is the whole loop, shared by the backends. Output beyond ``max_output_bytes``
(per stream) is still read, so the process never blocks on a full pipe, and dropped. At the deadline
``stop(proc)`` runs (it must make the process exit: kill its process group, and for podman the
processes inside the container too) and the wait goes on until it has; an interrupt of the caller
(``KeyboardInterrupt``, a cancelled thread) stops and reaps the process before it propagates.

``Popen.wait(timeout=...)`` polls with a sleep that doubles up to 50 ms, so a command that ends after
3 ms is noticed tens of milliseconds later — most of a sandbox exec's latency on a cache hit.
:func:`wait_with_deadline` blocks in ``waitpid`` instead and lets a timer thread act at the deadline.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import IO

from legorl.errors import SandboxError

_CHUNK = 65536


@dataclass(frozen=True)
class Captured:
    """How a host process ended and what it wrote (decoded as UTF-8, invalid bytes replaced)."""

    returncode: int  # as Popen reports it: negative when the process itself died of a signal
    stdout: str
    stderr: str
    truncated: bool  # stdout or stderr exceeded max_output_bytes
    timed_out: bool
    duration_s: float

    @property
    def died_of_signal(self) -> bool:
        """The host process itself (not a process it ran) was killed by a signal."""
        return self.returncode < 0

    @property
    def exit_code(self) -> int:
        """The exit status a shell reports: ``128 + signal`` for a process killed by one."""
        return 128 - self.returncode if self.returncode < 0 else self.returncode

    @property
    def signal(self) -> int | None:
        """The signal that ended the process or, in the shell convention ``128 + signal``, the one
        that ended the command it reports on (bwrap, ``podman exec``); None for a plain exit."""
        if self.returncode < 0:
            return -self.returncode
        if 128 < self.returncode <= 128 + 64:
            return self.returncode - 128
        return None


def require_program(name: str, install: str) -> str:
    """The path of the host program ``name``; :class:`SandboxError` with ``install`` (how to get it) if
    it is not on ``PATH``."""
    found = shutil.which(name)
    if not found:
        raise SandboxError(f"{name} is not installed; install it with {install}")
    return found


def signal_name(sig: int) -> str:
    """``SIGKILL`` for 9; the number for a signal without a name here (most real-time ones)."""
    try:
        return signal.Signals(sig).name
    except ValueError:
        return str(sig)


def kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL the process group of ``proc`` (started with ``start_new_session``)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


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


def _close(stream: IO[bytes]) -> None:
    with contextlib.suppress(OSError):
        stream.close()


def _drain(stream: IO[bytes], cap: int, out: list[bytes], truncated: threading.Event) -> None:
    size = 0
    try:
        while chunk := stream.read(_CHUNK):
            keep = chunk[: max(0, cap - size)]
            if keep:
                out.append(keep)
                size += len(keep)
            if len(keep) < len(chunk):
                truncated.set()
    except (OSError, ValueError):
        pass
    finally:
        _close(stream)


def _feed(stream: IO[bytes], data: bytes) -> None:
    try:
        stream.write(data)
    except (OSError, ValueError):  # BrokenPipeError: the command did not read it all
        pass
    finally:
        _close(stream)


def run_captured(
    argv: Sequence[str],
    *,
    env: Mapping[str, str] | None,
    timeout: float,
    max_output_bytes: int,
    stdin: str | None = None,
    pass_fds: Sequence[int] = (),
    stop: Callable[[subprocess.Popen], None] = kill_group,
    cwd: str | os.PathLike[str] | None = None,
) -> Captured:
    """Run ``argv`` in a new session to its end (see the module docstring); ``env`` None: this
    process's environment; ``cwd`` None: this process's directory. ``OSError`` when it cannot be
    started."""
    start = time.monotonic()
    proc = subprocess.Popen(
        list(argv),
        stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
        env=dict(env) if env is not None else None,
        pass_fds=tuple(pass_fds),
        cwd=cwd,
    )
    out: list[bytes] = []
    err: list[bytes] = []
    truncated = threading.Event()
    threads = [
        threading.Thread(target=_drain, args=(proc.stdout, max_output_bytes, out, truncated), daemon=True),
        threading.Thread(target=_drain, args=(proc.stderr, max_output_bytes, err, truncated), daemon=True),
    ]
    if stdin is not None:
        threads.append(threading.Thread(target=_feed, args=(proc.stdin, stdin.encode()), daemon=True))
    for t in threads:
        t.start()
    try:
        timed_out = wait_with_deadline(proc, timeout, lambda: stop(proc))
    except BaseException:
        stop(proc)
        with contextlib.suppress(subprocess.TimeoutExpired):  # the kernel did not reap it in time
            proc.wait(timeout=10)
        raise
    for t in threads:
        t.join(timeout=5)
    return Captured(
        returncode=proc.returncode,
        stdout=b"".join(out).decode("utf-8", "replace"),
        stderr=b"".join(err).decode("utf-8", "replace"),
        truncated=truncated.is_set(),
        timed_out=timed_out,
        duration_s=time.monotonic() - start,
    )


__all__ = ["Captured", "kill_group", "require_program", "run_captured", "signal_name", "wait_with_deadline"]
