"""A mined repository's test environment, from what the repository itself declares.

Declarations read (:func:`read_declared`), at the commit the environment is for:

* ``pyproject.toml``: ``[project]`` ``name``, ``requires-python``, ``dependencies``, the
  ``optional-dependencies`` and ``[dependency-groups]`` named ``test``/``tests``/``testing``
  (``include-group`` followed), Poetry's ``dependencies`` and its ``test`` group (names only);
* ``setup.cfg``: ``[options]`` ``python_requires``, ``install_requires``, ``tests_require`` and
  the test extras of ``[options.extras_require]``; ``setup.py``: the same keywords where they are
  literals;
* ``requirements*.txt`` / ``requirements/*.txt|.in`` / ``*-requirements.txt`` whose name says test
  (``requirements/tests.txt``, ``test-requirements.txt``...; ``-r`` includes followed), and a root
  ``requirements.txt`` as runtime;
* ``tox.ini``: ``[testenv]`` ``deps`` (lines with substitutions dropped, factor prefixes
  stripped), ``extras`` and ``dependency_groups`` naming more of the above.

``pytest`` is always added (the runner). The interpreter (:func:`choose_python`) is the newest
pyenv Python that ``requires-python`` allows and that was out half a year before the commit (an
old commit's code meets the interpreter it was written for), 3.9 at the oldest (what the grader's
in-process guard runs on). The requirements are resolved with uv
(``uv pip compile --python-version X --exclude-newer DATE``) as the index was at the end of the
commit's half-year (:func:`index_date`), with a pytest the grader's runner can drive (at least
:data:`RUNNER_FLOOR`: when the repository's era gives an older one, pytest and its own requirements
are taken as of :data:`RUNNER_INDEX_DATE`): the pinned closure becomes the env layer's requirements
(:class:`legorl.sandbox.images.EnvRecipe`), so commits whose declarations resolve alike share one
layer. A test requirement that cannot be resolved is dropped and named in the report; a runtime one
is an error naming it and uv's reason. Resolutions are cached under
``$LEGORL_HOME/tasks/mining/envs``.
"""

from __future__ import annotations

import ast
import configparser
import hashlib
import json
import re
import subprocess
import sys
import tempfile
import tomllib
from dataclasses import asdict, dataclass, field
from datetime import UTC, date, datetime
from pathlib import Path

from legorl import pyparse
from legorl.errors import TaskError
from legorl.sandbox.images import requirement_name
from legorl.tasks.mining.sources import mining_root
from legorl.tasks.model import TaskEnvironment
from legorl.tasks.swebench_env import declared_requirements, import_root, read_requirements
from legorl.tasks.swebench_specs import pyenv_python

# first release of each interpreter the miner may choose (pyenv must have it); none before 3.9: the
# grader's in-process guard (legorl.grading.behaviour) is written for 3.9 and later
PYTHON_RELEASES = {
    "3.9": date(2020, 10, 5),
    "3.10": date(2021, 10, 4),
    "3.11": date(2022, 10, 24),
    "3.12": date(2023, 10, 2),
    "3.13": date(2024, 10, 7),
}
_SETTLE_DAYS = 183  # an interpreter counts for a commit half a year after its release
_TEST_NAMES = re.compile(r"^(tests?|testing|test[-_](deps|requirements|extras))$", re.IGNORECASE)
_RESOLVE_FORMAT = 2  # bump when a resolution's inputs or outputs change meaning
# The grader's hardened runner needs a pytest of this age or later (pytest 3.5 has no
# ``_pytest.reports``; 5.4 fails the runner's collection of its canary tests). A resolution whose
# pytest is older is made again with pytest and what it needs taken as the index was on
# RUNNER_INDEX_DATE (SWE-bench's own index day), whatever the repository pins.
RUNNER_FLOOR = "7.0"
RUNNER_INDEX_DATE = "2024-08-31"
RUNNER_PACKAGES = ("pytest", "pluggy", "iniconfig", "packaging", "tomli", "exceptiongroup", "colorama")


@dataclass(frozen=True)
class Declared:
    """What a tree declares it needs (requirement strings as written)."""

    name: str = ""
    requires_python: str = ""
    runtime: tuple[str, ...] = ()
    tests: tuple[str, ...] = ()
    files: tuple[str, ...] = ()  # the files the declarations came from

    def key(self) -> str:
        return hashlib.sha256(json.dumps(asdict(self), sort_keys=True).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Resolved:
    """A resolution: the pinned closure uv chose and the test requirements it had to drop."""

    python: str
    index_date: str
    pins: tuple[str, ...]
    dropped: tuple[str, ...] = ()
    declared_files: tuple[str, ...] = field(default=())


def _clean(reqs: list[str], own: str) -> list[str]:
    out = []
    for raw in reqs:
        req = raw.split(" #", 1)[0].strip()
        if not req or req.startswith(("-", ".", "/", "file:", "git+", "http:", "https:")) or "{" in req:
            continue
        if own and requirement_name(req) == own:
            continue
        out.append(req)
    return list(dict.fromkeys(out))


def _groups(doc: dict, wanted: set[str]) -> list[str]:
    groups = doc.get("dependency-groups") or {}
    out: list[str] = []

    def take(name: str, depth: int) -> None:
        for item in groups.get(name, []) if depth < 5 else []:
            if isinstance(item, str):
                out.append(item)
            elif isinstance(item, dict) and isinstance(item.get("include-group"), str):
                take(item["include-group"], depth + 1)

    for name in groups:
        if name in wanted:
            take(name, 0)
    return out


def _setup_py_tests(tree: Path) -> list[str]:
    """``tests_require`` and the test extras of ``extras_require`` where ``setup.py`` spells them out."""
    try:
        module = pyparse.parse((tree / "setup.py").read_text(encoding="utf-8"), quiet=True)
    except (OSError, SyntaxError, ValueError, UnicodeDecodeError):
        return []
    out: list[str] = []
    for node in ast.walk(module):
        if not isinstance(node, ast.Call):
            continue
        for kw in node.keywords:
            if kw.arg == "tests_require" and isinstance(kw.value, ast.List):
                out += [e.value for e in kw.value.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
            if kw.arg == "extras_require" and isinstance(kw.value, ast.Dict):
                for k, v in zip(kw.value.keys, kw.value.values):
                    if isinstance(k, ast.Constant) and _TEST_NAMES.match(str(k.value)) and isinstance(v, ast.List):
                        out += [e.value for e in v.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
    return out


def _requirement_files(tree: Path) -> tuple[list[Path], list[Path]]:
    """(runtime files, test files) among the repository's requirement files."""
    candidates = [
        *tree.glob("requirements*.txt"),
        *tree.glob("*-requirements.txt"),
        *tree.glob("requirements/*.txt"),
        *tree.glob("requirements/*.in"),
        *tree.glob("tests/requirements*.txt"),
    ]
    runtime, tests = [], []
    for path in sorted(set(candidates)):
        rel = path.relative_to(tree).as_posix()
        if "test" in path.name.lower() or rel.startswith("tests/"):
            tests.append(path)
        elif rel == "requirements.txt":
            runtime.append(path)
    return runtime, tests


def read_declared(tree: Path) -> Declared:
    """The declarations of the repository in ``tree`` (see the module docstring)."""
    files: list[str] = []
    name, requires_python = "", ""
    runtime: list[str] = []
    tests: list[str] = []
    extras: set[str] = {"test", "tests", "testing"}
    groups: set[str] = {"test", "tests", "testing"}
    tox = configparser.ConfigParser(interpolation=None, strict=False)
    try:
        if tox.read(tree / "tox.ini", encoding="utf-8"):
            files.append("tox.ini")
            env = tox["testenv"] if tox.has_section("testenv") else {}
            for line in str(env.get("deps", "")).splitlines():
                line = line.split(":", 1)[1] if re.match(r"^\s*[\w,{}-]+\s*:\s", line) else line
                tests.append(line.strip())
            for key, bucket in (("extras", extras), ("dependency_groups", groups)):
                for line in str(env.get(key, "")).replace(",", "\n").splitlines():
                    word = line.split(":", 1)[-1].strip()
                    if word and "{" not in word:
                        bucket.add(word)
    except (configparser.Error, UnicodeDecodeError):
        pass
    try:
        doc = tomllib.loads((tree / "pyproject.toml").read_text(encoding="utf-8"))
        files.append("pyproject.toml")
    except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError):
        doc = {}
    project = doc.get("project") or {}
    name = str(project.get("name") or "")
    requires_python = str(project.get("requires-python") or "")
    runtime += [str(r) for r in project.get("dependencies") or []]
    for extra, reqs in (project.get("optional-dependencies") or {}).items():
        if extra in extras or _TEST_NAMES.match(extra):
            tests += [str(r) for r in reqs]
    tests += _groups(doc, groups)
    poetry = (doc.get("tool") or {}).get("poetry") or {}
    runtime += [n for n in poetry.get("dependencies") or {} if n != "python"]
    for group, spec in (poetry.get("group") or {}).items():
        if _TEST_NAMES.match(group) or group == "dev":
            tests += list((spec or {}).get("dependencies") or {})
    cfg = configparser.ConfigParser(interpolation=None, strict=False)
    try:
        if cfg.read(tree / "setup.cfg", encoding="utf-8"):
            files.append("setup.cfg")
            name = name or cfg.get("metadata", "name", fallback="")
            requires_python = requires_python or cfg.get("options", "python_requires", fallback="")
            tests += cfg.get("options", "tests_require", fallback="").splitlines()
            if cfg.has_section("options.extras_require"):
                for extra, reqs in cfg.items("options.extras_require"):
                    if extra in extras or _TEST_NAMES.match(extra):
                        tests += reqs.splitlines()
    except (configparser.Error, UnicodeDecodeError):
        pass
    if (tree / "setup.py").is_file():
        files.append("setup.py")
        tests += _setup_py_tests(tree)
    runtime += declared_requirements(tree)  # setup.cfg's and setup.py's install_requires
    runtime_files, test_files = _requirement_files(tree)
    for path, into in [*((p, runtime) for p in runtime_files), *((p, tests) for p in test_files)]:
        files.append(path.relative_to(tree).as_posix())
        into += read_requirements(path.parent, [path.name])
    own = requirement_name(name) if name else ""
    return Declared(
        name=name,
        requires_python=requires_python,
        runtime=tuple(_clean(runtime, own)),
        tests=tuple(_clean(tests, own)),
        files=tuple(dict.fromkeys(files)),
    )


def index_date(commit_day: date, today: date | None = None) -> str:
    """The day the index is read as of for a commit of ``commit_day``: the first day of the next
    half-year (what the project's developers could install while it was current), never after today."""
    nxt = date(commit_day.year, 7, 1) if commit_day.month <= 6 else date(commit_day.year + 1, 1, 1)
    return min(nxt, today or datetime.now(UTC).date()).isoformat()


def choose_python(requires_python: str, commit_day: date) -> str:
    """The interpreter version for a commit of ``commit_day`` (see the module docstring); TaskError
    when pyenv has none that ``requires_python`` allows."""
    from packaging.specifiers import InvalidSpecifier, SpecifierSet

    try:
        allowed = SpecifierSet(requires_python or "")
    except InvalidSpecifier:
        allowed = SpecifierSet("")
    have = []
    for version in PYTHON_RELEASES:
        try:
            pyenv_python(version)
        except TaskError:
            continue
        if allowed.contains(f"{version}.0", prereleases=True) or allowed.contains(f"{version}.99", prereleases=True):
            have.append(version)
    if not have:
        raise TaskError(
            f"no pyenv interpreter satisfies requires-python {requires_python!r} "
            f"(pyenv has {', '.join(v for v in PYTHON_RELEASES if _has(v)) or 'none of 3.9..3.13'})"
        )
    settled = [v for v in have if (commit_day - PYTHON_RELEASES[v]).days >= _SETTLE_DAYS]
    return (settled or have[:1])[-1]


def _has(version: str) -> bool:
    try:
        pyenv_python(version)
        return True
    except TaskError:
        return False


def _uv_compile(reqs: list[str], python: str, day: str, runner_floor: bool = False) -> tuple[list[str] | None, str]:
    """(the pinned closure, "") or (None, uv's reason). ``runner_floor``: pytest at least
    :data:`RUNNER_FLOOR`, it and its own requirements as the index was on :data:`RUNNER_INDEX_DATE`."""
    argv = [sys.executable, "-m", "uv", "pip", "compile", "-", "--python-version", python, "--exclude-newer", day]
    argv += ["--no-header", "--no-annotate", "--quiet", "--no-config"]
    with tempfile.TemporaryDirectory(prefix="legorl-uv-") as scratch:
        if runner_floor:
            overrides = Path(scratch) / "overrides.txt"
            overrides.write_text(f"pytest>={RUNNER_FLOOR}\n")
            argv += ["--overrides", str(overrides)]
            for name in RUNNER_PACKAGES:
                argv += ["--exclude-newer-package", f"{name}={RUNNER_INDEX_DATE}"]
        try:
            res = subprocess.run(argv, input="\n".join(reqs) + "\n", capture_output=True, text=True, timeout=600)
        except (OSError, subprocess.SubprocessError) as exc:
            return None, f"cannot run uv: {exc}"
    if res.returncode != 0:
        lines = [ln.strip(" ×╰─▶│") for ln in res.stderr.splitlines() if ln.strip()]
        return None, " ".join(lines)[-900:] or f"uv exited with {res.returncode}"
    pins = [ln.strip() for ln in res.stdout.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    return pins, ""


def resolve(declared: Declared, python: str, day: str, where: str) -> Resolved:
    """Resolve ``declared`` for ``python`` as the index was on ``day`` (cached). TaskError names
    what could not be resolved and why (``where``: the repository and commit, for the message)."""
    key = hashlib.sha256(json.dumps([_RESOLVE_FORMAT, declared.key(), python, day]).encode()).hexdigest()[:24]
    cache = mining_root() / "envs" / f"{key}.json"
    if cache.is_file():
        try:
            data = json.loads(cache.read_text())
            return Resolved(
                python=str(data["python"]),
                index_date=str(data["index_date"]),
                pins=tuple(data["pins"]),
                dropped=tuple(data["dropped"]),
                declared_files=tuple(data["declared_files"]),
            )
        except (json.JSONDecodeError, KeyError, TypeError):
            pass
    pins, dropped = _resolve_dropping(declared, python, day, where, runner_floor=False)
    if _too_old(pins):
        pins, dropped = _resolve_dropping(declared, python, day, where, runner_floor=True)
    out = Resolved(python, day, tuple(pins), tuple(dropped), declared.files)
    cache.parent.mkdir(parents=True, exist_ok=True)
    tmp = cache.with_suffix(f".tmp{id(out)}")
    tmp.write_text(json.dumps(asdict(out)))
    tmp.replace(cache)
    return out


def _too_old(pins: list[str]) -> bool:
    from packaging.version import InvalidVersion, Version

    for pin in pins:
        name, _, version = pin.partition("==")
        if requirement_name(name) == "pytest":
            try:
                return Version(version.split(";")[0].strip()) < Version(RUNNER_FLOOR)
            except InvalidVersion:
                return False
    return False


def _resolve_dropping(
    declared: Declared, python: str, day: str, where: str, *, runner_floor: bool
) -> tuple[list[str], list[str]]:
    """(pins, test requirements dropped): everything at once, else the runtime requirements and then
    each test requirement that still resolves with them. TaskError when the runtime ones do not."""
    runtime = [*declared.runtime, "pytest"]
    pins, why = _uv_compile([*runtime, *declared.tests], python, day, runner_floor)
    dropped: list[str] = []
    if pins is None:
        base, why_base = _uv_compile(runtime, python, day, runner_floor)
        if base is None:
            raise TaskError(
                f"{where}: cannot resolve the environment (python {python}, index as of {day}): "
                f"requirements {', '.join(runtime)}: {why_base}"
            )
        kept = list(runtime)
        for req in declared.tests:
            trial, _ = _uv_compile([*kept, req], python, day, runner_floor)
            if trial is None:
                dropped.append(req)
            else:
                kept.append(req)
        pins, why = _uv_compile(kept, python, day, runner_floor)
        if pins is None:
            raise TaskError(f"{where}: cannot resolve the environment (python {python}, index as of {day}): {why}")
    return pins, dropped


def task_environment(resolved: Resolved, tree: Path) -> TaskEnvironment:
    """The :class:`TaskEnvironment` of a resolution for the tree at ``tree`` (its import root)."""
    return TaskEnvironment(
        python=resolved.python,
        interpreter=str(pyenv_python(resolved.python)),
        requirements=list(resolved.pins),
        python_path=[import_root(tree)],
        index_date=resolved.index_date,
        runner="pytest",
    )
