"""The environment of a SWE-bench instance on this machine, from SWE-bench's own spec for its
(repository, version) (:mod:`legorl.tasks.swebench_specs`), built with pip instead of conda.

What SWE-bench's spec says → what the env layer (:class:`legorl.sandbox.images.EnvRecipe`) gets:

* ``python`` → the pyenv interpreter of that version (an error naming the instance when pyenv
  lacks it). The layer is built with it and sandboxes run it.
* ``pip_packages`` → required requirements.
* ``packages``: ``"requirements.txt"`` (the file SWE-bench reads, at the version's
  ``environment_setup_commit``, ``-r`` includes followed, ``-e .`` dropped), ``"environment.yml"``
  (its conda dependencies as pip requirements, ``name=1.2`` → ``name==1.2.*``, conda-forge names
  that mean another PyPI project mapped (:data:`CONDA_TO_PYPI`); ``python`` and ``pip`` skipped) or a conda package list → *optional* requirements: a name PyPI does not have is
  dropped and recorded in the layer (``meta.json``: ``dropped``), as conda-only packages must be.
* ``install`` (``pip install -e .[extras]``) → the repository's dependencies (with those extras),
  resolved from its tree at ``environment_setup_commit``, go into the layer; the repository itself
  does not (its code is the workspace's, first on ``PYTHONPATH``: ``/workspace`` or
  ``/workspace/src``). The instance layer then builds the repository in place, offline and without
  build isolation (``pip wheel --no-deps``), which writes what an editable install would: version
  files (``setuptools_scm``, with a version derived from the spec's) and the ``.egg-info``
  metadata that ``importlib.metadata`` finds beside the code.
* ``pre_install``: shell fixes (``sed`` on ``setup.cfg``…) run in the repository before that build;
  ``apt-get install`` steps cannot run in bwrap: satisfied when the host has every package (the
  sandbox's view shows the host's ``/usr``), otherwise the instance is unsupported in bwrap, with
  the packages named.

Every package is resolved as PyPI was on :data:`INDEX_DATE` (``uv pip install --exclude-newer``), so
that a layer built today holds what SWE-bench's environments held when its test lists were made:
resolved against today's index, Pygments 2.19+ renders line numbers differently and fails Sphinx's
own tests with the gold patch applied.

One env layer per (repository, version, spec, interpreter): every instance of a version shares the
``environment_setup_commit`` and so the layer.
"""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import tomllib
from pathlib import Path

import yaml

from legorl import pyparse
from legorl.errors import TaskError
from legorl.sandbox.base import WORKSPACE
from legorl.tasks.model import Task, TaskEnvironment
from legorl.tasks.swebench import RepoSource, commit_tree
from legorl.tasks.swebench_specs import EnvSpec, env_spec, harness, pyenv_python

__all__ = ["environment_tree", "import_root", "read_environment_yml", "read_requirements", "task_environment"]

# SWE-bench Verified's release month: its specs' newest pin (tox 4.16.0, July 2024) is older
INDEX_DATE = "2024-08-31"
_APT_INSTALL = re.compile(r"apt(?:-get)?\s+install\s+(.*)")
_EXTRAS = re.compile(r"\.\[([A-Za-z0-9_,\- ]+)\]")
_SELF_REQUIREMENT = ("-e .", "#", ".[test", ".")


def environment_tree(task: Task, source: RepoSource) -> Path:
    """The repository at the instance's ``environment_setup_commit`` (the one all instances of its
    version share: SWE-bench reads requirement files there), or at its base commit without one."""
    commit = task.environment_setup_commit or task.base_commit
    return commit_tree(task, commit, source, f"env-{task.repo.replace('/', '__')}-{commit[:12]}")


def read_requirements(tree: Path, candidates: list[str]) -> list[str]:
    """The requirement lines of the first of ``candidates`` in ``tree``, as SWE-bench reads them:
    ``-r`` includes followed (relative to the file), the repository itself (``-e .``, ``.[test]``),
    comments and other options dropped."""
    path = next((tree / c for c in candidates if (tree / c).is_file()), None)
    if path is None:
        raise TaskError(f"no requirements file at {candidates} in the tree of {tree.name}")
    out: list[str] = []

    def read(p: Path, depth: int) -> None:
        for raw in p.read_text(encoding="utf-8", errors="replace").splitlines():
            line = raw.split(" #", 1)[0].strip()
            if line.startswith("-r") and depth < 5:
                inc = p.parent / line[2:].strip()
                if inc.is_file():
                    read(inc, depth + 1)
            elif line and not line.startswith(("-", *_SELF_REQUIREMENT)):
                out.append(line)

    read(path, 0)
    return list(dict.fromkeys(out))


# conda-forge names that mean another project on PyPI (None: conda-only, nothing to install). PyPI's
# "iris" is a placeholder that raises at import, which would break every xarray test module.
# cfgrib: conda's pulls in the ecCodes C library, PyPI's needs ecmwflibs for it (else importing it
# raises RuntimeError, not ImportError, and xarray's test package fails to import).
CONDA_TO_PYPI: dict[str, tuple[str, ...]] = {
    "iris": ("scitools-iris",),
    "python-graphviz": ("graphviz",),
    "matplotlib-base": ("matplotlib",),
    "dask-core": ("dask",),
    "pytables": ("tables",),
    "cfgrib": ("cfgrib", "ecmwflibs"),
    "hdf5": (),  # the C library: h5py's wheels carry it
    "pynio": (),
    "cdms2": (),
    "esmpy": (),
}


def _conda_to_pip(dep: str) -> list[str]:
    name, op, version = re.match(r"([A-Za-z0-9_.\-]+)\s*([<>=!]*)\s*(.*)", dep.strip()).groups()  # type: ignore[union-attr]
    names = CONDA_TO_PYPI.get(name.lower(), (name,))
    if op == "=":  # conda's "name=1.2" means 1.2.*
        op, version = "==", (f"{version}.*" if version.count(".") < 2 else version)
    return [f"{names[0]}{op}{version}", *names[1:]] if names else []


def read_environment_yml(tree: Path, candidates: list[str]) -> list[str]:
    """The dependencies of the first of ``candidates`` (a conda environment file), as pip requirements."""
    path = next((tree / c for c in candidates if (tree / c).is_file()), None)
    if path is None:
        raise TaskError(f"no environment file at {candidates} in the tree of {tree.name}")
    doc = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    out: list[str] = []
    for dep in doc.get("dependencies", []) or []:
        if isinstance(dep, dict):
            out += [str(d) for d in dep.get("pip", []) or [] if not str(d).startswith("-")]
        elif isinstance(dep, str):
            name = re.split(r"[<>=!\s]", dep.strip(), maxsplit=1)[0]
            if name not in ("python", "pip"):
                out += _conda_to_pip(dep)
    return list(dict.fromkeys(out))


def declared_requirements(tree: Path) -> list[str]:
    """The repository's ``install_requires`` where it is declared as data: ``setup.cfg``'s
    ``[options]``, or a literal list in ``setup.py`` (``install_requires=[...]`` or a module-level
    list it names); ``[]`` when it is computed."""
    import ast
    import configparser

    cfg = configparser.ConfigParser(interpolation=None)
    try:
        cfg.read(tree / "setup.cfg", encoding="utf-8")
        raw = cfg.get("options", "install_requires", fallback="")
    except (configparser.Error, OSError, UnicodeDecodeError):
        raw = ""
    reqs = [line.strip() for line in raw.splitlines() if line.strip() and not line.strip().startswith("#")]
    try:
        module = pyparse.parse((tree / "setup.py").read_text(encoding="utf-8"), quiet=True)
    except (OSError, SyntaxError, ValueError, UnicodeDecodeError):
        return reqs
    lists = {
        t.id: node.value
        for node in module.body
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.List)
        for t in node.targets
        if isinstance(t, ast.Name)
    }
    for node in ast.walk(module):
        for kw in getattr(node, "keywords", []) if isinstance(node, ast.Call) else []:
            if kw.arg != "install_requires":
                continue
            value = lists.get(kw.value.id) if isinstance(kw.value, ast.Name) else kw.value
            if isinstance(value, ast.List):
                reqs += [e.value for e in value.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
    return list(dict.fromkeys(reqs))


def _newly_required(base_tree: Path, env_tree: Path) -> list[str]:
    """What the instance's own tree requires that the version's setup commit does not (SWE-bench
    installs each instance's repository, so its dependencies are the instance's: pytest 5.4 added
    ``wcwidth`` after its version's setup commit)."""

    def norm(req: str) -> str:  # the same requirement, spelled alike (a marker may differ: it counts)
        return re.sub(r"\s+", "", req).replace("'", '"').lower()

    known = {norm(r) for r in declared_requirements(env_tree)}
    return [r for r in declared_requirements(base_tree) if norm(r) not in known]


def import_root(tree: Path) -> str:
    """Where the repository's packages import from inside the sandbox: ``/workspace/src`` for a
    ``src`` layout, else ``/workspace``."""
    src = tree / "src"
    if src.is_dir() and any((d / "__init__.py").is_file() or d.suffix == ".py" for d in src.iterdir()):
        return f"{WORKSPACE}/src"
    return WORKSPACE


def _host_has_packages(packages: list[str]) -> list[str]:
    """Of ``packages`` (Debian names), those this host has not installed."""
    dpkg = shutil.which("dpkg-query")
    if dpkg is None:
        return packages
    missing = []
    for pkg in packages:
        res = subprocess.run([dpkg, "-W", "-f=${Status}", pkg], capture_output=True, text=True)
        if res.returncode != 0 or "install ok installed" not in res.stdout:
            missing.append(pkg)
    return missing


def _split_pre_install(spec: EnvSpec) -> tuple[list[str], list[str]]:
    """(shell steps to run in the repository, Debian packages the apt steps install)."""
    shell, apt = [], []
    for step in spec.pre_install:
        if "apt-get" in step or re.search(r"\bapt\b", step):
            for m in _APT_INSTALL.finditer(step):
                apt += [w for w in shlex.split(m.group(1).split("&&")[0]) if not w.startswith("-")]
        else:
            shell.append(step)
    return shell, apt


def _pretend_version(version: str) -> str:
    """A PEP 440 version for ``setuptools_scm`` (no ``.git`` in an instance tree) from the spec's."""
    parts = version.split(".")
    return ".".join([*parts, *(["0"] * (3 - len(parts)))]) if all(p.isdigit() for p in parts) else "0.0.0"


def _build_requirements(tree: Path) -> list[str]:
    """What building the repository in place (no isolation) needs: ``[build-system] requires``."""
    try:
        doc = tomllib.loads((tree / "pyproject.toml").read_text(encoding="utf-8"))
        requires = [str(r) for r in doc.get("build-system", {}).get("requires", [])]
    except (OSError, tomllib.TOMLDecodeError):
        requires = []
    # wheel: setuptools before 70.1 has no bdist_wheel of its own, and pip wheel needs it
    return list(dict.fromkeys([*(requires or ["setuptools"]), "wheel"]))


def install_command(version: str) -> str:
    """The instance layer's in-place build (offline, no isolation, nothing installed): it writes the
    version files and ``.egg-info`` metadata an editable install would, then drops its ``build/``."""
    pip = (
        f"SETUPTOOLS_SCM_PRETEND_VERSION={_pretend_version(version)} python -m pip wheel --no-deps "
        "--no-build-isolation --no-index --disable-pip-version-check -q -w /tmp/legorl-wheel ."
    )
    return f'keep=$(test -e build && echo 1); {pip}; rc=$?; test -n "$keep" || rm -rf build; exit $rc'


def task_environment(task: Task, source: RepoSource, base_tree: Path) -> TaskEnvironment:
    """The environment of SWE-bench instance ``task`` (whose tree at the base commit is ``base_tree``).
    TaskError names the instance and the cause (no spec for its version, an interpreter pyenv lacks,
    a requirements file missing at the setup commit)."""
    spec = env_spec(task)
    interpreter = pyenv_python(spec.python, needed_by=f"instance {task.instance_id}")
    env_tree = environment_tree(task, source)
    h = harness()
    optional: list[str] = []
    try:
        if spec.packages == "requirements.txt":
            optional = read_requirements(env_tree, h.requirements_paths.get(task.repo, ["requirements.txt"]))
        elif spec.packages == "environment.yml":
            optional = read_environment_yml(env_tree, h.environment_yml_paths.get(task.repo, ["environment.yml"]))
        elif spec.packages.strip():
            optional = spec.packages.split()
    except TaskError as exc:
        raise TaskError(f"instance {task.instance_id}: {exc}") from None
    runner = "sympy" if task.repo == "sympy/sympy" else "pytest"
    if runner == "pytest" and task.repo != "pytest-dev/pytest":
        optional.append("pytest")  # the runner's (pinned by the spec or the repository when they name it)
    shell_steps, apt = _split_pre_install(spec)
    unsupported = {}
    missing = _host_has_packages(apt) if apt else []
    if missing:
        unsupported["bwrap"] = (
            f"SWE-bench's pre-install step needs the Debian packages {', '.join(missing)} (apt cannot run in "
            "bwrap, and this host lacks them; install them on the host or use the podman backend)"
        )
    has_build = (base_tree / "setup.py").is_file() or (base_tree / "pyproject.toml").is_file()
    extras = [e.strip() for m in _EXTRAS.findall(spec.install) for e in m.split(",") if e.strip()]
    return TaskEnvironment(
        python=spec.python,
        interpreter=str(interpreter),
        requirements=list(spec.pip_packages),
        optional=list(dict.fromkeys([*optional, *_newly_required(base_tree, env_tree)])),
        build_requirements=_build_requirements(env_tree) if has_build else [],
        project=str(env_tree),
        project_extras=extras,
        project_prepare=shell_steps,
        pip_env={"SETUPTOOLS_SCM_PRETEND_VERSION": _pretend_version(task.version)},
        python_path=[import_root(base_tree)],
        setup=[*shell_steps, *([install_command(task.version)] if has_build else [])],
        runner=runner,
        framework_under_test=task.repo == "pytest-dev/pytest",
        index_date=INDEX_DATE,
        unsupported=unsupported,
    )
