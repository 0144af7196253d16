"""The built-in suites: enough tasks per tier, well-formed records, and every task real (acceptance)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess

import pytest

from legorl.diffs import split_diff
from legorl.tasks.author import read_tree
from legorl.tasks.loader import (
    BASES_DIR,
    BUILTIN_SUITES_DIR,
    builtin_suites,
    load_suite,
)

MINIMUM = {"trivial": 14, "easy": 13, "medium": 13}
ALL = load_suite("builtin")


def _apply_check(patch: str, cwd) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "apply", "--check", "-"], input=patch, text=True, cwd=cwd, capture_output=True)


def test_counts_per_tier():
    assert {"trivial", "easy", "medium"} <= set(builtin_suites())
    for tier, minimum in MINIMUM.items():
        tasks = load_suite(tier)
        assert len(tasks) >= minimum, tier
        assert all(t.tier == tier for t in tasks)
    assert len(ALL) == sum(len(load_suite(s)) for s in builtin_suites())
    assert [t.tier for t in ALL] == sorted((t.tier for t in ALL), key=["trivial", "easy", "medium"].index)


def test_ids_unique_and_named_after_their_dir():
    ids = [t.instance_id for t in ALL]
    assert len(ids) == len(set(ids))
    for t in ALL:
        assert re.fullmatch(rf"legorl__{t.tier}-\d{{3}}", t.instance_id)
        task_dir = BUILTIN_SUITES_DIR / t.tier / t.instance_id
        assert [p.name for p in task_dir.iterdir()] == ["task.json"]  # no repository copy
        # materialised outside the package (the suites dir holds the gold patches and fixed code)
        assert t.source_dir.name.startswith(t.instance_id + "-")
        assert not t.source_dir.is_relative_to(BUILTIN_SUITES_DIR)


def test_one_base_per_project_and_the_gold_patch_restores_it(tmp_path):
    """source_dir + gold patch == the project's base, byte for byte; every base is some task's."""
    used = set()
    for t in ALL:
        record = json.loads((BUILTIN_SUITES_DIR / t.tier / t.instance_id / "task.json").read_text())
        base = (BUILTIN_SUITES_DIR / t.tier / t.instance_id / record["base_dir"]).resolve()
        assert base.parent == BASES_DIR.resolve() and t.repo == f"legorl/{base.name}"
        used.add(base.name)
        work = tmp_path / t.instance_id
        shutil.copytree(t.source_dir, work)
        res = subprocess.run(
            ["git", "apply", "-"],
            input=t.patch,
            text=True,
            cwd=work,
            capture_output=True,
            env={"PATH": "/usr/bin:/bin", "GIT_CEILING_DIRECTORIES": str(tmp_path)},
        )
        assert res.returncode == 0, res.stderr
        assert read_tree(work) == read_tree(base), t.instance_id
        assert read_tree(t.source_dir) != read_tree(base)
    assert used == {p.name for p in BASES_DIR.iterdir()}


@pytest.mark.parametrize("task", ALL, ids=lambda t: t.instance_id)
def test_record_is_well_formed(task):
    src = task.source_dir
    assert src is not None and (src / "tests").is_dir()
    assert task.FAIL_TO_PASS and task.PASS_TO_PASS
    assert not set(task.FAIL_TO_PASS) & set(task.PASS_TO_PASS)
    assert task.problem_statement.strip() and task.repo.startswith("legorl/")
    modules = [p for p in src.rglob("*.py") if "tests" not in p.parts and p.name != "__init__.py"]
    assert 2 <= len(modules) <= 6, modules
    # the gold patch touches only source files and applies to the repo as shipped
    gold_paths = {p for fp in split_diff(task.patch) for p in fp.paths}
    assert gold_paths and not gold_paths & set(task.test_files) and not any(p.startswith("tests/") for p in gold_paths)
    res = _apply_check(task.patch, src)
    assert res.returncode == 0, res.stderr
    test_patch_paths = {p for fp in split_diff(task.test_patch) for p in fp.paths}
    for nodeid in task.FAIL_TO_PASS + task.PASS_TO_PASS:
        path, _, name = nodeid.partition("::")
        visible = (src / path).is_file() and f"def {name}(" in (src / path).read_text()
        hidden = path in test_patch_paths and f"+def {name}(" in task.test_patch
        assert visible or hidden, nodeid
    if task.tier == "trivial":
        # visible failing test, one-line fix in a short module
        assert task.test_patch == ""
        changed = [l for l in task.patch.splitlines() if l[:1] in "+-" and l[:3] not in ("+++", "---")]
        assert len(changed) == 2
        (target,) = gold_paths
        assert len((src / target).read_text().splitlines()) < 40
    else:
        # SWE-bench style: the failing tests arrive with the test_patch, which touches tests only
        assert task.test_patch.strip()
        assert all(p.startswith("tests/") for p in test_patch_paths)
        res = _apply_check(task.test_patch, src)
        assert res.returncode == 0, res.stderr
        for nodeid in task.FAIL_TO_PASS:
            path, _, name = nodeid.partition("::")
            assert f"+def {name}(" in task.test_patch, f"{nodeid} is visible in the repo"


@pytest.mark.sandbox
@pytest.mark.slow
@pytest.mark.sandbox
def test_check_suite_builtin_all_real(tmp_path):
    """Acceptance: gold patch -> reward 1, empty patch -> every FAIL_TO_PASS fails, for every task."""
    from legorl.sandbox.bwrap import BwrapBackend
    from legorl.tasks.check import check_suite

    results = check_suite(ALL, BwrapBackend(root=tmp_path / "sandboxes"), workers=2)
    assert [r.instance_id for r in results] == [t.instance_id for t in ALL]
    broken = {r.instance_id: r.problems for r in results if not r.ok}
    assert not broken, broken
    assert all(r.gold == "ok" and r.empty == "ok" for r in results)
