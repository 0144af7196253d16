#!/usr/bin/env python
"""Regenerate the built-in task suites (src/legorl/tasks/suites/<tier>/legorl__<tier>-NNN/).

The specs live in ``scripts/builtin_tasks_data.py``: a few small *correct* repositories (``BASES``)
and, per task, the bug to inject (``(path, correct_text, buggy_text)`` replacements, each matching
exactly once) plus the hidden tests (``hidden``: text appended to a test file, or a new test file)
that become the ``test_patch``. For each task this script

1. writes the buggy repository without hidden tests (the task's ``repo/``),
2. produces ``test_patch`` (buggy -> buggy + hidden tests) and the gold ``patch`` (buggy -> correct,
   source files only) with ``git diff`` in a scratch repository,
3. runs pytest on "buggy + hidden tests" and "correct + hidden tests" (plain subprocess, no
   sandbox) and derives FAIL_TO_PASS (failing before, passing after) and PASS_TO_PASS (passing in
   both); it refuses a task where the correct version fails a test, where nothing fails before, or
   (easy/medium) where a *visible* test already fails on the buggy repo (the failing tests must be
   hidden), or (trivial) where the fix is not a one-line change of a module under 40 lines.

Only the task dirs named in the specs are (re)written; the three hand-made trivial tasks 001-003
are not touched. Usage: ``python scripts/make_builtin_tasks.py [--only ID ...] [--check-only]``.
Validate the result in the sandbox with ``legorl tasks check builtin``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from builtin_tasks_data import BASES, TASKS  # noqa: E402

SUITES = HERE.parent / "src" / "legorl" / "tasks" / "suites"
GIT = ["git", "-c", "user.name=legorl", "-c", "user.email=legorl@localhost", "-c", "core.autocrlf=false",
       "-c", "commit.gpgsign=false", "-c", "init.defaultBranch=main", "-c", "core.hooksPath=/dev/null"]
GIT_ENV = {"GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": "/dev/null",
           "GIT_AUTHOR_DATE": "2000-01-01T00:00:00Z", "GIT_COMMITTER_DATE": "2000-01-01T00:00:00Z"}


def _write_tree(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text, encoding="utf-8")


def _git(args: list[str], cwd: Path) -> str:
    env = {**os.environ, **GIT_ENV}
    return subprocess.run([*GIT, *args], cwd=cwd, env=env, check=True, capture_output=True, text=True).stdout


def git_diff(before: dict[str, str], after: dict[str, str]) -> str:
    """``git diff`` turning the tree ``before`` into ``after`` (paths relative to the repo root)."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        _write_tree(root, before)
        _git(["init", "-q"], root)
        _git(["add", "-A"], root)
        _git(["commit", "-q", "-m", "base"], root)
        for rel in set(before) - set(after):
            (root / rel).unlink()
        _write_tree(root, after)
        _git(["add", "-A"], root)
        return _git(["diff", "--cached", "--no-color", "--no-ext-diff"], root)


def run_pytest(files: dict[str, str]) -> tuple[int, dict[str, str]]:
    """Exit code and {nodeid: passed|failed|error|skipped} of pytest over ``files``."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "repo"
        _write_tree(root, files)
        junit = Path(tmp) / "junit.xml"
        env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
        res = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q",
                              f"--junitxml={junit}", "-o", "junit_family=xunit2"],
                             cwd=root, env=env, capture_output=True, text=True, timeout=120)
        if not junit.exists():
            raise RuntimeError(f"pytest wrote no report (exit {res.returncode}):\n{res.stdout}\n{res.stderr}")
        outcomes: dict[str, str] = {}
        for case in ET.parse(junit).getroot().iter("testcase"):
            cls, name = case.get("classname", ""), case.get("name", "")
            nodeid = cls.replace(".", "/") + ".py::" + name
            tags = {c.tag for c in case}
            outcomes[nodeid] = ("error" if "error" in tags else "failed" if "failure" in tags
                                else "skipped" if "skipped" in tags else "passed")
        return res.returncode, outcomes


def build_task(spec: dict) -> tuple[dict, dict[str, str]]:
    """(task.json record, files of repo/) for one spec; raises on any inconsistency."""
    iid = f"legorl__{spec['tier']}-{spec['n']:03d}"
    base_name = spec["base"]
    correct = dict(BASES[base_name])
    buggy = dict(correct)
    for path, good, bad in spec["bug"]:
        count = buggy[path].count(good)
        if count != 1:
            raise ValueError(f"{iid}: {path}: the correct text occurs {count} times:\n{good}")
        buggy[path] = buggy[path].replace(good, bad)
    hidden = spec.get("hidden", {})
    with_tests = dict(buggy)
    for path, text in hidden.items():
        with_tests[path] = with_tests.get(path, "") + text
    correct_with_tests = {**correct, **{p: with_tests[p] for p in hidden}}

    test_patch = git_diff(buggy, with_tests) if hidden else ""
    patch = git_diff(buggy, correct)
    if not patch.strip():
        raise ValueError(f"{iid}: empty gold patch")

    rc_after, after = run_pytest(correct_with_tests)
    if rc_after != 0 or any(v != "passed" for v in after.values()):
        raise ValueError(f"{iid}: the correct repo fails tests: {after}")
    rc_before, before = run_pytest(with_tests)
    f2p = [t for t, v in before.items() if v != "passed" and after.get(t) == "passed"]
    p2p = [t for t, v in before.items() if v == "passed" and after.get(t) == "passed"]
    if not f2p:
        raise ValueError(f"{iid}: no test fails on the buggy repo")
    if set(after) != set(before):
        raise ValueError(f"{iid}: different tests collected before/after: {set(after) ^ set(before)}")
    if spec["tier"] == "trivial":
        if hidden:
            raise ValueError(f"{iid}: trivial tasks keep the failing test visible (no hidden tests)")
        changed = [l for l in patch.splitlines() if l[:1] in "+-" and l[:3] not in ("+++", "---")]
        (path, _, _), = spec["bug"]
        if len(changed) != 2 or len(buggy[path].splitlines()) >= 40:
            raise ValueError(f"{iid}: a trivial fix must change one line of a module under 40 lines")
    else:
        if not hidden:
            raise ValueError(f"{iid}: {spec['tier']} tasks hide their failing tests in test_patch")
        rc_visible, visible = run_pytest(buggy)
        if rc_visible != 0:
            raise ValueError(f"{iid}: a visible test already fails on the buggy repo: {visible}")
    statement = spec["statement"].strip()
    if spec["tier"] == "trivial":
        names = ", ".join(f"`{t}`" for t in f2p)
        statement += f" The failing test{'s are' if len(f2p) > 1 else ' is'} {names}."
    test_files = sorted(p for p in buggy if p.startswith("tests/") and p.endswith(".py"))
    record = {
        "instance_id": iid,
        "repo": f"legorl/{base_name}",
        "base_commit": "",
        "problem_statement": statement,
        "hints_text": spec.get("hints", ""),
        "patch": patch,
        "test_patch": test_patch,
        "FAIL_TO_PASS": f2p,
        "PASS_TO_PASS": p2p,
        "tier": spec["tier"],
        "test_command": "python -m pytest",
        "test_files": test_files,
    }
    return record, buggy


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", nargs="*", help="instance ids to (re)build")
    ap.add_argument("--check-only", action="store_true", help="validate the specs, write nothing")
    args = ap.parse_args()
    ids = set()
    failures = 0
    for spec in TASKS:
        iid = f"legorl__{spec['tier']}-{spec['n']:03d}"
        if iid in ids:
            raise SystemExit(f"duplicate task {iid}")
        ids.add(iid)
        if args.only and iid not in args.only:
            continue
        try:
            record, files = build_task(spec)
        except Exception as exc:  # noqa: BLE001 - report every broken spec
            failures += 1
            print(f"FAIL {iid}: {exc}")
            continue
        print(f"ok   {iid}: F2P {len(record['FAIL_TO_PASS'])}  P2P {len(record['PASS_TO_PASS'])}")
        if args.check_only:
            continue
        task_dir = SUITES / spec["tier"] / iid
        if task_dir.exists():
            shutil.rmtree(task_dir)
        _write_tree(task_dir / "repo", files)
        (task_dir / "task.json").write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
