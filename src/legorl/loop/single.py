"""One rollout of any registered harness on one task, outside a training run (``legorl rollout``).

It runs what a :class:`~legorl.config.RunConfig` says (harness and budget from ``rollout``, the
sandbox backend from ``sandbox``, grading from ``grading``, the model from ``engine``), through the
same builders as the training loop (:mod:`legorl.loop.stack`). Engines: ``embedded`` (the model of
``cfg.engine``), ``scripted-gold`` / ``scripted-wrong`` (a ScriptedEngine whose policy makes the
harness apply the gold fix, or a wrong one: see :mod:`legorl.harnesses.scripted`), ``scripted-explore``
(the fix made step by step at a shell: :mod:`legorl.harnesses.demonstrations`). Everything else
is real: harness program in a network-less sandbox, gateway, grader. Turns, the rollout and the
resolved config go to ``cfg.run_dir``; the host-side strace of the harness to ``run_dir/traces``.
"""

from __future__ import annotations

import tempfile
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from legorl.config import RunConfig
from legorl.grading import strace
from legorl.loop.rollout import GATEWAY_PORT_IN_SANDBOX, run_rollout
from legorl.loop.stack import build_harness, open_gateway_stack, rollout_context, sandbox_backend
from legorl.sandbox.base import SandboxBackend
from legorl.tasks.loader import get_task
from legorl.trajectory.records import Rollout

ENGINES = ("embedded", "scripted-gold", "scripted-wrong", "scripted-explore")
# One rollout without a config file: more agent steps and a shorter limit than RunConfig's training
# defaults; a scripted "model" also gets room for its longest reply (a whole file, a base64 fix).
SINGLE_ROLLOUT_DEFAULTS: dict[str, object] = {"rollout.max_turns": 6, "rollout.wall_clock_s": 600.0}
SCRIPTED_DEFAULTS: dict[str, object] = {"rollout.max_tokens_per_turn": 4096}


def single_rollout_config(
    config: Path | str | None = None, overrides: Mapping[str, object] | None = None, *, engine: str = "scripted-gold"
) -> RunConfig:
    """The RunConfig ``legorl rollout`` runs: the config file as written (without one:
    SINGLE_ROLLOUT_DEFAULTS, and SCRIPTED_DEFAULTS for a scripted engine), then ``overrides``
    (dotted keys; None values are skipped). ``run_dir``: the overrides', else the file's when it
    names one, else a fresh temporary directory (never RunConfig's default, a training run's)."""
    base: dict[str, object] = {}
    if config is None:
        base = {**SINGLE_ROLLOUT_DEFAULTS, **(SCRIPTED_DEFAULTS if engine != "embedded" else {})}
    given = {k: v for k, v in (overrides or {}).items() if v is not None}  # None: not given, base stands
    cfg = RunConfig.load(Path(config) if config is not None else None, **{**base, **given})
    if "run_dir" not in cfg.model_fields_set:
        cfg = cfg.model_copy(update={"run_dir": Path(tempfile.mkdtemp(prefix="legorl-rollout-"))})
    return cfg


@dataclass
class SingleRollout:
    rollout: Rollout
    connects: list[str] = field(default_factory=list)  # every connect() the sandbox made (strace)
    trace_path: Path | None = None
    prompts: list[str] = field(default_factory=list)  # scripted engines: every decoded prompt
    run_dir: Path | None = None

    def summary(self) -> dict[str, Any]:
        r = self.rollout
        align = Counter(e.kind for s in r.samples for e in s.alignment_events)
        return {
            "rollout_id": r.rollout_id,
            "harness": r.harness,
            "task": r.task_id,
            "status": r.status,
            "cause": r.cause,
            "reward": r.reward,
            "turns": sum(len(s.turn_indices) for s in r.samples),
            "samples": len(r.samples),
            "alignment": dict(align),
            "flags": r.flags,
            "harness_exit_code": r.harness_exit_code,
            "duration_s": round(r.duration_s, 2),
            "connects": sorted(set(self.connects)),
            "foreign_connects": foreign_connects(self.connects),
            "run_dir": str(self.run_dir) if self.run_dir else None,
        }


def foreign_connects(connects: list[str], port: int = GATEWAY_PORT_IN_SANDBOX) -> list[str]:
    """Connects to anything but the gateway (a loopback address at ``port`` inside) or a Unix socket."""
    return strace.foreign_connects(connects, port)


async def rollout_once(
    cfg: RunConfig, task_id: str, *, engine: str = "scripted-gold", backend: SandboxBackend | None = None
) -> SingleRollout:
    """One rollout of ``cfg.rollout.harness`` on ``task_id``. ``backend``: a sandbox backend other
    than the one ``cfg.sandbox`` describes (benchmarks with a private image cache)."""
    if engine not in ENGINES:
        raise ValueError(f"unknown engine {engine!r}; known: {', '.join(ENGINES)}")
    harness = build_harness(cfg.rollout)
    task = get_task(task_id)
    run_dir = Path(cfg.run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "config.json").write_text(cfg.model_dump_json(indent=2))
    backend = backend or sandbox_backend(cfg.sandbox)
    scripted = tok = None
    if engine != "embedded":
        from legorl.engines.scripted import ScriptedEngine
        from legorl.gateway.renderer import load_smollm2_gguf_tokenizer
        from legorl.harnesses.demonstrations import explore_policy
        from legorl.harnesses.scripted import gold_policy

        tok = load_smollm2_gguf_tokenizer()
        # a scripted "model" may need a long context: the harness's own prompts are not ours to cut
        policy = (
            explore_policy(harness, task)
            if engine == "scripted-explore"
            else gold_policy(harness, task, wrong=engine == "scripted-wrong")
        )
        scripted = ScriptedEngine(tok, policy, max_context=262144)
    trace_dir = run_dir / "traces"
    trace_dir.mkdir(exist_ok=True)
    async with open_gateway_stack(
        cfg.engine, rollout=cfg.rollout, run_dir=run_dir, engine_instance=scripted, tokenizer=tok
    ) as stack:
        ctx = rollout_context(cfg, stack, backend, harness, trace_dir=trace_dir)
        rollout = await run_rollout(ctx, task)
        stack.run_store().append_rollout(rollout)
    traces = sorted(trace_dir.glob("*.strace"))
    text = "".join(p.read_text(errors="replace") for p in traces)
    return SingleRollout(
        rollout,
        strace.connects_from_trace(text),
        traces[0] if traces else None,
        list(scripted.prompts) if scripted is not None else [],
        run_dir,
    )
