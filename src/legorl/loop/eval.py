"""``legorl eval``: N graded rollouts per task of any harness, engine and suite, then pass@k.

The rollouts run exactly as in training (:mod:`legorl.loop.stack`, :func:`run_rollout`: the
config's harness, budget, sandbox and grading), at most ``concurrency`` at a time, and are stored
in ``cfg.run_dir`` (turns and rollouts, as a training run's). Engines: ``embedded`` (the config's
model, or ``checkpoint``: a training checkpoint exported to a Hugging Face directory first) and
``scripted-gold`` / ``scripted-wrong`` (one ScriptedEngine per task, see :mod:`legorl.loop.single`).
Statistics: :mod:`legorl.loop.eval_stats`.
"""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from legorl.config import RunConfig
from legorl.loop.eval_stats import EvalReport, Outcome, build_report
from legorl.loop.rollout import RolloutContext, run_rollout
from legorl.loop.stack import build_harness, open_gateway_stack, rollout_context, sandbox_backend
from legorl.observe.progress import NoProgress, PhaseProgress
from legorl.tasks.loader import run_tasks
from legorl.trajectory.records import Rollout

ENGINES = ("embedded", "scripted-gold", "scripted-wrong")
PHASES = ("before", "after")


async def _run_all(
    ctx: RolloutContext,
    tasks: Sequence[Any],
    samples: int,
    sem: asyncio.Semaphore,
    store: Any,
    progress: PhaseProgress,
) -> list[Rollout]:
    async def one(task: Any, g: int) -> Rollout:
        async with sem:
            r = await run_rollout(ctx, task, 0, g)
        if store is not None:
            store.append_rollout(r)
        progress.rollout_done(r)
        return r

    return list(await asyncio.gather(*[one(t, g) for t in tasks for g in range(samples)]))


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
) -> EvalReport:
    """``samples`` graded rollouts of every task of ``cfg.suite`` (``cfg.task_ids``), then the
    report; ``progress`` sees one phase, ``label``, of that many rollouts."""
    if engine not in ENGINES:
        raise ValueError(f"unknown engine {engine!r}; known: {', '.join(ENGINES)}")
    if checkpoint is not None and engine != "embedded":
        raise ValueError("--checkpoint evaluates trained weights: use the embedded engine")
    run_dir = Path(cfg.run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    tasks = run_tasks(cfg, training=False)
    harness = build_harness(cfg.rollout)
    backend = sandbox_backend(cfg.sandbox)
    sem = asyncio.Semaphore(max(1, concurrency))
    progress = progress or NoProgress()
    progress.begin(f"{label}: {cfg.suite}", total=len(tasks) * samples)
    rollouts: list[Rollout] = []
    meta: dict[str, Any] = {
        "suite": cfg.suite,
        "harness": cfg.rollout.harness,
        "engine": engine,
        "model": cfg.engine.model,
        "samples_per_task": samples,
        "run_dir": str(run_dir),
    }
    with tempfile.TemporaryDirectory(prefix="legorl-eval-") as tmp:
        engine_cfg = cfg.engine
        if checkpoint is not None:
            from legorl.training.checkpoint import export_hf, latest_checkpoint

            ckpt = latest_checkpoint(checkpoint) if (checkpoint / "checkpoints").is_dir() else checkpoint
            if ckpt is None:
                raise ValueError(f"{checkpoint}: no complete checkpoint")
            exported = await asyncio.to_thread(export_hf, ckpt, Path(tmp) / "model")
            engine_cfg = cfg.engine.model_copy(update={"model": str(exported)})
            meta["checkpoint"] = str(ckpt)
        if engine == "embedded":
            async with open_gateway_stack(engine_cfg, rollout=cfg.rollout, run_dir=run_dir) as stack:
                ctx = rollout_context(cfg, stack, backend, harness)
                rollouts = await _run_all(ctx, tasks, samples, sem, stack.store, progress)
        else:
            from legorl.engines.scripted import ScriptedEngine
            from legorl.gateway.renderer import load_smollm2_gguf_tokenizer
            from legorl.harnesses.scripted import gold_policy

            tok = load_smollm2_gguf_tokenizer()
            for task in tasks:  # a scripted policy knows one task's fix
                scripted = ScriptedEngine(
                    tok, gold_policy(harness, task, wrong=engine == "scripted-wrong"), max_context=262144
                )
                async with open_gateway_stack(
                    engine_cfg, rollout=cfg.rollout, run_dir=run_dir, engine_instance=scripted, tokenizer=tok
                ) as stack:
                    ctx = rollout_context(cfg, stack, backend, harness)
                    rollouts += await _run_all(ctx, [task], samples, sem, stack.store, progress)
    outcomes = [Outcome(r.task_id, r.status, r.reward) for r in rollouts]
    return build_report(outcomes, ks, seed=cfg.seed, meta=meta)


def phase_report_path(run_dir: Path, phase: str) -> Path:
    """Where ``legorl train`` writes its held-out evaluation of ``phase`` (before / after)."""
    return Path(run_dir) / "eval" / f"{phase}.json"


async def evaluate_phase(cfg: RunConfig, phase: str, progress: PhaseProgress | None = None) -> EvalReport:
    """The run config's ``eval`` section for ``phase``: ``before`` scores the initial weights,
    ``after`` the run's latest checkpoint. Rollouts go to RUN_DIR/eval/<phase>/, the report to
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
        checkpoint=run_dir if phase == "after" else None,
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
