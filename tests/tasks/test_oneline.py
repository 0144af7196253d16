"""The one-line-fix task family: deterministic, split by family, every bug caught by its tests and
every gold patch fixing them (run with real pytest), loadable by name."""

from __future__ import annotations

import json
import subprocess

import pytest

from legorl.harnesses.line_agent import EXAMPLES
from legorl.tasks.author import read_tree, run_pytest
from legorl.tasks.loader import get_task, load_suite
from legorl.tasks.oneline import FAMILIES, FUNC_FILE, family_split, generate


def _records(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_generation_is_deterministic(tmp_path):
    a = generate(tmp_path / "a", "train")
    b = generate(tmp_path / "b", "train")
    assert a.read_text().replace(str(tmp_path / "a"), "") == b.read_text().replace(str(tmp_path / "b"), "")
    assert len(_records(a)) == sum(len(f.bugs) for i, f in enumerate(FAMILIES) if family_split(i) == "train")


def test_heldout_families_never_occur_in_training(tmp_path):
    train = _records(generate(tmp_path, "train"))
    heldout = _records(generate(tmp_path, "heldout"))
    assert len(heldout) >= 12 and len(train) >= 2 * len(heldout) - 4

    def docs(records):
        return {r["patch"].split('"""')[1] for r in records}

    assert docs(train).isdisjoint(docs(heldout))
    # nor is any of the harness's worked examples one of them
    assert all(question.split('"""')[1] not in {f.doc for f in FAMILIES} for question, _ in EXAMPLES)


def test_every_family_bug_differs_from_the_fix():
    for fam in FAMILIES:
        assert fam.good not in fam.bugs and len(set(fam.bugs)) == len(fam.bugs)


@pytest.mark.parametrize("split", ["train", "heldout"])
def test_tests_catch_the_bug_and_the_gold_patch_fixes_it(tmp_path, split):
    path = generate(tmp_path, split)
    for record in _records(path)[:3]:
        root = path.parent / record["source_dir"]
        before = run_pytest(read_tree(root))
        assert before[record["FAIL_TO_PASS"][0]] == "failed"
        assert before[record["PASS_TO_PASS"][0]] == "passed"
        subprocess.run(["git", "apply", "-"], cwd=root, input=record["patch"].encode(), check=True)
        after = run_pytest(read_tree(root))
        assert set(after.values()) == {"passed"}, after
        # the issue names the faulty line, which is the one the patch changes
        assert f"line 3 of `{FUNC_FILE}`" in record["problem_statement"]
        assert record["patch"].count("\n-    return") == 1 and record["patch"].count("\n+    return") == 1


def test_generated_suites_load_by_name():
    heldout = load_suite("oneline-heldout")
    assert heldout and all(t.instance_id.startswith("legorl__oneline-heldout-") for t in heldout)
    assert all(t.source().is_dir() for t in heldout)
    assert get_task(heldout[0].instance_id).patch == heldout[0].patch
    assert load_suite("oneline-train")[0].instance_id == "legorl__oneline-train-001"
