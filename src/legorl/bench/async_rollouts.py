"""``legorl bench async``: the same training work run synchronously and with asynchronous rollouts
(``RunConfig.max_staleness``), and the wall-time ratio.

Both runs start from the same config and seed (so the same tasks in the same order), each in its own
directory under ``out`` (``sync/``, ``async/``); the engine is apart from the trainer in both
(``engine.colocate_trainer: false``: asynchronous rollouts need it, and the synchronous run must pay
the same weight copies). The figure is ``async_speedup`` = sync wall time / async wall time of the
training loop (model loading included in both). The rollouts of step k+1 overlap the training of
step k only where there are cores for both: on a 2-core machine sandboxes, harness, engine and
trainer already share them, so the ratio may stay near or below 1; on a GPU engine it should not.

Result keys (:data:`legorl.bench.schema.RESULT_KEYS` ``"async"``): ``steps``, ``max_staleness``,
``engine``, ``cpu_count``, ``sync_wall_s``, ``async_wall_s``, ``async_speedup``, ``lag_histogram``
(trained samples of the async run by lag, summed over steps), ``dropped_stale`` (its rollouts
dropped as too old), ``sync_reward_mean``, ``async_reward_mean`` (mean reward of each run's
rollouts), ``runs`` (the two run directories).
"""

from __future__ import annotations

import asyncio
import os
import statistics
import time
from collections import Counter
from pathlib import Path
from typing import Any

from legorl.config import RunConfig


def run_async_bench(config: Path, out: Path, overrides: dict[str, object], max_staleness: int = 1) -> dict[str, Any]:
    from legorl.loop.train import train
    from legorl.observe.progress import RichPhaseProgress

    phases = RichPhaseProgress()  # on stderr: stdout carries the JSON; two training runs take minutes
    walls: dict[str, float] = {}
    histories: dict[str, list[dict[str, Any]]] = {}
    cfg: RunConfig | None = None
    for name, staleness in (("sync", None), ("async", max_staleness)):
        cfg = RunConfig.load(
            config,
            **{
                "eval.before": False,
                "eval.after": False,
                **overrides,
                "engine.colocate_trainer": False,
                "run_dir": str(out / name),
                "max_staleness": staleness,
            },
        )
        if staleness is None:
            cfg = cfg.model_copy(update={"max_staleness": None})  # None overrides are skipped by load
        phases.console.print(
            f"[bold]{name}[/] run: {cfg.steps} steps × {cfg.tasks_per_step * cfg.group_size} rollouts"
            f" (max_staleness {staleness}) → {out / name}"
        )

        def on_step(step: int, m: dict[str, Any], run: str = name, steps: int = cfg.steps) -> None:
            phases.console.print(f"  {run} step {step + 1}/{steps}: {m['time/step_s']:.0f} s")

        t0 = time.perf_counter()
        with phases:
            histories[name] = asyncio.run(train(cfg, on_step=on_step, progress=phases))
        walls[name] = time.perf_counter() - t0
    assert cfg is not None
    lags: Counter[int] = Counter()
    for m in histories["async"]:
        for key, value in m.items():
            if key.startswith("batch/version_lag_"):
                lags[int(key.rsplit("_", 1)[1])] += int(value)
    return {
        "steps": cfg.steps,
        "max_staleness": max_staleness,
        "engine": cfg.engine.type,
        "cpu_count": os.cpu_count(),
        "sync_wall_s": round(walls["sync"], 2),
        "async_wall_s": round(walls["async"], 2),
        "async_speedup": round(walls["sync"] / walls["async"], 3),
        "lag_histogram": {str(k): v for k, v in sorted(lags.items())},
        "dropped_stale": int(sum(m.get("batch/dropped_stale", 0) for m in histories["async"])),
        "sync_reward_mean": _reward_mean(histories["sync"]),
        "async_reward_mean": _reward_mean(histories["async"]),
        "runs": {name: str(out / name) for name in walls},
    }


def _reward_mean(history: list[dict[str, Any]]) -> float | None:
    values = [m["rollout/reward_mean"] for m in history if m.get("rollout/reward_mean") is not None]
    return round(statistics.fmean(values), 4) if values else None
