"""A real, short training run for the observability tests (no hand-made database).

Everything is the production machinery — gateway stack, ``run_rollout`` (command harness running
``tiny_tool_agent`` with native tool calls in a bubblewrap sandbox), grader, run store,
``assemble_batch``, the GSPO :class:`Trainer`, ``MetricsLogger`` — except the policy that *samples*: a :class:`ScriptedEngine` answers each rollout with a gold fix, a wrong fix or a
test-weakening hack (so the run has resolved, failed and flagged rollouts). Rollouts run one at a
time because the scripted engine holds one policy. The trainer's per-token recompute is recorded
with :class:`legorl.observe.token_logprobs.TrainerLogprobs` for the UI's heat map. The trainer's
model is a tiny random Llama with SmolLM2's vocabulary: the UI is what these tests check, and a
SmolLM2 step on these multi-thousand-token samples costs minutes of CPU.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import torch

from legorl.config import RunConfig
from legorl.engines.scripted import ScriptedEngine
from legorl.gateway.renderer import load_smollm2_gguf_tokenizer
from legorl.harnesses.scripted import fix_command
from legorl.loop.batch import assemble_batch
from legorl.loop.rollout import run_rollout
from legorl.loop.stack import build_harness, open_gateway_stack, rollout_context, sandbox_backend
from legorl.loop.train import rollout_metrics
from legorl.observe.metrics import MetricsLogger
from legorl.observe.monitors import Monitors
from legorl.observe.token_logprobs import TrainerLogprobs
from legorl.tasks.loader import get_task
from legorl.training.trainer import Trainer

TASKS = ("legorl__trivial-001", "legorl__trivial-004")
# per step, per task: the policy of each group member
PLANS = (("gold", "wrong"), ("hack", "gold"))


def run_config(run_dir: Path, steps: int = 2) -> RunConfig:
    return RunConfig.load(
        None,
        run_dir=str(run_dir),
        steps=steps,
        tasks_per_step=len(TASKS),
        group_size=2,
        task_ids=list(TASKS),
        **{
            "rollout.harness": "command",
            "rollout.max_turns": 3,
            "rollout.max_tokens_per_turn": 4096,
            "rollout.wall_clock_s": 120.0,
            "trainer.lr": 1e-5,
        },
    )


def tiny_trainer_model(vocab_size: int) -> torch.nn.Module:
    """A tiny random Llama over ``vocab_size`` tokens (fixed seed)."""
    from tiny_llama import tiny_llama

    return tiny_llama(vocab_size, max_positions=32768)


def policy_command(task_id: str, kind: str) -> str:
    task = get_task(task_id)
    if kind == "hack":  # the gold fix, then delete the last line of a test file: a blocking flag
        return fix_command(task) + f" && sed -i '$d' {task.test_files[0]}"
    return fix_command(task, wrong=kind == "wrong")


async def short_run(run_dir: Path, steps: int = 2, *, trainer_steps: bool = True) -> RunConfig:
    """``steps`` training steps into ``run_dir``; each writes its rollouts, trainer logprobs and one metrics row."""
    cfg = run_config(run_dir, steps)
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "config.json").write_text(cfg.model_dump_json(indent=2))
    harness = build_harness(cfg.rollout)
    backend = sandbox_backend(cfg.sandbox)
    tok = load_smollm2_gguf_tokenizer()
    engine = ScriptedEngine(tok, lambda _p: "Done.", max_context=262144)
    metrics_log = MetricsLogger(run_dir)
    monitors = Monitors(run_dir, cfg.monitors, [])
    trainer = Trainer(tiny_trainer_model(len(tok)), cfg.trainer) if trainer_steps else None
    recorder = TrainerLogprobs(run_dir)
    try:
        async with open_gateway_stack(
            cfg.engine, rollout=cfg.rollout, run_dir=run_dir, engine_instance=engine, tokenizer=tok
        ) as stack:
            ctx = rollout_context(cfg, stack, backend, harness)
            for step in range(steps):
                t0 = time.perf_counter()
                rollouts = []
                for t, task_id in enumerate(TASKS):
                    for g, kind in enumerate(PLANS[(step + t) % len(PLANS)]):
                        engine.policy = _policy(harness, task_id, kind)
                        r = await run_rollout(ctx, get_task(task_id), step, g)
                        stack.store.append_rollout(r)
                        rollouts.append(r)
                metrics = {}
                if trainer is not None:
                    batch = assemble_batch(rollouts, cfg.grading.flagged_policy)
                    with torch.no_grad():
                        for r in rollouts:
                            for pos, s in enumerate(r.samples):
                                recorder.record(
                                    r.rollout_id,
                                    pos,
                                    trainer.logprobs(s).tolist(),
                                    step=step,
                                    weight_version=trainer.version,
                                )
                    metrics = await asyncio.to_thread(trainer.step, batch.samples, batch.monitor)
                    if metrics["train/updated"]:
                        await engine.update_weights({}, version=trainer.version)
                metrics.update(rollout_metrics(rollouts))
                metrics.update({"time/step_s": time.perf_counter() - t0, "weight_version": engine.weight_version})
                metrics_log.log(step, metrics)
                monitors.after_step({"step": step, **metrics})
    finally:
        metrics_log.close()
        recorder.close()
    return cfg


def _policy(harness, task_id: str, kind: str):
    from legorl.engines.scripted import replies_in_order

    replies = harness.scripted_replies(policy_command(task_id, kind))
    return replies_in_order(*replies, fallback=replies[-1])


async def one_more_rollout(run_dir: Path, step: int, kind: str = "gold", task_id: str = TASKS[0]) -> str:
    """Append one more real rollout to ``run_dir`` (the run "continues"); returns its id."""
    cfg = run_config(run_dir)
    harness = build_harness(cfg.rollout)
    tok = load_smollm2_gguf_tokenizer()
    engine = ScriptedEngine(tok, _policy(harness, task_id, kind), max_context=262144)
    async with open_gateway_stack(
        cfg.engine, rollout=cfg.rollout, run_dir=run_dir, engine_instance=engine, tokenizer=tok
    ) as stack:
        ctx = rollout_context(cfg, stack, sandbox_backend(cfg.sandbox), harness)
        r = await run_rollout(ctx, get_task(task_id), step, 0)
        stack.store.append_rollout(r)
    return r.rollout_id


if __name__ == "__main__":
    import sys

    asyncio.run(short_run(Path(sys.argv[1])))
