from legorl.loop.batch import assemble_batch
from legorl.trajectory.records import Rollout, Sample


def _rollout(task, reward, status="ok", flags=()):
    s = Sample(rollout_id="r", thread_id="main", segment_index=0, token_ids=[1, 2, 3], loss_mask=[0, 1, 1],
               rollout_logprobs=[0.0, -0.1, -0.2])
    return Rollout(rollout_id="r", task_id=task, harness="minimal", sandbox="bwrap", reward=reward, status=status,
                   flags=list(flags), samples=[s])


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
