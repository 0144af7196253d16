"""SWE-bench's own per-repository, per-version environment specs and test-log parsers, imported from
``swebench==4.1.0`` (not copied), and the pyenv interpreter a spec asks for.

``swebench/__init__.py`` and ``swebench/harness/__init__.py`` import its docker and Modal runners;
nothing here needs them, so :func:`harness` registers those two packages as bare namespaces and
imports only ``swebench.harness.constants`` and ``swebench.harness.log_parsers`` (which need
``requests``, ``unidiff``, ``python-dotenv`` and ``datasets``: the ``swebench`` extra). Install the
package itself without its dependencies: ``pip install --no-deps swebench==4.1.0`` (``make setup``
does).

Interpreters come from pyenv, found through ``PYENV_ROOT`` or ``pyenv root``; a version it lacks is
an error that names it and the instance that needs it.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import types
from dataclasses import asdict, dataclass
from functools import cache
from pathlib import Path
from typing import Any

from legorl.errors import TaskError
from legorl.tasks.model import Task

__all__ = ["SWEBENCH_VERSION", "EnvSpec", "Harness", "env_spec", "harness", "parse_test_log", "pyenv_python"]

SWEBENCH_VERSION = "4.1.0"  # the release that still carries the per-repository environment specs
_INSTALL_HINT = f"pip install --no-deps swebench=={SWEBENCH_VERSION} (and legorl's 'swebench' extra)"


@dataclass(frozen=True)
class Harness:
    specs: dict[str, dict[str, dict[str, Any]]]  # MAP_REPO_VERSION_TO_SPECS
    parsers: dict[str, Any]  # MAP_REPO_TO_PARSER
    version: str
    requirements_paths: dict[str, list[str]]  # MAP_REPO_TO_REQS_PATHS: where "requirements.txt" specs look
    environment_yml_paths: dict[str, list[str]]  # MAP_REPO_TO_ENV_YML_PATHS


@cache
def harness() -> Harness:
    """SWE-bench's spec table and log parsers (imported once, without its docker/Modal runners)."""
    try:
        from importlib.metadata import version

        installed = version("swebench")
    except Exception:  # PackageNotFoundError, or broken metadata
        raise TaskError(f"SWE-bench's specs need the swebench package: {_INSTALL_HINT}") from None
    if installed != SWEBENCH_VERSION:
        raise TaskError(f"swebench {installed} is installed; the environment specs need {_INSTALL_HINT}")
    for name in ("swebench", "swebench.harness"):
        if name not in sys.modules:
            spec = importlib.util.find_spec(name)
            if spec is None or spec.submodule_search_locations is None:
                raise TaskError(f"cannot find the {name} package: {_INSTALL_HINT}")
            namespace = types.ModuleType(name)
            namespace.__path__ = list(spec.submodule_search_locations)
            sys.modules[name] = namespace
    try:
        constants = importlib.import_module("swebench.harness.constants")
        log_parsers = importlib.import_module("swebench.harness.log_parsers")
    except ImportError as exc:
        raise TaskError(f"cannot import SWE-bench's specs ({exc}): {_INSTALL_HINT}") from None
    return Harness(
        constants.MAP_REPO_VERSION_TO_SPECS,
        log_parsers.MAP_REPO_TO_PARSER,
        installed,
        constants.MAP_REPO_TO_REQS_PATHS,
        constants.MAP_REPO_TO_ENV_YML_PATHS,
    )


@dataclass(frozen=True)
class EnvSpec:
    """What an instance's environment needs, as SWE-bench's spec for its (repo, version) says."""

    repo: str
    version: str
    python: str  # "3.9"
    pip_packages: tuple[str, ...]
    packages: str  # conda-style package list, "requirements.txt" or "environment.yml" (or "")
    pre_install: tuple[str, ...]  # apt and shell steps before installing
    install: str  # how the repository itself is installed
    test_cmd: str
    eval_commands: tuple[str, ...]

    def key(self) -> str:
        """Identifies the environment layer: one per (repo, version, spec content)."""
        blob = json.dumps(asdict(self), sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]


def env_spec(task: Task) -> EnvSpec:
    """The environment spec of ``task`` (a SWE-bench instance); an unknown repository or version is
    an error naming the instance."""
    table = harness().specs
    if task.repo not in table:
        raise TaskError(f"instance {task.instance_id}: SWE-bench has no environment specs for {task.repo}")
    by_version = table[task.repo]
    if task.version not in by_version:
        raise TaskError(
            f"instance {task.instance_id}: {task.repo} has no environment spec for version {task.version!r} "
            f"(known: {', '.join(sorted(by_version))})"
        )
    raw = by_version[task.version]
    test_cmd = raw.get("test_cmd", "")
    return EnvSpec(
        repo=task.repo,
        version=task.version,
        python=str(raw.get("python", "")),
        pip_packages=tuple(raw.get("pip_packages", ()) or ()),
        packages=str(raw.get("packages", "") or ""),
        pre_install=tuple(raw.get("pre_install", ()) or ()),
        install=str(raw.get("install", "") or ""),
        test_cmd=" ".join(test_cmd) if isinstance(test_cmd, list) else str(test_cmd),
        eval_commands=tuple(raw.get("eval_commands", ()) or ()),
    )


def parse_test_log(task: Task, log: str) -> dict[str, str]:
    """Test outcomes in ``log`` by SWE-bench's parser for the task's repository (``PASSED``, ``FAILED``,
    ``SKIPPED``, ``ERROR``, ``XFAIL``)."""
    parsers = harness().parsers
    if task.repo not in parsers:
        raise TaskError(f"instance {task.instance_id}: SWE-bench has no test-log parser for {task.repo}")
    # SWE-bench's Python parsers take the instance's TestSpec but do not read it.
    return dict(parsers[task.repo](log, None))


def _pyenv_root() -> Path:
    root = os.environ.get("PYENV_ROOT")
    if root:
        return Path(root)
    pyenv = shutil.which("pyenv")
    if pyenv is None:
        raise TaskError("no pyenv: set PYENV_ROOT or put pyenv on PATH (SWE-bench environments need its interpreters)")
    try:
        out = subprocess.run([pyenv, "root"], capture_output=True, text=True, timeout=30, check=True).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        raise TaskError(f"`pyenv root` failed: {exc}") from None
    return Path(out.strip())


def pyenv_python(version: str, needed_by: str = "") -> Path:
    """The newest pyenv interpreter of ``version`` (``"3.9"`` → ``$(pyenv root)/versions/3.9.18/bin/python3.9``)."""
    if not re.fullmatch(r"\d+\.\d+", version):
        raise TaskError(f"{needed_by or 'environment'}: python version {version!r} is not MAJOR.MINOR")
    root = _pyenv_root()
    candidates = []
    for d in (root / "versions").glob(f"{version}.*"):
        m = re.fullmatch(rf"{re.escape(version)}\.(\d+)", d.name)
        exe = d / "bin" / f"python{version}"
        if m and exe.is_file():
            candidates.append((int(m.group(1)), exe))
    if not candidates:
        who = f"{needed_by} needs " if needed_by else "needs "
        raise TaskError(f"{who}python {version}, which pyenv ({root}) does not have: pyenv install {version}")
    return max(candidates)[1]
