"""SWE-bench suites by name: repository trees from bundles or clones, availability with its reason,
the repos/instances filters, and evaluation sets that training refuses."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from legorl.cli import app
from legorl.config import RunConfig
from legorl.errors import ConfigError, TaskError
from legorl.tasks import swebench
from legorl.tasks.loader import filter_tasks, load_suite, run_tasks
from legorl.tasks.model import Task


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


def _repo_with_commits(path: Path) -> list[str]:
    """A repository with two commits (a file that changes); their ids."""
    path.mkdir(parents=True)
    _git(path, "init", "-q", "-b", "main")
    _git(path, "config", "user.email", "t@t")
    _git(path, "config", "user.name", "t")
    ids = []
    for text in ("one\n", "two\n"):
        (path / "pkg.py").write_text(text)
        _git(path, "add", "-A")
        _git(path, "commit", "-q", "-m", text.strip())
        ids.append(_git(path, "rev-parse", "HEAD"))
    return ids


def _bundle(repo: Path, out: Path, commits: list[str]) -> None:
    """A bundle in the shipped format: a tag base/<sha> per commit."""
    for c in commits:
        _git(repo, "tag", "-f", f"base/{c}", c)
    _git(repo, "bundle", "create", str(out), *(f"refs/tags/base/{c}" for c in commits))


def _task(instance_id: str, repo: str, base_commit: str = "") -> Task:
    return Task(
        instance_id=instance_id, repo=repo, base_commit=base_commit, patch="", problem_statement="x", FAIL_TO_PASS=["t"]
    )


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("LEGORL_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def test_bundle_source_exports_a_history_free_tree_and_follows_a_new_bundle(tmp_path: Path, home: Path) -> None:
    repo = tmp_path / "upstream"
    first, second = _repo_with_commits(repo)
    bundles = tmp_path / "bundles"
    bundles.mkdir()
    _bundle(repo, bundles / "owner__proj.bundle", [first])
    source = swebench.BundleRepos(bundles)

    assert source.unavailable("owner/proj", first) is None
    assert "has no tag base/" in (source.unavailable("owner/proj", second) or "")
    assert "not shipped" in (source.unavailable("other/proj", first) or "")
    task = _task("owner__proj-1", "owner/proj", first)
    tree = swebench.instance_tree(task, source)
    assert (tree / "pkg.py").read_text() == "one\n" and not (tree / ".git").exists()
    assert tree.is_relative_to(home)
    assert swebench.instance_tree(task, source) == tree  # written once

    _bundle(repo, bundles / "owner__proj.bundle", [first, second])  # a newer bundle: the mirror follows it
    assert source.unavailable("owner/proj", second) is None


def test_git_source_takes_trees_from_a_directory_of_clones(tmp_path: Path, home: Path) -> None:
    clones = tmp_path / "clones"
    first, second = _repo_with_commits(clones / "owner__proj")
    source = swebench.GitRepos(clones)
    task = _task("owner__proj-2", "owner/proj", first)
    assert source.unavailable("owner/proj", first) is None
    assert (swebench.instance_tree(task, source) / "pkg.py").read_text() == "one\n"
    assert "lacks commit" in (source.unavailable("owner/proj", "0" * 40) or "")
    (clones / "owner__proj" / "pkg.py").write_text("three\n")  # the clone moves on after the mirror was made
    _git(clones / "owner__proj", "commit", "-qam", "three")
    third = _git(clones / "owner__proj", "rev-parse", "HEAD")
    assert source.unavailable("owner/proj", third) is None
    assert "no clone of other/proj" in (source.unavailable("other/proj", first) or "")
    status = swebench.instance_status([task.model_copy(update={"base_commit": "main"})], source)
    assert not status[0].available and "40-hex" in (status[0].reason or "")


def _tasks() -> list[Task]:
    return [_task(f"{r.replace('/', '__')}-{i}", r) for r in ("a/x", "b/y") for i in (1, 2)]


def test_filters_keep_a_repository_and_name_what_the_suite_lacks() -> None:
    assert [t.instance_id for t in filter_tasks(_tasks(), repos=["b/y"])] == ["b__y-1", "b__y-2"]
    assert [t.instance_id for t in filter_tasks(_tasks(), instances=["b__y-2", "a__x-1"])] == ["b__y-2", "a__x-1"]
    with pytest.raises(TaskError, match="no tasks of repository c/z"):
        filter_tasks(_tasks(), repos=["c/z"])
    with pytest.raises(TaskError, match="no instance a__x-1 of b/y"):
        filter_tasks(_tasks(), repos=["b/y"], instances=["a__x-1"])


@pytest.mark.swebench_data
def test_shipped_suites_list_every_instance_with_availability() -> None:
    source = swebench.default_repo_source()
    for suite, total, available in (("swebench-verified", 500, 181), ("swebench-lite-dev", 23, 12)):
        status = swebench.instance_status(swebench.read_records(suite), source)
        assert (len(status), sum(s.available for s in status)) == (total, available)
        missing = [s for s in status if not s.available]
        assert all("is not shipped" in (s.reason or "") and s.repo in (s.reason or "") for s in missing)


@pytest.mark.swebench_data
def test_a_shipped_instance_loads_with_its_base_tree() -> None:
    iid = "marshmallow-code__marshmallow-1359"
    (task,) = load_suite("swebench-lite-dev", instances=[iid])
    assert task.tier == "swebench" and task.source_dir is not None
    assert (task.source_dir / "setup.py").is_file() and not (task.source_dir / ".git").exists()
    # the gold patch applies to the tree (it is the instance's base commit, not another)
    check = subprocess.run(
        ["git", "apply", "--check", "-"], cwd=task.source_dir, input=task.patch.encode(), capture_output=True
    )
    assert check.returncode == 0, check.stderr
    both = load_suite("swebench-lite-dev", repos=["marshmallow-code/marshmallow"])
    assert {t.instance_id for t in both} == {iid, "marshmallow-code__marshmallow-1343"}
    with pytest.raises(TaskError, match="pydicom__pydicom-1256: repository pydicom/pydicom is not shipped"):
        load_suite("swebench-lite-dev", instances=["pydicom__pydicom-1256"])


@pytest.mark.swebench_data
def test_training_refuses_an_evaluation_set_unless_allowed(tmp_path: Path) -> None:
    iid = "psf__requests-2317"
    cfg = RunConfig(suite="swebench-verified", task_ids=[iid], run_dir=tmp_path / "run")
    with pytest.raises(ConfigError, match="evaluation set"):
        run_tasks(cfg, training=True)
    assert [t.instance_id for t in run_tasks(cfg, training=False)] == [iid]
    allowed = cfg.model_copy(update={"allow_eval_suite": True})
    assert [t.instance_id for t in run_tasks(allowed, training=True)] == [iid]
    # the CLI refuses before it creates anything
    res = CliRunner().invoke(
        app,
        [
            "train",
            "--suite",
            "swebench-verified",
            "--instances",
            iid,
            "--no-validate",
            "--set",
            f"run_dir={tmp_path / 'cli'}",
        ],
    )
    assert res.exit_code == 2 and "evaluation set" in res.output
    assert not (tmp_path / "cli").exists()


@pytest.mark.swebench_data
def test_tasks_list_reports_unavailable_instances_with_their_reason() -> None:
    res = CliRunner().invoke(
        app, ["tasks", "list", "swebench-lite-dev", "--repos", "pydicom/pydicom,marshmallow-code/marshmallow", "--json"]
    )
    assert res.exit_code == 0, res.output
    rows = json.loads(res.output)["tasks"]
    assert {r["repo"] for r in rows} == {"pydicom/pydicom", "marshmallow-code/marshmallow"}
    for r in rows:
        assert r["available"] == (r["repo"] == "marshmallow-code/marshmallow")
        assert (r["unavailable_reason"] is None) == r["available"]
