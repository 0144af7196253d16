"""What a harness's rollouts looked like, read back from run directories: model turns, how often a
rollout split into several samples and why (alignment kinds, fork kinds), failures that are not
the policy's (by cause), the first prompt's size. ``legorl bench learn --harness`` reports these
per harness beside the held-out rates."""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from legorl.loop.batch import TRAINABLE_STATUSES
from legorl.trajectory.records import Rollout, Turn

__all__ = ["HarnessStats", "cause_key", "harness_stats"]


@dataclass
class HarnessStats:
    rollouts: int = 0
    valid: int = 0  # graded as the policy's outcome (TRAINABLE_STATUSES)
    resolved: int = 0
    mean_turns: float = 0.0  # model calls per valid rollout
    multi_sample_share: float = 0.0  # valid rollouts that yielded more than one sample
    alignment: dict[str, int] = field(default_factory=dict)  # turns by kind: start / extend / realign / fork
    segment_kinds: dict[str, int] = field(default_factory=dict)  # forks by why: compaction / rebuild / retry / side ...
    realign_reasons: dict[str, int] = field(default_factory=dict)
    env_failure_rate: float = 0.0  # rollouts that are not the policy's outcome, of all
    env_failures_by_cause: dict[str, int] = field(default_factory=dict)
    first_prompt_tokens: int | None = None  # median over rollouts of the first model call's prompt
    first_prompt_tokens_max: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def cause_key(rollout: Rollout) -> str:
    """A failure's status and the first clause of its cause (causes carry ids and paths; the key
    groups the same failure across rollouts)."""
    cause = (rollout.cause or "").split(":", 1)[0].strip()
    return f"{rollout.status}: {cause[:80]}" if cause else rollout.status


def harness_stats(run_dirs: Iterable[Path]) -> HarnessStats:
    """The statistics over every rollout recorded in ``run_dirs`` (training runs, evaluation runs)."""
    from legorl.trajectory.store import open_run

    rollouts: list[Rollout] = []
    turns: dict[str, list[Turn]] = {}
    for run_dir in run_dirs:
        store = open_run(run_dir)
        try:
            for r in store.iter_rollouts():
                rollouts.append(r)
                turns[r.session_id] = list(store.iter_turns(r.session_id)) if r.session_id else []
        finally:
            store.close(compact=False)
    return _stats(rollouts, turns)


def _stats(rollouts: list[Rollout], turns: dict[str, list[Turn]]) -> HarnessStats:
    out = HarnessStats(rollouts=len(rollouts))
    if not rollouts:
        return out
    valid = [r for r in rollouts if r.status in TRAINABLE_STATUSES]
    out.valid, out.resolved = len(valid), sum(r.reward > 0 for r in valid)
    failures = [r for r in rollouts if r.status not in TRAINABLE_STATUSES]
    out.env_failure_rate = len(failures) / len(rollouts)
    out.env_failures_by_cause = dict(Counter(cause_key(r) for r in failures).most_common())
    if valid:
        out.mean_turns = statistics.fmean(len(turns.get(r.session_id, [])) for r in valid)
        out.multi_sample_share = sum(len(r.samples) > 1 for r in valid) / len(valid)
    kinds: Counter[str] = Counter()
    segments: Counter[str] = Counter()
    reasons: Counter[str] = Counter()
    firsts: list[int] = []
    for r in rollouts:
        ts = sorted(turns.get(r.session_id, []), key=lambda t: t.turn_index)
        if ts:
            firsts.append(len(ts[0].prompt_token_ids))
        for t in ts:
            kinds[t.alignment.kind] += 1
            if t.alignment.kind == "fork":
                segments[t.alignment.segment_kind] += 1
            if t.alignment.kind == "realign" and t.alignment.reason:
                reasons[t.alignment.reason.split(":", 1)[-1].strip()[:80]] += 1
    out.alignment, out.segment_kinds = dict(kinds), dict(segments)
    out.realign_reasons = dict(reasons.most_common(10))
    if firsts:
        out.first_prompt_tokens = int(statistics.median(firsts))
        out.first_prompt_tokens_max = max(firsts)
    return out
