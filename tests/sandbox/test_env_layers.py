"""Env layers of real repositories: a virtual environment with a project's dependencies but not the
project (its code is the workspace's), optional requirements the index lacks dropped and recorded,
the interpreter and import root the sandbox runs with, and no half-built layer left by a killed build."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from legorl.sandbox.base import SandboxSpec
from legorl.sandbox.bwrap import BwrapBackend
from legorl.sandbox.images import EnvRecipe, ImageBuildError, ImageCache, build_env_dir


def _project(root: Path, name: str, requires: list[str] | None = None) -> Path:
    """A setuptools project ``name`` with one module, depending on ``requires``."""
    root.mkdir(parents=True)
    (root / f"{name}.py").write_text("VALUE = 1\n")
    deps = ", ".join(repr(r) for r in requires or [])
    (root / "setup.py").write_text(
        f"from setuptools import setup\nsetup(name={name!r}, version='1.0', py_modules=[{name!r}], install_requires=[{deps}])\n"
    )
    return root


def _wheel(project: Path, out: Path) -> None:
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(out), str(project)],
        check=True,
        capture_output=True,
    )


def test_a_project_env_holds_its_dependencies_but_not_the_project(tmp_path: Path) -> None:
    dep = _project(tmp_path / "dep", "legorl_dep")
    proj = _project(tmp_path / "proj", "legorl_proj", ["legorl_dep"])
    recipe = EnvRecipe(
        interpreter=sys.executable,
        project=str(proj),
        project_prepare=("echo prepared > PREPARED",),
        pip_args=("--find-links", str(tmp_path / "wheels")),  # the build backend comes from the index
    )
    (tmp_path / "wheels").mkdir()
    # the dependency comes from a local wheel directory (no index reachable in this test)
    _wheel(dep, tmp_path / "wheels")
    meta = build_env_dir(recipe, tmp_path / "layer" / "data")
    site = tmp_path / "layer" / "data" / "site-packages"
    assert site.is_symlink() and (site / "legorl_dep.py").is_file()
    assert not (site / "legorl_proj.py").exists()  # uninstalled: its code is the workspace's
    assert meta["project"] == ["legorl_proj"]
    assert not (proj / "PREPARED").exists()  # the prepare steps ran in a scratch copy


def test_optional_requirements_the_index_lacks_are_dropped_and_recorded(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    dep = _project(tmp_path / "dep", "legorl_dep2")
    _wheel(dep, wheels)
    recipe = EnvRecipe(
        interpreter=sys.executable,
        optional=("legorl_dep2", "legorl-no-such-distribution"),
        pip_args=("--no-index", "--find-links", str(wheels)),
    )
    meta = build_env_dir(recipe, tmp_path / "layer" / "data")
    assert meta["dropped"] == ["legorl-no-such-distribution"]
    assert (tmp_path / "layer" / "data" / "site-packages" / "legorl_dep2.py").is_file()
    required = EnvRecipe(
        interpreter=sys.executable, requirements=("legorl-no-such-distribution",), pip_args=("--no-index",)
    )
    with pytest.raises(ImageBuildError, match="pip install"):
        build_env_dir(required, tmp_path / "layer2" / "data")


def test_a_killed_build_leaves_nothing_the_next_build_keeps(tmp_path: Path) -> None:
    cache = ImageCache(tmp_path / "images", max_bytes=10**12)
    stale = tmp_path / "images" / "tmp" / "env-k1-deadbeef"
    (stale / "data").mkdir(parents=True)  # what a SIGKILLed builder leaves
    cache.get_or_build("env", "k1", {}, lambda d: d.mkdir())
    assert not stale.exists() and cache.get("env", "k1") is not None


@pytest.mark.sandbox
def test_the_sandbox_runs_the_env_interpreter_with_the_import_root_first(tmp_path: Path) -> None:
    src = tmp_path / "repo"
    (src / "src" / "pkg").mkdir(parents=True)
    (src / "src" / "pkg" / "__init__.py").write_text("WHERE = 'workspace'\n")
    recipe = EnvRecipe(interpreter=sys.executable, setup=("mkdir -p site-packages",), python_path=("/workspace/src",))
    backend = BwrapBackend(root=tmp_path / "sandboxes", cache=ImageCache(tmp_path / "images", max_bytes=10**12))
    sb = backend.create(SandboxSpec(source_dir=src, env_recipe=recipe))
    try:
        res = sb.exec("python -c 'import os, sys, pkg; print(pkg.WHERE, os.environ[\"PYTHONPATH\"], sys.executable)'")
        where, pythonpath, exe = res.stdout.split()
        assert where == "workspace"
        assert pythonpath == "/workspace/src:/run/legorl/env/site-packages"
        assert os.path.realpath(exe) == os.path.realpath(sys.executable)
    finally:
        sb.destroy()


def test_an_index_date_resolves_as_the_index_was_that_day(tmp_path: Path) -> None:
    proj = _project(tmp_path / "proj", "legorl_dated", ["six"])
    recipe = EnvRecipe(
        interpreter=sys.executable,
        project=str(proj),
        optional=("legorl-no-such-distribution",),
        index_date="2020-01-01",
    )
    meta = build_env_dir(recipe, tmp_path / "layer" / "data")
    site = tmp_path / "layer" / "data" / "site-packages"
    assert [p.name for p in site.glob("six-*.dist-info")] == ["six-1.13.0.dist-info"]  # six 1.14 came out in 2020
    assert meta["dropped"] == ["legorl-no-such-distribution"]
    assert [n.replace("-", "_") for n in meta["project"]] == ["legorl_dated"]
    assert not (site / "legorl_dated.py").exists()
