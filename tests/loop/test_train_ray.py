"""The Ray executor end to end on a real local Ray cluster (``ray.init(num_cpus=2)``): rollout workers
are Ray actors with their own sandbox backend and a relay to the gateway; the embedded engine,
real sandboxes, harness, grader and GSPO steps.

* the same 2-step run as the local executor, same seeds: the same tokens, identical rewards, the
  same losses (to 1e-4);
* a rollout worker killed mid-step: its rollouts are environment failures naming the lost worker
  (not zero rewards, not trained on), a new worker takes its place and the run goes on.
"""

from __future__ import annotations

import asyncio
import json
import signal
import threading
import time
from pathlib import Path

import psutil
import pytest

from legorl.config import RunConfig
from legorl.loop.ray_executor import WORKER_LOST
from legorl.loop.train import train
from legorl.store import open_run

pytestmark = [pytest.mark.slow, pytest.mark.sandbox, pytest.mark.ray]

DEMO = Path(__file__).resolve().parents[2] / "configs" / "demo.json"


def _config(run: Path, executor: str) -> RunConfig:
    return RunConfig.load(
        DEMO,
        run_dir=str(run),
        steps=2,
        tasks_per_step=2,
        group_size=2,
        **{
            "eval.before": False,
            "eval.after": False,
            "executor.type": executor,
            "executor.num_cpus": 2,
        },
    )


def _by_rollout(run: Path) -> dict[tuple[int, str, int], object]:
    return {(r.step, r.task_id, r.group_index): r for r in open_run(run).iter_rollouts()}


def test_the_ray_executor_runs_the_local_run_with_the_same_seeds(tmp_path):
    local = asyncio.run(train(_config(tmp_path / "local", "local")))
    on_ray = asyncio.run(train(_config(tmp_path / "ray", "ray")))
    a, b = _by_rollout(tmp_path / "local"), _by_rollout(tmp_path / "ray")
    assert a.keys() == b.keys() and len(a) == 8
    for key in a:
        assert b[key].status == a[key].status == "ok", (key, b[key].cause)
        assert b[key].reward == a[key].reward, key
        # the same tokens: each rollout's sampling seed comes from the run, not from the schedule
        assert [s.token_ids for s in b[key].samples] == [s.token_ids for s in a[key].samples], key
    print("\nrewards", [a[k].reward for k in sorted(a)])
    for m_local, m_ray in zip(local, on_ray):
        print(f"step {m_local['step']}: loss local {m_local['train/loss']:.3e}, ray {m_ray['train/loss']:.3e}")
        assert abs(m_local["train/loss"] - m_ray["train/loss"]) <= 1e-4
        assert m_local["rollout/reward_mean"] == m_ray["rollout/reward_mean"]
        assert m_ray["executor/workers"] == 1 and m_ray["executor/workers_lost"] == 0
        assert "executor/workers" not in m_local


def _kill_first_busy_worker(stop: threading.Event, killed: list[int]) -> None:
    """SIGKILL the first Ray rollout worker seen running a sandbox (a rollout mid-flight)."""
    while not stop.is_set():
        for proc in psutil.process_iter(["cmdline"]):
            try:
                if "ray::RolloutWorker" not in " ".join(proc.info["cmdline"] or []):
                    continue
                if any(c.name() == "bwrap" for c in proc.children(recursive=True)):
                    proc.send_signal(signal.SIGKILL)
                    killed.append(proc.pid)
                    return
            except psutil.Error:
                continue
        time.sleep(0.05)


def test_a_killed_rollout_worker_yields_env_failures_and_the_run_goes_on(tmp_path):
    run = tmp_path / "run"
    stop, killed = threading.Event(), []
    killer = threading.Thread(target=_kill_first_busy_worker, args=(stop, killed), daemon=True)
    killer.start()
    try:
        history = asyncio.run(train(_config(run, "ray")))
    finally:
        stop.set()
        killer.join(5)
    assert len(killed) == 1
    rollouts = _by_rollout(run)
    lost = [r for r in rollouts.values() if r.status == "env_failure"]
    print(f"\nkilled worker pid {killed[0]}; lost rollouts: {[r.cause for r in lost]}")
    assert lost and all(r.step == 0 for r in lost)
    for r in lost:
        assert r.cause.startswith(f"{WORKER_LOST}: rollout-worker-1 (pid {killed[0]}")
        assert r.reward == 0.0 and r.grader is None  # no verdict on the policy
    # the run went on: a new worker served every rollout of the next step
    assert [r.status for k, r in sorted(rollouts.items()) if k[0] == 1] == ["ok"] * 4
    assert [m["step"] for m in history] == [0, 1]
    first, second = history
    assert first["rollout/status_env_failure"] == len(lost) and first["batch/dropped_env_failure"] == len(lost)
    assert first["executor/workers_lost"] == 1 and second["executor/workers"] == 1
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert rows[0]["batch/dropped_env_failure"] == len(lost)
