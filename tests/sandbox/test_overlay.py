"""Overlay workspaces (root): the workspace is a copy-on-write mount over the cached instance layer —
writes land in the sandbox's own upper dir, never in the cache; destroy unmounts it and releases the
layer's lease; without overlay (``overlay=False``) the same operations work on a copy."""

from __future__ import annotations

import os

import pytest

from legorl.sandbox.base import SandboxSpec
from legorl.sandbox.bwrap import BwrapBackend
from legorl.sandbox.images import ImageCache

pytestmark = [pytest.mark.sandbox, pytest.mark.root]


def _repo(tmp_path):
    src = tmp_path / "repo"
    (src / "pkg").mkdir(parents=True)
    (src / "pkg" / "a.py").write_text("x = 1\n")
    return src


@pytest.mark.parametrize("overlay", [True, False])
def test_workspace_writes_stay_private_and_destroy_cleans_up(tmp_path, overlay):
    backend = BwrapBackend(root=tmp_path / "sb", cache=ImageCache(tmp_path / "img"), overlay=overlay)
    spec = SandboxSpec(source_dir=_repo(tmp_path))
    a, b = backend.create(spec), backend.create(spec)
    try:
        assert os.path.ismount(a.workdir) is overlay
        assert a.instance_lease is not None if overlay else a.instance_lease is None
        res = a.exec("echo 'x = 2' > pkg/a.py && mkdir -p new && echo y > new/b.py && mv pkg pkg2 && ls")
        assert res.exit_code == 0, res.stderr
        assert res.stdout.split() == ["new", "pkg2"]
        assert b.exec("cat pkg/a.py").stdout == "x = 1\n"  # the other sandbox and the layer are untouched
        layer_files = [p.read_text() for p in (tmp_path / "img").rglob("a.py")]
        assert layer_files and set(layer_files) == {"x = 1\n"}
        diff = a.diff()
        assert "+x = 2" in diff and "new/b.py" in diff
    finally:
        a.destroy()
        b.destroy()
    assert not os.path.ismount(a.workdir) and not a.sandbox_dir.exists()
    assert a.instance_lease is None
