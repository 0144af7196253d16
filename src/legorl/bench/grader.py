"""Grader throughput: the gold patch of every built-in task graded with ``workers`` threads.

Reports rollouts/min and the cost of each stage (diff filter, sandbox create, apply — including the
restore/static scan —, test run, parse, twins) as mean / p50 / p90 seconds, from ``GraderReport.stage_s``.

``behaviour``: the cost of the behaviour defenses (:mod:`legorl.grading.behaviour`: the in-process
guard in every test run, and the twin run when the FAIL_TO_PASS tests pass), measured in the same run:
every job is graded with and without them, interleaved, for the gold patch (the FAIL_TO_PASS tests
pass, so the twin run happens) and for an empty diff (they fail: the guard only). Each case holds
``with`` and ``without`` (``grade_s`` and ``stages`` as above) and ``ratio`` (mean grading time with /
without); ``resolved_with``/``blocking_with`` show the defenses changed no verdict on gold patches.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

STAGES = ("diff_filter", "sandbox_create", "apply", "test_run", "parse", "twins")


def _pct(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    values = sorted(values)
    return values[min(len(values) - 1, int(q * (len(values) - 1) + 0.5))]


def _summary(reports: list[Any]) -> dict:
    per_stage = {}
    for stage in STAGES:
        vals = [r.stage_s.get(stage, 0.0) for r in reports if stage in r.stage_s]
        per_stage[stage] = {
            "mean_s": round(statistics.fmean(vals), 4) if vals else 0.0,
            "p50_s": round(_pct(vals, 0.5), 4),
            "p90_s": round(_pct(vals, 0.9), 4),
            "n": len(vals),
        }
    totals = [r.duration_s for r in reports]
    return {
        "grade_s": {
            "mean_s": round(statistics.fmean(totals), 3) if totals else 0.0,
            "p50_s": round(_pct(totals, 0.5), 3),
            "p90_s": round(_pct(totals, 0.9), 3),
        },
        "stages": per_stage,
    }


def run_grader_bench(workers: int = 2, suite: str = "builtin", rounds: int = 1, behaviour: bool = True) -> dict:
    """``behaviour``: also grade every job without the behaviour defenses (and an empty diff with and
    without them) to report their cost under ``behaviour``; False skips that (a quarter of the time)."""
    from legorl.config import BwrapSandboxConfig
    from legorl.grading.grader import grade
    from legorl.loop.stack import sandbox_backend
    from legorl.sandbox.base import SandboxSpec
    from legorl.tasks.loader import load_suite

    tasks = load_suite(suite)
    with tempfile.TemporaryDirectory(prefix="legorl-bench-grader-") as root:
        backend = sandbox_backend(BwrapSandboxConfig(root=Path(root)))
        for t in tasks:  # warm the image cache: measure grading, not first-time layer builds
            backend.create(SandboxSpec(source_dir=t.source())).destroy()
        jobs = [t for _ in range(rounds) for t in tasks]
        t0 = time.perf_counter()
        with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
            reports = list(pool.map(lambda t: grade(t, t.patch, backend), jobs))
        wall = time.perf_counter() - t0
        cost: dict[str, Any] = {}
        if behaviour:
            cases = [(t, case, on) for t in jobs for case in ("gold", "failing") for on in (False, True)]
            with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
                graded = list(
                    pool.map(
                        lambda c: grade(c[0], c[0].patch if c[1] == "gold" else "", backend, behaviour_checks=c[2]),
                        cases,
                    )
                )
            for case in ("gold", "failing"):
                sel = {
                    on: [r for (t, c, o), r in zip(cases, graded, strict=True) if c == case and o == on]
                    for on in (False, True)
                }
                without, with_ = _summary(sel[False]), _summary(sel[True])
                base = without["grade_s"]["mean_s"]
                cost[case] = {
                    "without": without,
                    "with": with_,
                    "ratio": round(with_["grade_s"]["mean_s"] / base, 2) if base else None,
                    "resolved_with": sum(r.resolved for r in sel[True]),
                    "blocking_with": sum(bool(r.blocking_flags()) for r in sel[True]),
                }
    summary = _summary(reports)
    return {
        "suite": suite,
        "workers": workers,
        "rollouts": len(reports),
        "wall_s": round(wall, 2),
        "rollouts_per_min": round(60 * len(reports) / wall, 1) if wall else 0.0,
        "grade_s": summary["grade_s"],
        "stages": summary["stages"],
        "resolved": sum(r.resolved for r in reports),
        "status": {s: sum(r.status == s for r in reports) for s in {r.status for r in reports}},
        "blocking_flags": sum(bool(r.blocking_flags()) for r in reports),
        "behaviour": cost,
    }
