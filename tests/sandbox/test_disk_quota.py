"""A disk quota per sandbox (``sandbox.disk_mb``, issue 37): a sandbox that writes past it gets ENOSPC
(its workspace, its home, its /tmp), the host keeps no more than the quota, the sandbox goes on
working once it frees space, and a grader run that fills it is the patch's failure, not the
environment's. Without a file system per sandbox (no root), each file is capped instead."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from needs import unavailable

from legorl.config import RunConfig
from legorl.grading.grader import grade
from legorl.loop.stack import sandbox_backend
from legorl.sandbox import quota as quota_module
from legorl.sandbox.base import SandboxSpec
from legorl.sandbox.bwrap import BwrapBackend
from legorl.sandbox.quota import MIB, image_mb
from legorl.tasks.loader import get_task

pytestmark = pytest.mark.sandbox

LIMIT_MB = 32
WRITE_MB = 3 * LIMIT_MB


@pytest.fixture
def source(tmp_path: Path) -> Path:
    src = tmp_path / "src"
    (src / "pkg").mkdir(parents=True)
    (src / "pkg" / "mod.py").write_text("X = 1\n")
    return src


def _fill(path: str) -> str:
    return f"dd if=/dev/zero of={path} bs=1M count={WRITE_MB} 2>&1; echo rc=$?"


@pytest.mark.root
def test_writes_past_the_quota_get_enospc_and_the_host_keeps_only_the_quota(tmp_path, source):
    if os.geteuid() != 0:
        unavailable("a file system per sandbox needs root")
    backend = BwrapBackend(root=tmp_path / "sandboxes", disk_mb=LIMIT_MB)
    sb = backend.create(SandboxSpec(source_dir=source))
    try:
        assert sb.quota is not None, "root here: the sandbox has a file system of its own"
        image = sb.quota.image
        for where in ("/workspace/big", "/home/agent/big"):
            res = sb.exec(_fill(where), timeout=120)
            assert "No space left on device" in res.stdout and "rc=1" in res.stdout, res.stdout
            assert f"disk quota ({LIMIT_MB} MiB) full" in res.cause
            assert image.stat().st_blocks * 512 <= image_mb(LIMIT_MB) * MIB  # what the host spent, at most
            sb.exec(f"rm -f {where}", timeout=60)
        res = sb.exec(_fill("/tmp/big"), timeout=120)  # a tmpfs per exec, bounded the same
        assert "No space left on device" in res.stdout, res.stdout
        # the sandbox works on: the agent's change is still its diff
        res = sb.exec("echo Y = 2 >> pkg/mod.py && python3 -c 'import pkg.mod as m; print(m.Y)'", timeout=60)
        assert res.exit_code == 0 and res.stdout.strip() == "2" and res.cause == ""
        assert "+Y = 2" in sb.diff()
    finally:
        sb.destroy()
    assert not image.exists() and not sb.sandbox_dir.exists()
    mounts = Path("/proc/self/mountinfo").read_text()
    assert str(sb.sandbox_dir) not in mounts
    assert subprocess.run(["losetup", "-j", str(image)], capture_output=True, text=True).stdout == ""


def test_without_a_file_system_of_its_own_each_file_is_capped(tmp_path, source, monkeypatch):
    # fault injection: a machine where no file system can be mounted per sandbox (not root, no loop device)
    monkeypatch.setattr(quota_module.DiskQuota, "mount", classmethod(lambda cls, *a, **k: None))
    backend = BwrapBackend(root=tmp_path / "sandboxes", disk_mb=LIMIT_MB)
    sb = backend.create(SandboxSpec(source_dir=source))
    try:
        assert sb.quota is None
        res = sb.exec(
            f"python3 -c \"open('/workspace/big', 'wb').write(bytes({WRITE_MB * MIB}))\"; "
            f"python3 -c \"open('/workspace/ok', 'wb').write(bytes({LIMIT_MB // 2 * MIB}))\" && echo small-ok",
            timeout=120,
        )
        assert "File too large" in res.stderr and "small-ok" in res.stdout, (res.stdout, res.stderr)
        assert (sb.workdir / "big").stat().st_size <= LIMIT_MB * MIB
    finally:
        sb.destroy()


def test_the_run_config_gives_every_sandbox_a_quota(tmp_path):
    cfg = RunConfig.load(None, **{"sandbox.root": str(tmp_path), "sandbox.disk_mb": 4096})
    assert sandbox_backend(cfg.sandbox).disk_mb == 4096
    off = RunConfig.load(None)  # off by default: 0.3-0.5 s per sandbox as root
    assert sandbox_backend(off.sandbox).disk_mb is None
    podman = RunConfig.load(None, **{"sandbox.type": "podman", "sandbox.disk_mb": 64})
    assert sandbox_backend(podman.sandbox).disk_mb == 64


@pytest.mark.root
def test_a_patch_whose_tests_fill_the_disk_fails_as_the_patchs_outcome(tmp_path):
    if os.geteuid() != 0:
        unavailable("a file system per sandbox needs root")
    task = get_task("legorl__trivial-001")
    filler = (
        "\n\ndef _fill():\n"
        "    with open('/workspace/junk.bin', 'wb') as f:\n"
        f"        for _ in range({WRITE_MB}):\n"
        "            f.write(bytes(1 << 20))\n\n\n_fill()\n"
    )
    lines = "".join(f"+{line}\n" for line in filler.splitlines())
    n = len(filler.splitlines())
    diff = task.patch + (
        "diff --git a/calc/junk.py b/calc/junk.py\nnew file mode 100644\n--- /dev/null\n+++ b/calc/junk.py\n"
        f"@@ -0,0 +1,{n} @@\n{lines}"
    )
    diff = diff.replace(
        "-    return a - b\n+    return a + b\n",
        "-    return a - b\n+    from calc import junk  # noqa\n+    return a + b\n",
    )
    diff = diff.replace("@@ -3,7 +3,7 @@", "@@ -3,7 +3,8 @@", 1)
    roomy = grade(task, diff, BwrapBackend(root=tmp_path / "roomy"), behaviour_checks=False)
    assert (roomy.status, roomy.reward) == ("ok", 1.0), "with room to write, the patch is a fix"
    report = grade(task, diff, BwrapBackend(root=tmp_path / "sandboxes", disk_mb=LIMIT_MB), behaviour_checks=False)
    assert report.status == "ok" and report.reward == 0.0, (report.status, report.cause, report.log_tail[-800:])
    assert report.tests["tests/test_arith.py::test_add"] == "failed"  # its import hit ENOSPC
    assert report.tests["tests/test_arith.py::test_subtract"] == "passed"
