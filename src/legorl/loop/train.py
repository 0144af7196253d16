"""The RL loop, on one screen: rollouts through the gateway → batch → GSPO step → weight sync."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import random
import statistics
import time
from collections import Counter
from collections.abc import Awaitable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import torch

from legorl.config import RunConfig
from legorl.errors import ConfigError
from legorl.grading.canaries import CanaryPool, canary_metrics
from legorl.loop.batch import Batch, step_batch
from legorl.loop.control import RunState, read_control, wait_while_paused, write_control
from legorl.loop.dynamic_sampling import draw_unused, refill_groups
from legorl.loop.eval import evaluate_phase, phase_report_path
from legorl.loop.executor import RolloutExecutor, open_executor
from legorl.loop.provenance import write_manifest
from legorl.loop.stack import GatewayStack, build_harness, open_gateway_stack, sandbox_backend
from legorl.loop.staleness import drop_stale
from legorl.loop.weight_sync import sync_weights
from legorl.observe.memory import release_free_memory
from legorl.observe.metrics import MetricsLogger, read_metrics
from legorl.observe.monitors import AlertLog, Monitors
from legorl.observe.plots import run_reward_curve
from legorl.observe.progress import NoProgress, PhaseProgress
from legorl.observe.token_logprobs import TrainerLogprobs
from legorl.tasks.loader import run_tasks
from legorl.tasks.model import Task
from legorl.training.checkpoint import (
    keep_metrics_until,
    latest_checkpoint,
    load_checkpoint,
    prune_checkpoints,
    save_checkpoint,
    tuple_state,
)
from legorl.training.ranks import RankedTrainer
from legorl.training.trainer import Trainer
from legorl.trajectory.records import Rollout

log = logging.getLogger(__name__)


async def train(
    cfg: RunConfig, on_step=None, resume: bool = False, progress: PhaseProgress | None = None
) -> list[dict[str, Any]]:
    """Train per ``cfg``. ``resume``: continue ``cfg.run_dir`` from its latest checkpoint
    (:mod:`legorl.training.checkpoint`): weights, optimizer, RNGs, task-order cursor, weight version.

    Between steps the run obeys ``RUN_DIR/control.json`` (:mod:`legorl.loop.control`): it waits while
    paused and ends after a checkpoint when asked to stop; the monitors (``cfg.monitors``) ask for
    either when a threshold with that action is crossed. ``progress`` sees each phase: held-out
    evaluations, every step's rollouts (one by one) and its training."""
    run_dir = Path(cfg.run_dir)
    if resume:  # a damaged store is refused with its file named before anything is trained on it
        from legorl.trajectory.store import open_run

        open_run(run_dir, verify=True).close(compact=False)
    ckpt = latest_checkpoint(run_dir) if resume else None
    if resume and ckpt is None:
        raise ConfigError(f"{run_dir}: no complete checkpoint to resume from")
    tasks = run_tasks(cfg, training=True)  # before the run directory exists: a refused run leaves nothing
    run_dir.mkdir(parents=True, exist_ok=True)
    if not resume:
        (run_dir / "config.json").write_text(cfg.model_dump_json(indent=2))
    # starting or resuming is the person's decision: it lifts a pause or stop a monitor left behind
    write_control(run_dir, "running", "resumed" if resume else "started", by="train")
    asyncio.get_running_loop().set_default_executor(ThreadPoolExecutor(max_workers=64))
    random.seed(cfg.seed)
    torch.manual_seed(cfg.seed)
    rng = random.Random(cfg.seed)
    harness = build_harness(cfg.rollout)
    backend = sandbox_backend(cfg.sandbox)
    canaries = CanaryPool.for_run(cfg, backend)  # grading.canaries: impossible variants mixed into steps
    if cfg.eval.suite is not None and cfg.eval.before and not phase_report_path(run_dir, "before").is_file():
        log.info("held-out evaluation before training: %s", cfg.eval.suite)
        await evaluate_phase(cfg, "before", progress)
        release_free_memory()  # the evaluation's engine is gone; its memory need not stay resident
    metrics_log = MetricsLogger(run_dir, wandb=cfg.wandb, run_config=cfg.model_dump(mode="json"))
    trainer_logprobs = TrainerLogprobs(run_dir)  # the UI's per-token heat map
    phases = progress or NoProgress()

    async def tracked(rollout: Awaitable[Rollout]) -> Rollout:
        done = await rollout
        phases.rollout_done(done)
        return done

    async def collect(executor: RolloutExecutor, step: int, chosen: list[Task], track: Any = None) -> list[Rollout]:
        runs = [executor.rollout(task, step, g) for task in chosen for g in range(cfg.group_size)]
        return await asyncio.gather(*[track(r) for r in runs] if track else runs)

    history: list[dict[str, Any]] = []
    # max_staleness set: the next step's rollouts, started before this step trains, and when they started
    prefetched: tuple[asyncio.Future[list[Rollout]], float] | None = None
    try:
        # The gateway samples exactly as the trainer assumes (rollout=...), whatever the harness asks for.
        async with (
            open_gateway_stack(
                cfg.engine, rollout=cfg.rollout, run_dir=run_dir, host=cfg.executor.gateway_host
            ) as stack,
            contextlib.AsyncExitStack() as scope,
        ):
            engine, store = stack.engine, stack.run_store()
            trainer = build_trainer(cfg, stack)
            if isinstance(trainer, RankedTrainer):
                scope.callback(trainer.close)
            executor = await scope.enter_async_context(open_executor(cfg, stack, backend, harness))
            start = 0
            if ckpt is not None:
                meta = await asyncio.to_thread(load_trainer_checkpoint, ckpt, trainer)
                start = int(meta["loop"]["next_step"])
                rng.setstate(tuple_state(meta["loop"]["task_rng"]))
                keep_metrics_until(run_dir, int(meta["step"]))  # rows of steps the checkpoint does not hold
                prune_checkpoints(run_dir, cfg.checkpoint.keep)  # and a save a kill cut short
                AlertLog(run_dir).keep_until(int(meta["step"]))
                gone = store.abandon_unfinished(
                    int(meta["step"]), f"resumed from the checkpoint of step {meta['step']}"
                )
                if gone:
                    log.warning("resume: %d session(s) past the checkpoint marked abandoned", len(gone))
                await sync_weights(engine, trainer)
            elif cfg.trainer.lora is not None:  # the engine serves the adapter from the first request on
                await sync_weights(engine, trainer)
            write_manifest(
                cfg,
                run_dir,
                model_path=stack.model_path,
                tasks=tasks,
                name="manifest.json" if ckpt is None else resume_manifest_name(run_dir, start),
            )
            monitors = Monitors(run_dir, cfg.monitors, read_metrics(run_dir) if ckpt is not None else [])
            for step in range(start, cfg.steps):
                control = await wait_while_paused(
                    run_dir,
                    on_pause=lambda c: log.warning(
                        "run paused (%s, by %s); resume: legorl control %s resume", c.reason, c.by, run_dir
                    ),
                )
                if control.state == "stop":
                    log.warning("run stopped before step %d (%s, by %s)", step, control.reason, control.by)
                    break
                t0 = time.perf_counter()
                rollouts: list[Rollout]
                if prefetched is None:
                    chosen = rng.sample(tasks, min(cfg.tasks_per_step, len(tasks)))
                    chosen = await canaries.mix_async(chosen, step) if canaries else chosen
                    phases.begin(f"step {step + 1}/{cfg.steps}: rollouts", total=len(chosen) * cfg.group_size)
                    rollouts = await collect(executor, step, chosen, tracked)
                else:  # started while the previous step trained: its time counts from then
                    (pending, t0), prefetched = prefetched, None
                    phases.begin(f"step {step + 1}/{cfg.steps}: rollouts (started during the previous step)")
                    rollouts = await pending
                refilled = await refill_groups(  # DAPO's dynamic sampling (dynamic_sampling_rounds 0: none)
                    rollouts,
                    functools.partial(step_batch, cfg, version=trainer.version),
                    lambda k, used: draw_unused(rng, tasks, k, used),
                    functools.partial(collect, executor, step, track=tracked),
                    target=min(cfg.tasks_per_step, len(tasks)),
                    rounds=cfg.dynamic_sampling_rounds,
                )
                rollouts = refilled.rollouts
                for r in rollouts:  # on disk before anything trains on them
                    store.append_rollout(r)
                t_rollout = time.perf_counter() - t0
                task_rng = rng.getstate()  # a resume from this step's checkpoint draws the next step's tasks
                if cfg.max_staleness is not None and step + 1 < cfg.steps:
                    upcoming = rng.sample(tasks, min(cfg.tasks_per_step, len(tasks)))
                    upcoming = await canaries.mix_async(upcoming, step + 1) if canaries else upcoming
                    prefetched = (asyncio.ensure_future(collect(executor, step + 1, upcoming)), time.perf_counter())
                stale = drop_stale(rollouts, trainer.version, cfg.max_staleness)
                batch = step_batch(cfg, stale.kept)
                version_before = trainer.version
                phases.begin(f"step {step + 1}/{cfg.steps}: training on {len(batch.samples)} samples")
                release_free_memory()  # the engine's batch KV, freed: the step's gradients need the room
                metrics = await asyncio.to_thread(train_step, trainer, stack, batch)
                release_free_memory()  # the step's activations and gradients, before the next rollouts
                record_step_logprobs(trainer_logprobs, trainer, rollouts, step, version_before)
                if metrics["train/updated"]:
                    metrics.update(await sync_weights(engine, trainer))
                metrics.update(rollout_metrics(rollouts))
                metrics.update(canary_metrics(rollouts))  # canary/hack_rate: the canary_hacks monitor reads it
                metrics.update(refilled.metrics())
                metrics.update(
                    {
                        "batch/groups": batch.groups_total,
                        "batch/groups_with_signal": batch.groups_with_signal,
                        "batch/truncated": batch.truncated,
                        "batch/overlong": batch.overlong,
                        "time/rollout_s": t_rollout,
                        "time/step_s": time.perf_counter() - t0,
                        "weight_version": engine.weight_version,
                    }
                )
                metrics.update({f"batch/dropped_{k}": v for k, v in batch.dropped.items()})
                metrics.update(stale.metrics())
                metrics.update({f"executor/{k}": v for k, v in getattr(executor, "stats", {}).items()})
                metrics_log.log(step, metrics)
                acting = []  # alerts whose action pauses or stops the run (stop last: it wins)
                for alert in sorted(monitors.after_step({"step": step, **metrics}), key=lambda a: a.level == "stop"):
                    log.warning("alert [%s] %s: %s", alert.level, alert.what, alert.detail)
                    if alert.level in ("pause", "stop"):
                        acting.append(alert)
                # a paused or stopping run holds a checkpoint of this step (written before it says so), so
                # stopping from a pause and `train --resume` continue here whatever checkpoint.every says
                held = bool(acting) or read_control(run_dir).state != "running"
                every = cfg.checkpoint.every
                if (every and (step + 1) % every == 0) or step == cfg.steps - 1 or held:
                    await asyncio.to_thread(
                        save_trainer_checkpoint,
                        run_dir,
                        step,
                        trainer,
                        {"next_step": step + 1, "task_rng": task_rng},
                        metrics,
                        str(stack.model_path) if stack.model_path else None,
                    )
                    prune_checkpoints(run_dir, cfg.checkpoint.keep)
                for alert in acting:
                    state: RunState = "paused" if alert.level == "pause" else "stop"
                    write_control(run_dir, state, f"{alert.what}: {alert.detail}", by=f"monitor:{alert.monitor}")
                history.append({"step": step, **metrics})
                if on_step is not None:
                    on_step(step, metrics)
            if prefetched is not None:  # stopped with the next step's rollouts running: keep them on disk
                for r in await prefetched[0]:
                    store.append_rollout(r)
                prefetched = None
        # the trainer's weights and optimizer state (3x the model) and the closed engine's model must
        # not stay resident beside the trained model that the held-out evaluation loads next
        del trainer, executor, engine, store, stack
    finally:
        if prefetched is not None:  # an error: the rollouts started early are not waited for
            prefetched[0].cancel()
        metrics_log.close()
        trainer_logprobs.close()
        release_free_memory()
    await asyncio.to_thread(run_reward_curve, run_dir)  # RUN_DIR/reward_curve.png
    finished = latest_checkpoint(run_dir)
    if cfg.eval.suite is not None and cfg.eval.after and finished is not None and finished_all_steps(finished, cfg):
        log.info("held-out evaluation after training: %s", cfg.eval.suite)
        await evaluate_phase(cfg, "after", progress)
    return history


def build_trainer(cfg: RunConfig, stack: GatewayStack) -> Trainer | RankedTrainer:
    """The run's trainer: in this process (``trainer.ranks`` 1), else FSDP2 ranks on Ray."""
    if cfg.trainer.ranks > 1:
        return RankedTrainer(
            cfg.trainer.ranks,
            stack.served_model_path(),
            cfg.trainer,
            cfg.executor,
            Path(cfg.run_dir) / "trainer-weights",
            temperature=cfg.rollout.temperature,
            total_steps=cfg.steps,
            seed=cfg.seed,
            use_gpus=cfg.trainer.rank_device == "gpu",
        )
    return Trainer(
        stack.policy_module(colocate=cfg.engine.colocate_trainer),
        cfg.trainer,
        temperature=cfg.rollout.temperature,
        total_steps=cfg.steps,
        seed=cfg.seed,
    )


def save_trainer_checkpoint(
    run_dir: Path,
    step: int,
    trainer: Trainer | RankedTrainer,
    loop_state: dict[str, Any],
    metrics: dict[str, Any],
    base_model: str | None,
) -> Path:
    """A checkpoint of the trainer, in this process or written by every rank."""
    if isinstance(trainer, RankedTrainer):
        return trainer.save_checkpoint(run_dir, step, loop_state, metrics, base_model)
    return save_checkpoint(run_dir, step, trainer, loop_state, metrics, base_model)


def load_trainer_checkpoint(ckpt: Path, trainer: Trainer | RankedTrainer) -> dict[str, Any]:
    if isinstance(trainer, RankedTrainer):
        return trainer.load_checkpoint(ckpt)
    return load_checkpoint(ckpt, trainer)


def train_step(trainer: Trainer | RankedTrainer, stack: GatewayStack, batch: Batch) -> dict[str, Any]:
    """One trainer step on ``batch`` while the engine generates nothing (a colocated engine serves
    the very weights the step changes). Blocking: run it in a worker thread."""
    with stack.weights_changing():
        return trainer.step(batch.samples, batch.monitor)


def finished_all_steps(checkpoint: Path, cfg: RunConfig) -> bool:
    """Whether ``checkpoint`` is the one written after the run's last step."""
    from legorl.training.checkpoint import checkpoint_step

    return checkpoint_step(checkpoint) == cfg.steps - 1


def resume_manifest_name(run_dir: Path, start: int) -> str:
    """``manifest-resume-<step>.json``; a second resume from the same step gets ``-2``, ``-3``, ... (each kept)."""
    name, n = f"manifest-resume-{start:06d}.json", 1
    while (run_dir / name).exists():
        n += 1
        name = f"manifest-resume-{start:06d}-{n}.json"
    return name


def record_step_logprobs(
    sink: TrainerLogprobs, trainer: Trainer | RankedTrainer, rollouts: list[Rollout], step: int, weight_version: int
) -> None:
    """Store the trainer's view (π_old of this step, under ``weight_version``) of every sample it scored."""
    for r in rollouts:
        for pos, s in enumerate(r.samples):
            lps = trainer.step_logprobs(s)
            if lps is not None:
                sink.record(r.rollout_id, pos, lps, step=step, weight_version=weight_version)


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
        "rollout/duration_p50_s": statistics.median(r.duration_s for r in rollouts) if rollouts else 0.0,
        "rollout/duration_max_s": max((r.duration_s for r in rollouts), default=0.0),
    }
    out.update({f"rollout/status_{k}": v for k, v in status.items()})
    out.update({f"align/{k}": v for k, v in align.items()})
    return out
