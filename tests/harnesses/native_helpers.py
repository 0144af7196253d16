"""Shared plumbing for the native-harness tests (Claude Code, OpenCode): real gateway on a Unix
socket + loopback port (built by :func:`legorl.loop.stack.open_gateway_stack`, as in a run), a
:class:`ScriptedEngine` (only the model is scripted), the real binary inside a bubblewrap sandbox
with no network, traced with host-side strace, then the real grader."""

from __future__ import annotations

import asyncio
import re
import shutil
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from needs import unavailable
from wire_trace import Wire, WireTrace

from legorl.config import BwrapSandboxConfig, EngineConfig
from legorl.engines.scripted import Policy, ScriptedEngine
from legorl.gateway.renderer import load_smollm2_gguf_tokenizer
from legorl.grading import strace
from legorl.harnesses.base import Budget, HarnessResult
from legorl.harnesses.common import fault_signal
from legorl.loop.stack import GatewayStack, open_gateway_stack, sandbox_backend
from legorl.sandbox.base import ExecResult, SandboxSpec
from legorl.tasks.loader import get_task
from legorl.trajectory.builder import build_samples
from legorl.trajectory.records import Sample, Turn

GATEWAY_PORT = 8000
TRIVIAL = "legorl__trivial-001"

_TOK = None


def tokenizer():
    global _TOK
    if _TOK is None:
        _TOK = load_smollm2_gguf_tokenizer()
    return _TOK


def need_sandbox() -> None:
    if shutil.which("bwrap") is None:
        unavailable("bubblewrap not installed")
    if shutil.which("strace") is None:
        unavailable("strace not installed (apt-get install -y strace)")


def install_layer(harness) -> tuple[tuple[str, str], ...]:
    """The harness's cached npm layer (built on the first use: needs npm and its registry), mounted
    read-only at ``install.mount`` like the rollout runner does."""
    from legorl.harnesses.install import layer_mounts
    from legorl.sandbox.images import ImageBuildError

    if shutil.which("npm") is None:
        unavailable("npm not installed")
    try:
        return layer_mounts(harness.install)
    except ImageBuildError as exc:
        unavailable(f"cannot build the {harness.name} layer: {exc}")


class LiveServer:
    """A served gateway stack (engine, gateway, server on a Unix socket and a loopback port) on its
    own event loop in a background thread, so the test drives the harness synchronously."""

    def __init__(self, engine, tok, *, default_max_tokens: int):
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self._cm = open_gateway_stack(
            EngineConfig(),
            engine_instance=engine,
            tokenizer=tok,
            model_name="legorl",
            default_max_tokens=default_max_tokens,
        )
        try:
            self.stack: GatewayStack = asyncio.run_coroutine_threadsafe(self._cm.__aenter__(), self.loop).result(30)
        except BaseException:
            self._stop_loop()
            raise
        # the gateway's side of the wire (before the first request builds the app's middleware stack)
        self.wire = Wire()
        self.stack.gateway.app.add_middleware(WireTrace, sink=self.wire)

    def _stop_loop(self):
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)

    def close(self):
        try:
            asyncio.run_coroutine_threadsafe(self._cm.__aexit__(None, None, None), self.loop).result(30)
        finally:
            self._stop_loop()


@dataclass
class Run:
    result: HarnessResult
    turns: list[Turn]
    samples: list[Sample]
    diff: str
    reward: float | None
    report: object
    connects: list[str]
    prompts: list[str]
    seconds: float
    exec_result: ExecResult
    extra: dict = field(default_factory=dict)
    wire: Wire = field(default_factory=Wire)  # every HTTP exchange as the gateway sent it
    launched_at: float = 0.0  # wall clock: the harness started, and ended (exited or was killed)
    ended_at: float = 0.0

    def wire_evidence(self) -> dict:
        """The gateway's side of a run that did not finish (:meth:`Wire.evidence`)."""
        return self.wire.evidence(self.ended_at, self.launched_at)


def foreign_connects(connects: list[str]) -> list[str]:
    """Connects to anything but the gateway (a loopback address at its port inside) or a Unix socket."""
    return strace.foreign_connects(connects, GATEWAY_PORT)


class RuntimeCrash(AssertionError):
    """The harness's own runtime died of a fault signal (:func:`legorl.harnesses.common.fault_signal`)."""


class UnfinishedRun(AssertionError):
    """A run that did not end as its test needs (a hang until the wall clock, an early exit)."""


# Bun's JavaScriptCore traps with SIGILL now and then: seen once in about ten runs of OpenCode under
# strace, twice in one CI run. Not what any of these tests checks (a rollout with such a crash is a
# ``harness_error``, out of the gradient: loop/rollout.py), so a test whose run crashed runs again.
RERUN_ON_RUNTIME_CRASH = pytest.mark.flaky(
    reason="the harness's runtime died of a fault signal (Bun's JavaScriptCore traps with SIGILL now and then, "
    "about 1 run in 10 of OpenCode under strace)",
    runs=3,
    on=RuntimeCrash,
)


def unfinished(run: Run, what: str) -> UnfinishedRun:
    """The failure for a run that did not end as the test needs, with the run's summary and the
    gateway's side of the wire (every call, whether its stream went out whole, how long the harness
    stayed silent before the kill), which says on whose side it hung."""
    evidence = {"ending": run.result.ending, **run.result.summary, "model_calls": len(run.turns)}
    return UnfinishedRun(f"{what}; gateway: {run.wire_evidence()}; run: {evidence}")  # the verdict first


def run_native(
    harness, policy: Policy, tmp_path: Path, *, budget: Budget, max_context: int = 262144, grade_it: bool = True
) -> Run:
    """One run of the real harness; :class:`RuntimeCrash` when its own runtime crashed (a test that
    calls this carries :data:`RERUN_ON_RUNTIME_CRASH`)."""
    run = _run_native_once(harness, policy, tmp_path, budget=budget, max_context=max_context, grade_it=grade_it)
    signal = fault_signal(run.exec_result)
    if signal is not None:
        raise RuntimeCrash(f"{harness.name}: runtime crash ({signal}): {run.result.summary.get('cause')}")
    return run


def _run_native_once(
    harness, policy: Policy, tmp_path: Path, *, budget: Budget, max_context: int, grade_it: bool
) -> Run:
    from legorl.grading.grader import grade

    need_sandbox()
    tmp_path.mkdir(parents=True, exist_ok=True)
    task = get_task(TRIVIAL)
    tok = tokenizer()
    engine = ScriptedEngine(tok, policy, max_context=max_context)
    live = LiveServer(engine, tok, default_max_tokens=budget.max_tokens_per_turn)
    gw, uds = live.stack.gateway, live.stack.uds
    backend = sandbox_backend(BwrapSandboxConfig(root=tmp_path / "sandboxes"))
    sandbox = None
    try:
        token = gw.open_session("r-native")
        # the runner's spec: default memory/pids limits, the harness layer mounted read-only
        sandbox = backend.create(
            SandboxSpec(
                source_dir=task.source_dir,
                gateway_socket=uds,
                gateway_port=GATEWAY_PORT,
                extra_layers=install_layer(harness),
            )
        )
        trace = tmp_path / "trace.log"
        assert sandbox.start_trace(trace)
        t0, launched_at = time.monotonic(), time.time()
        res = harness.launch(task, sandbox, f"http://127.0.0.1:{GATEWAY_PORT}/v1", token, budget)
        seconds, ended_at = time.monotonic() - t0, time.time()
        sandbox.stop_trace()
        result = harness.collect(sandbox, res, budget)
        turns = gw.session_turns(token)
        samples = build_samples(turns, "r-native")
        diff = sandbox.diff()
        connects = strace.connects_from_trace(trace.read_text(errors="replace")) if trace.exists() else []
    finally:
        if sandbox is not None:
            sandbox.destroy()
        live.close()
    reward = report = None
    if grade_it:
        report = grade(task, diff, backend)
        reward = report.reward
    run = Run(result, turns, samples, diff, reward, report, connects, list(engine.prompts), seconds, res)
    run.wire, run.launched_at, run.ended_at = live.wire, launched_at, ended_at
    return run


def tool_names(prompt: str) -> list[str]:
    """Tool names the renderer listed in the prompt's <tools> section (one JSON object a line)."""
    m = re.search(r"<tools>\n(.*?)\n</tools>", prompt, re.S)
    if not m:
        return []
    return re.findall(r'^\{"type": "function", "function": \{"name": "([^"]+)"', m.group(1), re.M)


def tool_call(name: str, args: dict) -> str:
    import json

    return "<tool_call>\n" + json.dumps({"name": name, "arguments": args}) + "\n</tool_call>"
