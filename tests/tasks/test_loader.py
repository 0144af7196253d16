"""Task loading: built-in suite, suite dirs, SWE-bench record files, and errors that name the field."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from legorl.errors import TaskError
from legorl.tasks.loader import (
    BUILTIN_SUITES_DIR,
    builtin_suites,
    get_task,
    load_suite,
    load_task_dir,
)
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
        res = subprocess.run(
            ["git", "apply", "--check", "-"], input=t.patch, text=True, cwd=t.source_dir, capture_output=True
        )
        assert res.returncode == 0, res.stderr


def test_get_task_and_unknown():
    assert get_task("legorl__trivial-002").instance_id == "legorl__trivial-002"
    with pytest.raises(TaskError, match="no built-in or SWE-bench task 'legorl__nope-999'"):
        get_task("legorl__nope-999")
    with pytest.raises(TaskError, match="trivial"):
        load_suite("no-such-suite")


def test_suite_dir_and_task_dir(tmp_path):
    # a user's task dir with its own repo/ (no base_dir)
    record = json.loads((BUILTIN_SUITES_DIR / "trivial" / "legorl__trivial-001" / "task.json").read_text())
    del record["base_dir"]
    suite = tmp_path / "suite"
    (suite / "t1" / "repo").mkdir(parents=True)
    (suite / "t1" / "task.json").write_text(json.dumps({**record, "instance_id": "x__t1"}))
    tasks = load_suite(suite)
    assert [t.instance_id for t in tasks] == ["x__t1"]
    assert tasks[0].source_dir == (suite / "t1" / "repo").resolve()
    assert load_suite(str(suite / "t1"))[0].instance_id == "x__t1"


def test_jsonl_and_json(tmp_path):
    rec = {
        "instance_id": "a__b-1",
        "repo": "a/b",
        "patch": "",
        "problem_statement": "p",
        "FAIL_TO_PASS": '["t.py::test_x"]',
        "PASS_TO_PASS": "[]",
    }
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


def _base_task(tmp_path: Path, arith: str = "def add(a, b):\n    return a + b\n") -> tuple[Path, Path]:
    """A one-module project (fixed) and a task dir whose gold patch turns ``a - b`` into ``a + b``."""
    from legorl.tasks.author import git_diff, read_tree

    base = tmp_path / "bases" / "mini"
    (base / "mini").mkdir(parents=True)
    (base / "tests").mkdir()
    (base / "mini" / "arith.py").write_text(arith)
    (base / "tests" / "test_arith.py").write_text(
        "from mini.arith import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n"
    )
    fixed = read_tree(base)
    buggy = {**fixed, "mini/arith.py": (0o644, arith.replace("a + b", "a - b").encode())}
    task_dir = tmp_path / "suite" / "mini__t-1"
    task_dir.mkdir(parents=True)
    (task_dir / "task.json").write_text(
        json.dumps(
            {
                "instance_id": "mini__t-1",
                "repo": "x/mini",
                "base_dir": "../../bases/mini",
                "problem_statement": "p",
                "patch": git_diff(buggy, fixed),
                "FAIL_TO_PASS": ["tests/test_arith.py::test_add"],
            }
        )
    )
    return base, task_dir


def test_base_dir_task_is_the_base_with_the_patch_reversed(tmp_path, monkeypatch):
    from legorl.sandbox.images import InstanceRecipe

    # LEGORL_HOME inside a git work tree: `git apply` must not take paths relative to that repository
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    monkeypatch.setenv("LEGORL_HOME", str(tmp_path / "home"))
    base, task_dir = _base_task(tmp_path)
    (task,) = load_suite(tmp_path / "suite")
    src = task.source_dir
    assert src.parent == tmp_path / "home" / "tasks" / "sources" and src.name.startswith("mini__t-1-")
    assert (src / "mini" / "arith.py").read_text() == "def add(a, b):\n    return a - b\n"
    assert (src / "tests" / "test_arith.py").read_bytes() == (base / "tests" / "test_arith.py").read_bytes()
    assert sorted(p.relative_to(src).as_posix() for p in src.rglob("*")) == sorted(
        p.relative_to(base).as_posix() for p in base.rglob("*")
    )
    mtime = (src / "mini" / "arith.py").stat().st_mtime_ns
    assert load_task_dir(task_dir).source_dir == src and (src / "mini" / "arith.py").stat().st_mtime_ns == mtime
    keys = {InstanceRecipe(src).key("env")}

    # a change to the base (even a file the patch does not touch) makes a new tree, so a new image
    (base / "README.md").write_text("mini\n")
    src2 = load_task_dir(task_dir).source_dir
    assert src2 != src and (src2 / "README.md").read_text() == "mini\n" and src.is_dir()
    keys.add(InstanceRecipe(src2).key("env"))
    # so does a change to the gold patch
    record = json.loads((task_dir / "task.json").read_text())
    record["patch"] = record["patch"].replace("-    return a - b", "-    return a * b")
    (task_dir / "task.json").write_text(json.dumps(record))
    src3 = load_task_dir(task_dir).source_dir
    assert src3 not in (src, src2) and "a * b" in (src3 / "mini" / "arith.py").read_text()
    keys.add(InstanceRecipe(src3).key("env"))
    assert len(keys) == 3
    assert not [p for p in src.parent.iterdir() if p.name.startswith(".tmp-")]


def test_base_dir_errors_name_the_task(tmp_path, monkeypatch):
    monkeypatch.setenv("LEGORL_HOME", str(tmp_path / "home"))
    _, task_dir = _base_task(tmp_path)
    record = json.loads((task_dir / "task.json").read_text())
    (task_dir / "task.json").write_text(json.dumps({**record, "patch": record["patch"].replace("a + b", "a ** b")}))
    with pytest.raises(TaskError, match=r"mini__t-1.*does not reverse-apply"):
        load_task_dir(task_dir)
    (task_dir / "task.json").write_text(json.dumps({**record, "base_dir": "../nowhere"}))
    with pytest.raises(TaskError, match=r"mini__t-1.*base_dir.*not a directory"):
        load_task_dir(task_dir)
    (task_dir / "repo").mkdir()
    (task_dir / "task.json").write_text(json.dumps(record))
    with pytest.raises(TaskError, match=r"mini__t-1.*base_dir.*excludes"):
        load_task_dir(task_dir)
    assert not (tmp_path / "home" / "tasks" / "sources").is_dir() or not list(
        (tmp_path / "home" / "tasks" / "sources").iterdir()
    )
