"""``legorl grade`` on the hostile diffs of issue 37, with the real grader in bubblewrap: each prediction
is graded on its own (a failure of our code on one is that one's ``grader_error``), the gold prediction
beside them resolves, and the report is written. Then the same boundary without a sandbox (a crash
injected into the grader for one prediction)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from legorl.grading import defenses, grader
from legorl.grading.predictions import grade_predictions
from legorl.tasks.loader import get_task, load_suite
from legorl.trajectory.records import GraderReport

TASK = get_task("legorl__trivial-001")
GOLD = TASK.patch
# one long expression: CPython's AST for it nests past the host's recursion limit (RecursionError)
NESTED = "x = 1" + "+1" * 150_000 + "\n"


def _new_file(path: str, text: str, header: str = "") -> str:
    lines = text.splitlines()
    body = "".join("+" + line + "\n" for line in lines)
    return (
        f"diff --git a/{path} b/{path}\nnew file mode 100644\n{header}--- /dev/null\n+++ b/{path}\n"
        f"@@ -0,0 +1,{len(lines)} @@\n{body}"
    )


FORCE_PASS = (
    "import pytest\n@pytest.hookimpl(hookwrapper=True)\ndef pytest_runtest_makereport(item, call):\n"
    "    outcome = yield\n    outcome.get_result().outcome = 'passed'\n"
)
HOSTILE = {
    # a benign git section, then a plain one git applies too: the rules used to see the first only
    "conftest-after-git-section": _new_file("calc/notes.txt", "notes")
    + "--- /dev/null\n+++ b/conftest.py\n@@ -0,0 +1,5 @@\n"
    + "".join("+" + line + "\n" for line in FORCE_PASS.splitlines()),
    # the fix plus a file the host cannot parse (the static scan used to raise RecursionError)
    "nested-expression": GOLD + _new_file("calc/deep.py", NESTED),
    # a protected test deleted and re-created as a directory (used to end the run with FileExistsError)
    "test-file-to-directory": GOLD
    + "diff --git a/tests/test_arith.py b/tests/test_arith.py\ndeleted file mode 100644\n"
    + "--- a/tests/test_arith.py\n+++ /dev/null\n@@ -1 +0,0 @@\n-x\n"
    + _new_file("tests/test_arith.py/data.txt", "x"),
    "malformed-c-quote": GOLD + 'diff --git "a/calc/\\q.py" "b/calc/\\q.py"\nnew file mode 100644\n'
    '--- /dev/null\n+++ "b/calc/\\q.py"\n@@ -0,0 +1 @@\n+x = 1\n',
    "nul-in-quoted-path": GOLD + 'diff --git "a/calc/\\000.py" "b/calc/\\000.py"\nnew file mode 100644\n'
    '--- /dev/null\n+++ "b/calc/\\000.py"\n@@ -0,0 +1 @@\n+x = 1\n',
    "non-utf8-text": GOLD + _new_file("calc/latin.py", "x = '\udce9'"),
    "symlink-behind-at-at": GOLD
    + "diff --git a/calc/x@@y b/calc/x@@y\nnew file mode 120000\n--- /dev/null\n+++ b/calc/x@@y\n"
    + "@@ -0,0 +1 @@\n+/etc/passwd\n\\ No newline at end of file\n",
}
# what each hostile prediction must end with: (status, reward, a flag kind it must carry)
EXPECT = {
    "conftest-after-git-section": ("ok", 0.0, "modified_test_config"),
    "nested-expression": ("ok", 1.0, "source_not_scanned"),  # a real fix; the unparseable file is not evidence
    "test-file-to-directory": ("ok", 0.0, "modified_test_file"),
    "malformed-c-quote": ("ok", 0.0, "diff_rejected"),
    "nul-in-quoted-path": ("ok", 0.0, "diff_rejected"),
    "non-utf8-text": ("ok", 0.0, "diff_rejected"),
    "symlink-behind-at-at": ("ok", 0.0, "symlink_in_diff"),
}


@pytest.mark.sandbox
def test_hostile_predictions_each_get_their_own_verdict_and_the_report_is_written(tmp_path, backend, monkeypatch):
    preds = [{"instance_id": TASK.instance_id, "model_patch": GOLD, "model_name_or_path": "gold"}]
    preds += [{"instance_id": TASK.instance_id, "model_patch": d, "model_name_or_path": n} for n, d in HOSTILE.items()]
    # one more: our own code fails on it (injected), which must cost that prediction alone
    preds.append(
        {
            "instance_id": TASK.instance_id,
            "model_patch": GOLD + _new_file("calc/boom.py", "x = 1"),
            "model_name_or_path": "grader-bug",
        }
    )
    real_scan = defenses.scan_source_changes

    def scan(changes, *args, **kwargs):
        if any(path.endswith("boom.py") for path, _, _ in changes):
            raise RecursionError("maximum recursion depth exceeded (injected)")
        return real_scan(changes, *args, **kwargs)

    monkeypatch.setattr(defenses, "scan_source_changes", scan)
    monkeypatch.setattr("legorl.sandbox.bwrap.BwrapBackend", lambda **_: backend)
    path = tmp_path / "preds.jsonl"
    path.write_text("".join(json.dumps(p) + "\n" for p in preds))  # the surrogate travels as a JSON escape
    out = tmp_path / "report.json"
    from legorl.cli import app

    res = CliRunner().invoke(app, ["grade", str(path), "--tasks", "trivial", "--out", str(out), "--workers", "2"])
    assert res.exit_code == 0, res.output
    report = json.loads(out.read_text())
    inst = report["instances"]
    gold = inst[f"{TASK.instance_id}@gold"]
    assert gold["status"] == "ok" and gold["resolved"] and gold["reward"] == 1.0 and not gold["blocking_flags"]
    for name, (status, reward, kind) in EXPECT.items():
        r = inst[f"{TASK.instance_id}@{name}"]
        kinds = {f["kind"] for f in r["flag_details"]}
        assert (r["status"], r["reward"]) == (status, reward), (name, r["status"], r["cause"], r["flags"])
        assert kind in kinds, (name, kinds)
        assert r["resolved"] == (reward == 1.0), name  # a zeroed hack is never counted as resolved
    bug = inst[f"{TASK.instance_id}@grader-bug"]
    assert bug["status"] == "grader_error" and not bug["resolved"] and bug["reward"] == 0.0
    assert bug["cause"].startswith("grader_error: RecursionError: maximum recursion depth exceeded (injected)")
    s = report["summary"]
    assert s["total"] == len(preds) and s["grader_error"] == 1 and s["resolved"] == 2  # gold and nested-expression
    # the directory hack: the blocking flag zeroed a run whose tests passed (the test file was restored)
    moved = inst[f"{TASK.instance_id}@test-file-to-directory"]
    assert moved["tests_resolved"] is True and moved["resolved"] is False


def test_a_grader_failure_on_one_prediction_is_its_grader_error_only(monkeypatch):
    """No sandbox: grade() raises for one prediction (any exception of our own code); every other
    prediction is graded and reported, the failing one says why."""
    a, b = (t.instance_id for t in load_suite("trivial")[:2])

    def fake_grade(task, diff, backend, timeout=120, **kw):
        if diff == "crash":
            raise MemoryError("host-side parse ran out of memory")
        return GraderReport(resolved=diff == "fix", tests_resolved=diff == "fix", reward=float(diff == "fix"))

    monkeypatch.setattr(grader, "grade", fake_grade)
    preds = [
        {"instance_id": a, "model_patch": "fix", "model_name_or_path": "m1"},
        {"instance_id": a, "model_patch": "crash", "model_name_or_path": "m2"},
        {"instance_id": b, "model_patch": "fix", "model_name_or_path": "m1"},
    ]
    report = grade_predictions(preds, "trivial", backend=object(), workers=2)
    inst = report["instances"]
    assert inst[f"{a}@m1"]["resolved"] and inst[f"{b}@m1"]["resolved"]
    crashed = inst[f"{a}@m2"]
    assert crashed["status"] == "grader_error" and crashed["reward"] == 0.0 and not crashed["resolved"]
    assert crashed["cause"] == "grader_error: MemoryError: host-side parse ran out of memory"
    assert report["summary"]["grader_error"] == 1 and report["summary"]["resolved"] == 2
    with pytest.raises(ValueError, match="reward_mode"):  # the caller's mistake is not a prediction's
        grade_predictions(preds, "trivial", backend=object(), reward_mode="bogus")
