"""Author a task from a project's fixed tree and a buggy edit of it (``legorl tasks author``).

Input: ``base``, the project as it should be (source and visible tests), and ``buggy``: a copy of it
with the bug injected into source files and, for SWE-bench style tiers, the hidden tests added to
test files (or a diff from ``base`` to that). Changes to test modules (:func:`is_test_module`) become
the ``test_patch``; every other change is the bug, and the gold ``patch`` reverts it. The task dir
gets only ``task.json``, whose ``base_dir`` names ``base``: the loader rebuilds the buggy tree from
base and patch (:func:`legorl.tasks.loader.materialize_source`).

FAIL_TO_PASS / PASS_TO_PASS come from pytest runs on the host (the author's code is trusted):
buggy + hidden tests (before) and fixed + hidden tests (after). Refused: a fixed tree that fails a
test, nothing failing before, different tests before and after; tier rules of the built-in suites:
``trivial`` tasks show their failing test (no test_patch) and fix one line of a module under 40
lines; ``easy``/``medium`` hide every failing test (the visible tests pass on the buggy tree). Then
``legorl tasks check`` (sandbox, real grader) validates the written task.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from legorl.errors import TaskError
from legorl.rules import is_test_module
from legorl.sandbox.git import git_argv, host_git_env
from legorl.tasks.loader import load_task_dir

_SKIP = {".git", "__pycache__", ".pytest_cache"}

# A pytest plugin that records {nodeid: passed|failed|error|skipped} in run order.
_PLUGIN = """
import json, os
_seen = {}
def pytest_runtest_logreport(report):
    if report.failed:
        _seen[report.nodeid] = "failed" if report.when == "call" else "error"
    elif report.skipped:
        _seen.setdefault(report.nodeid, "skipped")
    elif report.when == "call":
        _seen.setdefault(report.nodeid, "passed")
def pytest_collectreport(report):
    if report.failed:
        _seen[report.nodeid or "<collection>"] = "error"
def pytest_sessionfinish(session):
    with open(os.environ["LEGORL_AUTHOR_REPORT"], "w") as f:
        json.dump(_seen, f)
"""

Files = dict[str, tuple[int, bytes]]  # repo-relative path -> (mode, bytes)


def read_tree(root: Path) -> Files:
    out: Files = {}
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root)
        if set(rel.parts) & _SKIP or p.suffix == ".pyc" or p.is_dir():
            continue
        if p.is_symlink() or not p.is_file():
            raise TaskError(f"{p}: only regular files can be part of a task repository")
        out[rel.as_posix()] = (p.stat().st_mode & 0o777, p.read_bytes())
    return out


def write_tree(root: Path, files: Files) -> None:
    for rel, (mode, data) in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
        p.chmod(mode)


def _git(args: list[str], cwd: Path) -> str:
    res = subprocess.run(git_argv(*args), cwd=cwd, env=host_git_env(cwd), capture_output=True, timeout=120)
    if res.returncode != 0:
        raise TaskError(f"git {args[0]} failed: {res.stderr.decode('utf-8', 'replace').strip()}")
    return res.stdout.decode("utf-8", "replace")


def git_diff(before: Files, after: Files) -> str:
    """``git diff`` that turns the tree ``before`` into ``after``."""
    with tempfile.TemporaryDirectory(prefix="legorl-author-") as tmp:
        root = Path(tmp) / "repo"
        root.mkdir()
        write_tree(root, before)
        _git(["init", "-q"], root)
        _git(["add", "-A"], root)
        _git(["commit", "-q", "--allow-empty", "-m", "before"], root)
        for rel in set(before) - set(after):
            (root / rel).unlink()
        write_tree(root, after)
        _git(["add", "-A"], root)
        return _git(["diff", "--cached", "--no-color", "--no-ext-diff"], root)


def run_pytest(files: Files, timeout: float = 120) -> dict[str, str]:
    """{nodeid: passed|failed|error|skipped} of ``python -m pytest`` over a copy of ``files``."""
    with tempfile.TemporaryDirectory(prefix="legorl-author-") as tmp:
        root, plugin, report = Path(tmp) / "repo", Path(tmp) / "plugin", Path(tmp) / "report.json"
        write_tree(root, files)
        plugin.mkdir()
        (plugin / "_legorl_author_report.py").write_text(_PLUGIN)
        env = {
            **os.environ,
            "PYTHONDONTWRITEBYTECODE": "1",
            "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
            "PYTHONPATH": str(plugin),
            "LEGORL_AUTHOR_REPORT": str(report),
        }
        try:
            res = subprocess.run(
                [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "_legorl_author_report"],
                cwd=root,
                env=env,
                capture_output=True,
                text=True,
                timeout=timeout,
            )
        except subprocess.TimeoutExpired:
            raise TaskError(f"pytest ran over {timeout:.0f}s") from None
        if not report.is_file():
            raise TaskError(
                f"pytest wrote no report (exit {res.returncode}; is pytest installed for "
                f"{sys.executable}?):\n{res.stdout[-2000:]}\n{res.stderr[-2000:]}"
            )
        return json.loads(report.read_text())


def _buggy_files(base: Path, buggy: Path) -> Files:
    if buggy.is_dir():
        return read_tree(buggy)
    if not buggy.is_file():
        raise TaskError(f"{buggy}: no such directory or diff file")
    with tempfile.TemporaryDirectory(prefix="legorl-author-") as tmp:
        root = Path(tmp) / "repo"
        root.mkdir()
        write_tree(root, read_tree(base))
        res = subprocess.run(
            ["git", "apply", "--whitespace=nowarn", str(buggy.resolve())],
            cwd=root,
            env={**os.environ, "GIT_CEILING_DIRECTORIES": tmp},
            capture_output=True,
            text=True,
        )
        if res.returncode != 0:
            raise TaskError(f"{buggy} does not apply to {base}: {res.stderr.strip()}")
        return read_tree(root)


def build_record(
    base: Path,
    buggy: Path,
    out: Path,
    *,
    instance_id: str,
    tier: str,
    statement: str,
    repo: str | None = None,
    hints: str = "",
    timeout: float = 120,
) -> tuple[dict[str, Any], Files]:
    """The task.json record for the bug ``buggy`` of ``base``, to be written in the task dir ``out``,
    and the files of the task's repository (what the agent starts from)."""
    base, out = Path(base).resolve(), Path(out).resolve()
    if not base.is_dir():
        raise TaskError(f"{base}: no such directory")
    fixed = read_tree(base)
    bugged = _buggy_files(base, Path(buggy))
    changed = sorted(p for p in set(fixed) | set(bugged) if fixed.get(p) != bugged.get(p))
    tests = {p for p in changed if is_test_module(p)}
    if not set(changed) - tests:
        raise TaskError("the buggy tree changes no source file (changes to test modules are the hidden tests)")
    visible = {p: v for p, v in fixed.items() if p not in changed or p in tests}  # fixed tests, buggy source
    visible.update({p: bugged[p] for p in changed if p not in tests and p in bugged})
    with_tests = {p: v for p, v in visible.items() if p not in tests}
    with_tests.update({p: bugged[p] for p in tests if p in bugged})
    fixed_with_tests = {p: v for p, v in fixed.items() if p not in tests}
    fixed_with_tests.update({p: bugged[p] for p in tests if p in bugged})

    patch = git_diff(visible, fixed)
    test_patch = git_diff(visible, with_tests) if tests else ""
    after = run_pytest(fixed_with_tests, timeout)
    if not after or any(v != "passed" for v in after.values()):
        raise TaskError(f"the fixed tree fails tests: { ({k: v for k, v in after.items() if v != 'passed'} or after) }")
    before = run_pytest(with_tests, timeout)
    if set(after) != set(before):
        raise TaskError(f"different tests before and after the fix: {sorted(set(after) ^ set(before))}")
    f2p = [t for t, v in before.items() if v != "passed"]
    p2p = [t for t, v in before.items() if v == "passed"]
    if not f2p:
        raise TaskError("no test fails on the buggy tree")
    if tier == "trivial":
        lines = [ln for ln in patch.splitlines() if ln[:1] in "+-" and ln[:3] not in ("+++", "---")]
        (target, *more) = [p for p in changed if p not in tests]
        if tests:
            raise TaskError("trivial tasks keep the failing test visible: no hidden tests")
        if more or len(lines) != 2 or len(visible[target][1].splitlines()) >= 40:
            raise TaskError("a trivial fix changes one line of a module under 40 lines")
    elif tier in ("easy", "medium"):
        if not tests:
            raise TaskError(f"{tier} tasks hide their failing tests: add them to test files in the buggy tree")
        if failing := [t for t, v in run_pytest(visible, timeout).items() if v != "passed"]:
            raise TaskError(f"a visible test already fails on the buggy tree: {failing}")
    record = {
        "instance_id": instance_id,
        "repo": repo or f"legorl/{base.name}",
        "base_dir": os.path.relpath(base, out),
        "base_commit": "",
        "problem_statement": statement.strip(),
        "hints_text": hints,
        "patch": patch,
        "test_patch": test_patch,
        "FAIL_TO_PASS": f2p,
        "PASS_TO_PASS": p2p,
        "tier": tier,
        "test_command": "python -m pytest",
        "test_files": sorted(p for p in visible if is_test_module(p)),
    }
    return record, visible


def write_task(record: dict[str, Any], out: Path, expect: Files | None = None) -> Path:
    """Write ``out/task.json``; load it back and, with ``expect``, check that the loader's tree is it."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    if (out / "repo").exists():
        raise TaskError(f"{out}/repo exists: a task with base_dir keeps no repository copy")
    task_file = out / "task.json"
    task_file.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    try:
        task = load_task_dir(out)
        if task.source_dir is None:  # a base_dir record always loads with one; guard against a loader change
            raise TaskError(f"{task_file}: the loader gave the task no source tree")
        if expect is not None and read_tree(task.source_dir) != expect:
            raise TaskError(f"{task_file}: the loader's tree differs from the buggy tree")
    except TaskError:
        task_file.unlink()
        raise
    return task_file


def author_task(base: Path, buggy: Path, out: Path, **kw: Any) -> Path:
    """:func:`build_record` then :func:`write_task`; returns the task.json path."""
    record, visible = build_record(base, buggy, out, **kw)
    return write_task(record, out, expect=visible)
