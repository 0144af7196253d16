"""Bad input to any command: ONE line on stderr (``error: ...`` naming the file and field), a non-zero
exit code, nothing on stdout, no traceback — printed by the one handler in ``legorl.cli``."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from legorl.cli import app
from legorl.cli.errors import one_line
from legorl.errors import ImageBuildError

runner = CliRunner()


@pytest.fixture
def files(tmp_path):
    (tmp_path / "notjson.json").write_text("{ nope")
    (tmp_path / "list.json").write_text("[1, 2]")
    (tmp_path / "typo.json").write_text(json.dumps({"rollout": {"max_turnz": 3}}))
    (tmp_path / "preds.jsonl").write_text(
        '{"instance_id": "legorl__trivial-001", "model_patch": ""}\n'
        '{"instance_id": "legorl__trivial-002", "model_patch": 12}\n'
    )
    (tmp_path / "binary.jsonl").write_bytes(b"\xff\xfe\x00garbage")
    task = tmp_path / "suite" / "broken"
    task.mkdir(parents=True)
    (task / "task.json").write_text(
        json.dumps(
            {"instance_id": "x", "repo": "r", "patch": "", "problem_statement": "p", "FAIL_TO_PASS": "not json ["}
        )
    )
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "run.sqlite").write_bytes(b"SQLite format 3\x00" + b"\x13" * 200)
    return tmp_path


CASES = [
    # (argv, text the one line must contain); {d} is the temp directory
    (["train", "--config", "{d}/notjson.json"], "{d}/notjson.json: not valid JSON"),
    (["train", "--config", "{d}/list.json", "--set", "steps=3"], "expected a JSON object"),
    (["train", "--config", "{d}/typo.json"], "field 'rollout.max_turnz'"),
    (["train", "--config", "{d}/missing.json"], "{d}/missing.json"),
    (["train", "--set", "sandbox.memory_mb=lots"], "field 'sandbox.memory_mb'"),
    (["train", "--set", "steps=2", "--set", "steps.x=1"], "field 'steps' is a int, not a section"),
    (["train", "--set", "steps"], "--set expects KEY=VALUE"),
    (["rollout", "--config", "{d}/typo.json"], "field 'rollout.max_turnz'"),
    (["grade", "{d}/preds.jsonl"], "{d}/preds.jsonl:2: field 'model_patch'"),
    (["grade", "{d}/binary.jsonl"], "not UTF-8"),
    (["grade", "{d}/absent.jsonl"], "does not exist"),
    (["grade", "{d}/preds.jsonl", "--out", "{d}/no/dir/report.json"], "--out {d}/no/dir/report.json: directory"),
    (["tasks", "list", "{d}/suite"], "field 'FAIL_TO_PASS'"),
    (["tasks", "list", "no-such-suite"], "no task suite 'no-such-suite'"),
    (["bench", "grader", "--suite", "{d}/suite"], "{d}/suite/broken/task.json"),
    (["export", "{d}/run", "--out", "{d}/out"], "{d}/run/run.sqlite: truncated or damaged"),
    (["export", "{d}/nowhere", "--out", "{d}/out"], "{d}/nowhere is not a LEGO-RL run directory"),
    (["export", "{d}/run", "--out", "{d}/out", "--format", "csv"], "'parquet' or 'jsonl'"),
    (["tasks", "check", "trivial", "--workers", "abc"], "Invalid value for '--workers'"),
    (["images", "build", "--backend", "nope"], "unknown backend 'nope'"),
    (["no-such-command"], "No such command"),
]


@pytest.mark.parametrize(("argv", "expect"), CASES, ids=[" ".join(a[:2]) + f"-{i}" for i, (a, _) in enumerate(CASES)])
def test_bad_input_is_one_line_on_stderr(files, argv, expect):
    argv = [a.format(d=files) for a in argv]
    res = runner.invoke(app, argv)
    assert res.exit_code == 2, (res.exit_code, res.output)
    assert res.exception is None or isinstance(res.exception, SystemExit), res.exception
    assert res.stdout == ""
    lines = res.stderr.splitlines()
    assert len(lines) == 1, res.stderr
    assert lines[0].startswith("error: ") and expect.format(d=files) in lines[0], lines[0]
    assert "Traceback" not in res.stderr
    assert not (files / "out").exists()  # nothing half-written


def test_the_real_entry_point(files):
    """The installed console script path: no rich traceback box, one line, exit 2."""
    res = subprocess.run(
        [sys.executable, "-m", "legorl.cli", "grade", str(files / "preds.jsonl")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 2 and res.stdout == ""
    assert res.stderr.splitlines() == [
        f"error: {files}/preds.jsonl:2: field 'model_patch' must be a string or null, got int"
    ]


def test_multi_line_messages_are_joined():
    exc = ImageBuildError("pip install failed", kind="env", key="abc123", step="pip", output="line 1\n\nline 2\n")
    assert one_line(exc) == "env layer abc123: pip install failed [step: pip] | --- output (tail) --- | line 1 | line 2"


def test_help_still_prints():
    res = runner.invoke(app, ["tasks"])
    assert "list" in res.output and "check" in res.output
    res = runner.invoke(app, ["tasks", "list", "--help"])
    assert res.exit_code == 0 and "--json" in res.stdout
