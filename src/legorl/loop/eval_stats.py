"""Evaluation statistics: pass@k (unbiased), 95% intervals, per-task table, baseline comparison.

Inputs are graded rollouts, ``n`` per task. Only rollouts whose reward says something about the
policy count (statuses ``ok`` and ``timeout``, as in training: :data:`legorl.loop.batch.TRAINABLE_STATUSES`);
environment failures and harness crashes are reported apart and never counted as fails.

* pass@k of a task with ``n`` valid samples of which ``c`` are correct (reward > 0 in binary
  mode): the unbiased estimator of Chen et al. (2021), ``1 − C(n−c, k) / C(n, k)``, defined for
  ``k <= n``; the suite's pass@k is the mean over tasks that have at least ``k`` valid samples.
* 95% interval of pass@1: Wilson score interval over all valid samples; of pass@k (k > 1): a
  percentile bootstrap over tasks (2000 resamples, seeded: the report is reproducible).
* Baseline: two-proportion z-test on pass@1 (pooled), two-sided p-value.
"""

from __future__ import annotations

import math
import random
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

COUNTED_STATUSES = ("ok", "timeout")
Z95 = 1.959963984540054


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from ``n`` samples with ``c`` correct (``1 − C(n−c,k)/C(n,k)``)."""
    if not 0 <= c <= n or k < 1 or k > n:
        raise ValueError(f"pass@k needs 0 <= c <= n and 1 <= k <= n (n={n}, c={c}, k={k})")
    if n - c < k:
        return 1.0
    # C(n−c,k)/C(n,k) = Π_{i=n−c+1..n} (1 − k/i), numerically stable
    prod = 1.0
    for i in range(n - c + 1, n + 1):
        prod *= 1.0 - k / i
    return 1.0 - prod


def wilson_interval(successes: int, trials: int, z: float = Z95) -> tuple[float, float]:
    if trials == 0:
        return (0.0, 1.0)
    p = successes / trials
    denom = 1 + z * z / trials
    centre = (p + z * z / (2 * trials)) / denom
    half = z * math.sqrt(p * (1 - p) / trials + z * z / (4 * trials * trials)) / denom
    return (max(0.0, centre - half), min(1.0, centre + half))


def two_proportion_test(c1: int, n1: int, c2: int, n2: int) -> tuple[float, float]:
    """(z, two-sided p) of H0: p1 == p2, pooled standard error."""
    if n1 == 0 or n2 == 0:
        return (0.0, 1.0)
    pooled = (c1 + c2) / (n1 + n2)
    se = math.sqrt(pooled * (1 - pooled) * (1 / n1 + 1 / n2))
    if se == 0:
        return (0.0, 1.0)
    z = (c1 / n1 - c2 / n2) / se
    return (z, math.erfc(abs(z) / math.sqrt(2)))


@dataclass
class TaskResult:
    task_id: str
    samples: int = 0  # valid (counted) samples
    correct: int = 0
    env_failures: int = 0
    harness_errors: int = 0
    reward_mean: float = 0.0
    pass_at: dict[str, float] = field(default_factory=dict)  # "1", "4", ... (k <= samples)


@dataclass
class EvalReport:
    ks: list[int]
    tasks: list[TaskResult]
    pass_at: dict[str, float]
    interval: dict[str, tuple[float, float]]
    samples: int
    correct: int
    env_failures: int
    harness_errors: int
    meta: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> EvalReport:
        tasks = [TaskResult(**t) for t in d["tasks"]]
        interval = {k: (float(v[0]), float(v[1])) for k, v in d["interval"].items()}
        return cls(
            ks=list(d["ks"]),
            tasks=tasks,
            pass_at=dict(d["pass_at"]),
            interval=interval,
            samples=int(d["samples"]),
            correct=int(d["correct"]),
            env_failures=int(d["env_failures"]),
            harness_errors=int(d["harness_errors"]),
            meta=dict(d.get("meta", {})),
        )


@dataclass(frozen=True)
class Outcome:
    """One graded rollout, as the statistics see it."""

    task_id: str
    status: str
    reward: float


def build_report(
    outcomes: Iterable[Outcome],
    ks: Sequence[int],
    bootstrap: int = 2000,
    seed: int = 0,
    meta: dict[str, Any] | None = None,
) -> EvalReport:
    by_task: dict[str, list[Outcome]] = defaultdict(list)
    for o in outcomes:
        by_task[o.task_id].append(o)
    tasks: list[TaskResult] = []
    for task_id in sorted(by_task):
        rs = by_task[task_id]
        valid = [o for o in rs if o.status in COUNTED_STATUSES]
        t = TaskResult(
            task_id,
            samples=len(valid),
            correct=sum(1 for o in valid if o.reward > 0),
            env_failures=sum(1 for o in rs if o.status == "env_failure"),
            harness_errors=sum(1 for o in rs if o.status == "harness_error"),
            reward_mean=sum(o.reward for o in valid) / len(valid) if valid else 0.0,
        )
        t.pass_at = {str(k): pass_at_k(t.samples, t.correct, k) for k in ks if k <= t.samples}
        tasks.append(t)
    samples, correct = sum(t.samples for t in tasks), sum(t.correct for t in tasks)
    pass_at: dict[str, float] = {}
    interval: dict[str, tuple[float, float]] = {}
    rng = random.Random(seed)
    for k in ks:
        eligible = [t.pass_at[str(k)] for t in tasks if str(k) in t.pass_at]
        if not eligible:
            continue
        pass_at[str(k)] = sum(eligible) / len(eligible)
        if k == 1:
            interval["1"] = wilson_interval(correct, samples)
        else:
            means = sorted(sum(rng.choices(eligible, k=len(eligible))) / len(eligible) for _ in range(bootstrap))
            interval[str(k)] = (means[int(0.025 * bootstrap)], means[min(bootstrap - 1, int(0.975 * bootstrap))])
    return EvalReport(
        ks=list(ks),
        tasks=tasks,
        pass_at=pass_at,
        interval=interval,
        samples=samples,
        correct=correct,
        env_failures=sum(t.env_failures for t in tasks),
        harness_errors=sum(t.harness_errors for t in tasks),
        meta=meta or {},
    )


def compare(report: EvalReport, baseline: EvalReport) -> dict[str, Any]:
    """pass@1 (and pass@k where both have it) differences; z-test on pass@1."""
    z, p = two_proportion_test(report.correct, report.samples, baseline.correct, baseline.samples)
    diff = {k: report.pass_at[k] - baseline.pass_at[k] for k in report.pass_at if k in baseline.pass_at}
    return {"diff": diff, "pass@1_z": z, "pass@1_p": p, "significant_at_0.05": p < 0.05}
