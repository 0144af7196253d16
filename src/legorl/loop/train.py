"""The RL loop: :func:`train` on one screen of named stages. Set up (or resume) the run; then each
step: rollouts through the gateway → batch → trainer step → weight sync → metrics → monitors →
checkpoint; then the held-out evaluation."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import random
import statistics
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import torch

from legorl.config import RunConfig
from legorl.errors import ConfigError
from legorl.grading.canaries import CanaryPool, canary_metrics
from legorl.harnesses.base import Harness
from legorl.loop.batch import Batch, step_batch
from legorl.loop.dynamic_sampling import Refill, draw_unused, refill_groups
from legorl.loop.eval import evaluate_phase, phase_report_path
from legorl.loop.executor import RolloutExecutor, open_executor
from legorl.loop.provenance import write_manifest
from legorl.loop.stack import GatewayStack, build_harness, open_gateway_stack, sandbox_backend
from legorl.loop.staleness import StalenessReport, drop_stale
from legorl.loop.weight_sync import sync_weights
from legorl.observe.control import RunState, read_control, wait_while_paused, write_control
from legorl.observe.memory import release_free_memory
from legorl.observe.metrics import MetricsLogger, read_metrics
from legorl.observe.monitors import Alert, AlertLog, Monitors
from legorl.observe.plots import run_reward_curve
from legorl.observe.progress import NoProgress, PhaseProgress
from legorl.observe.token_logprobs import TrainerLogprobs
from legorl.sandbox.base import SandboxBackend
from legorl.tasks.loader import run_tasks
from legorl.tasks.model import Task
from legorl.training.checkpoint import (
    CheckpointRequest,
    checkpoint_step,
    keep_metrics_until,
    latest_checkpoint,
    prune_checkpoints,
    tuple_state,
)
from legorl.training.interface import LoopTrainer
from legorl.training.ranks import RankedTrainer
from legorl.training.trainer import Trainer
from legorl.trajectory.records import Rollout

if TYPE_CHECKING:
    from legorl.trajectory.store import RunStore

log = logging.getLogger(__name__)

OnStep = Callable[[int, dict[str, Any]], object]  # told each finished step and its metrics row


@dataclass
class TrainingRun:
    """What a run's steps share from the first to the last (it outlives the gateway stack)."""

    cfg: RunConfig
    run_dir: Path
    tasks: list[Task]
    rng: random.Random  # the task order: a checkpoint holds its state
    canaries: CanaryPool | None
    phases: PhaseProgress
    metrics_log: MetricsLogger
    trainer_logprobs: TrainerLogprobs  # the UI's per-token heat map
    history: list[dict[str, Any]] = field(default_factory=list)
    # max_staleness set: the next step's rollouts, started before this step trains, and when they started
    prefetched: tuple[asyncio.Future[list[Rollout]], float] | None = None

    def close(self) -> None:
        if self.prefetched is not None:  # an error: the rollouts started early are not waited for
            self.prefetched[0].cancel()
        self.metrics_log.close()
        self.trainer_logprobs.close()
        release_free_memory()


@dataclass
class LoopParts:
    """What the steps drive, alive while the gateway stack is open (:func:`open_parts`)."""

    stack: GatewayStack
    store: RunStore
    trainer: LoopTrainer
    executor: RolloutExecutor
    monitors: Monitors
    start: int  # the first step to run: 0, or the next one after the checkpoint resumed from


async def train(
    cfg: RunConfig, on_step: OnStep | None = None, resume: bool = False, progress: PhaseProgress | None = None
) -> list[dict[str, Any]]:
    """Train per ``cfg``. ``resume``: continue ``cfg.run_dir`` from its latest checkpoint
    (:mod:`legorl.training.checkpoint`): weights, optimizer, RNGs, task-order cursor, weight version.

    Between steps the run obeys ``RUN_DIR/control.json`` (:mod:`legorl.observe.control`): it waits while
    paused and ends after a checkpoint when asked to stop; the monitors (``cfg.monitors``) ask for
    either when a threshold with that action is crossed. ``progress`` sees each phase: held-out
    evaluations, every step's rollouts (one by one) and its training."""
    run_dir = Path(cfg.run_dir)
    ckpt = checkpoint_to_resume(run_dir) if resume else None
    tasks = run_tasks(cfg, training=True)  # before the run directory exists: a refused run leaves nothing
    start_run_dir(cfg, run_dir, resume)
    asyncio.get_running_loop().set_default_executor(ThreadPoolExecutor(max_workers=64))
    rng = seeded_task_order(cfg)
    harness, backend = build_harness(cfg.rollout), sandbox_backend(cfg.sandbox)
    canaries = CanaryPool.for_run(cfg, backend)  # grading.canaries: impossible variants mixed into steps
    await evaluate_held_out(cfg, "before", progress)
    metrics_log = MetricsLogger(run_dir, wandb=cfg.wandb, run_config=cfg.model_dump(mode="json"))
    run = TrainingRun(
        cfg, run_dir, tasks, rng, canaries, progress or NoProgress(), metrics_log, TrainerLogprobs(run_dir)
    )
    try:
        # The gateway samples exactly as the trainer assumes (rollout=...), whatever the harness asks for.
        async with (
            open_gateway_stack(
                cfg.engine, rollout=cfg.rollout, run_dir=run_dir, host=cfg.executor.gateway_host
            ) as stack,
            contextlib.AsyncExitStack() as scope,
        ):
            parts = await open_parts(run, stack, scope, harness, backend, ckpt)
            for step in range(parts.start, cfg.steps):
                if await stop_requested(run_dir, step):
                    break
                metrics = await run_step(run, parts, step)
                run.history.append({"step": step, **metrics})
                if on_step is not None:
                    on_step(step, metrics)
            await keep_prefetched(run, parts.store)
        # the trainer's weights and optimizer state (3x the model) and the closed engine's model must
        # not stay resident beside the trained model that the held-out evaluation loads next
        del parts, stack
    finally:
        run.close()
    await asyncio.to_thread(run_reward_curve, run_dir)  # RUN_DIR/reward_curve.png
    await evaluate_held_out(cfg, "after", progress)
    return run.history


# -- setup and resume ----------------------------------------------------------------------------
def checkpoint_to_resume(run_dir: Path) -> Path:
    """The checkpoint a resume continues from; a damaged run store or none complete is refused."""
    from legorl.trajectory.store import open_run

    # a damaged store is refused with its file named before anything is trained on it
    open_run(run_dir, verify=True).close(compact=False)
    ckpt = latest_checkpoint(run_dir)
    if ckpt is None:
        raise ConfigError(f"{run_dir}: no complete checkpoint to resume from")
    return ckpt


def start_run_dir(cfg: RunConfig, run_dir: Path, resume: bool) -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    if not resume:
        (run_dir / "config.json").write_text(cfg.model_dump_json(indent=2))
    # starting or resuming is the person's decision: it lifts a pause or stop a monitor left behind
    write_control(run_dir, "running", "resumed" if resume else "started", by="train")


def seeded_task_order(cfg: RunConfig) -> random.Random:
    """Seed the global RNGs from ``cfg.seed``; returns the run's task-order RNG, seeded alike."""
    random.seed(cfg.seed)
    torch.manual_seed(cfg.seed)
    return random.Random(cfg.seed)


async def evaluate_held_out(cfg: RunConfig, phase: Literal["before", "after"], progress: PhaseProgress | None) -> None:
    """The held-out evaluation (``cfg.eval``) before training (unless a resumed run already has its
    report) or after it (once the checkpoint of the last step exists)."""
    run_dir = Path(cfg.run_dir)
    if cfg.eval.suite is None:
        return
    if phase == "before":
        due = cfg.eval.before and not phase_report_path(run_dir, "before").is_file()
    else:
        finished = latest_checkpoint(run_dir) if cfg.eval.after else None
        due = finished is not None and finished_all_steps(finished, cfg)
    if due:
        log.info("held-out evaluation %s training: %s", phase, cfg.eval.suite)
        await evaluate_phase(cfg, phase, progress)
        if phase == "before":
            release_free_memory()  # the evaluation's engine is gone; its memory need not stay resident


async def open_parts(
    run: TrainingRun,
    stack: GatewayStack,
    scope: contextlib.AsyncExitStack,
    harness: Harness,
    backend: SandboxBackend,
    ckpt: Path | None,
) -> LoopParts:
    """The trainer (restored from ``ckpt`` on a resume) and the rollout executor, both closed with
    ``scope``; the engine serving the trainer's weights; the run's manifest and monitors."""
    cfg, run_dir = run.cfg, run.run_dir
    store = stack.run_store()
    trainer = build_trainer(cfg, stack)
    scope.callback(trainer.close)
    executor = await scope.enter_async_context(open_executor(cfg, stack, backend, harness))
    start = 0
    if ckpt is not None:
        start = await resume_from(run, trainer, store, ckpt)
        await sync_weights(stack.engine, trainer)
    elif cfg.trainer.lora is not None:  # the engine serves the adapter from the first request on
        await sync_weights(stack.engine, trainer)
    manifest = "manifest.json" if ckpt is None else resume_manifest_name(run_dir, start)
    write_manifest(cfg, run_dir, model_path=stack.model_path, tasks=run.tasks, name=manifest)
    monitors = Monitors(run_dir, cfg.monitors, read_metrics(run_dir) if ckpt is not None else [])
    return LoopParts(stack, store, trainer, executor, monitors, start)


async def resume_from(run: TrainingRun, trainer: LoopTrainer, store: RunStore, ckpt: Path) -> int:
    """Restore the trainer and the task order from ``ckpt`` and set aside what the run wrote past it;
    returns the step to continue with."""
    meta = await asyncio.to_thread(trainer.load_checkpoint, ckpt)
    run.rng.setstate(tuple_state(meta["loop"]["task_rng"]))
    step = int(meta["step"])
    keep_metrics_until(run.run_dir, step)  # rows of steps the checkpoint does not hold
    prune_checkpoints(run.run_dir, run.cfg.checkpoint.keep)  # and a save a kill cut short
    AlertLog(run.run_dir).keep_until(step)
    gone = store.abandon_unfinished(step, f"resumed from the checkpoint of step {meta['step']}")
    if gone:
        log.warning("resume: %d session(s) past the checkpoint marked abandoned", len(gone))
    return int(meta["loop"]["next_step"])


# -- one step ------------------------------------------------------------------------------------
async def stop_requested(run_dir: Path, step: int) -> bool:
    """Wait while the run is paused (``RUN_DIR/control.json``); whether it was asked to stop."""
    control = await wait_while_paused(
        run_dir,
        on_pause=lambda c: log.warning(
            "run paused (%s, by %s); resume: legorl control %s resume", c.reason, c.by, run_dir
        ),
    )
    if control.state == "stop":
        log.warning("run stopped before step %d (%s, by %s)", step, control.reason, control.by)
    return control.state == "stop"


async def run_step(run: TrainingRun, parts: LoopParts, step: int) -> dict[str, Any]:
    """One step: rollouts → batch → trainer step → weight sync → metrics → monitors → checkpoint;
    returns the step's metrics row."""
    refilled, t0 = await step_rollouts(run, parts, step)
    t_rollout = time.perf_counter() - t0
    task_rng = run.rng.getstate()  # a resume from this step's checkpoint draws the next step's tasks
    if run.cfg.max_staleness is not None and step + 1 < run.cfg.steps:
        upcoming = await draw_tasks(run, step + 1)
        run.prefetched = (asyncio.ensure_future(collect(run, parts.executor, step + 1, upcoming)), time.perf_counter())
    stale = drop_stale(refilled.rollouts, parts.trainer.version, run.cfg.max_staleness)
    batch = step_batch(run.cfg, stale.kept)
    metrics = await train_on(run, parts, step, batch, refilled.rollouts)
    metrics.update(step_metrics(refilled, batch, stale, parts, t_rollout, t0))
    run.metrics_log.log(step, metrics)
    acting = acting_alerts(parts.monitors, step, metrics)
    # a paused or stopping run holds a checkpoint of this step (written before it says so), so
    # stopping from a pause and `train --resume` continue here whatever checkpoint.every says
    held = bool(acting) or read_control(run.run_dir).state != "running"
    await checkpoint_if_due(run, parts, step, {"next_step": step + 1, "task_rng": task_rng}, metrics, held)
    for alert in acting:
        state: RunState = "paused" if alert.level == "pause" else "stop"
        write_control(run.run_dir, state, f"{alert.what}: {alert.detail}", by=f"monitor:{alert.monitor}")
    return metrics


async def step_rollouts(run: TrainingRun, parts: LoopParts, step: int) -> tuple[Refill, float]:
    """The step's rollouts, their groups without signal refilled (DAPO's dynamic sampling;
    ``dynamic_sampling_rounds`` 0: none), on disk before anything trains on them; and when they started."""
    cfg = run.cfg
    if run.prefetched is None:
        t0 = time.perf_counter()
        chosen = await draw_tasks(run, step)
        run.phases.begin(f"step {step + 1}/{cfg.steps}: rollouts", total=len(chosen) * cfg.group_size)
        rollouts = await collect(run, parts.executor, step, chosen, track=True)
    else:  # started while the previous step trained: its time counts from then
        (pending, t0), run.prefetched = run.prefetched, None
        run.phases.begin(f"step {step + 1}/{cfg.steps}: rollouts (started during the previous step)")
        rollouts = await pending
    refilled = await refill_groups(
        rollouts,
        functools.partial(step_batch, cfg, version=parts.trainer.version),
        lambda k, used: draw_unused(run.rng, run.tasks, k, used),
        functools.partial(collect, run, parts.executor, step, track=True),
        target=min(cfg.tasks_per_step, len(run.tasks)),
        rounds=cfg.dynamic_sampling_rounds,
    )
    for r in refilled.rollouts:  # on disk before anything trains on them
        parts.store.append_rollout(r)
    return refilled, t0


async def draw_tasks(run: TrainingRun, step: int) -> list[Task]:
    """The tasks of ``step`` from the run's task order, canaries mixed in."""
    chosen = run.rng.sample(run.tasks, min(run.cfg.tasks_per_step, len(run.tasks)))
    return await run.canaries.mix_async(chosen, step) if run.canaries else chosen


async def collect(
    run: TrainingRun, executor: RolloutExecutor, step: int, chosen: list[Task], track: bool = False
) -> list[Rollout]:
    """``group_size`` rollouts of each task, at once; ``track``: each told to the progress display as it ends."""
    runs = [executor.rollout(task, step, g) for task in chosen for g in range(run.cfg.group_size)]
    return list(await asyncio.gather(*[tracked(run.phases, r) for r in runs] if track else runs))


async def tracked(phases: PhaseProgress, rollout: Awaitable[Rollout]) -> Rollout:
    done = await rollout
    phases.rollout_done(done)
    return done


async def keep_prefetched(run: TrainingRun, store: RunStore) -> None:
    """Stopped with the next step's rollouts running: they end and stay on disk."""
    if run.prefetched is not None:
        for r in await run.prefetched[0]:
            store.append_rollout(r)
        run.prefetched = None


async def train_on(
    run: TrainingRun, parts: LoopParts, step: int, batch: Batch, rollouts: list[Rollout]
) -> dict[str, Any]:
    """The trainer's step on ``batch``, its view of the samples recorded, the new weights into the
    engine; returns the training metrics."""
    trainer = parts.trainer
    version_before = trainer.version
    run.phases.begin(f"step {step + 1}/{run.cfg.steps}: training on {len(batch.samples)} samples")
    release_free_memory()  # the engine's batch KV, freed: the step's gradients need the room
    metrics = await asyncio.to_thread(train_step, trainer, parts.stack, batch)
    release_free_memory()  # the step's activations and gradients, before the next rollouts
    record_step_logprobs(run.trainer_logprobs, trainer, rollouts, step, version_before)
    if metrics["train/updated"]:
        metrics.update(await sync_weights(parts.stack.engine, trainer))
    return metrics


def step_metrics(
    refilled: Refill, batch: Batch, stale: StalenessReport, parts: LoopParts, t_rollout: float, t0: float
) -> dict[str, Any]:
    """The step's metrics besides the trainer's: rollouts, canaries, refills, batch, timing, staleness, executor."""
    rollouts = refilled.rollouts
    return {
        **rollout_metrics(rollouts),
        **canary_metrics(rollouts),  # canary/hack_rate: the canary_hacks monitor reads it
        **refilled.metrics(),
        "batch/groups": batch.groups_total,
        "batch/groups_with_signal": batch.groups_with_signal,
        "batch/truncated": batch.truncated,
        "batch/overlong": batch.overlong,
        "time/rollout_s": t_rollout,
        "time/step_s": time.perf_counter() - t0,
        "weight_version": parts.stack.engine.weight_version,
        **{f"batch/dropped_{k}": v for k, v in batch.dropped.items()},
        **stale.metrics(),
        **{f"executor/{k}": v for k, v in getattr(parts.executor, "stats", {}).items()},
    }


def acting_alerts(monitors: Monitors, step: int, metrics: dict[str, Any]) -> list[Alert]:
    """The monitors' alerts on the step, logged; returns those whose action pauses or stops the run
    (stop last: it wins)."""
    acting = []
    for alert in sorted(monitors.after_step({"step": step, **metrics}), key=lambda a: a.level == "stop"):
        log.warning("alert [%s] %s: %s", alert.level, alert.what, alert.detail)
        if alert.level in ("pause", "stop"):
            acting.append(alert)
    return acting


async def checkpoint_if_due(
    run: TrainingRun, parts: LoopParts, step: int, loop_state: dict[str, Any], metrics: dict[str, Any], held: bool
) -> None:
    """A checkpoint every ``checkpoint.every`` steps, after the last one, and whenever the run is held."""
    cfg, stack = run.cfg, parts.stack
    every = cfg.checkpoint.every
    if (every and (step + 1) % every == 0) or step == cfg.steps - 1 or held:
        base_model = str(stack.model_path) if stack.model_path else None
        request = CheckpointRequest(run.run_dir, step, loop_state, metrics, base_model)
        await asyncio.to_thread(parts.trainer.save_checkpoint, request)
        prune_checkpoints(run.run_dir, cfg.checkpoint.keep)


def build_trainer(cfg: RunConfig, stack: GatewayStack) -> LoopTrainer:
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


def train_step(trainer: LoopTrainer, stack: GatewayStack, batch: Batch) -> dict[str, Any]:
    """One trainer step on ``batch`` while the engine generates nothing (a colocated engine serves
    the very weights the step changes). Blocking: run it in a worker thread."""
    with stack.weights_changing():
        return trainer.step(batch.samples, batch.monitor)


def finished_all_steps(checkpoint: Path, cfg: RunConfig) -> bool:
    """Whether ``checkpoint`` is the one written after the run's last step."""
    return checkpoint_step(checkpoint) == cfg.steps - 1


def resume_manifest_name(run_dir: Path, start: int) -> str:
    """``manifest-resume-<step>.json``; a second resume from the same step gets ``-2``, ``-3``, ... (each kept)."""
    name, n = f"manifest-resume-{start:06d}.json", 1
    while (run_dir / name).exists():
        n += 1
        name = f"manifest-resume-{start:06d}-{n}.json"
    return name


def record_step_logprobs(
    sink: TrainerLogprobs, trainer: LoopTrainer, rollouts: list[Rollout], step: int, weight_version: int
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
