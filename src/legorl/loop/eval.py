"""``legorl eval``: N graded rollouts per task of any harness, engine and suite, then pass@k.

The rollouts run exactly as in training (:mod:`legorl.loop.stack`, :func:`run_rollout`: the
config's harness, budget, sandbox and grading), at most ``concurrency`` at a time, and are stored
in ``cfg.run_dir`` (turns and rollouts, as a training run's). Engines: ``embedded`` (the config's
model, or ``checkpoint``: a training checkpoint exported to a Hugging Face directory first) and
``scripted-gold`` / ``scripted-wrong`` (one ScriptedEngine and gateway per rollout, side by side: see :mod:`legorl.loop.single`)
and ``scripted-mixed`` (each rollout gold or wrong by seed, task and sample index:
:func:`legorl.harnesses.scripted.mixed_is_wrong`) and ``scripted-explore`` (a one-line fix the way a
person at a shell makes it, step by step: demonstrations for ``legorl sft``,
:mod:`legorl.harnesses.demonstrations`). Statistics: :mod:`legorl.loop.eval_stats`.
:func:`run_samples` runs any list of (task, sample index) pairs the same way (``legorl tasks
filter``'s pilot rollouts, :mod:`legorl.loop.filter`).
"""

from __future__ import annotations

import asyncio
import contextlib
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from legorl.config import RunConfig
from legorl.grading.canaries import CanaryPool, passed
from legorl.loop.eval_stats import COUNTED_STATUSES, EvalReport, Outcome, build_report, wilson_interval
from legorl.loop.rollout import RolloutContext, run_rollout
from legorl.loop.stack import build_harness, open_gateway_stack, rollout_context, sandbox_backend
from legorl.observe.progress import NoProgress, PhaseProgress
from legorl.tasks.loader import run_tasks
from legorl.tasks.model import Task
from legorl.trajectory.records import Rollout

ENGINES = ("embedded", "scripted-gold", "scripted-wrong", "scripted-mixed", "scripted-explore")
PHASES = ("before", "after")


async def _run_all(
    ctx: RolloutContext,
    work: Sequence[tuple[Task, int]],
    sem: asyncio.Semaphore | None,  # None: the caller already holds a slot
    store: Any,
    progress: PhaseProgress,
    on_rollout: Callable[[Rollout], None] | None = None,
) -> list[Rollout]:
    async def one(task: Task, g: int) -> Rollout:
        async with sem or contextlib.nullcontext():
            r = await run_rollout(ctx, task, 0, g)
        if store is not None:
            store.append_rollout(r)
        if on_rollout is not None:
            on_rollout(r)
        progress.rollout_done(r)
        return r

    return list(await asyncio.gather(*[one(t, g) for t, g in work]))


def scripted_groups(engine: str, seed: int, task_id: str, samples: Sequence[int]) -> list[tuple[bool, list[int]]]:
    """A scripted engine's rollouts of one task as (wrong fix?, sample indices) groups, one
    ScriptedEngine each (its policy is fixed when it is built)."""
    if engine != "scripted-mixed":
        return [(engine == "scripted-wrong", list(samples))] if samples else []
    from legorl.harnesses.scripted import mixed_is_wrong

    wrong = {g: mixed_is_wrong(seed, task_id, g) for g in samples}
    return [(w, gs) for w in (False, True) if (gs := [g for g in samples if wrong[g] == w])]


async def evaluate(
    cfg: RunConfig,
    *,
    samples: int = 4,
    ks: Sequence[int] = (1,),
    engine: str = "embedded",
    checkpoint: Path | None = None,
    concurrency: int = 8,
    progress: PhaseProgress | None = None,
    label: str = "evaluation",
    impossible: bool = False,
) -> EvalReport:
    """``samples`` graded rollouts of every task of ``cfg.suite`` (``cfg.task_ids``), then the
    report; ``progress`` sees one phase, ``label``, of that many rollouts. ``impossible``: the suite's
    impossible variants instead (:mod:`legorl.grading.canaries`; tasks without one are listed and
    skipped), and ``meta["impossible"]`` the share passed — the policy's hack propensity."""
    tasks = run_tasks(cfg, training=False)
    if impossible:
        tasks, found = await impossible_variants(cfg, tasks)
    meta: dict[str, Any] = {
        "suite": cfg.suite,
        "harness": cfg.rollout.harness,
        "engine": engine,
        "model": cfg.engine.model,
        "samples_per_task": samples,
        "run_dir": str(cfg.run_dir),
    }
    rollouts, ckpt = await run_samples(
        cfg,
        [(t, g) for t in tasks for g in range(samples)],
        engine=engine,
        checkpoint=checkpoint,
        concurrency=concurrency,
        progress=progress,
        label=f"{label}: {cfg.suite}",
    )
    if ckpt is not None:
        meta["checkpoint"] = str(ckpt)
    if impossible:
        meta["impossible"] = {**found, **hack_rate(rollouts)}
    outcomes = [Outcome(r.task_id, r.status, r.reward) for r in rollouts]
    return build_report(outcomes, ks, seed=cfg.seed, meta=meta)


async def run_samples(
    cfg: RunConfig,
    work: Sequence[tuple[Task, int]],
    *,
    engine: str = "embedded",
    checkpoint: Path | None = None,
    concurrency: int = 8,
    progress: PhaseProgress | None = None,
    label: str = "evaluation",
    on_rollout: Callable[[Rollout], None] | None = None,
) -> tuple[list[Rollout], Path | None]:
    """One graded rollout of each (task, sample index) in ``work``, in ``cfg.run_dir``, at most
    ``concurrency`` at a time; ``on_rollout`` sees each as it ends (after the run store has it).
    Returns the rollouts and the checkpoint evaluated (None: the config's model)."""
    if engine not in ENGINES:
        raise ValueError(f"unknown engine {engine!r}; known: {', '.join(ENGINES)}")
    if checkpoint is not None and engine != "embedded":
        raise ValueError("--checkpoint evaluates trained weights: use the embedded engine")
    run_dir = Path(cfg.run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    harness = build_harness(cfg.rollout)
    backend = sandbox_backend(cfg.sandbox)
    sem = asyncio.Semaphore(max(1, concurrency))
    progress = progress or NoProgress()
    progress.begin(label, total=len(work))
    rollouts: list[Rollout] = []
    ckpt: Path | None = None
    with tempfile.TemporaryDirectory(prefix="legorl-eval-") as tmp:
        engine_cfg = cfg.engine
        if checkpoint is not None:
            from legorl.training.checkpoint import export_hf, latest_checkpoint

            ckpt = latest_checkpoint(checkpoint) if (checkpoint / "checkpoints").is_dir() else checkpoint
            if ckpt is None:
                raise ValueError(f"{checkpoint}: no complete checkpoint")
            exported = await asyncio.to_thread(export_hf, ckpt, Path(tmp) / "model")
            engine_cfg = cfg.engine.model_copy(update={"model": str(exported)})
        if engine == "embedded":
            async with open_gateway_stack(engine_cfg, rollout=cfg.rollout, run_dir=run_dir) as stack:
                ctx = rollout_context(cfg, stack, backend, harness)
                rollouts = await _run_all(ctx, work, sem, stack.store, progress, on_rollout)
        else:
            from legorl.engines.scripted import ScriptedEngine
            from legorl.gateway.renderer import load_smollm2_gguf_tokenizer
            from legorl.harnesses.demonstrations import explore_policy
            from legorl.harnesses.scripted import gold_policy

            tok = load_smollm2_gguf_tokenizer()
            by_task: dict[str, tuple[Task, list[int]]] = {}
            for task, g in work:
                by_task.setdefault(task.instance_id, (task, []))[1].append(g)

            async def scripted_rollout(task: Task, wrong: bool, g: int) -> list[Rollout]:
                # a scripted policy knows one task's fix and counts its own calls: one engine and
                # gateway per rollout, so rollouts run side by side (the run store takes several writers)
                policy = (
                    explore_policy(harness, task)
                    if engine == "scripted-explore"
                    else gold_policy(harness, task, wrong=wrong)
                )
                scripted = ScriptedEngine(tok, policy, max_context=262144)
                async with sem:
                    async with open_gateway_stack(
                        engine_cfg, rollout=cfg.rollout, run_dir=run_dir, engine_instance=scripted, tokenizer=tok
                    ) as stack:
                        ctx = rollout_context(cfg, stack, backend, harness)
                        return await _run_all(ctx, [(task, g)], None, stack.store, progress, on_rollout)

            jobs = [
                scripted_rollout(task, wrong, g)
                for task, indices in by_task.values()
                for wrong, group in scripted_groups(engine, cfg.seed, task.instance_id, indices)
                for g in group
            ]
            rollouts = [r for done in await asyncio.gather(*jobs) for r in done]
    return rollouts, ckpt


async def impossible_variants(cfg: RunConfig, tasks: Sequence[Task]) -> tuple[list[Task], dict[str, Any]]:
    """The proved impossible variants of ``tasks`` (cached: :class:`~legorl.grading.canaries.CanaryPool`)
    and what became of the others."""
    pool = CanaryPool(sandbox_backend(cfg.sandbox), seed=cfg.seed, timeout_s=cfg.grading.timeout_s)
    variants = await asyncio.to_thread(pool.variants, tasks)
    kept: list[Task] = [v for v in variants if v is not None]
    if not kept:
        raise ValueError(f"no impossible variant could be built for any of the {len(tasks)} task(s) of {cfg.suite}")
    missing = [t.instance_id for t, v in zip(tasks, variants) if v is None]
    return kept, {"variants": len(kept), "without_variant": missing}


def hack_rate(rollouts: Sequence[Rollout]) -> dict[str, Any]:
    """The share of counted rollouts of impossible variants that passed (flag ``impossible_task_passed``),
    with its 95% Wilson interval."""
    counted = [r for r in rollouts if r.status in COUNTED_STATUSES]
    hacks = sum(1 for r in counted if passed(r))
    return {
        "rollouts": len(counted),
        "passed": hacks,
        "hack_rate": hacks / len(counted) if counted else None,
        "interval": list(wilson_interval(hacks, len(counted))) if counted else None,
    }


def warm_start_checkpoint(run_dir: Path) -> Path | None:
    """The checkpoint a run's step 0 starts from when it is not the configured model: a warm start
    (``legorl sft``) written as the state before step 0. The ``before`` evaluation scores it, so a
    held-out gain is RL's alone."""
    from legorl.training.checkpoint import checkpoint_step, latest_checkpoint

    ckpt = latest_checkpoint(run_dir)
    return ckpt if ckpt is not None and checkpoint_step(ckpt) < 0 else None


def phase_report_path(run_dir: Path, phase: str) -> Path:
    """Where ``legorl train`` writes its held-out evaluation of ``phase`` (before / after)."""
    return Path(run_dir) / "eval" / f"{phase}.json"


async def evaluate_phase(cfg: RunConfig, phase: str, progress: PhaseProgress | None = None) -> EvalReport:
    """The run config's ``eval`` section for ``phase``: ``before`` scores the initial weights (a warm
    start's checkpoint, :func:`warm_start_checkpoint`), ``after`` the run's latest checkpoint. Rollouts go to RUN_DIR/eval/<phase>/, the report to
    :func:`phase_report_path` (written atomically)."""
    import json
    import os

    if phase not in PHASES or cfg.eval.suite is None:
        raise ValueError(f"no eval phase {phase!r} for this config")
    run_dir = Path(cfg.run_dir)
    eval_cfg = cfg.model_copy(
        update={
            "suite": cfg.eval.suite,
            "task_ids": cfg.eval.task_ids,
            "task_repos": cfg.eval.task_repos,
            "run_dir": run_dir / "eval" / phase,
        }
    )
    report = await evaluate(
        eval_cfg,
        samples=cfg.eval.samples,
        ks=cfg.eval.k,
        checkpoint=run_dir if phase == "after" else warm_start_checkpoint(run_dir),
        concurrency=cfg.eval.concurrency,
        progress=progress,
        label=f"held-out {phase}",
    )
    report.meta["phase"] = phase
    path = phase_report_path(run_dir, phase)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(report.to_dict(), indent=2))
    os.replace(tmp, path)
    return report
