"""Rollouts → a training batch: drop what must not train, turn rewards into advantages within groups
(the estimator ``trainer.advantage``, :mod:`legorl.training.objectives`).

Truncated rollouts (cut by the turn or token budget) follow ``trainer.truncated``: see
:mod:`legorl.loop.truncation`."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from legorl.loop.truncation import is_truncated
from legorl.training.objectives import get_advantage
from legorl.trajectory.records import Rollout, Sample

# Statuses whose reward says something about the policy. Env failures and our own harness
# crashes are infrastructure: they are kept out of the gradient, not scored as zeros.
TRAINABLE_STATUSES = ("ok", "timeout")


@dataclass
class Batch:
    samples: list[Sample]
    # Valid samples that carry no gradient (groups without signal): still checked for fidelity.
    monitor: list[Sample] = field(default_factory=list)
    groups_total: int = 0
    groups_with_signal: int = 0
    dropped: dict[str, int] = field(default_factory=dict)
    truncated: int = 0  # valid rollouts cut by their budget (whatever the policy did with them)


def assemble_batch(
    rollouts: list[Rollout],
    flagged_policy: str = "zero",
    truncated_policy: str = "keep",
    truncated_reward: float = 0.0,
    advantage: str = "group_norm",
) -> Batch:
    # looked up first: an unknown estimator fails even on a batch with no group to estimate
    estimate = get_advantage(advantage)
    by_task: dict[str, list[Rollout]] = defaultdict(list)
    dropped: dict[str, int] = defaultdict(int)
    masked: set[int] = set()  # by identity: rollout ids need not be unique here
    rewards: dict[int, float] = {}
    truncated = 0
    for r in rollouts:
        if r.status not in TRAINABLE_STATUSES:
            dropped[r.status] += 1
            continue
        if r.flags and flagged_policy == "drop":
            dropped["flagged"] += 1
            continue
        reward = r.reward
        if is_truncated(r):
            truncated += 1
            if truncated_policy == "drop":
                dropped["truncated"] += 1
                continue
            if truncated_policy == "mask":
                masked.add(id(r))
            elif truncated_policy == "penalize":
                reward = truncated_reward
        rewards[id(r)] = reward
        by_task[r.task_id].append(r)
    batch = Batch(samples=[], groups_total=len(by_task), dropped=dict(dropped), truncated=truncated)
    for group in by_task.values():
        advs = estimate([rewards[id(r)] for r in group])
        if advs is None:  # no signal (no variance, too few valid rollouts): no gradient from this group
            batch.monitor.extend(s for r in group for s in r.samples)
            continue
        batch.groups_with_signal += 1
        for r, a in zip(group, advs):
            for s in r.samples:
                s.reward, s.advantage = rewards[id(r)], a
                # masked: in the baseline above, but no gradient (scored for fidelity only)
                (batch.monitor if id(r) in masked else batch.samples).append(s)
    return batch
