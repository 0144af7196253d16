"""How old a sample is when it is trained, and which samples are too old (asynchronous rollouts,
``RunConfig.max_staleness``).

A sample's *lag* is the trainer's weight version at the step that trains it minus the sample's
``weight_version`` (the oldest version among its turns; a turn counts with the version in force when
it finished). Synchronous runs train lag-0 samples only. With ``max_staleness = k`` the next step's
rollouts run while a step trains, so their first turns come from the weights before that step: lag
up to 1 per step of overlap. A rollout with any sample lagging more than ``k`` is dropped whole (its
group's advantages are taken over the rollouts that remain) and counted; the loss's importance
correction (:mod:`legorl.training.gspo`: π_old is the trainer before the step, the behaviour policy
is the engine's logprobs) is the same for fresh and stale samples.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from legorl.trajectory.records import Rollout


@dataclass
class StalenessReport:
    """What :func:`drop_stale` kept and dropped."""

    kept: list[Rollout]
    dropped: int = 0  # rollouts dropped as too old
    lags: Counter[int] = field(default_factory=Counter)  # kept samples by lag

    def metrics(self) -> dict[str, float]:
        """``batch/dropped_stale`` and the version-lag histogram ``batch/version_lag_<n>`` (kept samples)."""
        out: dict[str, float] = {"batch/dropped_stale": float(self.dropped)}
        out.update({f"batch/version_lag_{lag}": float(n) for lag, n in sorted(self.lags.items())})
        if self.lags:
            out["batch/max_version_lag"] = float(max(self.lags))
        return out


def sample_lag(trainer_version: int, sample_version: int | None) -> int:
    """Versions the sample is behind the trainer (a sample without a recorded version: 0)."""
    return 0 if sample_version is None else max(0, trainer_version - sample_version)


def drop_stale(rollouts: list[Rollout], trainer_version: int, max_staleness: int | None) -> StalenessReport:
    """The rollouts whose every sample lags at most ``max_staleness`` (None: no limit), the count of
    the others, and the kept samples' lag histogram."""
    report = StalenessReport(kept=[])
    for r in rollouts:
        lags = [sample_lag(trainer_version, s.weight_version) for s in r.samples]
        if max_staleness is not None and lags and max(lags) > max_staleness:
            report.dropped += 1
            continue
        report.kept.append(r)
        report.lags.update(lags)
    return report
