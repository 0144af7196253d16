"""Per-harness rollout statistics read back from a run store (what `bench learn --harness` reports)."""

from __future__ import annotations

import pytest

from legorl.bench.harness_stats import cause_key, harness_stats
from legorl.trajectory.records import AlignmentEvent, Rollout, Sample, Turn
from legorl.trajectory.store import RunStore


def _turn(session: str, index: int, kind: str, prompt: int, segment_kind: str = "main", reason: str = "") -> Turn:
    return Turn(
        session_id=session,
        thread_id="main",
        turn_index=index,
        dialect="openai.chat",
        prompt_token_ids=list(range(prompt)),
        output_token_ids=[1, 2],
        output_logprobs=[-0.1, -0.2],
        sampling={},
        weight_version=0,
        finish_reason="stop",
        alignment=AlignmentEvent(turn_index=index, kind=kind, segment_kind=segment_kind, reason=reason),
    )


def _sample(rid: str, segment: int) -> Sample:
    return Sample(
        rollout_id=rid,
        thread_id="main",
        segment_index=segment,
        token_ids=[1, 2],
        loss_mask=[0, 1],
        rollout_logprobs=[0, -0.1],
    )


def test_turns_splits_alignment_failures_and_first_prompts(tmp_path):
    store = RunStore(tmp_path)
    # r0: 3 turns, compacted once (2 samples), solved; r1: 1 turn; r2: a harness error
    for t in (
        _turn("s0", 0, "start", 100),
        _turn("s0", 1, "extend", 150),
        _turn("s0", 2, "fork", 60, "compaction"),
        _turn("s1", 0, "start", 120),
        _turn("s1", 1, "realign", 130, reason="msg 2 (assistant): tool call 0 'bash' arguments key order"),
        _turn("s2", 0, "start", 140),
    ):
        store.append_turn(t)
    rollouts = [
        Rollout(rollout_id="r0", session_id="s0", task_id="t", harness="h", sandbox="bwrap", reward=1.0,
                samples=[_sample("r0", 0), _sample("r0", 1)]),
        Rollout(rollout_id="r1", session_id="s1", task_id="t", harness="h", sandbox="bwrap", samples=[_sample("r1", 0)]),
        Rollout(rollout_id="r2", session_id="s2", task_id="t", harness="h", sandbox="bwrap", status="harness_error",
                cause="harness exit code 1: mini-swe-agent exit status Boom"),
    ]  # fmt: skip
    for r in rollouts:
        store.append_rollout(r)
    store.close(compact=False)
    stats = harness_stats([tmp_path])
    assert (stats.rollouts, stats.valid, stats.resolved) == (3, 2, 1)
    assert stats.mean_turns == pytest.approx((3 + 2) / 2)
    assert stats.multi_sample_share == 0.5
    assert stats.alignment == {"start": 3, "extend": 1, "fork": 1, "realign": 1}
    assert stats.segment_kinds == {"compaction": 1}
    assert stats.realign_reasons == {"tool call 0 'bash' arguments key order": 1}
    assert stats.env_failure_rate == pytest.approx(1 / 3)
    assert stats.env_failures_by_cause == {"harness_error: harness exit code 1": 1}
    assert (stats.first_prompt_tokens, stats.first_prompt_tokens_max) == (120, 140)


def test_cause_key_groups_a_failure_across_rollouts():
    a = Rollout(
        rollout_id="a", task_id="t", harness="h", sandbox="b", status="env_failure", cause="grader: /tmp/x1 gone"
    )
    b = Rollout(
        rollout_id="b", task_id="t", harness="h", sandbox="b", status="env_failure", cause="grader: /tmp/x2 gone"
    )
    assert cause_key(a) == cause_key(b) == "env_failure: grader"
    assert cause_key(Rollout(rollout_id="c", task_id="t", harness="h", sandbox="b", status="timeout")) == "timeout"
