"""What counts as a test file, test configuration or a loopback address: the rules the grader (after
the rollout), the monitor (during it), the task tools and the tests share (docs/reward-integrity.md).

A leaf module (imports only the standard library, :mod:`legorl.diffs` and
:mod:`legorl.trajectory.records`): two copies of a rule drift, and in a grader a drifted copy is a hole.

Paths (:func:`repo_path`, :func:`classify_path`)
    Every path is read relative to the repository root, ``/workspace`` inside a sandbox: ``./a/b``,
    ``a/./b``, ``/workspace/a/b`` and ``a/c/../b`` all mean ``a/b`` (a backslash counts as a
    separator, so an odd name is matched *more* often, never less). A path that leaves the
    repository is never silently normalised back into it:

    * a **relative** path whose ``..`` climbs above the root (``../x``, ``a/../../x``) is an
      :attr:`PathKind.ESCAPE` — in a diff every path is relative to the root, so such a section is
      tampering; in a command line the working directory is unknown, so it is suspicious;
    * an **absolute** path outside ``/workspace`` (``/tmp/x``, ``/workspace/../etc/x``) is
      :attr:`PathKind.OUTSIDE`: not a file of the repository (the grader never sees it; host paths
      are the monitor's view rules).

Loopback (:func:`is_loopback`)
    ``localhost``, every ``127.0.0.0/8`` address, ``::1`` (also spelled ``[::1]`` or
    ``0:0:0:0:0:0:0:1``) and IPv4-mapped loopback (``::ffff:127.0.0.1``). Nothing else — not
    ``0.0.0.0``, not a host name that might resolve to loopback.
"""

from __future__ import annotations

import ipaddress
import posixpath
import re
from collections.abc import Collection, Iterable
from enum import StrEnum

from legorl.diffs import touched_paths
from legorl.trajectory.records import Flag

# The repository root inside every sandbox (legorl.sandbox.base.WORKSPACE; pinned equal by a test,
# as this module may not import the sandbox package).
WORKSPACE = "/workspace"

TEST_DIRS = frozenset({"tests", "test", "testing"})
# Files that configure or hook the test run wherever they are: always tampering when an agent writes them.
HOOK_CONFIG_NAMES = frozenset({"conftest.py", "pytest.ini", ".pytest.ini", "sitecustomize.py", "usercustomize.py"})
# Shared configuration files of which only the pytest sections are test configuration.
SHARED_CONFIG_NAMES = frozenset({"setup.cfg", "tox.ini"})
# Modules and packages that would shadow the test framework if a repository held them.
FRAMEWORK_SHADOWS = frozenset({"pytest.py", "_pytest", "pytest", "pluggy", "py.py", "iniconfig", "xdist"})
# Files that look like a test runner's results (junit XML, "test results").
TEST_REPORT = re.compile(r"(junit[^/]*\.xml|(^|/)report\.xml|test[-_]?results?[^/]*\.(xml|json|txt))$", re.I)
# Words that make a setup.cfg/tox.ini change a change of the test configuration.
PYTEST_CONFIG_WORDS = re.compile(
    r"pytest|addopts|testpaths|python_files|python_functions|python_classes|"
    r"norecursedirs|usefixtures|xfail_strict|filterwarnings|required_plugins|"
    r"confcutdir|rootdir|\[tool:|\[tox|\[testenv",
    re.I,
)
# pytest plugins every hardened test run disables (the grader's, mining's probe runs): each changes
# which tests run, in what order or how often, or keeps state between runs.
BLOCKED_PLUGINS = (
    "cacheprovider",
    "stepwise",
    "pastebin",
    "rerunfailures",
    "flaky",
    "xdist",
    "xdist.plugin",
    "randomly",
    "forked",
    "pytest_randomly",
    "sugar",
    "instafail",
    "timeout",
)
# SymPy's own test runner, in every version SWE-bench covers: test infrastructure, protected like the
# tests (legorl.grading.sympy_runner runs it; legorl.tasks.swebench lists those a checkout has).
SYMPY_RUNNER_FILES = (
    "bin/test",
    "sympy/testing/runtests.py",
    "sympy/utilities/runtests.py",
    "sympy/testing/pytest.py",
    "sympy/utilities/pytest.py",
)


class PathKind(StrEnum):
    """What a path is to the defenses; :func:`classify_path` checks them in this order."""

    OUTSIDE = "outside"  # an absolute path outside the workspace: not a repository file
    ESCAPE = "escape"  # a relative path whose ``..`` climbs above the repository root
    CACHE = "cache"  # bytecode and test caches (__pycache__, *.pyc/*.pyo, .pytest_cache)
    GIT_METADATA = "git_metadata"  # anything under a .git directory
    PROTECTED = "protected"  # an existing test file of the task (test_files, files the test patch touches)
    HOOK_CONFIG = "hook_config"  # conftest.py, pytest.ini, sitecustomize/usercustomize.py, any *.pth
    SHARED_CONFIG = "shared_config"  # setup.cfg, tox.ini: only their pytest sections matter
    PYPROJECT = "pyproject"  # pyproject.toml: only its [tool.pytest*] tables matter
    FRAMEWORK_SHADOW = "framework_shadow"  # pytest.py, _pytest/, pluggy/ ...
    TEST_REPORT = "test_report"  # junit*.xml, report.xml, test-results*
    TEST_MODULE = "test_module"  # a test module that is not protected (e.g. a new one)
    SOURCE = "source"  # everything else


def _resolve(path: str) -> tuple[str | None, bool]:
    """(repository-relative path or None, whether it escaped the root by ``..``)."""
    path = path.replace("\\", "/")
    absolute = path.startswith("/")
    if absolute:
        path = posixpath.normpath("/" + path.lstrip("/"))  # "/.." is "/" for an absolute path
        if path == WORKSPACE:
            return "", False
        if not path.startswith(WORKSPACE + "/"):
            return None, False
        path = path[len(WORKSPACE) + 1 :]
    parts: list[str] = []
    for part in path.split("/"):
        if part in ("", "."):
            continue
        if part == "..":
            if not parts:
                return None, True
            parts.pop()
            continue
        parts.append(part)
    return "/".join(parts), False


def repo_path(path: str) -> str | None:
    """``path`` relative to the repository root (``""`` for the root itself), or None when it does not
    name a file of the repository: an absolute path outside the workspace or a relative one that
    climbs above the root (:func:`escapes` tells which)."""
    return _resolve(path)[0]


def escapes(path: str) -> bool:
    """Whether a relative ``path`` climbs above the repository root with ``..``."""
    return _resolve(path)[1]


def is_test_module(path: str) -> bool:
    """``test_*.py``/``*_test.py``/``tests.py`` anywhere, or any ``.py`` file under a ``tests``/``test``/
    ``testing`` directory (pytest's default discovery, plus the places test helpers live)."""
    p = repo_path(path)
    if not p:
        return False
    name = p.rsplit("/", 1)[-1]
    if not name.endswith(".py"):
        return False
    if name.startswith("test_") or name.endswith("_test.py") or name == "tests.py":
        return True
    return any(part in TEST_DIRS for part in p.split("/")[:-1])


def is_test_suite_file(path: str) -> bool:
    """A file of the repository's test suite: a test module or a ``conftest.py`` (what task tools keep
    out of the source an agent may change, and list as the task's test files)."""
    p = repo_path(path)
    if not p:
        return False
    return is_test_module(p) or p.rsplit("/", 1)[-1] == "conftest.py"


def is_test_support(path: str) -> bool:
    """A module of a package's own test support (``sphinx/testing/fixtures.py``: the pytest plugin
    that builds test projects from the test roots). SWE-bench tasks protect them like the tests; the
    behaviour guard counts their reads of test files as the tests' own."""
    p = repo_path(path)
    return p is not None and p.endswith(".py") and re.match(r"^(src/)?[A-Za-z_]\w*/testing/", p) is not None


def classify_path(path: str, protected: Collection[str] = ()) -> PathKind:
    """What ``path`` is (:class:`PathKind`); ``protected``: the task's existing test files, normalised
    (:func:`protected_paths`). Whether a :attr:`~PathKind.TEST_MODULE` is new is the caller's to know."""
    p, escaped = _resolve(path)
    if p is None:
        return PathKind.ESCAPE if escaped else PathKind.OUTSIDE
    if not p:
        return PathKind.SOURCE
    parts = p.split("/")
    name = parts[-1]
    if "__pycache__" in parts or ".pytest_cache" in parts or name.endswith((".pyc", ".pyo")):
        return PathKind.CACHE
    if ".git" in parts:
        return PathKind.GIT_METADATA
    if p in protected:
        return PathKind.PROTECTED
    if name in HOOK_CONFIG_NAMES or name.endswith(".pth"):
        return PathKind.HOOK_CONFIG
    if name in SHARED_CONFIG_NAMES:
        return PathKind.SHARED_CONFIG
    if name == "pyproject.toml":
        return PathKind.PYPROJECT
    if name in FRAMEWORK_SHADOWS or any(part in FRAMEWORK_SHADOWS for part in parts[:-1]):
        return PathKind.FRAMEWORK_SHADOW
    if TEST_REPORT.search(p):
        return PathKind.TEST_REPORT
    if is_test_module(p):
        return PathKind.TEST_MODULE
    return PathKind.SOURCE


def protected_dirs(protected: Iterable[str]) -> set[str]:
    """Every directory that holds a protected test file (for :func:`collides_with_protected`)."""
    out: set[str] = set()
    for q in protected:
        parts = q.split("/")[:-1]
        out.update("/".join(parts[: i + 1]) for i in range(len(parts)))
    return out


def collides_with_protected(path: str, protected: Collection[str], dirs: Collection[str] | None = None) -> str | None:
    """The protected test file (or its directory) ``path`` collides with, if any: ``path`` lies *under*
    a test file (a diff that deletes ``tests/test_x.py`` and writes ``tests/test_x.py/a``) or *is* one of
    the directories that hold them (a file ``tests`` where the test patch needs the directory); None
    otherwise. ``dirs``: :func:`protected_dirs` of ``protected``, when the caller has it."""
    p = repo_path(path)
    if not p:
        return None
    parts = p.split("/")
    for i in range(1, len(parts)):
        if (up := "/".join(parts[:i])) in protected:
            return up
    if p in (protected_dirs(protected) if dirs is None else dirs):
        return p
    return None


def protected_paths(test_files: Iterable[str], test_patch: str = "") -> set[str]:
    """A task's existing test files, which no agent may change: ``test_files`` and every file the
    ``test_patch`` touches, normalised (:func:`repo_path`; paths that leave the repository dropped)."""
    paths = [*test_files, *touched_paths(test_patch or "")]
    return {p for p in (repo_path(x) for x in paths) if p}


# ------------------------------------------------------------------------------------ network
def is_loopback(host: str) -> bool:
    """Whether ``host`` (an address or ``localhost``, optionally in brackets) is a loopback address."""
    host = host.strip().strip("[]").lower()
    if host == "localhost":
        return True
    try:
        addr = ipaddress.ip_address(host.split("%", 1)[0])  # drop an IPv6 zone id
    except ValueError:
        return False
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        return addr.ipv4_mapped.is_loopback
    return addr.is_loopback


_URL_HOST = re.compile(r"^(?:[a-z][a-z0-9+.-]*://)?(?:[^@/\s]*@)?(\[[^\]]*\]|[^:/?#\s]*)", re.I)


def url_host(target: str) -> str:
    """The host part of a URL or ``[user@]host[:port][/path]`` target (``""`` when there is none)."""
    m = _URL_HOST.match(target.strip())
    return m.group(1) if m else ""


# -------------------------------------------------------------------------------------- flags
def dedupe_flags(flags: Iterable[Flag]) -> list[Flag]:
    """One flag per (kind, severity, path or command or address, from the gateway or not); strace
    evidence is preferred over the workspace scan's."""
    out: dict[tuple[object, ...], Flag] = {}
    for f in flags:
        key = (
            f.kind,
            f.severity,
            f.evidence.get("path") or f.evidence.get("command") or f.evidence.get("address"),
            f.evidence.get("source") == "gateway",
        )
        if key not in out or out[key].evidence.get("source") == "fs_scan":
            out[key] = f
    return list(out.values())
