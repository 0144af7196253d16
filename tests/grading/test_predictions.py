"""``legorl grade``: every prediction is graded and reported, keyed by (instance, model) when one
instance has several models' predictions; the same (instance, model) twice is refused, naming it.
The grader is replaced by a stand-in (no sandbox): these tests are about the bookkeeping."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from legorl.errors import ConfigError
from legorl.grading import grader
from legorl.grading.predictions import (
    grade_predictions,
    load_predictions,
    prediction_keys,
)
from legorl.tasks.loader import load_suite
from legorl.trajectory.records import GraderReport

SUITE = "trivial"
A, B = (t.instance_id for t in load_suite(SUITE)[:2])


@pytest.fixture
def graded(monkeypatch):
    """grade() stand-in: resolved iff the patch is 'fix'; records which (instance, patch) it graded."""
    seen: list[tuple[str, str]] = []

    def fake_grade(task, diff, backend, timeout=120, **kw):
        seen.append((task.instance_id, diff))
        ok = diff == "fix"
        return GraderReport(resolved=ok, reward=1.0 if ok else 0.0)

    monkeypatch.setattr(grader, "grade", fake_grade)
    return seen


def _p(iid: str, patch: str, model: str | None) -> dict:
    r = {"instance_id": iid, "model_patch": patch}
    if model is not None:
        r["model_name_or_path"] = model
    return r


def test_two_models_on_one_instance_are_both_graded_and_reported(graded):
    preds = [_p(A, "fix", "model-good"), _p(A, "", "model-bad"), _p(B, "fix", "model-good")]
    report = grade_predictions(preds, SUITE, backend=object(), workers=2)
    assert sorted(graded) == sorted([(A, "fix"), (A, ""), (B, "fix")])
    inst = report["instances"]
    assert set(inst) == {f"{A}@model-good", f"{A}@model-bad", f"{B}@model-good"}
    assert report["keyed_by"] == ["instance_id", "model_name_or_path"]
    assert inst[f"{A}@model-good"]["resolved"] and not inst[f"{A}@model-bad"]["resolved"]
    assert inst[f"{A}@model-bad"]["instance_id"] == A and inst[f"{A}@model-bad"]["model_name_or_path"] == "model-bad"
    s = report["summary"]
    assert (s["total"], s["resolved"]) == (3, 2)
    assert s["by_model"]["model-good"]["resolved"] == 2 and s["by_model"]["model-bad"]["total"] == 1
    assert s["resolved_ids"] == sorted([f"{A}@model-good", f"{B}@model-good"])


def test_one_prediction_per_instance_keeps_instance_id_keys(graded):
    report = grade_predictions([_p(A, "fix", "m"), _p(B, "", "other")], SUITE, backend=object())
    assert set(report["instances"]) == {A, B} and report["keyed_by"] == ["instance_id"]
    assert report["summary"]["total"] == 2 and report["summary"]["resolved_ids"] == [A]


@pytest.mark.parametrize("model", ["same-model", None])
def test_the_same_instance_and_model_twice_is_refused_naming_the_instance(graded, model):
    preds = [_p(A, "fix", model), _p(B, "", model), _p(A, "", model)]
    with pytest.raises(ConfigError, match=A) as info:
        grade_predictions(preds, SUITE, backend=object())
    assert B not in str(info.value)
    assert graded == [], "refused before anything is graded"


def test_keys_that_would_collide_are_refused():
    with pytest.raises(ConfigError, match="cannot be told apart"):
        prediction_keys([_p("x@y", "", "z"), _p("x", "", "y@z"), _p("x", "", "w")])


def test_json_predictions_with_a_duplicate_key_are_refused(tmp_path):
    path = tmp_path / "preds.json"
    path.write_text(
        f'{{"{A}": {{"instance_id": "{A}", "model_patch": "a"}}, "{A}": {{"instance_id": "{A}", "model_patch": "b"}}}}'
    )
    with pytest.raises(ConfigError, match=f"duplicate key '{A}'"):
        load_predictions(path)
    line = tmp_path / "preds.jsonl"
    line.write_text(f'{{"instance_id": "{A}", "model_patch": "a", "model_patch": "b"}}\n')
    with pytest.raises(ConfigError, match="preds.jsonl:1: duplicate key 'model_patch'"):
        load_predictions(line)


def test_cli_grade_reports_every_prediction_and_refuses_duplicates(graded, tmp_path):
    from legorl.cli import app

    preds = tmp_path / "preds.jsonl"
    preds.write_text("".join(json.dumps(r) + "\n" for r in [_p(A, "fix", "m1"), _p(A, "", "m2")]))
    out = tmp_path / "report.json"
    res = CliRunner().invoke(app, ["grade", str(preds), "--tasks", SUITE, "--out", str(out)])
    assert res.exit_code == 0, res.output
    report = json.loads(out.read_text())
    assert set(report["instances"]) == {f"{A}@m1", f"{A}@m2"} and report["summary"]["resolved"] == 1
    assert "m1" in res.output and "m2" in res.output

    dup = tmp_path / "dup.jsonl"
    dup.write_text("".join(json.dumps(r) + "\n" for r in [_p(A, "fix", "m1"), _p(A, "", "m1")]))
    res = CliRunner().invoke(app, ["grade", str(dup), "--tasks", SUITE])
    assert res.exit_code == 2 and A in res.output.replace("\n", ""), res.output
