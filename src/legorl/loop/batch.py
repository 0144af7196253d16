"""Rollouts → a training batch: drop what must not train, turn rewards into advantages within groups
(the estimator ``trainer.advantage``, :mod:`legorl.objectives`).

Truncated rollouts (cut by the turn or token budget) follow ``trainer.truncated``: see
:mod:`legorl.loop.truncation`. With ``trainer.overlong`` (DAPO's soft overlong punishment,
:class:`OverlongShaping`) a rollout's reward then loses a linear penalty for the sampled tokens it
spent in the last ``buffer_tokens`` before ``max_tokens``, before group statistics."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from legorl.loop.staleness import drop_stale
from legorl.loop.truncation import is_truncated
from legorl.objectives import get_advantage
from legorl.trajectory.records import Rollout, Sample

if TYPE_CHECKING:
    from legorl.config import RunConfig

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
    overlong: int = 0  # valid rollouts whose reward the overlong shaping lowered


@dataclass(frozen=True)
class OverlongShaping:
    """DAPO's soft overlong punishment (Yu et al. 2025, eq. 13) on a rollout of ``L`` sampled tokens:
    0 while ``L <= max_tokens - buffer_tokens``, then ``-penalty · (L - (max_tokens - buffer_tokens)) /
    buffer_tokens`` (linear, ``-penalty`` at ``L = max_tokens``), and ``-penalty`` beyond."""

    max_tokens: int
    buffer_tokens: int
    penalty: float = 1.0

    def reward_delta(self, sampled_tokens: int) -> float:
        start = self.max_tokens - self.buffer_tokens
        if sampled_tokens <= start:
            return 0.0
        if sampled_tokens >= self.max_tokens:
            return -self.penalty
        return -self.penalty * (sampled_tokens - start) / self.buffer_tokens


def overlong_shaping(cfg: RunConfig) -> OverlongShaping | None:
    """The shaping ``cfg.trainer.overlong`` asks for, its ``max_tokens`` resolved (None: off)."""
    shaping = cfg.trainer.overlong
    if shaping is None:
        return None
    return OverlongShaping(shaping.limit(cfg.rollout), shaping.buffer_tokens, shaping.penalty)


def sampled_tokens(rollout: Rollout) -> int:
    """What the policy generated in a rollout: the sampled (loss-masked) tokens of all its samples."""
    return sum(s.num_sampled for s in rollout.samples)


def assemble_batch(
    rollouts: list[Rollout],
    flagged_policy: str = "zero",
    truncated_policy: str = "keep",
    truncated_reward: float = 0.0,
    advantage: str = "group_norm",
    overlong: OverlongShaping | None = None,
) -> Batch:
    # looked up first: an unknown estimator fails even on a batch with no group to estimate
    estimate = get_advantage(advantage)
    by_task: dict[str, list[Rollout]] = defaultdict(list)
    dropped: dict[str, int] = defaultdict(int)
    masked: set[int] = set()  # by identity: rollout ids need not be unique here
    rewards: dict[int, float] = {}
    truncated = lowered = 0
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
        if overlong is not None:
            delta = overlong.reward_delta(sampled_tokens(r))
            reward += delta
            lowered += delta < 0
        rewards[id(r)] = reward
        by_task[r.task_id].append(r)
    batch = Batch(samples=[], groups_total=len(by_task), dropped=dict(dropped), truncated=truncated, overlong=lowered)
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


def step_batch(cfg: RunConfig, rollouts: list[Rollout], *, version: int | None = None) -> Batch:
    """:func:`assemble_batch` with the run's grading and trainer options. ``version``: the trainer's
    weight version, whose ``max_staleness`` first drops the samples too old for it."""
    if version is not None:
        rollouts = drop_stale(rollouts, version, cfg.max_staleness).kept
    return assemble_batch(
        rollouts,
        cfg.grading.flagged_policy,
        cfg.trainer.truncated,
        cfg.trainer.truncated_reward,
        cfg.trainer.advantage,
        overlong_shaping(cfg),
    )
