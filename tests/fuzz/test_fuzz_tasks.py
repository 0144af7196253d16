"""Fuzzing task files and suites: a broken ``task.json`` or record file raises :class:`TaskError` naming
the file and the field — never a KeyError, a UnicodeDecodeError or a pydantic traceback."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import garbage, json_values

from legorl.errors import TaskError
from legorl.tasks.loader import BASES_DIR, BUILTIN_SUITES_DIR, load_suite
from legorl.tasks.model import Task

# examples, randomness and deadline come from the Hypothesis profile (tests/conftest.py)
FUZZ = settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
GOOD = json.loads((BUILTIN_SUITES_DIR / "trivial" / "legorl__trivial-001" / "task.json").read_text())
GOOD["base_dir"] = str((BASES_DIR / "calc").resolve())
FIELDS = sorted(set(GOOD) | {"source_dir", "version", "environment_setup_commit"})


@pytest.fixture(autouse=True)
def _home(tmp_path_factory, monkeypatch):
    # materialised task sources go to a throwaway LEGORL_HOME (shared by the examples: content-addressed)
    monkeypatch.setenv("LEGORL_HOME", str(tmp_path_factory.getbasetemp() / "home"))


mutation = st.tuples(st.sampled_from(FIELDS), st.sampled_from(["delete", "set"]), json_values | st.text(max_size=20))


def _load(path):
    try:
        return load_suite(path)
    except TaskError as exc:
        return exc


@FUZZ
@given(st.lists(mutation, min_size=1, max_size=2))
def test_broken_task_json_names_the_field(tmp_path, mutations):
    record = dict(GOOD)
    touched = set()
    for field, action, value in mutations:
        touched.add(field)
        if action == "delete":
            record.pop(field, None)
        else:
            record[field] = value
    task_dir = tmp_path / "t"
    task_dir.mkdir(exist_ok=True)
    (task_dir / "task.json").write_text(json.dumps(record))
    got = _load(task_dir)
    if isinstance(got, TaskError):
        msg = str(got)
        assert str(task_dir / "task.json") in msg, msg
        assert any(f"'{f}'" in msg or f"'{f}." in msg for f in touched), msg  # 'FAIL_TO_PASS.0' names an item
    else:
        [task] = got
        assert isinstance(task, Task)


@FUZZ
@given(st.lists(json_values | st.just(GOOD), max_size=3), st.sampled_from(["s.jsonl", "s.json"]))
def test_any_record_file(tmp_path, records, name):
    path = tmp_path / name
    if name.endswith(".jsonl"):
        path.write_text("".join(json.dumps(r) + "\n" for r in records))
    else:
        path.write_text(json.dumps(records))
    got = _load(path)
    if isinstance(got, TaskError):
        assert str(path) in str(got), got
    else:
        assert all(isinstance(t, Task) for t in got)


@FUZZ
@given(garbage, st.sampled_from(["t/task.json", "s.jsonl", "s.json", "s.parquet"]))
def test_any_bytes(tmp_path, data, name):
    path = tmp_path / name
    path.parent.mkdir(exist_ok=True)
    path.write_bytes(data)
    target = path.parent if name == "t/task.json" else path
    got = _load(target)
    assert isinstance(got, TaskError) or all(isinstance(t, Task) for t in got)
    if isinstance(got, TaskError):
        assert str(path) in str(got), got


def test_missing_files_are_named(tmp_path):
    task_dir = tmp_path / "t"
    task_dir.mkdir()
    (task_dir / "task.json").write_text(json.dumps({**GOOD, "base_dir": "no-such-base"}))
    err = _load(task_dir)
    assert isinstance(err, TaskError) and "field 'base_dir'" in str(err) and "no-such-base" in str(err)
    record = {k: v for k, v in GOOD.items() if k != "base_dir"}
    (task_dir / "task.json").write_text(json.dumps({**record, "source_dir": "gone"}))
    err = _load(task_dir)
    assert isinstance(err, TaskError) and "field 'source_dir'" in str(err) and "gone" in str(err)
    (tmp_path / "suite").mkdir()
    err = _load(tmp_path / "suite")
    assert isinstance(err, TaskError) and "suite" in str(err) and "no task directories" in str(err)
    (task_dir / "task.json").write_text(json.dumps({**GOOD, "patch": "diff --git a/x b/x\n"}))
    err = _load(task_dir)
    assert isinstance(err, TaskError) and "field 'patch'" in str(err)


def test_record_file_source_dir_must_exist(tmp_path):
    record = {k: v for k, v in GOOD.items() if k != "base_dir"}
    path = tmp_path / "s.jsonl"
    path.write_text(json.dumps({**record, "source_dir": "missing-repo"}) + "\n")
    err = _load(path)
    assert isinstance(err, TaskError) and str(path) in str(err) and "field 'source_dir'" in str(err)
    (tmp_path / "missing-repo").mkdir()
    [task] = load_suite(path)
    assert task.source_dir == (tmp_path / "missing-repo").resolve()
