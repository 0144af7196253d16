import pytest
from sample_records import tiny_sample

from legorl.loop.batch import assemble_batch
from legorl.loop.truncation import truncation_flag
from legorl.trajectory.records import Flag, Rollout, Turn


def _rollout(task, reward, status="ok", flags=(), truncated=False):
    s = tiny_sample()
    return Rollout(
        rollout_id="r",
        task_id=task,
        harness="minimal",
        sandbox="bwrap",
        reward=reward,
        status=status,
        flags=list(flags),
        samples=[s],
        flag_details=[Flag(kind="truncated", severity="info", evidence={"by": "budget"})] if truncated else [],
    )


def test_env_failures_leave_before_group_statistics():
    rs = [_rollout("a", 1.0), _rollout("a", 0.0), _rollout("a", 0.0, status="env_failure")]
    batch = assemble_batch(rs)
    assert batch.dropped == {"env_failure": 1}
    # Normalised over the 2 valid rollouts only: a zero for the env failure would shift both.
    assert [round(s.advantage, 4) for s in batch.samples] == [1.0, -1.0]
    assert len(batch.samples) == 2


def test_groups_without_signal_add_no_samples():
    rs = [_rollout("a", 0.0), _rollout("a", 0.0), _rollout("b", 1.0), _rollout("b", 1.0, status="env_failure")]
    batch = assemble_batch(rs)
    assert batch.samples == [] and batch.groups_with_signal == 0 and batch.groups_total == 2


def test_flagged_rollouts_can_be_dropped():
    rs = [_rollout("a", 1.0), _rollout("a", 0.0, flags=["modified_test_file:tests/t.py"]), _rollout("a", 0.0)]
    assert len(assemble_batch(rs, "drop").samples) == 2
    assert len(assemble_batch(rs, "zero").samples) == 3


def _turn(finish: str) -> Turn:
    from legorl.trajectory.records import AlignmentEvent

    return Turn(
        session_id="s",
        thread_id="t",
        turn_index=0,
        dialect="openai.chat",
        prompt_token_ids=[1],
        output_token_ids=[2],
        output_logprobs=[-0.1],
        sampling={},
        weight_version=0,
        finish_reason=finish,
        alignment=AlignmentEvent(turn_index=0, kind="start"),
    )


def test_truncation_flag():
    assert truncation_flag("finished", [_turn("stop")]) is None
    assert truncation_flag("finished", [_turn("length")]).evidence["by"] == "length"
    assert truncation_flag("budget", [_turn("stop")]).evidence["by"] == "budget"


@pytest.mark.parametrize("policy", ["keep", "mask", "penalize", "drop"])
def test_truncated_policy(policy):
    # group a: 1.0, 0.0, and a truncated 1.0
    rs = [_rollout("a", 1.0), _rollout("a", 0.0), _rollout("a", 1.0, truncated=True)]
    for i, r in enumerate(rs):
        r.rollout_id = f"r{i}"
    batch = assemble_batch(rs, truncated_policy=policy, truncated_reward=-1.0)
    assert batch.truncated == 1
    advs = [round(s.advantage, 4) for s in batch.samples]
    if policy == "keep":  # rewards 1, 0, 1
        assert advs == [0.7071, -1.4142, 0.7071]
    elif policy == "mask":  # same baseline, the truncated one only monitored
        assert advs == [0.7071, -1.4142] and len(batch.monitor) == 1
    elif policy == "penalize":  # rewards 1, 0, -1
        assert advs == [1.2247, 0.0, -1.2247] and batch.samples[2].reward == -1.0
    else:  # rewards 1, 0
        assert advs == [1.0, -1.0] and batch.dropped == {"truncated": 1}
