"""The RL loop, on one screen: rollouts through the gateway → batch → GSPO step → weight sync."""

from __future__ import annotations

import asyncio
import random
import shutil
import tempfile
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import torch

from legorl.config import RunConfig
from legorl.errors import ConfigError
from legorl.engines.embedded import EmbeddedEngine
from legorl.gateway.app import Gateway, SamplingPolicy
from legorl.gateway.renderer import ChatTemplateRenderer
from legorl.gateway.server import GatewayServer
from legorl.gateway.sessions import SessionRegistry
from legorl.harnesses.base import Budget
from legorl.harnesses.registry import get_harness
from legorl.loop.batch import assemble_batch
from legorl.loop.rollout import RolloutContext, run_rollout
from legorl.models.registry import load_model, load_tokenizer, resolve_model
from legorl.observe.metrics import MetricsLogger
from legorl.sandbox.bwrap import BwrapBackend
from legorl.tasks.loader import load_suite
from legorl.trajectory.records import Rollout
from legorl.trajectory.store import RunStore
from legorl.training.trainer import Trainer


async def train(cfg: RunConfig, on_step=None) -> list[dict[str, Any]]:
    run_dir = Path(cfg.run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "config.json").write_text(cfg.model_dump_json(indent=2))
    asyncio.get_running_loop().set_default_executor(ThreadPoolExecutor(max_workers=64))
    random.seed(cfg.seed)
    torch.manual_seed(cfg.seed)

    model_path = resolve_model(cfg.engine.model)
    tokenizer = load_tokenizer(model_path)
    engine = EmbeddedEngine.from_pretrained(str(model_path), max_batch_size=cfg.engine.max_batch_size)
    trainer = Trainer(load_model(model_path), cfg.trainer, temperature=cfg.rollout.temperature)
    store = RunStore(run_dir)
    # The gateway samples exactly as the trainer assumes, whatever the harness asks for.
    policy = SamplingPolicy(temperature=cfg.rollout.temperature, max_tokens=cfg.rollout.max_tokens_per_turn)
    gateway = Gateway(engine, ChatTemplateRenderer(tokenizer), SessionRegistry(), store,
                      model_name=cfg.engine.model, sampling_policy=policy)
    metrics_log = MetricsLogger(run_dir)
    tasks = select_tasks(load_suite(cfg.suite), cfg.task_ids)
    rng = random.Random(cfg.seed)
    budget = Budget(cfg.rollout.max_turns, cfg.rollout.max_tokens_per_turn, cfg.rollout.wall_clock_s,
                    cfg.rollout.temperature, max_total_tokens=cfg.rollout.max_total_tokens,
                    max_concurrent_requests=cfg.rollout.max_concurrent_requests, turn_slack=cfg.rollout.turn_slack)
    # Unix socket paths are limited to ~108 bytes: keep the socket in a short private dir.
    sock_dir = Path(tempfile.mkdtemp(prefix="legorl-gw-"))
    history: list[dict[str, Any]] = []
    try:
        async with GatewayServer(gateway, port=0, uds=str(sock_dir / "gw.sock")) as server:
            harness = get_harness(cfg.rollout.harness, **cfg.rollout.harness_options)
            ctx = RolloutContext(gateway, server.uds, BwrapBackend(), harness, budget,
                                 cfg.rollout.grade_timeout_s, flagged_policy=cfg.flagged_policy)
            for step in range(cfg.steps):
                t0 = time.perf_counter()
                chosen = rng.sample(tasks, min(cfg.tasks_per_step, len(tasks)))
                rollouts: list[Rollout] = await asyncio.gather(*[
                    run_rollout(ctx, task, step, g) for task in chosen for g in range(cfg.group_size)
                ])
                for r in rollouts:  # on disk before anything trains on them
                    store.append_rollout(r)
                t_rollout = time.perf_counter() - t0
                batch = assemble_batch(rollouts, cfg.flagged_policy)
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
        await engine.close()
        shutil.rmtree(sock_dir, ignore_errors=True)
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
