"""`legorl tasks mine` end to end on a small repository built here (tests/tasks/mining/minerepo.py):
both methods find tasks, validated in bwrap; the real grader agrees (`legorl tasks check`); the same
sources and seed give the same suite bytes (from the run cache, and when every run is made again,
all but the measured test times); a second run drops what the first holds; the suite loads, lists
and trains like any other (the train: `slow`)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from minerepo import make_repo
from typer.testing import CliRunner

from legorl.cli import app
from legorl.tasks.check import check_task
from legorl.tasks.loader import load_suite
from legorl.tasks.mining.pipeline import MineOptions, mine
from legorl.tasks.mining.suite import REPORT_FILE, SUITE_FILE

pytestmark = pytest.mark.sandbox

# per_test_suite=0: mutants run the tests that call their function (`legorl bench mine` below: whole files)
OPTIONS = MineOptions(
    python="host", max_mutations=3, per_function=1, workers=2, seed=0, dedup_mined=False, per_test_suite=0
)


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_repo(tmp_path_factory.mktemp("src") / "shapes")


@pytest.fixture(scope="module")
def mined(repo: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The repository mined once, every run made now (nothing read from the run cache)."""
    out = tmp_path_factory.mktemp("mined") / "a"
    report = mine([str(repo)], out, OPTIONS.model_copy(update={"use_cache": False}))
    assert not report.sources[0].errors, report.sources[0].errors
    return out


def _records(suite: Path) -> list[dict]:
    return [json.loads(line) for line in (suite / SUITE_FILE).read_text().splitlines()]


def test_both_methods_find_validated_tasks(mined: Path, repo: Path) -> None:
    records = _records(mined)
    by_method: dict[str, list[dict]] = {}
    for r in records:
        by_method.setdefault(r["mined"]["method"], []).append(r)
    assert set(by_method) == {"commit", "mutation"}

    [commit] = by_method["commit"]
    fix = subprocess.run(["git", "rev-parse", "HEAD~1"], cwd=repo, capture_output=True, text=True).stdout.strip()
    assert commit["mined"]["commit"] == fix and commit["instance_id"] == f"local__shapes.commit-{fix[:12]}"
    assert commit["FAIL_TO_PASS"] == ["tests/test_geometry.py::test_clamp_high"]
    assert "tests/test_geometry.py::test_clamp_low" in commit["PASS_TO_PASS"]
    assert "+    if value > high:" in commit["patch"] and "tests/" not in commit["patch"]
    assert "+def test_clamp_high" in commit["test_patch"]
    assert commit["mined"]["functions"] == ["shapes/geometry.py::clamp"]
    assert (commit["mined"]["files_changed"], commit["mined"]["lines_changed"]) == (1, 2)
    assert "test_clamp_high" in commit["problem_statement"] and commit["mined"]["synthetic_statement"]

    assert 1 <= len(by_method["mutation"]) <= OPTIONS.max_mutations
    functions = [r["mined"]["functions"][0] for r in by_method["mutation"]]
    assert len(set(functions)) == len(functions)  # --per-function 1
    for r in by_method["mutation"]:
        assert r["FAIL_TO_PASS"] and not set(r["FAIL_TO_PASS"]) & set(r["PASS_TO_PASS"])
        tree = mined / r["source_dir"]
        path = r["mined"]["functions"][0].split("::")[0]
        assert (tree / path).read_text() != (repo / path).read_text()  # the tree holds the bug
        assert r["FAIL_TO_PASS"][0] in r["problem_statement"]
        assert r["mined"]["mutation"] and r["mined"]["test_seconds"] >= 0

    report = json.loads((mined / REPORT_FILE).read_text())
    commits = report["sources"][0]["methods"]["commits"]
    assert commits["skipped"] == {"no source change": 1, "root commit": 1}  # the README commit and the first
    assert report["totals"]["by_method"] == {"commit": 1, "mutation": len(by_method["mutation"])}


def test_the_grader_agrees_with_the_miner(mined: Path) -> None:
    from legorl.sandbox.bwrap import BwrapBackend

    tasks = load_suite(str(mined))
    picked = [next(t for t in tasks if t.mined and t.mined.method == m) for m in ("commit", "mutation")]
    for task in picked:
        result = check_task(task, BwrapBackend())
        assert result.ok, (task.instance_id, result.problems)


def test_same_sources_and_seed_give_the_same_suite(mined: Path, repo: Path, tmp_path: Path) -> None:
    again = mine([str(repo)], tmp_path / "b", OPTIONS)
    assert again.runs["cache_misses"] == 0 and again.runs["cache_hits"] > 0  # every run read back
    assert (tmp_path / "b" / SUITE_FILE).read_bytes() == (mined / SUITE_FILE).read_bytes()

    mine([str(repo)], tmp_path / "c", OPTIONS.model_copy(update={"use_cache": False}))  # every run made again

    def timeless(suite: Path) -> list[dict]:
        out = _records(suite)
        for r in out:
            r["mined"].pop("test_seconds")
        return out

    assert timeless(tmp_path / "c") == timeless(mined)


def test_duplicates_of_an_earlier_run_are_dropped(mined: Path, repo: Path, tmp_path: Path) -> None:
    options = OPTIONS.model_copy(update={"dedup_against": [str(mined / SUITE_FILE)]})
    report = mine([str(repo)], tmp_path / "d", options)
    first, second = _records(mined), _records(tmp_path / "d")
    dups = [d for m in report.sources[0].methods.values() for d in m.duplicates]
    # every task of the first run is a duplicate now (by its key; another mutant making the same edit
    # is one too), and none of them is written again
    assert {r["instance_id"] for r in first} <= {d["candidate"] for d in dups}
    assert all(d["of"].startswith("a: ") for d in dups)
    keys = {k for r in first for k in r["mined"]["dedup_keys"]}
    assert not {k for r in second for k in r["mined"]["dedup_keys"]} & keys
    assert all(r["mined"]["method"] == "mutation" for r in second)  # the one commit is taken: other mutants fill in


def test_a_mined_suite_is_listed_by_name_and_loads(mined: Path, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("LEGORL_HOME", str(tmp_path))
    shutil.copytree(mined, tmp_path / "tasks" / "mined" / "shapes-pool", symlinks=True)
    res = CliRunner().invoke(app, ["tasks", "list", "--json"])
    assert res.exit_code == 0, res.output
    [row] = [s for s in json.loads(res.stdout)["suites"] if s["name"] == "shapes-pool"]
    n = len(_records(mined))
    assert row["tasks"] == n and row["by_method"]["commit"] == 1 and row["by_repo"] == {"local/shapes": n}
    tasks = load_suite("shapes-pool")
    assert len(tasks) == n and all(t.source_dir is not None and t.source_dir.is_dir() for t in tasks)
    res = CliRunner().invoke(app, ["tasks", "list", "shapes-pool", "--json"])
    assert res.exit_code == 0 and len(json.loads(res.stdout)["tasks"]) == n


def test_bench_mine_reports_its_keys(mined: Path, repo: Path) -> None:
    from legorl.bench.schema import RESULT_KEYS

    res = CliRunner().invoke(
        app, ["bench", "mine", str(repo), "--python", "host", "--max-mutations", "2", "--max-commits", "1", "--json"]
    )
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert set(RESULT_KEYS["mine"]) <= set(out)
    assert out["validated"] == 3 and out["by_method"]["commits"]["kept"] == 1 and not out["errors"]
    assert set(out["kept_share"]) == {"commits", "mutations"} and 0 < out["kept_share"]["mutations"] <= 1
    assert out["cache"]["hits"] > 0  # the module's earlier runs of these candidates are read back
    assert out["tasks_per_hour"] > 0 and out["tasks_per_cpu_hour"] > 0


@pytest.mark.slow
def test_two_training_steps_on_a_mined_suite(mined: Path, tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    argv = [sys.executable, "-m", "legorl.cli", "train", "--no-validate"]
    for setting in (
        f"suite={mined}",
        f"run_dir={run_dir}",
        "steps=2",
        "tasks_per_step=1",
        "group_size=2",
        "rollout.harness=minimal",
        "rollout.max_turns=1",
        "rollout.max_tokens_per_turn=16",  # the point is the suite in the loop, not what SmolLM2 writes
    ):
        argv += ["--set", setting]
    res = subprocess.run(argv, capture_output=True, text=True, timeout=1800)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 2


@pytest.mark.slow
def test_the_pass_rate_filter_takes_a_mined_suite(mined: Path, tmp_path: Path) -> None:
    from legorl.harnesses.scripted import mixed_is_wrong

    task = next(r for r in _records(mined) if r["mined"]["method"] == "commit")["instance_id"]
    out = tmp_path / "filtered"
    argv = [sys.executable, "-m", "legorl.cli", "tasks", "filter", str(mined), "--harness", "minimal"]
    argv += ["--samples", "2", "--engine", "scripted-mixed", "--instances", task, "--out", str(out)]
    res = subprocess.run(argv, capture_output=True, text=True, timeout=1800)
    solved = sum(not mixed_is_wrong(0, task, g) for g in range(2))
    assert res.returncode == (0 if solved == 1 else 1), res.stdout[-3000:] + res.stderr[-3000:]
    [verdict] = json.loads((out / "report.json").read_text())["tasks"]
    assert (verdict["task_id"], verdict["solved"]) == (task, solved)  # gold fixes resolve it, wrong ones do not
    if solved == 1:
        [kept] = load_suite(str(out / "suite.jsonl"))
        assert kept.mined is not None and kept.pass_rate is not None and kept.mined.method == "commit"
