"""Shared plumbing for the harness end-to-end tests: one full rollout (``legorl.loop.single``, the
code path of ``legorl rollout``) of a registered harness through the real gateway, a bubblewrap
sandbox without network (traced by a host-side strace) and the real grader; only the model is
scripted (ScriptedEngine)."""

from __future__ import annotations

import asyncio
import shutil

from needs import unavailable

from legorl.harnesses.base import Budget
from legorl.loop.single import (
    SingleRollout,
    foreign_connects,
    rollout_once,
    single_rollout_config,
)

TASK = "legorl__trivial-001"


def budget_overrides(budget: Budget) -> dict[str, object]:
    """``budget`` as RunConfig.rollout overrides (the config is what the rollout runs)."""
    return {
        f"rollout.{k}": getattr(budget, k)
        for k in (
            "max_turns",
            "max_tokens_per_turn",
            "wall_clock_s",
            "temperature",
            "max_total_tokens",
            "max_concurrent_requests",
            "turn_slack",
        )
    }


def need_sandbox() -> None:
    if shutil.which("bwrap") is None:
        unavailable("bubblewrap not installed")
    if shutil.which("strace") is None:
        unavailable("strace not installed (apt-get install -y strace): needed for the network proof")


def rollout(
    harness: str, engine: str, tmp_path, *, task: str = TASK, budget: Budget | None = None, **options
) -> SingleRollout:
    need_sandbox()
    overrides = {
        "rollout.harness": harness,
        "rollout.harness_options": options,
        "run_dir": str(tmp_path / engine),
        **(budget_overrides(budget) if budget is not None else {}),
    }
    return asyncio.run(rollout_once(single_rollout_config(None, overrides, engine=engine), task, engine=engine))


def assert_gateway_only(run: SingleRollout) -> None:
    """Every connect() the harness made went to the gateway (127.0.0.1:8000 inside) or a Unix socket,
    and at least one went to the gateway."""
    assert run.trace_path is not None and run.trace_path.stat().st_size > 0, "no strace log"
    assert "AF_INET 127.0.0.1:8000" in run.connects, run.connects
    assert foreign_connects(run.connects) == [], foreign_connects(run.connects)
    assert "network_attempt" not in run.rollout.flags


def assert_recorded(run: SingleRollout) -> None:
    r = run.rollout
    assert r.samples, "no model call was recorded"
    for s in r.samples:
        assert s.num_sampled > 0
        assert s.alignment_events[0].kind == "start"
