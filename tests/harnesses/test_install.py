"""Harness layers: built once per install record (npm / pip venv), cached, mounted read-only at
``install.mount`` in a bubblewrap sandbox; the warm path never runs a package manager."""

import shutil

import pytest
from needs import unavailable

import legorl.harnesses.install as install_mod
from legorl.harnesses.base import HarnessInstall
from legorl.harnesses.install import (
    BUILD_COUNTER,
    harness_layer,
    harness_layer_key,
    harness_mounts,
)
from legorl.sandbox.base import SandboxSpec
from legorl.sandbox.bwrap import BwrapBackend
from legorl.sandbox.images import ImageCache

pytestmark = [pytest.mark.slow, pytest.mark.sandbox]


def _no_package_manager(*a, **k):
    raise AssertionError(f"a package manager ran on the warm path: {a[:2]}")


@pytest.fixture
def home(tmp_path, monkeypatch):
    if shutil.which("bwrap") is None:
        unavailable("bubblewrap not installed")
    monkeypatch.setenv("LEGORL_HOME", str(tmp_path / "home"))
    return tmp_path


def _sandbox(tmp_path, layer, install):
    repo = tmp_path / "repo"
    repo.mkdir(exist_ok=True)
    (repo / "a.txt").write_text("x\n")
    backend = BwrapBackend(root=tmp_path / "sb", cache=ImageCache(tmp_path / "sbcache"))
    # the layer plus what it needs (a venv's interpreter prefix), as the rollout runner mounts it
    return backend.create(SandboxSpec(source_dir=repo, extra_layers=harness_mounts(install, layer)))


def test_npm_layer_built_once_and_mounted_read_only(home, monkeypatch):
    if shutil.which("npm") is None:
        unavailable("npm not installed")
    cache = ImageCache(home / "images")
    inst = HarnessInstall(kind="npm", packages=("is-number@7.0.0",))
    before = BUILD_COUNTER["npm"]
    layer = harness_layer(inst, cache)
    assert BUILD_COUNTER["npm"] == before + 1 and cache.stats.builds == 1
    assert (layer.path / "node_modules" / "is-number" / "package.json").is_file()
    # warm: same layer, no npm (any build step would raise)
    monkeypatch.setattr(install_mod, "run_step", _no_package_manager)
    again = harness_layer(inst, cache)
    assert again.path == layer.path and BUILD_COUNTER["npm"] == before + 1 and cache.stats.hits == 1
    # another pin is another layer key
    assert harness_layer_key(HarnessInstall(kind="npm", packages=("is-number@6.0.0",))) != layer.key
    sb = _sandbox(home, layer, inst)
    try:
        res = sb.exec(
            "node -e \"console.log(require('/opt/legorl-harness/node_modules/is-number')(5))\"; "
            "touch /opt/legorl-harness/x 2>&1; ls /opt"
        )
        assert res.stdout.splitlines()[0] == "true", res.stdout + res.stderr
        assert "Read-only file system" in res.stdout
        assert "pypi" not in res.stdout.split()  # the host's other /opt entries are not in the view
    finally:
        sb.destroy()


def test_pip_venv_layer_is_relocated_to_its_mount(home, monkeypatch):
    try:
        install_mod.find_python("python3.12")
    except Exception as exc:
        unavailable(str(exc))
    cache = ImageCache(home / "images")
    inst = HarnessInstall(kind="pip-venv", packages=("six==1.16.0",), python="python3.12")
    before = BUILD_COUNTER["pip"]
    layer = harness_layer(inst, cache)
    assert BUILD_COUNTER["pip"] == before + 1
    assert layer.meta["shebangs_rewritten"] >= 1  # pip's own scripts at least
    monkeypatch.setattr(install_mod, "run_step", _no_package_manager)
    assert harness_layer(inst, cache).path == layer.path and BUILD_COUNTER["pip"] == before + 1
    sb = _sandbox(home, layer, inst)
    try:
        res = sb.exec(
            "/opt/legorl-harness/venv/bin/python -c 'import six, sys; print(six.__version__, sys.version_info[:2])'"
            " && /opt/legorl-harness/venv/bin/pip --version"
        )
        assert res.exit_code == 0, res.stdout + res.stderr
        assert res.stdout.startswith("1.16.0 (3, 12)")
        assert "/opt/legorl-harness/venv/lib/python3.12/site-packages/pip" in res.stdout  # script shebang works
    finally:
        sb.destroy()


def test_no_layer_for_kind_none_and_bad_mount_points_refused(home):
    assert harness_layer(HarnessInstall()) is None
    from legorl.errors import SandboxError
    from legorl.sandbox.bwrap import extra_layer_args

    with pytest.raises(SandboxError, match="absolute"):
        extra_layer_args((("/tmp", "relative/path"),))
    with pytest.raises(SandboxError, match="shadow"):
        extra_layer_args((("/tmp", "/workspace/x"),))
