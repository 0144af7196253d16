"""One rollout of any registered harness on one task, outside a training run (``legorl rollout``).

Engines: ``embedded`` (the real model), ``scripted-gold`` / ``scripted-wrong`` (a ScriptedEngine whose
policy makes the harness apply the gold fix, or a wrong one: see :mod:`legorl.harnesses.scripted`).
Everything else is real: harness program in a bubblewrap sandbox with no network, gateway, grader.
Turns and the rollout go to ``run_dir``; the host-side strace of the harness to ``run_dir/traces``.
"""

from __future__ import annotations

import re
import shutil
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from legorl.gateway.app import Gateway, SamplingPolicy
from legorl.gateway.renderer import ChatTemplateRenderer
from legorl.gateway.server import GatewayServer
from legorl.gateway.sessions import SessionRegistry
from legorl.harnesses.base import Budget
from legorl.harnesses.registry import get_harness
from legorl.loop.rollout import GATEWAY_PORT_IN_SANDBOX, RolloutContext, run_rollout
from legorl.sandbox.bwrap import BwrapBackend
from legorl.tasks.loader import get_task
from legorl.trajectory.records import Rollout
from legorl.trajectory.store import RunStore

ENGINES = ("embedded", "scripted-gold", "scripted-wrong")


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
        return {"rollout_id": r.rollout_id, "harness": r.harness, "task": r.task_id, "status": r.status,
                "cause": r.cause, "reward": r.reward, "turns": sum(len(s.turn_indices) for s in r.samples),
                "samples": len(r.samples), "alignment": dict(align), "flags": r.flags,
                "harness_exit_code": r.harness_exit_code, "duration_s": round(r.duration_s, 2),
                "connects": sorted(set(self.connects)), "foreign_connects": foreign_connects(self.connects),
                "run_dir": str(self.run_dir) if self.run_dir else None}


_CONNECT = re.compile(r"connect\(\d+(?:<[^>]*>)?, \{(sa_family=[^}]*)\}")


def connects_from_trace(text: str) -> list[str]:
    """Every ``connect`` target in an strace log: ``AF_INET 127.0.0.1:8000``, ``AF_UNIX <path>``."""
    out = []
    for line in text.splitlines():
        if "connect(" not in line or "resumed>" in line and "sa_family" not in line:
            continue
        m = _CONNECT.search(line)
        if not m:
            if re.search(r"\bconnect\(", line):
                out.append("UNPARSED " + line.strip()[:200])
            continue
        addr = m.group(1)
        fam = re.search(r"sa_family=(\w+)", addr).group(1)
        if fam == "AF_UNIX":
            p = re.search(r'sun_path=(@?"[^"]*"|[^,}]*)', addr)
            out.append(f"AF_UNIX {p.group(1) if p else ''}")
        elif fam in ("AF_INET", "AF_INET6"):
            port = re.search(r"sin6?_port=htons\((\d+)\)", addr)
            ip = re.search(r'inet_addr\("([^"]+)"\)|inet_pton\(AF_INET6?, "([^"]+)"', addr)
            host = (ip.group(1) or ip.group(2)) if ip else "?"
            out.append(f"{fam} {host}:{port.group(1) if port else '?'}")
        else:
            out.append(fam)
    return out


def foreign_connects(connects: list[str], port: int = GATEWAY_PORT_IN_SANDBOX) -> list[str]:
    """Connects to anything but the gateway (``127.0.0.1:<port>`` inside) or a Unix socket."""
    ok = {f"AF_INET 127.0.0.1:{port}", f"AF_INET6 ::ffff:127.0.0.1:{port}", f"AF_INET6 ::1:{port}"}
    return [c for c in connects if not (c in ok or c.startswith("AF_UNIX"))]


async def rollout_once(harness_name: str, task_id: str, *, engine: str = "scripted-gold", model: str = "smollm2-135m",
                       run_dir: Path | str | None = None, budget: Budget | None = None,
                       harness_options: dict[str, Any] | None = None, backend: BwrapBackend | None = None,
                       max_tokens: int = 4096) -> SingleRollout:
    if engine not in ENGINES:
        raise ValueError(f"unknown engine {engine!r}; known: {', '.join(ENGINES)}")
    harness = get_harness(harness_name, **(harness_options or {}))
    task = get_task(task_id)
    budget = budget or Budget(max_turns=6, max_tokens_per_turn=max_tokens, wall_clock_s=600.0)
    run_dir = Path(run_dir or tempfile.mkdtemp(prefix="legorl-rollout-"))
    run_dir.mkdir(parents=True, exist_ok=True)
    scripted = None
    if engine == "embedded":
        from legorl.engines.embedded import EmbeddedEngine
        from legorl.models.registry import load_tokenizer, resolve_model

        path = resolve_model(model)
        tok = load_tokenizer(path)
        eng = EmbeddedEngine.from_pretrained(str(path))
        policy = SamplingPolicy(temperature=budget.temperature, max_tokens=budget.max_tokens_per_turn)
    else:
        from legorl.engines.scripted import ScriptedEngine
        from legorl.gateway.renderer import load_smollm2_gguf_tokenizer
        from legorl.harnesses.scripted import gold_policy

        tok = load_smollm2_gguf_tokenizer()
        # a scripted "model" may need a long context: the harness's own prompts are not ours to cut
        eng = scripted = ScriptedEngine(tok, gold_policy(harness, task, wrong=engine == "scripted-wrong"),
                                        max_context=262144)
        policy = SamplingPolicy(temperature=1.0, max_tokens=max_tokens)
    store = RunStore(run_dir)
    gateway = Gateway(eng, ChatTemplateRenderer(tok), SessionRegistry(), store, model_name=model,
                      sampling_policy=policy)
    sock_dir = Path(tempfile.mkdtemp(prefix="legorl-gw-"))  # Unix socket paths are short
    trace_dir = run_dir / "traces"
    trace_dir.mkdir(exist_ok=True)
    try:
        async with GatewayServer(gateway, port=0, uds=str(sock_dir / "gw.sock")) as server:
            ctx = RolloutContext(gateway, server.uds, backend or BwrapBackend(), harness, budget,
                                 trace_dir=str(trace_dir))
            rollout = await run_rollout(ctx, task)
        store.append_rollout(rollout)
    finally:
        shutil.rmtree(sock_dir, ignore_errors=True)
        close = getattr(eng, "close", None)
        if close is not None:
            await close()
    traces = sorted(trace_dir.glob("*.strace"))
    text = "".join(p.read_text(errors="replace") for p in traces)
    return SingleRollout(rollout, connects_from_trace(text), traces[0] if traces else None,
                         list(scripted.prompts) if scripted is not None else [], run_dir)
