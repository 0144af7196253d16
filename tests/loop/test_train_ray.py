"""Ray end to end on a real local Ray cluster (``ray.init(num_cpus=2)``), with the embedded engine,
real sandboxes, harness, grader and GSPO steps. The executor: rollout workers are Ray actors with
their own sandbox backend and a relay to the gateway. The trainer: FSDP2 ranks as Ray actors.

* the same 2-step run as the local executor, same seeds: the same tokens, identical rewards, the
  same losses (to 1e-4);
* a rollout worker killed mid-step: its rollouts are environment failures naming the lost worker
  (not zero rewards, not trained on), a new worker takes its place and the run goes on;
* the loop's trainer on 2 FSDP2 ranks: the same losses and weights as one process, and the run
  resumes from their checkpoint in one process.
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
import torch

from legorl.config import RunConfig
from legorl.loop.ray_executor import WORKER_LOST, RayExecutor
from legorl.loop.train import train
from legorl.models.registry import load_model, resolve_model
from legorl.store import open_run
from legorl.training.checkpoint import load_checkpoint
from legorl.training.trainer import Trainer

pytestmark = [pytest.mark.slow, pytest.mark.sandbox, pytest.mark.ray]

DEMO = Path(__file__).resolve().parents[2] / "configs" / "demo.json"


def _config(run: Path, executor: str, steps: int = 2, **overrides: object) -> RunConfig:
    return RunConfig.load(
        DEMO,
        run_dir=str(run),
        steps=steps,
        tasks_per_step=2,
        group_size=2,
        **{
            "eval.before": False,
            "eval.after": False,
            "executor.type": executor,
            "executor.num_cpus": 2,
            **overrides,
        },
    )


def _by_rollout(run: Path) -> dict[tuple[int, str, int], object]:
    return {(r.step, r.task_id, r.group_index): r for r in open_run(run).iter_rollouts()}


def _ranked_config(run: Path, ranks: int, steps: int = 2) -> RunConfig:
    return _config(run, "local", steps, **{"trainer.ranks": ranks, "engine.colocate_trainer": False})


@pytest.fixture(scope="module")
def local_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, RunConfig, list[dict]]:
    """The 2-step run in this process, its trainer apart from the engine: what the Ray executor and
    the FSDP ranks must both reproduce (run once for the module)."""
    cfg = _ranked_config(tmp_path_factory.mktemp("local") / "run", 1)
    return Path(cfg.run_dir), cfg, asyncio.run(train(cfg))


def test_the_ray_executor_runs_the_local_run_with_the_same_seeds(local_run, tmp_path):
    local_dir, _, local = local_run
    on_ray = asyncio.run(train(_config(tmp_path / "ray", "ray", **{"engine.colocate_trainer": False})))
    a, b = _by_rollout(local_dir), _by_rollout(tmp_path / "ray")
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


def _train_killing_a_worker(run: Path) -> tuple[list[dict], list[int]]:
    """The 2-step run on the Ray executor, with the first busy rollout worker SIGKILLed."""
    stop, killed = threading.Event(), []
    killer = threading.Thread(target=_kill_first_busy_worker, args=(stop, killed), daemon=True)
    killer.start()
    try:
        return asyncio.run(train(_config(run, "ray"))), killed
    finally:
        stop.set()
        killer.join(5)


def test_a_killed_rollout_worker_yields_env_failures_and_the_run_goes_on(tmp_path):
    run = tmp_path / "run"
    history, killed = _train_killing_a_worker(run)
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


def test_a_worker_that_cannot_be_replaced_leaves_env_failures_not_a_crash(tmp_path, monkeypatch):
    """Fault injection: no new worker can be started after the kill (a test double for a full cluster)."""
    spawned = []
    real_spawn = RayExecutor._spawn

    async def spawn_once(self, node_id):
        spawned.append(node_id)
        if len(spawned) > 1:
            raise RuntimeError("injected: the cluster has no room for a new worker")
        return await real_spawn(self, node_id)

    monkeypatch.setattr(RayExecutor, "_spawn", spawn_once)
    run = tmp_path / "run"
    history, killed = _train_killing_a_worker(run)
    assert len(killed) == 1 and len(spawned) == 2
    rollouts = _by_rollout(run)
    assert all(r.status == "env_failure" for k, r in rollouts.items() if k[0] == 1)
    assert {r.cause for k, r in rollouts.items() if k[0] == 1} == {f"{WORKER_LOST}: no rollout worker is left"}
    assert [m["step"] for m in history] == [0, 1] and history[1]["executor/workers"] == 0


def _checkpoint_params(path: Path, cfg: RunConfig) -> dict[str, torch.Tensor]:
    """A checkpoint's weights, loaded at world size 1 (resharded when several ranks wrote it)."""
    trainer = Trainer(load_model(resolve_model(cfg.engine.model)), cfg.trainer)
    load_checkpoint(path, trainer, restore_rng=False)
    return {k: v.clone() for k, v in trainer.model.state_dict().items()}


def test_two_fsdp_trainer_ranks_on_ray_train_as_one_process_and_resume_on_one(local_run, tmp_path):
    one_dir, one_cfg, one = local_run
    two_cfg = _ranked_config(tmp_path / "two", 2)
    two = asyncio.run(train(two_cfg))
    a, b = _by_rollout(one_dir), _by_rollout(tmp_path / "two")
    assert a.keys() == b.keys() and [b[k].reward for k in sorted(b)] == [a[k].reward for k in sorted(a)]
    for m1, m2 in zip(one, two):
        print(
            f"\nstep {m1['step']}: loss {m1['train/loss']:.4e} vs {m2['train/loss']:.4e} on 2 ranks; "
            f"grad norm {m1['train/grad_norm']:.6f} vs {m2['train/grad_norm']:.6f}"
        )
        assert abs(m1["train/loss"] - m2["train/loss"]) <= 1e-4
        assert m2["train/grad_norm"] == pytest.approx(m1["train/grad_norm"], rel=1e-4, abs=1e-6)
        assert m2["mismatch/pearson"] > 0.999  # the engine serves what the ranks trained (disk sync)
    last = "checkpoints/step-000001"
    shards = sorted(p.name for p in (tmp_path / "two" / last).glob("*.distcp"))
    assert shards == ["__0_0.distcp", "__1_0.distcp"]  # each rank wrote its own
    ours, theirs = (
        _checkpoint_params(tmp_path / "two" / last, two_cfg),
        _checkpoint_params(one_dir / last, one_cfg),
    )
    worst = max(float((ours[k] - theirs[k]).norm() / theirs[k].norm()) for k in theirs)
    print(f"weights after 2 steps, 2 ranks vs 1 process: worst ‖Δθ‖/‖θ‖ {worst:.2e}")
    assert worst <= 1e-5
    # the run saved by 2 ranks goes on in one process (DCP reshards)
    resumed = asyncio.run(train(_ranked_config(tmp_path / "two", 1, steps=3), resume=True))
    assert [m["step"] for m in resumed] == [2]
    rows = [json.loads(line) for line in (tmp_path / "two" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [0, 1, 2]
