"""Monitors acting on a real training run (embedded SmolLM2, gateway, GSPO trainer), with faults
injected where the monitor must see them:

- an engine whose weights are perturbed (the rollout policy is no longer the trainer's): the mismatch
  monitor, configured to stop, ends the run after the step that showed it, with a checkpoint;
- a sandbox backend that refuses every sandbox (an env-failure burst): the monitor, configured to
  pause, holds the run until `legorl control RUN_DIR resume`.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
import time

import pytest
import torch

import legorl.loop.train as train_mod
from legorl.config import RunConfig
from legorl.engines.embedded import EmbeddedEngine
from legorl.errors import SandboxError
from legorl.loop.train import train
from legorl.observe.control import read_control
from legorl.observe.metrics import read_metrics
from legorl.observe.monitors import AlertLog
from legorl.observe.status import run_summary
from legorl.trajectory.store import open_run

pytestmark = [pytest.mark.slow]


def small_run(run_dir, steps: int, **overrides) -> RunConfig:
    return RunConfig.load(
        None,
        run_dir=str(run_dir),
        steps=steps,
        tasks_per_step=1,
        group_size=2,
        task_ids=["legorl__trivial-001"],
        **{"rollout.max_turns": 1, "rollout.max_tokens_per_turn": 48, **overrides},
    )


@pytest.mark.sandbox
def test_perturbed_engine_weights_raise_the_mismatch_alert_and_stop_the_run(tmp_path, monkeypatch):
    real = EmbeddedEngine.from_pretrained.__func__

    def perturbed(cls, *args, **kwargs):
        engine = real(cls, *args, **kwargs)
        g = torch.Generator().manual_seed(0)
        with torch.no_grad():  # the engine samples from a policy the trainer does not hold
            for p in engine.model.parameters():
                p.mul_(1 + 0.3 * torch.randn(p.shape, generator=g))
        return engine

    monkeypatch.setattr(EmbeddedEngine, "from_pretrained", classmethod(perturbed))
    run = tmp_path / "run"
    # the trainer holds its own copy (as with a remote engine): a colocated one would train the perturbed module
    cfg = small_run(run, 3, **{"monitors.mismatch.action": "stop", "engine.colocate_trainer": False})
    history = asyncio.run(train(cfg))

    assert len(history) == 1, "the run ends after the step that showed the mismatch"
    pearson = history[0]["mismatch/pearson"]
    assert pearson < 0.99
    (alert,) = [a for a in AlertLog(run).read() if a.monitor == "mismatch"]
    assert (alert.level, alert.step) == ("stop", 0) and f"{pearson:.4f}" in alert.detail
    ctl = read_control(run)
    assert (ctl.state, ctl.by) == ("stop", "monitor:mismatch") and "mismatch" in ctl.reason
    assert (run / "checkpoints").is_dir() and any((run / "checkpoints").iterdir()), "stopped after a checkpoint"
    s = run_summary(run)
    assert s.state == "stopped" and "rollout/trainer mismatch" in s.state_reason
    assert [a.monitor for a in s.alerts if a.level == "stop"] == ["mismatch"]
    assert len(list(open_run(run).iter_rollouts())) == 2, "the step's rollouts stay on disk"


def test_env_failure_burst_pauses_the_run_until_resumed(tmp_path, monkeypatch):
    attempts = []

    class RefusingBackend:  # fault injection: every sandbox fails to start
        name = "refusing"

        def create(self, spec):
            attempts.append(spec)
            raise SandboxError("injected: no sandbox")

    monkeypatch.setattr(train_mod, "sandbox_backend", lambda cfg: RefusingBackend())
    run = tmp_path / "run"
    cfg = small_run(run, 2, **{"monitors.env_failures.action": "pause"})
    result: dict = {}

    def main():
        try:
            result["history"] = asyncio.run(train(cfg))
        except BaseException as exc:  # re-raised below
            result["error"] = exc

    worker = threading.Thread(target=main, daemon=True)
    worker.start()
    deadline = time.monotonic() + 300
    while read_control(run).state != "paused":
        assert worker.is_alive() and time.monotonic() < deadline, result.get("error")
        time.sleep(0.2)
    time.sleep(3.0)  # the run holds: no second step while paused
    assert len(read_metrics(run)) == 1 and len(attempts) == 2 and worker.is_alive()
    assert (run / "checkpoints" / "latest").read_text() == "step-000000", "a paused run holds a checkpoint"
    s = run_summary(run)
    assert s.state == "paused" and "environment failures" in s.state_reason and "monitor:env_failures" in s.state_reason
    status = subprocess.run(
        [sys.executable, "-m", "legorl.cli", "status", str(run)], capture_output=True, text=True, timeout=120
    ).stdout
    assert "state      paused" in status and "[pause] environment failures" in status

    out = subprocess.run(
        [sys.executable, "-m", "legorl.cli", "control", str(run), "resume"], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    worker.join(timeout=300)
    assert not worker.is_alive() and "error" not in result, result.get("error")
    assert len(result["history"]) == 2 and len(attempts) == 4
    rows = read_metrics(run)
    assert [r["rollout/status_env_failure"] for r in rows] == [2, 2]
    assert [r["train/samples"] for r in rows] == [0, 0], "env failures never reach the gradient"
    lines = [json.loads(x) for x in (run / "alerts.jsonl").read_text().splitlines()]
    assert [(x["step"], x["monitor"], x["level"]) for x in lines if x["monitor"] == "env_failures"] == [
        (0, "env_failures", "pause"),
        (1, "env_failures", "pause"),
    ]
    assert run_summary(run).state == "finished"
