"""The one builder of what a RunConfig describes (legorl.loop.stack): the served gateway stack and its
clean-up, the sandbox backend, the budget and the rollout context."""

from __future__ import annotations

import dataclasses
import socket
import stat
from pathlib import Path

import httpx
import pytest

from legorl.bench.gateway import zero_engine_for
from legorl.config import (
    BwrapSandboxConfig,
    EngineConfig,
    PodmanSandboxConfig,
    RolloutConfig,
    RunConfig,
)
from legorl.errors import ConfigError, SandboxError
from legorl.gateway.app import SamplingPolicy
from legorl.harnesses.base import Budget
from legorl.loop import stack as stack_mod
from legorl.loop.rollout import run_rollout
from legorl.loop.stack import (
    open_gateway_stack,
    rollout_budget,
    rollout_context,
    sandbox_backend,
)
from legorl.sandbox.bwrap import BwrapBackend
from legorl.sandbox.podman import PodmanBackend
from legorl.tasks.loader import get_task


@pytest.fixture(scope="module")
def tok():
    from legorl.gateway.renderer import load_smollm2_gguf_tokenizer

    return load_smollm2_gguf_tokenizer()


class ClosingEngine:
    """A zero-cost engine that records whether the stack closed it."""

    def __init__(self, tok, tokenizer_attr: bool = True):
        self._inner = zero_engine_for(tok, 4)
        self.model_name, self.max_context = "zero", self._inner.max_context
        if tokenizer_attr:
            self.tokenizer = tok
        self.closed = 0

    @property
    def weight_version(self) -> int:
        return 0

    async def generate(self, prompt, sampling):
        return await self._inner.generate(prompt, sampling)

    async def update_weights(self, state_dict, version=None):
        return 0

    def health(self):
        return self._inner.health()

    async def close(self):
        self.closed += 1


@pytest.fixture
def socket_dirs(monkeypatch):
    """Every socket directory the stack makes."""
    made: list[Path] = []
    real = stack_mod._socket_dir

    def recording() -> Path:
        made.append(real())
        return made[-1]

    monkeypatch.setattr(stack_mod, "_socket_dir", recording)
    return made


async def test_stack_serves_the_training_sampling_on_a_short_socket_and_cleans_up(tok, tmp_path, socket_dirs):
    eng = ClosingEngine(tok)
    rollout = RolloutConfig(temperature=0.5, max_tokens_per_turn=3)
    async with open_gateway_stack(
        EngineConfig(), rollout=rollout, run_dir=tmp_path / "run", engine_instance=eng
    ) as stack:
        uds = Path(stack.uds)
        assert stat.S_ISSOCK(uds.stat().st_mode) and len(str(uds)) < 108
        assert stat.S_IMODE(uds.parent.stat().st_mode) == 0o700  # private: only this user reaches the socket dir
        assert stack.gateway.sampling_policy == SamplingPolicy(temperature=0.5, max_tokens=3)
        assert stack.gateway.model_name == "smollm2-135m" and stack.model_path is None
        token = stack.gateway.open_session("r-1")
        body = {"messages": [{"role": "user", "content": "hi"}], "temperature": 1.7, "max_tokens": 100}
        async with httpx.AsyncClient(transport=httpx.AsyncHTTPTransport(uds=str(uds)), base_url="http://gw") as c:
            r = await c.post("/v1/chat/completions", json=body, headers={"Authorization": f"Bearer {token}"})
        assert r.status_code == 200, r.text
        (turn,) = stack.gateway.session_turns(token)
        # the harness asked for 1.7 and 100 tokens; the gateway sampled as the trainer assumes
        assert (turn.sampling["temperature"], turn.sampling["max_tokens"]) == (0.5, 3)
        assert [t.turn_index for t in stack.store.iter_turns(turn.session_id)] == [0]  # recorded in run_dir
        async with httpx.AsyncClient() as c:  # and on loopback TCP
            assert (await c.get(stack.base_url.removesuffix("/v1") + "/health")).status_code == 200
    assert eng.closed == 1
    assert socket_dirs == [uds.parent] and not uds.parent.exists()


async def test_strict_requests_comes_from_the_rollout_config(tok):
    # a tool_result that answers no call: refused as the real API (strict), served in lenient mode
    orphan = {
        "model": "m",
        "max_tokens": 2,
        "messages": [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "nobody", "content": "x"}]}],
    }
    for strict, status in ((True, 400), (False, 200)):
        rollout = RolloutConfig(strict_requests=strict)
        async with open_gateway_stack(
            EngineConfig(), rollout=rollout, engine_instance=ClosingEngine(tok), unix_socket=False
        ) as stack:
            token = stack.gateway.open_session(f"strict-{strict}")
            async with httpx.AsyncClient() as c:
                r = await c.post(stack.base_url + "/messages", json=orphan, headers={"x-api-key": token})
            assert r.status_code == status, r.text


async def test_stack_cleans_up_when_the_body_fails(tok, socket_dirs):
    eng = ClosingEngine(tok)
    with pytest.raises(RuntimeError, match="rollout blew up"):
        async with open_gateway_stack(EngineConfig(), engine_instance=eng):
            raise RuntimeError("rollout blew up")
    assert eng.closed == 1 and len(socket_dirs) == 1 and not socket_dirs[0].exists()


async def test_stack_cleans_up_when_the_server_cannot_start(tok, socket_dirs):
    eng = ClosingEngine(tok)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        with pytest.raises(OSError):
            async with open_gateway_stack(EngineConfig(), engine_instance=eng, port=taken.getsockname()[1]):
                pytest.fail("served on a port that is in use")
    assert eng.closed == 1 and len(socket_dirs) == 1 and not socket_dirs[0].exists()


async def test_stack_without_rollout_or_socket(tok, socket_dirs):
    eng = ClosingEngine(tok, tokenizer_attr=False)
    with pytest.raises(ConfigError, match="pass tokenizer="):
        async with open_gateway_stack(EngineConfig(), engine_instance=eng):
            pass
    assert eng.closed == 1  # closed even though the stack never served it
    async with open_gateway_stack(
        EngineConfig(), engine_instance=eng, tokenizer=tok, unix_socket=False, model_name="m"
    ) as stack:
        assert stack.uds is None and stack.gateway.sampling_policy is None and stack.store is None
        assert stack.gateway.model_name == "m"
        with pytest.raises(ConfigError, match="Unix socket"):
            rollout_context(RunConfig(), stack, BwrapBackend(), object())
    assert socket_dirs == []


def test_sandbox_backend_from_the_config(tmp_path, monkeypatch):
    monkeypatch.delenv("LEGORL_NO_CGROUPS", raising=False)
    monkeypatch.delenv("LEGORL_BWRAP_USERNS", raising=False)
    be = sandbox_backend(
        BwrapSandboxConfig(
            root=tmp_path / "sb", cgroups=True, userns=False, python="/usr/bin/python3", hide=[tmp_path / "secret"]
        )
    )
    assert isinstance(be, BwrapBackend) and be.name == "bwrap"
    assert (be.root, be.cgroups, be.userns, be.python, be.hide) == (
        tmp_path / "sb",
        True,
        False,
        "/usr/bin/python3",
        [tmp_path / "secret"],
    )
    monkeypatch.setenv("LEGORL_NO_CGROUPS", "1")  # the machine setting wins over the config
    monkeypatch.setenv("LEGORL_BWRAP_USERNS", "0")
    be = sandbox_backend(BwrapSandboxConfig(userns=True))
    assert (be.cgroups, be.userns) == (False, False)
    pm = sandbox_backend(
        PodmanSandboxConfig(
            root=tmp_path / "pm", executable="docker", image="img:1", runtime=None, extra_run_args=["--cpus=1"]
        )
    )
    assert isinstance(pm, PodmanBackend) and pm.name == "docker"
    assert (pm.root, pm.image, pm.runtime, pm.extra_run_args) == (tmp_path / "pm", "img:1", None, ("--cpus=1",))


def test_budget_carries_every_rollout_limit():
    cfg = RolloutConfig(
        max_turns=4,
        max_tokens_per_turn=99,
        max_total_tokens=300,
        turn_slack=1,
        max_concurrent_requests=2,
        temperature=0.7,
        wall_clock_s=12.0,
    )
    budget = rollout_budget(cfg)
    # a Budget field without a config field (or left at its default) would not be configurable
    for f in dataclasses.fields(Budget):
        assert getattr(budget, f.name) == getattr(cfg, f.name), f.name


async def test_rollout_context_and_sandbox_limits_reach_the_spec(tok):
    cfg = RunConfig.load(
        None,
        **{
            "sandbox.memory_mb": 777,
            "sandbox.max_pids": 55,
            "grading.retries": 0,
            "grading.flagged_policy": "drop",
            "grading.reward_mode": "partial",
        },
    )
    created = []

    class RefusingBackend:
        name = "refusing"

        def create(self, spec):
            created.append(spec)
            raise SandboxError("no sandbox today")

    async with open_gateway_stack(cfg.engine, rollout=cfg.rollout, engine_instance=ClosingEngine(tok)) as stack:
        ctx = rollout_context(cfg, stack, RefusingBackend(), stack_mod.build_harness(cfg.rollout))
        assert ctx.grading == cfg.grading and ctx.budget == rollout_budget(cfg.rollout)
        rollout = await run_rollout(ctx, get_task("legorl__trivial-001"))
    assert (rollout.status, rollout.cause) == ("env_failure", "sandbox create: no sandbox today")
    (spec,) = created
    assert (spec.memory_mb, spec.max_pids, str(spec.gateway_socket)) == (777, 55, stack.uds)


class DyingEngine(ClosingEngine):
    """Fault injection: the engine fails every call, as a crashed vLLM server does after its retries."""

    async def generate(self, prompt, sampling):
        from legorl.errors import EngineError

        raise EngineError("http://127.0.0.1:1: the vLLM server died (exit code -9)")


@pytest.mark.sandbox
async def test_a_rollout_whose_engine_failed_is_an_env_failure_naming_it(tok, tmp_path):
    cfg = RunConfig.load(None, **{"grading.retries": 0})
    async with open_gateway_stack(
        cfg.engine, rollout=cfg.rollout, engine_instance=DyingEngine(tok), run_dir=tmp_path / "run"
    ) as stack:
        ctx = rollout_context(cfg, stack, sandbox_backend(cfg.sandbox), stack_mod.build_harness(cfg.rollout))
        rollout = await run_rollout(ctx, get_task("legorl__trivial-001"))
    # not graded, not a zero reward for the agent (env failures stay out of the batch): the model stopped answering
    assert rollout.status == "env_failure" and rollout.grader is None, (rollout.status, rollout.cause)
    assert rollout.cause.startswith("engine failed turn 0:") and "the vLLM server died (exit code -9)" in rollout.cause
