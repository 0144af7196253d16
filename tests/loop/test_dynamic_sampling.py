"""DAPO's dynamic sampling and overlong reward shaping, against hand-computed batches."""

from __future__ import annotations

import random

import pytest

from legorl.config import RunConfig
from legorl.errors import ConfigError
from legorl.loop.batch import OverlongShaping, assemble_batch, overlong_shaping
from legorl.loop.dynamic_sampling import draw_unused, refill_groups
from legorl.tasks.model import Task
from legorl.trajectory.records import Rollout, Sample

# each task's group: the rewards its two rollouts get
REWARDS = {
    "a": (1.0, 0.0),  # signal
    "b": (0.0, 0.0),  # none
    "c": (1.0, 1.0),  # none
    "d": (0.0, 1.0),  # signal
    "e": (0.0, 0.0),  # none
    "f": (1.0, 0.0),  # signal
}


def _rollout(task: str, reward: float, sampled: int = 2) -> Rollout:
    sample = Sample(
        rollout_id=f"{task}-{reward}",
        thread_id="main",
        segment_index=0,
        token_ids=[1] * (sampled + 1),
        loss_mask=[0] + [1] * sampled,
        rollout_logprobs=[0.0] + [-0.5] * sampled,
    )
    return Rollout(
        rollout_id=sample.rollout_id, task_id=task, harness="h", sandbox="s", reward=reward, samples=[sample]
    )


def _group(task: str) -> list[Rollout]:
    return [_rollout(task, r) for r in REWARDS[task]]


class _Source:
    """Tasks in a fixed order (the first unused ones), and each task's group of rollouts."""

    def __init__(self, order: str) -> None:
        self.order, self.runs = order, []

    def draw(self, k: int, used: set[str]) -> list[Task]:
        return [Task.model_construct(instance_id=t) for t in self.order if t not in used][:k]

    async def run(self, tasks: list[Task]) -> list[Rollout]:
        self.runs.append([t.instance_id for t in tasks])
        return [r for t in tasks for r in _group(t.instance_id)]


async def _refill(first: str, order: str, rounds: int, target: int = 3):
    source = _Source(order)
    rollouts = [r for t in first for r in _group(t)]
    done = await refill_groups(rollouts, assemble_batch, source.draw, source.run, target=target, rounds=rounds)
    return done, source.runs


async def test_groups_without_signal_are_refilled_until_the_target():
    done, runs = await _refill("abc", "abcdef", rounds=3)
    # a has signal, b and c not: 2 new tasks (d: signal, e: none), then the 1 still missing (f)
    assert runs == [["d", "e"], ["f"]]
    assert done.rounds == 2 and done.tasks_added == ["d", "e", "f"]
    assert done.metrics() == {"batch/refill_rounds": 2, "batch/refill_groups": 3}
    batch = done.batch
    assert (batch.groups_total, batch.groups_with_signal) == (6, 3)
    # the groups with signal train (rewards 1, 0 -> advantages +1, -1; d's 0, 1 -> -1, +1; group_norm
    # divides by std + 1e-6) ...
    assert [s.rollout_id[0] for s in batch.samples] == ["a", "a", "d", "d", "f", "f"]
    assert [s.advantage for s in batch.samples] == pytest.approx([1, -1, -1, 1, 1, -1], rel=1e-5)
    # ... the others stay, scored for fidelity only
    assert sorted(s.rollout_id[0] for s in batch.monitor) == ["b", "b", "c", "c", "e", "e"]
    assert len(done.rollouts) == 12


async def test_refills_stop_at_the_bound_and_when_no_task_is_left():
    done, runs = await _refill("abc", "abcdef", rounds=1)
    assert runs == [["d", "e"]] and done.batch.groups_with_signal == 2  # one round only
    done, runs = await _refill("abc", "abce", rounds=5)
    assert runs == [["e"]] and done.rounds == 1 and done.batch.groups_with_signal == 1  # e alone was unused
    done, runs = await _refill("adf", "abcdef", rounds=5)
    assert runs == [] and done.rounds == 0  # every group has signal already
    done, runs = await _refill("abc", "abcdef", rounds=0)
    assert runs == [] and done.batch.groups_with_signal == 1  # off


def test_draw_unused_never_repeats_a_task_of_the_step():
    tasks = [Task.model_construct(instance_id=t) for t in "abcdef"]
    drawn = draw_unused(random.Random(0), tasks, 3, {"a", "c"})
    assert len(drawn) == 3 and not {t.instance_id for t in drawn} & {"a", "c"}
    assert [t.instance_id for t in draw_unused(random.Random(0), tasks, 3, {"a", "c"})] == [
        t.instance_id for t in drawn
    ]
    assert sorted(t.instance_id for t in draw_unused(random.Random(0), tasks, 9, set("abcd"))) == ["e", "f"]


def test_overlong_penalty_is_linear_in_the_buffer():
    shaping = OverlongShaping(max_tokens=100, buffer_tokens=20, penalty=1.0)
    # 0 up to 80 tokens; (80 - L) / 20 between; -1 from 100 on
    deltas = [shaping.reward_delta(n) for n in (0, 80, 81, 85, 90, 99, 100, 130)]
    assert deltas == pytest.approx([0.0, 0.0, -0.05, -0.25, -0.5, -0.95, -1.0, -1.0])
    assert OverlongShaping(100, 20, penalty=0.5).reward_delta(90) == pytest.approx(-0.25)


def test_overlong_shaping_applies_before_group_statistics():
    shaping = OverlongShaping(max_tokens=100, buffer_tokens=20)
    # both solved: no signal without shaping; with it, 90 sampled tokens cost 0.5
    group = [_rollout("a", 1.0, sampled=90), _rollout("a", 1.0, sampled=50)]
    assert assemble_batch(group).groups_with_signal == 0
    batch = assemble_batch(group, overlong=shaping)
    assert batch.overlong == 1 and batch.groups_with_signal == 1
    # rewards 0.5 and 1.0: mean 0.75, std 0.25 -> advantages -1, +1
    assert [s.reward for s in batch.samples] == [0.5, 1.0]
    assert [s.advantage for s in batch.samples] == pytest.approx([-1.0, 1.0], rel=1e-5)
    assert [r.reward for r in group] == [1.0, 1.0]  # the graded reward on record is untouched


def test_overlong_max_tokens_defaults_to_the_rollout_budget():
    cfg = RunConfig.load(None, **{"trainer.overlong": {"buffer_tokens": 16}, "rollout.max_turns": 2})
    assert overlong_shaping(cfg) == OverlongShaping(max_tokens=2 * 512, buffer_tokens=16, penalty=1.0)
    cfg = RunConfig.load(None, **{"trainer.overlong": {"buffer_tokens": 16}, "rollout.max_total_tokens": 300})
    assert overlong_shaping(cfg) == OverlongShaping(max_tokens=300, buffer_tokens=16)
    assert overlong_shaping(RunConfig.load(None)) is None
    with pytest.raises(ConfigError, match="buffer_tokens 64 exceeds its max_tokens 32"):
        RunConfig.load(None, **{"trainer.overlong": {"buffer_tokens": 64, "max_tokens": 32}})


@pytest.mark.slow
@pytest.mark.sandbox
def test_a_run_refills_its_groups_without_signal(tmp_path):
    """One token per answer: every line-fix rollout fails, so no group ever has signal and each round
    refills both groups with unused tasks, up to the bound; everything lands in the run store."""
    import asyncio
    import json
    from pathlib import Path

    from legorl.loop.train import train
    from legorl.store import open_run

    run = tmp_path / "run"
    demo = Path(__file__).resolve().parents[2] / "configs" / "demo.json"
    cfg = RunConfig.load(
        demo,
        run_dir=str(run),
        steps=1,
        tasks_per_step=2,
        group_size=2,
        dynamic_sampling_rounds=2,
        **{"rollout.max_tokens_per_turn": 1, "eval.before": False, "eval.after": False, "trainer.lora": {"rank": 4}},
    )
    asyncio.run(train(cfg))
    (m,) = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert (m["batch/refill_rounds"], m["batch/refill_groups"]) == (2, 4)
    assert m["batch/groups"] == 6 and m["batch/groups_with_signal"] == 0 and not m["train/updated"]
    rollouts = list(open_run(run).iter_rollouts())
    assert len(rollouts) == m["rollout/count"] == 12
    tasks = [r.task_id for r in rollouts]
    assert len(set(tasks)) == 6 and all(tasks.count(t) == 2 for t in tasks)  # six distinct groups of two
