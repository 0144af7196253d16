"""Task synthesis: mutations of a working repo become tasks whose gold patch is the reverse diff."""

from __future__ import annotations

import ast
import shutil
import subprocess
from pathlib import Path

import pytest

from legorl.errors import TaskError
from legorl.tasks.loader import get_task, load_suite
from legorl.tasks.synth import (
    Mutation,
    find_mutations,
    reverse_diff,
    source_files,
    synthesize,
)

needs_bwrap = pytest.mark.sandbox

MODULE = '''"""Sample module."""


def f(values, limit=3):
    """Docstring with 7 in it."""
    total = 0
    for i in range(len(values)):
        if values[i] > limit and i != 0:
            total += values[i] - 1
    if not values:
        return None
    return total
'''


@pytest.fixture()
def fixed_calc(tmp_path) -> Path:
    """trivial-001's repository with its gold patch applied: all its tests pass."""
    task = get_task("legorl__trivial-001")
    repo = tmp_path / "calc"
    shutil.copytree(task.source_dir, repo)
    subprocess.run(["git", "apply", "-"], input=task.patch, text=True, cwd=repo, check=True)
    return repo


def test_find_mutations_kinds_and_minimal_edits(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "m.py").write_text(MODULE)
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_m.py").write_text("def test_x():\n    if 1 < 2:\n        return 1\n")
    assert source_files(tmp_path) == ["pkg/m.py"]  # tests are never mutated
    muts = find_mutations(tmp_path, "pkg/m.py")
    kinds = {m.kind for m in muts}
    assert {
        "flip_comparison",
        "swap_plus_minus",
        "off_by_one",
        "swap_and_or",
        "negate_if",
        "drop_return_value",
    } <= kinds
    assert len({m.key for m in muts}) == len(muts)
    for m in muts:
        ast.parse(m.mutated)
        assert m.mutated != MODULE and "limit=3" in m.mutated and "7 in it" in m.mutated
        changed = [l for l in reverse_diff(m).splitlines() if l[:1] in "+-" and l[:3] not in ("+++", "---")]
        assert len(changed) == 2, reverse_diff(m)  # one line changed, formatting kept
    flips = {(m.before, m.after) for m in muts if m.kind == "flip_comparison"}
    assert (">", ">=") in flips and ("!=", "==") in flips
    assert any(m.before == "not values" and m.after == "values" for m in muts if m.kind == "negate_if")


def test_reverse_diff_applies_without_final_newline(tmp_path):
    original = "def g(a):\n    return a + 1"
    mutated = "def g(a):\n    return a - 1"
    (tmp_path / "g.py").write_text(mutated)
    patch = reverse_diff(Mutation("g.py", 2, "swap_plus_minus", "+", "-", original, mutated))
    subprocess.run(["git", "apply", "-"], input=patch, text=True, cwd=tmp_path, check=True)
    assert (tmp_path / "g.py").read_text() == original


def test_bad_input(tmp_path):
    with pytest.raises(TaskError, match="no such directory"):
        synthesize(tmp_path / "missing", tmp_path / "out.jsonl")
    (tmp_path / "file.py").write_text("x = 1\n")
    with pytest.raises(TaskError, match="not a directory"):
        synthesize(tmp_path / "file.py", tmp_path / "out.jsonl")
    (tmp_path / "empty").mkdir()
    with pytest.raises(TaskError, match="no Python modules"):
        synthesize(tmp_path / "empty", tmp_path / "out.jsonl")


@pytest.mark.sandbox
@needs_bwrap
def test_failing_tests_before_mutation_is_an_error(tmp_path):
    from legorl.sandbox.bwrap import BwrapBackend

    buggy = get_task("legorl__trivial-001").source_dir  # test_add fails as shipped
    with pytest.raises(TaskError, match="must pass before mutation"):
        synthesize(buggy, tmp_path / "out.jsonl", backend=BwrapBackend(root=tmp_path / "sb"))


@pytest.mark.sandbox
@pytest.mark.slow
@needs_bwrap
def test_synthesize_from_fixed_calc_and_check(fixed_calc, tmp_path):
    from legorl.sandbox.bwrap import BwrapBackend
    from legorl.tasks.check import check_suite

    backend = BwrapBackend(root=tmp_path / "sandboxes")
    out = tmp_path / "out" / "calc.jsonl"
    tasks = synthesize(fixed_calc, out, max_tasks=3, seed=0, backend=backend)
    assert 1 <= len(tasks) <= 3
    loaded = load_suite(out)
    assert [t.instance_id for t in loaded] == [t.instance_id for t in tasks]
    for t in loaded:
        assert t.source_dir == (out.parent / "calc.jsonl.d" / t.instance_id).resolve() and t.source_dir.is_dir()
        assert not (t.source_dir / ".git").exists()
        assert t.FAIL_TO_PASS and t.test_patch == ""
        assert set(t.FAIL_TO_PASS) | set(t.PASS_TO_PASS) == {
            "tests/test_arith.py::test_add",
            "tests/test_arith.py::test_subtract",
            "tests/test_arith.py::test_multiply",
            "tests/test_stats.py::test_total",
            "tests/test_stats.py::test_mean",
            "tests/test_stats.py::test_mean_empty",
        }
        assert t.FAIL_TO_PASS[0] in t.problem_statement
        fix_line = next(l[1:] for l in t.patch.splitlines() if l.startswith("+") and not l.startswith("+++"))
        assert fix_line.strip() not in t.problem_statement  # the statement does not reveal the fix
    results = check_suite(loaded, backend, workers=2)
    assert all(r.ok for r in results), [(r.instance_id, r.problems) for r in results]
