"""``legorl bench mine``: how fast the miner turns sources into validated tasks.

Mines the given sources (``legorl tasks mine``, :mod:`legorl.tasks.mining.pipeline`) into a scratch
suite (or ``out``) with ``workers`` sandboxes, and reports:

* ``validated``: tasks kept (each checked in bwrap: FAIL_TO_PASS fail before and pass after the
  gold patch, PASS_TO_PASS pass at both); ``verdicts``: candidates that got a verdict (kept or not);
* ``kept_share``: per method, kept / verdicts;
* ``tasks_per_hour``: validated tasks per hour of this run's wall time; ``verdicts_per_hour`` the
  same for verdicts (what the CPU does, whatever the share kept);
* ``cpu_s``: CPU seconds the run took (the miner and everything it started: sandboxes, git, uv;
  :mod:`legorl.tasks.mining.cpu`, ``cpu_source`` says how it was counted), and ``tasks_per_cpu_hour``: validated tasks per CPU-hour. On a machine shared with other work
  the wall-time figures measure the share it got; ``tasks_per_hour_2_cores`` = 2 ×
  ``tasks_per_cpu_hour`` is what two otherwise idle cores give (the runs of two workers do not share
  anything but the disk);
* ``cache``: test runs read from the run cache (``hits``) and run (``misses``), and the hit rate:
  a second run over the same sources is all hits;
* ``by_method``: per method: ``candidates``, ``excluded`` (decontamination), ``duplicates``,
  ``verdicts``, ``kept``, ``run_seconds`` (sandbox test time spent); ``by_source``: kept per source
  and method; ``sources``, ``workers``, ``cpus``, ``wall_s``, ``suite`` (where the suite was written),
  ``errors``.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

__all__ = ["run_mine_bench"]


def run_mine_bench(
    sources: list[str],
    *,
    workers: int = 2,
    max_mutations: int = 20,
    max_commits: int = 10,
    methods: list[str] | None = None,
    seed: int = 0,
    use_cache: bool = True,
    out: Path | None = None,
    python: str = "auto",
) -> dict[str, Any]:
    from legorl.tasks.mining.pipeline import METHODS, MineOptions, mine

    options = MineOptions(
        methods=methods or list(METHODS),
        seed=seed,
        workers=workers,
        max_mutations=max_mutations,
        max_commits=max_commits,
        use_cache=use_cache,
        python=python,
        dedup_mined=False,  # a benchmark measures the sources, not what other suites already hold
    )
    with tempfile.TemporaryDirectory(prefix="legorl-bench-mine-") as scratch:
        directory = out or Path(scratch) / "suite"
        report = mine(sources, directory, options)
    by_method: dict[str, dict[str, Any]] = {}
    for src in report.sources:
        for name, m in src.methods.items():
            row = by_method.setdefault(
                name, {"candidates": 0, "excluded": 0, "duplicates": 0, "verdicts": 0, "kept": 0, "run_seconds": 0.0}
            )
            row["candidates"] += m.candidates
            row["excluded"] += len(m.excluded)
            row["duplicates"] += len(m.duplicates)
            row["verdicts"] += m.validated
            row["kept"] += m.kept
            row["run_seconds"] = round(row["run_seconds"] + m.run_seconds, 1)
    validated = sum(r["kept"] for r in by_method.values())
    verdicts = sum(r["verdicts"] for r in by_method.values())
    hours = max(report.wall_s, 1e-9) / 3600
    hits, misses = report.runs.get("cache_hits", 0), report.runs.get("cache_misses", 0)
    cpu_hours = max(report.cpu_s, 1e-9) / 3600
    return {
        "validated": validated,
        "verdicts": verdicts,
        "kept_share": {k: round(r["kept"] / r["verdicts"], 3) if r["verdicts"] else None for k, r in by_method.items()},
        "tasks_per_hour": round(validated / hours, 1),
        "verdicts_per_hour": round(verdicts / hours, 1),
        "cpu_s": report.cpu_s,
        "cpu_source": report.cpu_source,
        "tasks_per_cpu_hour": round(validated / cpu_hours, 1),
        "tasks_per_hour_2_cores": round(2 * validated / cpu_hours, 1),
        "cache": {
            "hits": hits,
            "misses": misses,
            "hit_rate": round(hits / (hits + misses), 3) if hits + misses else None,
        },
        "by_method": by_method,
        "by_source": report.totals.get("by_source", {}),
        "sources": sources,
        "workers": workers,
        "cpus": os.cpu_count(),
        "wall_s": report.wall_s,
        "suite": str(out) if out is not None else None,
        "errors": [f"{s.source}: {e}" for s in report.sources for e in s.errors],
    }
