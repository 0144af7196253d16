"""`legorl tasks author`: a task from a fixed base and a buggy edit; it reproduces the shipped tasks."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from legorl.cli import app
from legorl.errors import TaskError
from legorl.tasks.author import author_task, build_record, read_tree
from legorl.tasks.loader import BUILTIN_SUITES_DIR, get_task, load_task_dir

ARITH = "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n"
TESTS = "from mini.arith import add, sub\n\n\ndef test_add():\n    assert add(2, 3) == 5\n"
HIDDEN = "\n\ndef test_sub():\n    assert sub(5, 3) == 2\n"


def _project(tmp_path: Path) -> Path:
    base = tmp_path / "mini"
    (base / "mini").mkdir(parents=True)
    (base / "tests").mkdir()
    (base / "mini" / "__init__.py").write_text("")
    (base / "mini" / "arith.py").write_text(ARITH)
    (base / "tests" / "test_arith.py").write_text(TESTS)
    return base


def _buggy(base: Path, tmp_path: Path, source: str | None = None, hidden: str = HIDDEN) -> Path:
    buggy = tmp_path / "buggy"
    shutil.copytree(base, buggy)
    (buggy / "mini" / "arith.py").write_text(source if source is not None else ARITH.replace("a - b", "b - a"))
    (buggy / "tests" / "test_arith.py").write_text(TESTS + hidden)
    return buggy


@pytest.mark.parametrize("instance_id", ["legorl__trivial-001", "legorl__easy-001", "legorl__medium-005"])
def test_reauthoring_a_shipped_task_reproduces_its_record(instance_id, tmp_path):
    task = get_task(instance_id)
    task_dir = BUILTIN_SUITES_DIR / task.tier / instance_id
    shipped = json.loads((task_dir / "task.json").read_text())
    buggy = tmp_path / "buggy"
    shutil.copytree(task.source_dir, buggy)
    if task.test_patch:
        subprocess.run(
            ["git", "apply", "-"],
            input=task.test_patch,
            text=True,
            cwd=buggy,
            check=True,
            env={"PATH": "/usr/bin:/bin", "GIT_CEILING_DIRECTORIES": str(tmp_path)},
        )
    record, visible = build_record(
        (task_dir / shipped["base_dir"]).resolve(),
        buggy,
        task_dir,
        instance_id=instance_id,
        tier=task.tier,
        statement=task.problem_statement,
        repo=task.repo,
        hints=task.hints_text,
    )
    assert record == shipped
    assert visible == read_tree(task.source_dir)


def test_author_writes_a_loadable_task(tmp_path, monkeypatch):
    monkeypatch.setenv("LEGORL_HOME", str(tmp_path / "home"))
    base = _project(tmp_path)
    out = tmp_path / "suite" / "mini__easy-1"
    task_file = author_task(
        base, _buggy(base, tmp_path), out, instance_id="mini__easy-1", tier="easy", statement="  sub is backwards\n"
    )
    assert [p.name for p in out.iterdir()] == ["task.json"]
    record = json.loads(task_file.read_text())
    assert record["base_dir"] == "../../mini" and record["repo"] == "legorl/mini"
    assert record["problem_statement"] == "sub is backwards"
    assert record["FAIL_TO_PASS"] == ["tests/test_arith.py::test_sub"]
    assert record["PASS_TO_PASS"] == ["tests/test_arith.py::test_add"]
    assert record["test_files"] == ["tests/test_arith.py"]
    assert "+def test_sub():" in record["test_patch"] and "mini/arith.py" not in record["test_patch"]
    assert "-    return b - a\n+    return a - b" in record["patch"] and "tests/" not in record["patch"]
    task = load_task_dir(out)
    assert (task.source_dir / "mini" / "arith.py").read_text() == ARITH.replace("a - b", "b - a")
    assert (task.source_dir / "tests" / "test_arith.py").read_text() == TESTS  # hidden test hidden

    # the buggy edit as a diff file gives the same record
    diff = (
        subprocess.run(["git", "diff", "--no-index", "mini", "buggy"], cwd=tmp_path, capture_output=True, text=True)
        .stdout.replace("a/mini/", "a/")
        .replace("b/buggy/", "b/")
    )
    assert "b/tests/test_arith.py" in diff and "b/mini/arith.py" in diff
    (tmp_path / "bug.diff").write_text(diff)
    record2, _ = build_record(
        base, tmp_path / "bug.diff", out, instance_id="mini__easy-1", tier="easy", statement="sub is backwards"
    )
    assert record2 == record


@pytest.mark.parametrize(
    "case, match",
    [
        ("no_source_change", "changes no source file"),
        ("breaks_nothing", "no test fails"),
        ("fixed_fails", "the fixed tree fails tests"),
        ("trivial_hidden", "no hidden tests"),
        ("easy_visible_failure", "a visible test already fails"),
        ("easy_no_hidden", "hide their failing tests"),
    ],
)
def test_author_refuses_bad_tasks(case, match, tmp_path):
    base = _project(tmp_path)
    tier = "trivial" if case == "trivial_hidden" else "easy"
    if case == "no_source_change":
        buggy = _buggy(base, tmp_path, source=ARITH)
    elif case == "breaks_nothing":
        buggy = _buggy(base, tmp_path, source=ARITH + "\n# a comment\n", hidden="")
    elif case == "fixed_fails":
        buggy = _buggy(base, tmp_path, hidden="\n\ndef test_sub():\n    assert sub(5, 3) == 3\n")
    elif case == "easy_visible_failure":
        buggy = _buggy(base, tmp_path, source=ARITH.replace("a + b", "a * b"))
    elif case == "easy_no_hidden":
        buggy = _buggy(base, tmp_path, source=ARITH.replace("a + b", "a * b"), hidden="")
    else:
        buggy = _buggy(base, tmp_path)
    with pytest.raises(TaskError, match=match):
        build_record(base, buggy, tmp_path / "out", instance_id="x", tier=tier, statement="s")


@pytest.mark.sandbox
@pytest.mark.sandbox
def test_cli_author_checks_the_task_in_the_sandbox(tmp_path, monkeypatch):
    monkeypatch.setenv("LEGORL_HOME", str(tmp_path / "home"))
    base = _project(tmp_path)
    buggy = _buggy(base, tmp_path)
    (tmp_path / "issue.md").write_text("sub(5, 3) gives -2\n")
    out = tmp_path / "suite" / "mini__easy-1"
    res = CliRunner().invoke(
        app,
        [
            "tasks",
            "author",
            str(base),
            str(buggy),
            "--out",
            str(out),
            "--tier",
            "easy",
            "--statement",
            str(tmp_path / "issue.md"),
        ],
    )
    assert res.exit_code == 0, res.output
    assert "FAIL_TO_PASS 1, PASS_TO_PASS 1" in res.output and "checked mini__easy-1" in res.output
    assert load_task_dir(out).problem_statement == "sub(5, 3) gives -2"
    res = CliRunner().invoke(
        app,
        [
            "tasks",
            "author",
            str(base),
            str(buggy),
            "--out",
            str(out),
            "--tier",
            "hard",
            "--statement",
            str(tmp_path / "issue.md"),
        ],
    )
    assert res.exit_code == 2 and "--tier must be" in res.output
