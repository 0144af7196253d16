"""`legorl tasks ...`: list, check (non-zero exit on a broken task, naming it), synth errors."""

from __future__ import annotations

import json
import shutil

import pytest
from typer.testing import CliRunner

from legorl.cli import app
from legorl.tasks.loader import BUILTIN_SUITES_DIR

runner = CliRunner()


def test_tasks_list():
    res = runner.invoke(app, ["tasks", "list"])
    assert res.exit_code == 0, res.output
    assert "trivial" in res.output and "medium" in res.output and "builtin" in res.output
    res = runner.invoke(app, ["tasks", "list", "easy"])
    assert res.exit_code == 0 and "legorl__easy-001" in res.output


def test_tasks_check_unknown_backend_and_suite():
    res = runner.invoke(app, ["tasks", "check", "trivial", "--backend", "nope"])
    assert res.exit_code == 2 and "unknown sandbox backend" in res.output
    res = runner.invoke(app, ["tasks", "check", "no-such-suite"])
    assert res.exit_code == 2 and "no task suite" in res.output


def test_tasks_synth_bad_input(tmp_path):
    res = runner.invoke(app, ["tasks", "synth", str(tmp_path / "missing"), "--out", str(tmp_path / "o.jsonl")])
    assert res.exit_code == 2 and "no such directory" in res.output


@pytest.mark.sandbox
@pytest.mark.sandbox
def test_tasks_check_broken_suite_exits_nonzero(tmp_path, monkeypatch):
    monkeypatch.setenv("LEGORL_HOME", str(tmp_path / "home"))
    suite = tmp_path / "suite"
    good = suite / "legorl__good-001"
    shutil.copytree(BUILTIN_SUITES_DIR / "trivial" / "legorl__trivial-001", good)
    record = json.loads((good / "task.json").read_text())
    record["instance_id"] = "legorl__good-001"
    record["base_dir"] = str((BUILTIN_SUITES_DIR / "trivial" / "legorl__trivial-001" / record["base_dir"]).resolve())
    (good / "task.json").write_text(json.dumps(record))
    # broken: claims a test that passes without the fix is FAIL_TO_PASS
    bad = suite / "legorl__broken-001"
    shutil.copytree(good, bad)
    record["instance_id"] = "legorl__broken-001"
    record["FAIL_TO_PASS"] = ["tests/test_arith.py::test_add", "tests/test_arith.py::test_subtract"]
    record["PASS_TO_PASS"].remove("tests/test_arith.py::test_subtract")
    (bad / "task.json").write_text(json.dumps(record))

    res = runner.invoke(app, ["tasks", "check", str(suite), "--workers", "1"])
    assert res.exit_code == 1, res.output
    assert "BROKEN legorl__broken-001" in res.output and "test_subtract" in res.output
    assert "BROKEN legorl__good-001" not in res.output
    assert "2 tasks: 1 ok, 1 broken" in res.output

    shutil.rmtree(bad)
    res = runner.invoke(app, ["tasks", "check", str(suite)])
    assert res.exit_code == 0, res.output
