"""Task loading: built-in suite, suite dirs, SWE-bench record files, and errors that name the field."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from legorl.errors import TaskError
from legorl.tasks.loader import builtin_suites, get_task, load_suite
from legorl.tasks.model import Task

SHARED = Path(__file__).resolve().parents[2].parent / "shared"
SWEBENCH_LITE_DEV = SHARED / "data" / "swebench" / "SWE-bench_Lite-dev.parquet"


def test_builtin_trivial_suite():
    assert "trivial" in builtin_suites()
    tasks = load_suite("trivial")
    ids = [t.instance_id for t in tasks]
    assert len(ids) >= 14 and ids[:3] == [f"legorl__trivial-00{i}" for i in (1, 2, 3)]
    for t in tasks:
        assert t.tier == "trivial" and t.test_patch == ""
        assert t.source_dir is not None and (t.source_dir / "tests").is_dir()
        assert t.FAIL_TO_PASS and t.PASS_TO_PASS and t.test_files
        for nodeid in t.FAIL_TO_PASS + t.PASS_TO_PASS:
            path, _, name = nodeid.partition("::")
            assert path in t.test_files and f"def {name}(" in (t.source_dir / path).read_text()
        # the gold patch is a one-line change of one short module that `git apply` accepts
        changed = [l for l in t.patch.splitlines() if l[:1] in "+-" and l[:3] not in ("+++", "---")]
        assert len(changed) == 2, t.patch
        target = t.patch.split("\n", 1)[0].split(" b/")[-1]
        assert len((t.source_dir / target).read_text().splitlines()) < 40
        res = subprocess.run(["git", "apply", "--check", "-"], input=t.patch, text=True, cwd=t.source_dir,
                             capture_output=True)
        assert res.returncode == 0, res.stderr


def test_get_task_and_unknown():
    assert get_task("legorl__trivial-002").instance_id == "legorl__trivial-002"
    with pytest.raises(TaskError, match="no built-in task"):
        get_task("legorl__nope-999")
    with pytest.raises(TaskError, match="trivial"):
        load_suite("no-such-suite")


def test_suite_dir_and_task_dir(tmp_path):
    src = load_suite("trivial")[0].source_dir.parent
    suite = tmp_path / "suite"
    (suite / "t1" / "repo").mkdir(parents=True)
    record = json.loads((src / "task.json").read_text())
    (suite / "t1" / "task.json").write_text(json.dumps({**record, "instance_id": "x__t1"}))
    tasks = load_suite(suite)
    assert [t.instance_id for t in tasks] == ["x__t1"]
    assert tasks[0].source_dir == (suite / "t1" / "repo").resolve()
    assert load_suite(str(suite / "t1"))[0].instance_id == "x__t1"


def test_jsonl_and_json(tmp_path):
    rec = {"instance_id": "a__b-1", "repo": "a/b", "patch": "", "problem_statement": "p",
           "FAIL_TO_PASS": '["t.py::test_x"]', "PASS_TO_PASS": "[]"}
    (tmp_path / "s.jsonl").write_text(json.dumps(rec) + "\n\n" + json.dumps({**rec, "instance_id": "a__b-2"}) + "\n")
    tasks = load_suite(tmp_path / "s.jsonl")
    assert [t.FAIL_TO_PASS for t in tasks] == [["t.py::test_x"]] * 2
    (tmp_path / "s.json").write_text(json.dumps([rec]))
    assert load_suite(tmp_path / "s.json")[0].instance_id == "a__b-1"
    (tmp_path / "dup.jsonl").write_text(json.dumps(rec) + "\n" + json.dumps(rec) + "\n")
    with pytest.raises(TaskError, match="duplicate"):
        load_suite(tmp_path / "dup.jsonl")


def test_broken_record_names_instance_and_field(tmp_path):
    bad = {"instance_id": "a__b-9", "repo": "a/b", "patch": "", "FAIL_TO_PASS": "[]"}  # no problem_statement
    (tmp_path / "bad.jsonl").write_text(json.dumps(bad) + "\n")
    with pytest.raises(TaskError, match=r"a__b-9.*problem_statement"):
        load_suite(tmp_path / "bad.jsonl")
    suite = tmp_path / "suite" / "t"
    suite.mkdir(parents=True)
    (suite / "task.json").write_text(json.dumps({**bad, "problem_statement": "p", "tier": "impossible"}))
    with pytest.raises(TaskError, match=r"a__b-9.*tier"):
        load_suite(tmp_path / "suite")


def test_swebench_parquet():
    if not SHARED.is_dir():
        pytest.skip(f"shared data dir {SHARED} is absent (SWE-bench records live there)")
    pytest.importorskip("pyarrow", reason="pyarrow is needed to read .parquet task files")
    tasks = load_suite(SWEBENCH_LITE_DEV)
    assert len(tasks) == 23
    assert all(isinstance(t, Task) and t.tier == "swebench" and t.source_dir is None for t in tasks)
    assert all(t.FAIL_TO_PASS and isinstance(t.FAIL_TO_PASS, list) for t in tasks)
    assert all(t.patch.startswith("diff --git") for t in tasks)
