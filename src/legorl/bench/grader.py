"""Grader throughput: the gold patch of every built-in task graded with ``workers`` threads.

Reports rollouts/min and the cost of each stage (diff filter, sandbox create, apply — including the
restore/static scan —, test run, parse) as mean / p50 / p90 seconds, from ``GraderReport.stage_s``.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

STAGES = ("diff_filter", "sandbox_create", "apply", "test_run", "parse")


def _pct(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    values = sorted(values)
    return values[min(len(values) - 1, int(q * (len(values) - 1) + 0.5))]


def run_grader_bench(workers: int = 2, suite: str = "builtin", rounds: int = 1) -> dict:
    from legorl.config import BwrapSandboxConfig
    from legorl.grading.grader import grade
    from legorl.loop.stack import sandbox_backend
    from legorl.sandbox.base import SandboxSpec
    from legorl.tasks.loader import load_suite

    tasks = load_suite(suite)
    with tempfile.TemporaryDirectory(prefix="legorl-bench-grader-") as root:
        backend = sandbox_backend(BwrapSandboxConfig(root=Path(root)))
        for t in tasks:  # warm the image cache: measure grading, not first-time layer builds
            backend.create(SandboxSpec(source_dir=t.source_dir)).destroy()
        jobs = [t for _ in range(rounds) for t in tasks]
        t0 = time.perf_counter()
        with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
            reports = list(pool.map(lambda t: grade(t, t.patch, backend), jobs))
        wall = time.perf_counter() - t0
    per_stage = {}
    for stage in STAGES:
        vals = [r.stage_s.get(stage, 0.0) for r in reports if stage in r.stage_s]
        per_stage[stage] = {"mean_s": round(statistics.fmean(vals), 4) if vals else 0.0,
                            "p50_s": round(_pct(vals, 0.5), 4), "p90_s": round(_pct(vals, 0.9), 4)}
    totals = [r.duration_s for r in reports]
    return {
        "suite": suite,
        "workers": workers,
        "rollouts": len(reports),
        "wall_s": round(wall, 2),
        "rollouts_per_min": round(60 * len(reports) / wall, 1) if wall else 0.0,
        "grade_s": {"mean_s": round(statistics.fmean(totals), 3), "p50_s": round(_pct(totals, 0.5), 3),
                    "p90_s": round(_pct(totals, 0.9), 3)},
        "stages": per_stage,
        "resolved": sum(r.resolved for r in reports),
        "status": {s: sum(r.status == s for r in reports) for s in {r.status for r in reports}},
        "blocking_flags": sum(bool(r.blocking_flags()) for r in reports),
    }
