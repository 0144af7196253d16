"""The walking skeleton end to end: real engine, gateway, bubblewrap sandbox, minimal harness,
grader and GSPO step — one small step."""

import asyncio
import json

import pytest

from legorl.config import RunConfig
from legorl.loop.train import train
from legorl.observe.monitors import AlertLog
from legorl.store import open_run
from legorl.trajectory.records import Rollout

pytestmark = [pytest.mark.slow, pytest.mark.sandbox]


class _Phases:
    """Records what the live progress display would be told."""

    def __init__(self) -> None:
        self.events: list[tuple[str, int | None]] = []
        self.done: list[str] = []

    def begin(self, label: str, total: int | None = None) -> None:
        self.events.append((label, total))

    def rollout_done(self, rollout: Rollout) -> None:
        self.done.append(rollout.rollout_id)


def test_one_training_step_end_to_end(tmp_path):
    cfg = RunConfig.load(
        None,
        run_dir=str(tmp_path / "run"),
        steps=1,
        tasks_per_step=1,
        group_size=2,
        **{"rollout.max_turns": 2, "rollout.max_tokens_per_turn": 64, "rollout.temperature": 0.4},
    )
    phases = _Phases()
    history = asyncio.run(train(cfg, progress=phases))
    run = tmp_path / "run"
    store = open_run(run)
    rollouts = list(store.iter_rollouts())
    metrics = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert len(rollouts) == 2 and len(metrics) == 1 and len(history) == 1
    # the live display heard of both rollouts as they ended, then of the training phase
    assert phases.events[0] == ("step 1/1: rollouts", 2) and sorted(phases.done) == sorted(
        r.rollout_id for r in rollouts
    )
    assert phases.events[1][0].startswith("step 1/1: training on ") and len(phases.events) == 2
    for r in rollouts:
        assert r.status in ("ok", "timeout"), (r.status, r.cause, r.harness_log_tail)
        assert r.grader is not None and r.reward in (0.0, 1.0)
        assert r.samples, "every rollout made at least one model call"
        for s in r.samples:
            assert s.num_sampled > 0
            assert s.alignment_events[0].kind == "start"
            assert all(e.kind in ("extend", "realign") for e in s.alignment_events[1:])
        assert [s.token_ids for s in store.samples(r.rollout_id)] == [s.token_ids for s in r.samples]
    turns = list(store.iter_turns())
    assert len(turns) == sum(len(s.turn_indices) for r in rollouts for s in r.samples)
    m = metrics[0]
    print(
        f"\nrollout vs trainer logprobs on the run's samples: pearson={m['mismatch/pearson']:.6f} "
        f"max|Δ|={m['mismatch/max_abs_diff']:.2e} tokens={m['mismatch/tokens']}"
    )
    assert m["mismatch/pearson"] >= 0.9999
    assert m["mismatch/max_abs_diff"] <= 1e-3
    assert [a.monitor for a in AlertLog(run).read() if a.monitor == "mismatch"] == []  # a faithful run stays quiet
