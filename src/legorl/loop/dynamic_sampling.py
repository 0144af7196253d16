"""DAPO's dynamic sampling (Yu et al. 2025, §3.2): a group whose rollouts all got the same reward
carries no gradient, so a step with many such groups trains on few; the step draws fresh tasks until
``target`` groups have signal (``RunConfig.dynamic_sampling_rounds`` rounds at most).

Each round assembles the batch of every rollout so far, counts the groups with signal, and runs a
group (``group_size`` rollouts) of each of ``target - groups_with_signal`` new tasks, none of them
already in the step. It stops when the target is met, the rounds are spent or no unused task is
left. Nothing is thrown away: the groups without signal stay in the run store and in the batch's
``monitor`` samples (scored for fidelity only); the batch can only gain groups with signal.
"""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from legorl.loop.batch import Batch
    from legorl.tasks.model import Task
    from legorl.trajectory.records import Rollout

__all__ = ["Refill", "draw_unused", "refill_groups"]


@dataclass
class Refill:
    rollouts: list[Rollout]  # the step's rollouts, the refills' appended
    batch: Batch  # assembled from all of them
    rounds: int = 0  # rounds that ran rollouts
    tasks_added: list[str] = field(default_factory=list)

    def metrics(self) -> dict[str, int]:
        return {"batch/refill_rounds": self.rounds, "batch/refill_groups": len(self.tasks_added)}


async def refill_groups(
    rollouts: list[Rollout],
    assemble: Callable[[list[Rollout]], Batch],
    draw: Callable[[int, set[str]], list[Task]],
    run: Callable[[list[Task]], Awaitable[list[Rollout]]],
    *,
    target: int,
    rounds: int,
) -> Refill:
    """Refill ``rollouts`` until ``target`` groups have signal, at most ``rounds`` rounds.
    ``assemble``: the step's batch of some rollouts; ``draw(k, used)``: up to ``k`` tasks whose ids
    are not in ``used``; ``run(tasks)``: a group of rollouts of each (on disk when it returns)."""
    done = Refill(list(rollouts), assemble(list(rollouts)))
    for _ in range(rounds):
        deficit = target - done.batch.groups_with_signal
        if deficit <= 0:
            break
        tasks = draw(deficit, {r.task_id for r in done.rollouts})
        if not tasks:
            break
        done.rollouts.extend(await run(tasks))
        done.rounds += 1
        done.tasks_added.extend(t.instance_id for t in tasks)
        done.batch = assemble(done.rollouts)
    return done


def draw_unused(rng: random.Random, tasks: Sequence[Task], k: int, used: set[str]) -> list[Task]:
    """Up to ``k`` of ``tasks`` whose ids are not in ``used``, drawn with the run's task-order ``rng``."""
    pool = [t for t in tasks if t.instance_id not in used]
    return rng.sample(pool, min(k, len(pool)))
