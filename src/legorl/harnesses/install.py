"""Harness layers: an agent program built once into a cached, content-addressed image layer.

``harness_layer(install)`` turns a :class:`~legorl.harnesses.base.HarnessInstall` record into a layer
of kind ``harness`` in the :class:`~legorl.sandbox.images.ImageCache`, keyed by a hash of the record
(pinned packages, interpreter version, build recipe version). Sandboxes mount it read-only at
``install.mount`` (``SandboxSpec.extra_layers``); nothing is installed at rollout time. The package
managers run only on a cache miss (see :data:`BUILD_COUNTER`).

Layer contents (``layer.path``):

* ``kind="npm"``: ``npm install --prefix <data> --no-audit --no-fund <pkgs>`` (npm's own download cache
  in ``$LEGORL_HOME/npm-cache``); programs at ``<mount>/node_modules/.bin/<name>`` (relative links).
* ``kind="pip-venv"``: ``<data>/venv`` made by ``install.python`` (``python3.12`` is searched on PATH
  and under ``~/.pyenv/versions/3.12.*``), packages pip-installed into it. The venv is built in a
  temporary directory and renamed into the cache, so after the build every script header that names
  the build path is rewritten to ``<mount>/venv/...``; the venv's ``bin/python`` links to the
  absolute host interpreter (visible read-only in the sandbox). Prefer ``<mount>/venv/bin/python -m pkg``.
"""

from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess
import threading
from pathlib import Path
from typing import Any

from legorl.harnesses.base import HarnessInstall
from legorl.sandbox.images import (
    ImageBuildError,
    ImageCache,
    Layer,
    default_cache,
    recipe_key,
    run_step,
)
from legorl.settings import legorl_home

RECIPE_VERSION = 1
# How many times a package manager ran in this process (tests assert the warm path adds none).
BUILD_COUNTER = {"npm": 0, "pip": 0}
_counter_lock = threading.Lock()


def find_python(spec: str | None) -> str:
    """An absolute interpreter path for ``spec`` ("python3.12", "3.12", or a path)."""
    spec = spec or "python3"
    if "/" in spec:
        if os.access(spec, os.X_OK):
            return str(Path(spec).resolve())
        raise ImageBuildError(f"interpreter {spec} is not executable", step="find python")
    version = spec.removeprefix("python")
    name = f"python{version}" if version else "python3"
    found = shutil.which(name)
    candidates = [found] if found else []
    if re.fullmatch(r"\d+\.\d+", version):
        pyenv_root = Path(os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv")
        pyenv = glob.glob(str(pyenv_root / "versions" / f"{version}.*" / "bin" / name))
        pyenv.sort(key=lambda p: [int(x) if x.isdigit() else 0 for x in Path(p).parts[-3].split(".")])
        candidates += reversed(pyenv)
        candidates += glob.glob(f"/usr/local/bin/{name}") + glob.glob(f"/usr/bin/{name}")
    for c in candidates:
        if not c:
            continue
        real = Path(c).resolve()
        # a pyenv shim is a shell script that needs the pyenv machinery: skip it
        if "shims" in real.parts:
            continue
        if os.access(real, os.X_OK):
            return str(real)
    raise ImageBuildError(f"{name} not found on the host (PATH, ~/.pyenv/versions/{version}.*)", step="find python")


def _python_version(py: str) -> str:
    out = subprocess.run(
        [py, "-c", "import sys; print('%d.%d.%d' % sys.version_info[:3])"], capture_output=True, text=True, timeout=60
    )
    return out.stdout.strip()


def install_recipe(install: HarnessInstall) -> dict[str, Any]:
    recipe: dict[str, Any] = {
        "v": RECIPE_VERSION,
        "kind": install.kind,
        "packages": sorted(install.packages),
        "mount": install.mount,
    }
    if install.kind == "pip-venv":
        py = find_python(install.python)
        recipe["python"] = {"spec": install.python, "version": _python_version(py)}
    if install.kind == "npm":
        node = shutil.which("node")
        if node:
            recipe["node"] = subprocess.run(
                [node, "--version"], capture_output=True, text=True, timeout=60
            ).stdout.strip()
    return recipe


def harness_layer_key(install: HarnessInstall) -> str:
    return recipe_key("harness", install_recipe(install))


def _bump(kind: str) -> None:
    with _counter_lock:
        BUILD_COUNTER[kind] += 1


def _build_npm(install: HarnessInstall, dest: Path) -> dict[str, Any]:
    npm = shutil.which("npm")
    if not npm:
        raise ImageBuildError("npm is not installed on the host (apt-get install -y nodejs npm)", step="find npm")
    dest.mkdir(parents=True)
    cache = legorl_home() / "npm-cache"
    cache.mkdir(parents=True, exist_ok=True)
    env = {
        **os.environ,
        "npm_config_cache": str(cache),
        "npm_config_update_notifier": "false",
        "npm_config_fund": "false",
        "npm_config_audit": "false",
    }
    _bump("npm")
    run_step(
        "npm install",
        [npm, "install", "--prefix", str(dest), "--no-audit", "--no-fund", "--no-update-notifier", *install.packages],
        cwd=dest,
        env=env,
        timeout=3600,
    )
    return {"tool": "npm"}


def _rewrite_shebangs(bin_dir: Path, build_prefix: str, final_prefix: str) -> int:
    """Point scripts made at the build path to the mount path: ``#!<venv>/bin/python`` and, for long
    paths, pip's ``#!/bin/sh`` + ``'''exec' "<venv>/bin/python"`` form (both in the first lines)."""
    n = 0
    old, new = build_prefix.encode(), final_prefix.encode()
    for f in bin_dir.iterdir():
        if f.is_symlink() or not f.is_file():
            continue
        try:
            data = f.read_bytes()
        except OSError:
            continue
        if not data.startswith(b"#!"):
            continue
        head = data[:1024]
        if old in head:
            f.write_bytes(head.replace(old, new) + data[1024:])
            n += 1
    return n


def _build_venv(install: HarnessInstall, dest: Path) -> dict[str, Any]:
    py = find_python(install.python)
    dest.mkdir(parents=True)
    venv = dest / "venv"
    run_step("venv", [py, "-m", "venv", str(venv)], cwd=dest, timeout=600)
    pip_env = {
        **os.environ,
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
        "PIP_NO_INPUT": "1",
        "PIP_CACHE_DIR": str(legorl_home() / "pip-cache"),
    }
    pip_env.pop("PYTHONPATH", None)
    pip_env.pop("VIRTUAL_ENV", None)
    if install.packages:
        _bump("pip")
        run_step(
            "pip install",
            [str(venv / "bin" / "python"), "-m", "pip", "install", *install.packages],
            cwd=dest,
            env=pip_env,
            timeout=3600,
        )
    rewritten = _rewrite_shebangs(venv / "bin", str(venv), f"{install.mount}/venv")
    return {"tool": "pip", "python": py, "shebangs_rewritten": rewritten}


def harness_layer(install: HarnessInstall, cache: ImageCache | None = None, lease: bool = False) -> Layer | None:
    """The cached layer for ``install`` (built on a miss; ``None`` for ``kind="none"``). With ``lease``
    the layer is marked in use (LRU eviction skips it) until ``layer.lease.release()``."""
    if install.kind == "none":
        return None
    if install.kind not in ("npm", "pip-venv"):
        raise ImageBuildError(f"unknown harness install kind {install.kind!r}", step="recipe")
    cache = cache or default_cache()
    recipe = install_recipe(install)
    key = recipe_key("harness", recipe)
    build = (lambda d: _build_npm(install, d)) if install.kind == "npm" else (lambda d: _build_venv(install, d))
    return cache.get_or_build("harness", key, recipe, build, lease=lease)


def harness_mounts(install: HarnessInstall, layer: Layer | None) -> tuple[tuple[str, str], ...]:
    """``SandboxSpec.extra_layers`` for a built harness ``layer``: the layer at ``install.mount`` and,
    for a venv, the prefix of the interpreter it was made with (its ``bin/python`` links there, and
    the sandbox's filesystem shows nothing of the host it was not given), bound at its own path."""
    if layer is None:
        return ()
    mounts = [(str(layer.path), install.mount)]
    python = (layer.meta or {}).get("python")
    if install.kind == "pip-venv" and python:
        prefix = str(Path(python).resolve().parent.parent)  # <prefix>/bin/python3.X -> <prefix>
        mounts.append((prefix, prefix))
    return tuple(mounts)


def layer_mounts(install: HarnessInstall, cache: ImageCache | None = None) -> tuple[tuple[str, str], ...]:
    """``SandboxSpec.extra_layers`` for ``install`` (built on a miss): see :func:`harness_mounts`."""
    return harness_mounts(install, harness_layer(install, cache))


__all__ = [
    "BUILD_COUNTER",
    "find_python",
    "harness_layer",
    "harness_layer_key",
    "harness_mounts",
    "install_recipe",
    "layer_mounts",
]
