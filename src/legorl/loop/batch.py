"""Rollouts → a training batch: drop what must not train, normalise rewards within groups."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from legorl.trajectory.records import Rollout, Sample
from legorl.training.gspo import group_advantages

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


def assemble_batch(rollouts: list[Rollout], flagged_policy: str = "zero") -> Batch:
    by_task: dict[str, list[Rollout]] = defaultdict(list)
    dropped: dict[str, int] = defaultdict(int)
    for r in rollouts:
        if r.status not in TRAINABLE_STATUSES:
            dropped[r.status] += 1
            continue
        if r.flags and flagged_policy == "drop":
            dropped["flagged"] += 1
            continue
        by_task[r.task_id].append(r)
    batch = Batch(samples=[], groups_total=len(by_task), dropped=dict(dropped))
    for group in by_task.values():
        advs = group_advantages([r.reward for r in group])
        if advs is None:  # no variance or too few valid rollouts: no gradient from this group
            batch.monitor.extend(s for r in group for s in r.samples)
            continue
        batch.groups_with_signal += 1
        for r, a in zip(group, advs):
            for s in r.samples:
                s.reward, s.advantage = r.reward, a
                batch.samples.append(s)
    return batch
