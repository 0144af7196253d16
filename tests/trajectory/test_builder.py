"""build_samples: one Sample per (thread, segment), loss mask exactly on sampled tokens."""

from __future__ import annotations

import pytest

from legorl.trajectory.builder import AlignmentBuildError, build_samples
from legorl.trajectory.records import AlignmentEvent, Turn


def turn(i, prompt, out, kind, seg=0, thread="main", failed=False, session="s"):
    return Turn(
        session_id=session,
        thread_id=thread,
        turn_index=i,
        dialect="test",
        prompt_token_ids=prompt,
        output_token_ids=out,
        output_logprobs=[-0.1 * (k + 1) for k in range(len(out))],
        sampling={},
        weight_version=0,
        finish_reason="stop",
        alignment=AlignmentEvent(turn_index=i, kind=kind, segment_index=seg),
        failed=failed,
    )


def test_extend_chain_is_one_sample():
    t0 = turn(0, [1, 2, 3], [10, 11], "start")
    t1 = turn(1, [1, 2, 3, 10, 11, 4, 5], [12], "extend")
    t2 = turn(2, [1, 2, 3, 10, 11, 4, 5, 12, 6], [13, 14, 15], "extend")
    [s] = build_samples([t2, t0, t1], "R")  # order of input does not matter
    assert s.token_ids == [1, 2, 3, 10, 11, 4, 5, 12, 6, 13, 14, 15]
    assert s.loss_mask == [0, 0, 0, 1, 1, 0, 0, 1, 0, 1, 1, 1]
    assert s.rollout_logprobs == pytest.approx([0, 0, 0, -0.1, -0.2, 0, 0, -0.1, 0, -0.1, -0.2, -0.3])
    assert s.turn_indices == [0, 1, 2] and [e.kind for e in s.alignment_events] == ["start", "extend", "extend"]
    assert (s.rollout_id, s.thread_id, s.segment_index) == ("R", "main", 0)
    assert [t for m, t in zip(s.loss_mask, s.token_ids) if m] == [10, 11, 12, 13, 14, 15]


def test_fork_starts_new_sample_and_failed_turns_are_excluded():
    t0 = turn(0, [1, 2], [10], "start")
    bad = turn(1, [1, 2, 10, 3], [], "extend", failed=True)
    t2 = turn(2, [1, 2, 10, 3], [11], "extend")
    t3 = turn(3, [7, 8], [20, 21], "fork", seg=1)
    t4 = turn(4, [5], [30], "start", thread="sub")
    samples = build_samples([t0, bad, t2, t3, t4], "R")
    by = {(s.thread_id, s.segment_index): s for s in samples}
    assert set(by) == {("main", 0), ("main", 1), ("sub", 0)}
    assert by[("main", 0)].turn_indices == [0, 2] and by[("main", 0)].num_sampled == 2
    assert by[("main", 1)].token_ids == [7, 8, 20, 21] and by[("main", 1)].loss_mask == [0, 0, 1, 1]
    assert by[("sub", 0)].loss_mask == [0, 1]
    assert [s.turn_indices[0] for s in samples] == [0, 3, 4]


def test_extend_that_does_not_extend_raises():
    t0 = turn(0, [1, 2], [10], "start")
    t1 = turn(1, [1, 2, 99, 3], [11], "extend")  # sampled 10 missing
    with pytest.raises(AlignmentBuildError, match="does not start with"):
        build_samples([t0, t1], "R")


def test_extend_without_predecessor_raises():
    with pytest.raises(AlignmentBuildError, match="no earlier"):
        build_samples([turn(0, [1], [2], "extend")], "R")


def test_empty():
    assert build_samples([], "R") == []
