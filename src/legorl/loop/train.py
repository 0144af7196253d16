"""The RL loop, on one screen: rollouts through the gateway → batch → GSPO step → weight sync."""

from __future__ import annotations

import asyncio
import random
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import torch

from legorl.config import RunConfig
from legorl.errors import ConfigError
from legorl.loop.batch import assemble_batch
from legorl.loop.rollout import run_rollout
from legorl.loop.stack import build_harness, open_gateway_stack, rollout_context, sandbox_backend
from legorl.models.registry import load_model
from legorl.observe.metrics import MetricsLogger
from legorl.tasks.loader import load_suite
from legorl.trajectory.records import Rollout
from legorl.training.trainer import Trainer


async def train(cfg: RunConfig, on_step=None) -> list[dict[str, Any]]:
    run_dir = Path(cfg.run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "config.json").write_text(cfg.model_dump_json(indent=2))
    asyncio.get_running_loop().set_default_executor(ThreadPoolExecutor(max_workers=64))
    random.seed(cfg.seed)
    torch.manual_seed(cfg.seed)
    tasks = select_tasks(load_suite(cfg.suite), cfg.task_ids)
    rng = random.Random(cfg.seed)
    harness = build_harness(cfg.rollout)
    backend = sandbox_backend(cfg.sandbox)
    metrics_log = MetricsLogger(run_dir)
    history: list[dict[str, Any]] = []
    try:
        # The gateway samples exactly as the trainer assumes (rollout=...), whatever the harness asks for.
        async with open_gateway_stack(cfg.engine, rollout=cfg.rollout, run_dir=run_dir) as stack:
            engine, store = stack.engine, stack.store
            trainer = Trainer(load_model(stack.model_path), cfg.trainer, temperature=cfg.rollout.temperature)
            ctx = rollout_context(cfg, stack, backend, harness)
            for step in range(cfg.steps):
                t0 = time.perf_counter()
                chosen = rng.sample(tasks, min(cfg.tasks_per_step, len(tasks)))
                rollouts: list[Rollout] = await asyncio.gather(*[
                    run_rollout(ctx, task, step, g) for task in chosen for g in range(cfg.group_size)
                ])
                for r in rollouts:  # on disk before anything trains on them
                    store.append_rollout(r)
                t_rollout = time.perf_counter() - t0
                batch = assemble_batch(rollouts, cfg.grading.flagged_policy)
                metrics = await asyncio.to_thread(trainer.step, batch.samples, batch.monitor)
                if metrics["train/updated"]:
                    await engine.update_weights(trainer.state_dict(), version=trainer.version)
                metrics.update(rollout_metrics(rollouts))
                metrics.update({"batch/groups": batch.groups_total, "batch/groups_with_signal": batch.groups_with_signal,
                                "time/rollout_s": t_rollout, "time/step_s": time.perf_counter() - t0,
                                "weight_version": engine.weight_version})
                metrics.update({f"batch/dropped_{k}": v for k, v in batch.dropped.items()})
                metrics_log.log(step, metrics)
                history.append({"step": step, **metrics})
                if on_step is not None:
                    on_step(step, metrics)
    finally:
        metrics_log.close()
    return history


def select_tasks(tasks: list, task_ids: list[str]) -> list:
    if not task_ids:
        return tasks
    by_id = {t.instance_id: t for t in tasks}
    unknown = [i for i in task_ids if i not in by_id]
    if unknown:
        raise ConfigError(f"task_ids not in the suite: {', '.join(unknown)}")
    return [by_id[i] for i in task_ids]


def rollout_metrics(rollouts: list[Rollout]) -> dict[str, Any]:
    status = Counter(r.status for r in rollouts)
    valid = [r for r in rollouts if r.status in ("ok", "timeout")]
    align = Counter(e.kind for r in rollouts for s in r.samples for e in s.alignment_events)
    turns = sum(len(s.turn_indices) for r in rollouts for s in r.samples)
    out: dict[str, Any] = {
        "rollout/count": len(rollouts),
        "rollout/reward_mean": sum(r.reward for r in valid) / len(valid) if valid else 0.0,
        "rollout/resolved": sum(1 for r in valid if r.reward > 0),
        "rollout/turns": turns,
        "rollout/samples": sum(len(r.samples) for r in rollouts),
        "rollout/flagged": sum(1 for r in rollouts if r.flags),
        "rollout/duration_mean_s": sum(r.duration_s for r in rollouts) / max(len(rollouts), 1),
    }
    out.update({f"rollout/status_{k}": v for k, v in status.items()})
    out.update({f"align/{k}": v for k, v in align.items()})
    return out
