"""Asynchronous rollouts end to end (embedded engine apart from the trainer, real sandboxes,
harness, grader and GSPO steps): the next step's rollouts start before this step trains, and no
sample older than ``max_staleness`` weight versions is trained on."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from pathlib import Path

import pytest

from legorl.config import RunConfig
from legorl.loop.staleness import sample_lag
from legorl.loop.train import train
from legorl.store import open_run

pytestmark = [pytest.mark.slow, pytest.mark.sandbox]

DEMO = Path(__file__).resolve().parents[2] / "configs" / "demo.json"


def test_async_rollouts_overlap_training_and_respect_max_staleness(tmp_path):
    run = tmp_path / "run"
    cfg = RunConfig.load(
        DEMO,
        run_dir=str(run),
        steps=3,
        tasks_per_step=2,
        group_size=4,
        max_staleness=1,
        **{
            "engine.colocate_trainer": False,
            "rollout.temperature": 1.0,
            "eval.before": False,
            "eval.after": False,
        },
    )
    asyncio.run(train(cfg))
    metrics = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == [0, 1, 2]
    by_step: dict[int, list] = {}
    for r in open_run(run).iter_rollouts():
        by_step.setdefault(r.step, []).append(r)
    assert sorted(by_step) == [0, 1, 2] and all(len(rs) == 8 for rs in by_step.values())

    version_before = 0  # the trainer's weight version when each step trains
    for m in metrics:
        step = m["step"]
        if step > 0:  # started while the previous step trained: before its metrics row was written
            assert max(r.started_at for r in by_step[step]) < metrics[step - 1]["time"]
        # the step's own account, recomputed from what is on disk
        lags = {r.rollout_id: [sample_lag(version_before, s.weight_version) for s in r.samples] for r in by_step[step]}
        stale = [rid for rid, ls in lags.items() if ls and max(ls) > 1]
        kept = Counter(lag for rid, ls in lags.items() if rid not in stale for lag in ls)
        print(f"\nstep {step}: trainer v{version_before}, kept samples by lag {dict(kept)}, dropped {len(stale)}")
        assert m["batch/dropped_stale"] == len(stale) == 0  # one step of overlap: never more than 1 behind
        assert {k: v for k, v in m.items() if k.startswith("batch/version_lag_")} == {
            f"batch/version_lag_{lag}": n for lag, n in sorted(kept.items())
        }
        assert m.get("batch/max_version_lag", 0) <= 1
        if step == 0:
            assert set(kept) == {0}  # nothing started early for the first step
        version_before = m["weight_version"]
    assert metrics[-1]["weight_version"] >= 1  # the weights moved while rollouts were running
