"""Faults: a sandbox killed mid-exec, exec timeouts, broken images, a vanished workspace — typed
errors or an ExecResult that says what happened, and other sandboxes keep working."""

from __future__ import annotations

import os
import shutil
import signal
import threading
import time
from pathlib import Path

import pytest

from legorl.errors import SandboxError
from legorl.sandbox.base import SandboxSpec
from legorl.sandbox.bwrap import BwrapBackend
from legorl.sandbox.images import ImageBuildError, ImageCache
from legorl.sandbox.overlay import unmount

pytestmark = pytest.mark.sandbox


@pytest.fixture
def backend(tmp_path: Path) -> BwrapBackend:
    return BwrapBackend(root=tmp_path / "sandboxes", cache=ImageCache(tmp_path / "images"))


@pytest.fixture
def source(tmp_path: Path) -> Path:
    src = tmp_path / "src"
    src.mkdir()
    (src / "f.txt").write_text("data\n")
    return src


def _bwrap_pids(marker: str) -> list[int]:
    """The bwrap processes whose command carries ``marker`` (the view and the workdir are not on
    bwrap's command line: they travel by memfd)."""
    pids = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            argv = (d / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv and argv[0].endswith(b"bwrap") and marker.encode() in argv:
            pids.append(int(d.name))
    return pids


def _wait_for(pred, timeout: float = 10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = pred()
        if got:
            return got
        time.sleep(0.02)
    raise AssertionError("condition not reached")


def test_sandbox_killed_mid_exec_is_reported_and_others_unaffected(backend, source):
    victim = backend.create(SandboxSpec(source_dir=source))
    bystander = backend.create(SandboxSpec(source_dir=source))
    try:
        results = {}

        def long_exec():
            results["victim"] = victim.exec("echo started; sleep 30; echo never", timeout=60)

        def bystander_exec():
            results["bystander"] = bystander.exec("sleep 1; cat f.txt", timeout=60)

        t1 = threading.Thread(target=long_exec)
        t2 = threading.Thread(target=bystander_exec)
        t1.start()
        t2.start()
        pids = _wait_for(lambda: _bwrap_pids("echo started; sleep 30; echo never"))
        time.sleep(0.2)
        for pid in pids:
            os.kill(pid, signal.SIGKILL)
        t1.join(30)
        t2.join(30)
        res = results["victim"]
        assert res.killed_by_signal == signal.SIGKILL and res.exit_code == 128 + 9
        assert "killed" in res.cause and "signal 9" in res.cause, res.cause
        assert "never" not in res.stdout and not res.timed_out
        assert results["bystander"].exit_code == 0 and results["bystander"].stdout == "data\n"
        # the victim sandbox itself is still usable for the next exec
        assert victim.exec("cat f.txt").stdout == "data\n"
    finally:
        victim.destroy()
        bystander.destroy()


def test_exec_timeout_kills_the_tree(backend, source):
    sb = backend.create(SandboxSpec(source_dir=source))
    try:
        t0 = time.monotonic()
        res = sb.exec("(sleep 60 &) ; sleep 60", timeout=1)
        assert res.timed_out and "timeout after 1.0s" in res.cause
        assert time.monotonic() - t0 < 15
        _wait_for(lambda: not _bwrap_pids("(sleep 60 &) ; sleep 60"))
        assert sb.exec("echo alive").stdout == "alive\n"
    finally:
        sb.destroy()


def test_broken_image_fails_typed_without_disturbing_running_sandboxes(backend, source, tmp_path):
    ok = backend.create(SandboxSpec(source_dir=source))
    try:
        with pytest.raises(ImageBuildError) as info:
            backend.create(SandboxSpec(source_dir=source, setup_commands=("./configure",)))
        assert info.value.step == "setup[0]: ./configure" and "No such file" in info.value.output
        assert ok.exec("cat f.txt").stdout == "data\n"
        with pytest.raises(SandboxError, match="not a directory"):
            backend.create(SandboxSpec(source_dir=tmp_path / "missing"))
    finally:
        ok.destroy()


def test_vanished_workspace_is_a_typed_error(backend, source):
    sb = backend.create(SandboxSpec(source_dir=source))
    other = backend.create(SandboxSpec(source_dir=source))
    try:
        if os.path.ismount(sb.workdir):  # an overlay workspace: make the whole mount vanish
            unmount(sb.workdir)
        shutil.rmtree(sb.workdir)
        with pytest.raises(SandboxError, match="bwrap failed to set up"):
            sb.exec("true")
        assert other.exec("cat f.txt").stdout == "data\n"
    finally:
        sb.destroy()
        other.destroy()


def test_destroy_during_exec_does_not_hang(backend, source):
    sb = backend.create(SandboxSpec(source_dir=source))
    out = {}
    marker = f"sleep 30 # {sb.name}"
    t = threading.Thread(target=lambda: out.setdefault("r", sb.exec(marker, timeout=60)))
    t.start()
    _wait_for(lambda: _bwrap_pids(marker))
    sb.destroy()  # kills the cgroup's processes when there is one
    t.join(45)
    assert not t.is_alive() and "r" in out
