"""`legorl tasks filter` (legorl.loop.filter): pilot rollouts, pass rates, the filtered suite.

End to end on the built-in trivial tier with the scripted-mixed policy (each rollout the gold fix or
a wrong one, by seed, task and sample index), the minimal harness, bubblewrap and the real grader:
the run is killed mid-pilot and resumed, tasks solved 0 or K times are dropped, the written suite
carries the pass rates and loads like any other suite.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from legorl.config import RunConfig
from legorl.harnesses.scripted import mixed_is_wrong
from legorl.loop.filter import PilotResult, judge, read_results
from legorl.tasks.loader import load_suite, run_tasks
from legorl.tasks.model import Task

# with seed 0: 001 and 002 get one gold and one wrong rollout, 005 two gold, 012 two wrong
TASKS = ("legorl__trivial-001", "legorl__trivial-002", "legorl__trivial-005", "legorl__trivial-012")
K = 2


def _argv(out: Path, *more: str) -> list[str]:
    return [
        sys.executable, "-m", "legorl.cli", "tasks", "filter", "trivial", "--harness", "minimal",
        "--samples", str(K), "--engine", "scripted-mixed", "--instances", ",".join(TASKS),
        "--out", str(out), "--concurrency", "2", *more,
    ]  # fmt: skip


def _lines(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.is_file() else 0


@pytest.mark.slow
@pytest.mark.sandbox
def test_filter_keeps_the_tasks_solved_sometimes_resumes_after_a_kill_and_writes_a_loadable_suite(tmp_path):
    out = tmp_path / "filtered"
    pilot = out / "pilot.jsonl"
    solved = {t: sum(not mixed_is_wrong(0, t, g) for g in range(K)) for t in TASKS}
    assert sorted(solved.values()) == [0, 1, 1, 2], "the chosen tasks must cover every verdict"

    # 1. killed mid-pilot, as an OOM killer or a lost machine would end it
    log = tmp_path / "first.log"
    p = subprocess.Popen(_argv(out), stdout=log.open("w"), stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 600
    while _lines(pilot) < 1:
        assert p.poll() is None, log.read_text()[-3000:]
        assert time.monotonic() < deadline, log.read_text()[-3000:]
        time.sleep(0.05)
    os.killpg(p.pid, signal.SIGKILL)
    p.wait(timeout=60)
    before = read_results(pilot)
    assert 1 <= len(before) < len(TASKS) * K, "the kill was meant to land mid-pilot"

    # 2. the rerun runs only what is missing
    res = subprocess.run(_argv(out), capture_output=True, text=True, timeout=900)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert "pilot rollouts" in res.stderr  # the live progress, apart from the table on stdout
    report = json.loads((out / "report.json").read_text())
    results = read_results(pilot)
    pairs = [(r.task_id, r.sample) for r in results]
    assert sorted(pairs) == sorted((t, g) for t in TASKS for g in range(K)), "each pilot rollout exactly once"
    assert report["ran"] == len(TASKS) * K - len(before)
    for r in results:  # the real grader's verdict on each scripted rollout
        assert r.status == "ok", r
        assert r.reward == (0.0 if mixed_is_wrong(0, r.task_id, r.sample) else 1.0), r
    verdicts = {t["task_id"]: (t["solved"], t["verdict"]) for t in report["tasks"]}
    want = {0: "too_hard", 1: "kept", 2: "too_easy"}
    assert verdicts == {t: (solved[t], want[solved[t]]) for t in TASKS}

    # 3. the suite: the kept tasks with their pass rates, loadable by path as any suite
    suite = out / "suite.jsonl"
    kept = load_suite(str(suite))
    assert [t.instance_id for t in kept] == [t for t in TASKS if solved[t] == 1]
    for t in kept:
        assert t.pass_rate is not None
        assert (t.pass_rate.solved, t.pass_rate.samples, t.pass_rate.rate) == (1, K, 0.5)
        assert (t.pass_rate.harness, t.pass_rate.engine) == ("minimal", "scripted-mixed")
        assert t.source_dir is not None and t.source_dir.is_dir()
    cfg = RunConfig.load(None, suite=str(suite), run_dir=str(tmp_path / "run"))
    assert [t.instance_id for t in run_tasks(cfg, training=True)] == [t.instance_id for t in kept]
    listed = subprocess.run(
        [sys.executable, "-m", "legorl.cli", "tasks", "list", str(suite), "--json"], capture_output=True, text=True
    )
    assert listed.returncode == 0, listed.stderr
    assert [t["instance_id"] for t in json.loads(listed.stdout)["tasks"]] == [t.instance_id for t in kept]

    # 4. other bounds on the same pilots: nothing reruns
    res = subprocess.run(_argv(out, "--min-solved", "0", "--max-solved", "2"), capture_output=True, text=True)
    assert res.returncode == 0, res.stderr[-3000:]
    assert json.loads((out / "report.json").read_text())["ran"] == 0
    assert [t.instance_id for t in load_suite(str(suite))] == list(TASKS)

    # 5. pilots of another policy do not mix with these
    res = subprocess.run(
        [*_argv(out)[:-4], "--engine", "scripted-gold", "--out", str(out)], capture_output=True, text=True
    )
    assert res.returncode == 2 and "use another --out" in res.stderr, res.stderr


def test_a_torn_last_line_is_ignored_and_a_torn_middle_one_is_an_error(tmp_path):
    path = tmp_path / "pilot.jsonl"
    line = PilotResult(task_id="t", sample=0, status="ok", reward=1.0, rollout_id="r-1").model_dump_json()
    path.write_text(line + "\n" + line[:20])
    assert [r.task_id for r in read_results(path)] == ["t"]
    path.write_text(line[:20] + "\n" + line + "\n")
    with pytest.raises(Exception, match="not a pilot result"):
        read_results(path)


def test_verdicts_count_only_results_that_say_something_about_the_task():
    def res(g: int, status: str, reward: float) -> PilotResult:
        return PilotResult(task_id="t", sample=g, status=status, reward=reward, rollout_id=f"r-{g}")

    counted = [r for r in (res(0, "ok", 1.0), res(1, "timeout", 0.0), res(2, "env_failure", 0.0)) if r.counts]
    assert judge("t", counted, 3, 1, 2).verdict == "incomplete"  # an env failure is neither pass nor fail
    assert judge("t", counted + [res(2, "ok", 1.0)], 3, 1, 2).verdict == "kept"
    assert judge("t", counted + [res(2, "ok", 1.0)], 3, 1, 1).verdict == "too_easy"
    assert judge("t", [res(g, "ok", 0.0) for g in range(3)], 3, 1, 2).verdict == "too_hard"


def test_swebench_records_without_a_pass_rate_still_load():
    record = {
        "instance_id": "o__r-1",
        "repo": "o/r",
        "patch": "",
        "problem_statement": "x",
        "FAIL_TO_PASS": '["t::a"]',
        "PASS_TO_PASS": "[]",
    }
    assert Task.parse(record).pass_rate is None
    rated = Task.parse(
        {**record, "pass_rate": {"solved": 1, "samples": 4, "rate": 0.25, "harness": "h", "engine": "e", "model": "m"}}
    )
    assert rated.pass_rate is not None and rated.pass_rate.rate == 0.25
