"""Which rollouts were cut by their budget, and what a training batch does with them.

A rollout is *truncated* when the harness ran out of its turn or token budget before it finished
(``HarnessResult.ending == "budget"``: the harness stopped at ``max_turns`` or the gateway refused
calls over the session budget) or when its last model call was cut at ``max_tokens_per_turn``
(finish reason ``length``). :func:`truncation_flag` records it as an info Flag (``truncated``,
evidence ``by``: ``budget`` | ``length``) on the rollout, so the evidence is on disk with it.

``RunConfig.trainer.truncated`` then decides (:mod:`legorl.loop.batch`):
``keep`` — train on the graded reward (for a harness such as the minimal one, running out of turns
*is* how a failed attempt ends, so its 0 is the real outcome); ``mask`` — the reward counts in its
group's baseline, its samples get no gradient (DAPO's overlong filtering); ``penalize`` — the
reward becomes ``truncated_reward`` before group statistics; ``drop`` — left out before group
statistics, like an environment failure. Every step counts its truncated rollouts either way.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from legorl.trajectory.records import Flag, Rollout

TRUNCATED = "truncated"


def truncation_flag(ending: str, turns: Sequence[Any]) -> Flag | None:
    """The ``truncated`` info Flag of a rollout whose harness ended with ``ending`` after ``turns``
    (Turn records, in order), or None when it was not cut."""
    served = [t for t in turns if not getattr(t, "failed", False)]
    if served and served[-1].finish_reason == "length":
        return Flag(
            kind=TRUNCATED,
            severity="info",
            stage="during",
            evidence={"by": "length", "turn": served[-1].turn_index, "source": "gateway"},
        )
    if ending == "budget":
        return Flag(
            kind=TRUNCATED,
            severity="info",
            stage="during",
            evidence={"by": "budget", "turns": len(served), "source": "harness"},
        )
    return None


def is_truncated(rollout: Rollout) -> bool:
    return any(f.kind == TRUNCATED for f in rollout.flag_details)
