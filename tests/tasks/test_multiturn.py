"""The multi-turn fix family: deterministic, split by family (neighbours too), the issue names no
file or line, every bug caught by its test, every neighbour's test passing before and after, and
every gold patch fixing the bug (real pytest), loadable by name."""

from __future__ import annotations

import json
import re
import subprocess

import pytest

from legorl.tasks.author import read_tree, run_pytest
from legorl.tasks.loader import get_task, load_suite
from legorl.tasks.multiturn import VARIANTS, generate
from legorl.tasks.oneline import FAMILIES, family_split


def _records(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def _docs(path, record) -> set[str]:
    """The docstrings of every function in the task's repository (the bug's and its neighbours')."""
    root = path.parent / record["source_dir"]
    return {d for p in (root / "lib").glob("*.py") for d in re.findall(r'"""(.*?)"""', p.read_text())}


def test_generation_is_deterministic(tmp_path):
    a = generate(tmp_path / "a", "train")
    b = generate(tmp_path / "b", "train")
    assert a.read_text() == b.read_text()
    bugs = sum(len(f.bugs) for i, f in enumerate(FAMILIES) if family_split(i) == "train")
    assert len(_records(a)) == VARIANTS * bugs


def test_heldout_families_never_occur_in_training_not_even_as_neighbours(tmp_path):
    train_path, heldout_path = generate(tmp_path, "train"), generate(tmp_path, "heldout")
    train = set().union(*(_docs(train_path, r) for r in _records(train_path)))
    heldout = set().union(*(_docs(heldout_path, r) for r in _records(heldout_path)))
    assert len(_records(heldout_path)) >= 30  # 160 held-out samples at 5 per task
    assert train.isdisjoint(heldout)


def test_the_issue_names_no_file_and_no_line(tmp_path):
    path = generate(tmp_path, "heldout")
    for record in _records(path):
        text = record["problem_statement"]
        assert "lib/" not in text and ".py" not in text and "line " not in text.replace("wrong line", "")
        assert len(_docs(path, record)) >= 3  # something to look through


@pytest.mark.parametrize("split", ["train", "heldout"])
def test_tests_catch_the_bug_and_the_gold_patch_fixes_it(tmp_path, split):
    path = generate(tmp_path, split)
    for record in _records(path)[:2]:
        root = path.parent / record["source_dir"]
        before = run_pytest(read_tree(root))
        assert [before[t] for t in record["FAIL_TO_PASS"]] == ["failed"]
        assert {before[t] for t in record["PASS_TO_PASS"]} == {"passed"} and len(record["PASS_TO_PASS"]) >= 2
        subprocess.run(["git", "apply", "-"], cwd=root, input=record["patch"].encode(), check=True)
        after = run_pytest(read_tree(root))
        assert set(after.values()) == {"passed"}, after
        assert record["patch"].count("\n-    return") == 1 and record["patch"].count("\n+    return") == 1


def test_generated_suites_load_by_name():
    heldout = load_suite("multiturn-heldout")
    assert heldout and all(t.instance_id.startswith("legorl__multiturn-heldout-") for t in heldout)
    assert all(t.source().is_dir() for t in heldout)
    assert get_task(heldout[0].instance_id).patch == heldout[0].patch
    assert load_suite("multiturn-train")[0].instance_id == "legorl__multiturn-train-001"
