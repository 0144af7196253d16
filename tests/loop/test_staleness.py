"""Asynchronous rollouts: a sample's lag, which rollouts are too old, and what is counted."""

from __future__ import annotations

import pytest
from sample_records import tiny_sample

from legorl.config import RunConfig
from legorl.errors import ConfigError
from legorl.loop.batch import assemble_batch
from legorl.loop.staleness import drop_stale, sample_lag
from legorl.trajectory.builder import build_samples
from legorl.trajectory.records import AlignmentEvent, Rollout, Turn


def _rollout(task: str, reward: float, *versions: int | None) -> Rollout:
    return Rollout(
        rollout_id=f"r-{task}-{reward}-{versions}",
        task_id=task,
        harness="minimal",
        sandbox="bwrap",
        reward=reward,
        status="ok",
        samples=[tiny_sample(v) for v in versions],
    )


def test_a_sample_lags_by_its_oldest_turn():
    def turn(i: int, prompt: list[int], out: list[int], kind: str, version: int) -> Turn:
        return Turn(
            session_id="s",
            thread_id="main",
            turn_index=i,
            dialect="test",
            prompt_token_ids=prompt,
            output_token_ids=out,
            output_logprobs=[-0.5] * len(out),
            sampling={},
            weight_version=version,
            finish_reason="stop",
            alignment=AlignmentEvent(turn_index=i, kind=kind, segment_index=0),
        )

    # the first turn came from the weights before the update, the second from the new ones
    [s] = build_samples([turn(0, [1, 2], [10], "start", 3), turn(1, [1, 2, 10, 4], [11], "extend", 4)], "R")
    assert s.weight_version == 3
    assert sample_lag(4, s.weight_version) == 1 and sample_lag(3, s.weight_version) == 0
    assert sample_lag(4, None) == 0  # recorded before versions were kept on samples


def test_rollouts_older_than_max_staleness_are_dropped_whole_and_counted():
    fresh = _rollout("a", 1.0, 5, 5)
    one_behind = _rollout("a", 0.0, 4, 5)  # a compaction segment from the newer weights
    two_behind = _rollout("a", 1.0, 5, 3)
    report = drop_stale([fresh, one_behind, two_behind], trainer_version=5, max_staleness=1)
    assert report.kept == [fresh, one_behind] and report.dropped == 1
    assert report.lags == {0: 3, 1: 1}
    assert report.metrics() == {
        "batch/dropped_stale": 1.0,
        "batch/version_lag_0": 3.0,
        "batch/version_lag_1": 1.0,
        "batch/max_version_lag": 1.0,
    }
    # the group's advantages are over what remains
    batch = assemble_batch(report.kept)
    assert [round(s.advantage or 0, 4) for s in batch.samples] == [1.0, 1.0, -1.0, -1.0]

    report = drop_stale([fresh, one_behind, two_behind], trainer_version=5, max_staleness=0)
    assert report.kept == [fresh] and report.dropped == 2
    report = drop_stale([fresh, one_behind, two_behind], trainer_version=5, max_staleness=None)  # synchronous
    assert len(report.kept) == 3 and report.dropped == 0 and report.lags == {0: 4, 1: 1, 2: 1}


def test_async_needs_a_trainer_apart_from_the_engine():
    with pytest.raises(ConfigError, match="colocate_trainer: false"):
        RunConfig.load(max_staleness=1)
    cfg = RunConfig.load(max_staleness=1, **{"engine.colocate_trainer": False})
    assert cfg.max_staleness == 1
    with pytest.raises(ConfigError, match="max_staleness"):
        RunConfig.load(max_staleness=-1, **{"engine.colocate_trainer": False})
