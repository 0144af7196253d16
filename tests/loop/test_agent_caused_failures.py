"""Failures the agent can cause are scored, not kept out of the gradient (docs/reward-integrity.md).

An environment failure (``env_failure``, ``harness_error``) is kept out of the gradient and out of
the pass rate. A policy that could make its own failures look like the environment's would hide
them: never pushed away from them in training, and a better pass@1 than it earns in evaluation. The
agent's commands run in the same sandbox as its harness, so everything in there is within its reach:
the harness process, the workspace's git repository, the harness's own output files. Each attack
below is a real rollout (gateway, command harness in bubblewrap, grader) whose scripted policy runs
one command; none of them may end out of the gradient, and none fixes the bug, so each scores 0. The
gold fix followed by the same crash is graded on what the crash left: reward 1.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from legorl.config import RunConfig
from legorl.engines.scripted import ScriptedEngine
from legorl.errors import SandboxError
from legorl.gateway.renderer import load_smollm2_gguf_tokenizer
from legorl.harnesses.codex import UNREACHABLE_EVENT
from legorl.harnesses.scripted import fix_command
from legorl.loop import stack as stack_mod
from legorl.loop.batch import TRAINABLE_STATUSES
from legorl.loop.rollout import run_rollout
from legorl.sandbox.git import DIFF_LIMIT
from legorl.tasks.loader import get_task

pytestmark = [pytest.mark.sandbox]

TASK = "legorl__trivial-001"
# the tool command's parent is the harness program (tiny_tool_agent runs each command with bash -c)
KILL_HARNESS = "kill -SEGV $PPID; sleep 5"
ATTACKS = {
    "the harness killed with a fault signal": KILL_HARNESS,
    "the harness killed outright": "kill -KILL $PPID; sleep 5",
    "the workspace's git repository removed": "rm -rf /workspace/.git && echo done",
    "a diff over the size limit": f"head -c {DIFF_LIMIT + 1024} /dev/urandom > /workspace/blob.bin && echo done",
}


class FailingHarnessExec:
    """Fault injection: the harness's exec raises the error bwrap's set-up failure raises (exit code 1,
    stderr starting ``bwrap:``: legorl.sandbox.bwrap), after running (what an agent that writes to its
    harness's stderr and makes it exit 1 would leave) or instead of running (a real set-up failure)."""

    def __init__(self, backend, after_running: bool):
        self.backend, self.after_running = backend, after_running
        self.name, self.cache = backend.name, getattr(backend, "cache", None)

    def create(self, spec):
        sandbox = self.backend.create(spec)
        real = sandbox.exec

        def exec(cmd, *args, **kwargs):
            if "tiny_tool_agent" not in str(cmd):
                return real(cmd, *args, **kwargs)
            if self.after_running:
                real(cmd, *args, **kwargs)
            raise SandboxError(f"bwrap failed to set up sandbox {sandbox.name}: bwrap: Can't mount proc")

        sandbox.exec = exec
        return sandbox


class TimesOutUnderLoad:
    """Fault injection: the engine (the scripted one inside) takes 0.3 s a call and times out a call
    that arrives while another is in flight (an engine a flood overloads), or the ``fail_call``-th
    call (0-based) whatever the load (an engine that fails by itself)."""

    def __init__(self, inner, fail_call: int | None = None):
        self.inner, self.fail_call, self.in_flight, self.calls = inner, fail_call, 0, 0

    def __getattr__(self, name):
        return getattr(self.inner, name)

    async def generate(self, prompt_token_ids, sampling, **kwargs):
        index, self.calls, self.in_flight = self.calls, self.calls + 1, self.in_flight + 1
        try:
            await asyncio.sleep(0.3)
            if self.in_flight > 1 or index == self.fail_call:
                raise TimeoutError()
            return await self.inner.generate(prompt_token_ids, sampling, **kwargs)
        finally:
            self.in_flight -= 1


async def _rollout(command: str, tmp_path, harness_name: str = "command", wrap=None, engine_wrap=None):
    cfg = RunConfig.load(
        None,
        run_dir=str(tmp_path / "run"),
        **{
            "rollout.harness": harness_name,
            "rollout.max_turns": 3,
            "rollout.wall_clock_s": 120.0,
            "grading.retries": 0,
            "sandbox.root": str(tmp_path / "sandboxes"),
        },
    )
    tok = load_smollm2_gguf_tokenizer()
    harness = stack_mod.build_harness(cfg.rollout)
    first, done = harness.scripted_replies(command)

    calls = []

    def policy(prompt: str) -> str:  # one rollout per test: the command, then stop
        calls.append(prompt)
        return first if len(calls) == 1 else done

    engine = ScriptedEngine(tok, policy, max_context=262144)
    engine = engine_wrap(engine) if engine_wrap else engine
    async with stack_mod.open_gateway_stack(
        cfg.engine, rollout=cfg.rollout, engine_instance=engine, run_dir=tmp_path / "run"
    ) as stack:
        backend = stack_mod.sandbox_backend(cfg.sandbox)
        ctx = stack_mod.rollout_context(cfg, stack, wrap(backend) if wrap else backend, harness)
        return await run_rollout(ctx, get_task(TASK))


@pytest.mark.parametrize("attack", list(ATTACKS))
async def test_a_failure_the_agent_caused_is_scored_zero(attack, tmp_path):
    rollout = await _rollout(ATTACKS[attack], tmp_path)
    assert rollout.status in TRAINABLE_STATUSES, (rollout.status, rollout.cause)
    assert rollout.reward == 0.0 and rollout.cause, rollout.cause


async def test_a_harness_crash_after_the_fix_is_graded_on_what_it_left(tmp_path):
    rollout = await _rollout(f"{fix_command(get_task(TASK))} && {KILL_HARNESS}", tmp_path)
    assert (rollout.status, rollout.reward) == ("ok", 1.0), rollout.cause
    assert "harness_crashed" in {f.kind for f in rollout.flag_details}
    assert "SIGSEGV" in rollout.cause


@pytest.mark.slow
async def test_a_forged_codex_unreachable_event_is_scored_zero(tmp_path):
    # the Codex watchdog's stream file is in the agent's /tmp: one forged event line and a killed Codex
    # read as "could not reach the gateway" (crashed); the gateway served this session, so it is graded
    line = json.dumps({"type": UNREACHABLE_EVENT}, separators=(",", ":"))
    forge = f"printf '%s\\n' '{line}' >> /tmp/.legorl-codex.jsonl; kill -KILL $PPID; sleep 3"
    rollout = await _rollout(forge, tmp_path, "codex")
    assert (rollout.status, rollout.reward) == ("ok", 0.0), rollout.cause
    assert "could not connect to the gateway" in rollout.cause  # the claim is kept, not believed


async def test_a_sandbox_failure_after_the_first_answer_is_scored(tmp_path):
    # the harness ran (the agent's command among it), then its exec read as bwrap's set-up failure: a
    # sandbox that served an answer was set up, so the claim is within the agent's reach
    forged = await _rollout("echo hi", tmp_path, wrap=lambda b: FailingHarnessExec(b, after_running=True))
    assert (forged.status, forged.reward) == ("ok", 0.0), forged.cause
    assert "harness_crashed" in {f.kind for f in forged.flag_details} and "bwrap:" in forged.cause
    # the same failure before any answer: nothing of the policy's ran, the environment failed
    real = await _rollout("echo hi", tmp_path / "b", wrap=lambda b: FailingHarnessExec(b, after_running=False))
    assert real.status == "env_failure" and real.cause.startswith("sandbox crashed during the harness"), real.cause


async def test_an_engine_failure_under_the_agents_own_calls_is_scored(tmp_path):
    # the agent's command calls the gateway itself, 6 calls at once, with the session token its
    # environment holds; the engine, overloaded, times out the calls that overlap: an engine failure
    # in a session whose traffic its harness would not make may be the agent's doing, so it is graded
    flood = f"python3 {Path(__file__).parent.parent / 'harnesses' / 'budget_flood_client.py'} 6 --at-once"
    rollout = await _rollout(flood, tmp_path, engine_wrap=TimesOutUnderLoad)
    assert (rollout.status, rollout.reward) == ("ok", 0.0), rollout.cause
    assert "engine_failed_under_own_traffic" in {f.kind for f in rollout.flag_details}
    assert "engine failed turn" in rollout.cause and "at once" in rollout.cause, rollout.cause
    # the same engine failing the harness's own second call, with nothing else calling: the environment's
    real = await _rollout("echo hi", tmp_path / "b", engine_wrap=lambda e: TimesOutUnderLoad(e, fail_call=1))
    assert real.status == "env_failure" and real.cause.startswith("engine failed turn 1"), real.cause
