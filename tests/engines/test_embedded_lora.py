"""The embedded engine with LoRA (tiny random Llama): a trainer beside it sends the adapter alone,
which the engine injects and applies; a colocated trainer adds the adapters to the served module,
so its sync copies nothing."""

from __future__ import annotations

import asyncio

import pytest
import torch
from tiny_llama import tiny_llama

from legorl.config import TrainerConfig
from legorl.engines.base import SamplingParams, takes_adapters
from legorl.engines.embedded import EmbeddedEngine
from legorl.engines.vllm import VLLMEngine
from legorl.loop.weight_sync import sync_weights
from legorl.models.lora import has_lora
from legorl.training.logprobs import compute_token_logprobs
from legorl.training.trainer import Trainer
from legorl.trajectory.records import Sample

PROMPT = [1, 2, 3, 4]
SAMPLING = SamplingParams(max_tokens=6, temperature=1.0, seed=3)


def _engine() -> EmbeddedEngine:
    return EmbeddedEngine(tiny_llama(64), None, model_name="tiny", eos_token_ids=())


def _trainer(model: torch.nn.Module) -> Trainer:
    return Trainer(model, TrainerConfig(lr=5e-2, lora={"rank": 4, "alpha": 8}))


async def _train_on_own_samples(engine: EmbeddedEngine, trainer: Trainer) -> None:
    """One step on two of the engine's own generations, one rewarded, one not."""
    samples = []
    for i, advantage in enumerate((1.0, -1.0)):
        r = await engine.generate(PROMPT, SamplingParams(max_tokens=6, temperature=1.0, seed=10 + i))
        samples.append(
            Sample(
                rollout_id=f"r{i}",
                thread_id="t",
                segment_index=0,
                token_ids=PROMPT + r.token_ids,
                loss_mask=[0] * len(PROMPT) + [1] * len(r.token_ids),
                rollout_logprobs=[0.0] * len(PROMPT) + r.logprobs,
                advantage=advantage,
            )
        )
    metrics = await asyncio.to_thread(trainer.step, samples)
    assert metrics["train/updated"] and metrics["mismatch/pearson"] > 0.9999


def _served_logprobs_match(engine: EmbeddedEngine, trainer: Trainer, result) -> None:
    with torch.no_grad():
        lp = compute_token_logprobs(trainer.model, PROMPT + result.token_ids)[len(PROMPT) :]
    assert result.logprobs == pytest.approx(lp.tolist(), abs=1e-4)


async def test_a_trainer_apart_sends_the_adapter_alone_and_the_engine_applies_it():
    engine = _engine()
    trainer = _trainer(tiny_llama(64))  # its own copy of the same base weights
    try:
        assert takes_adapters(engine) and not has_lora(engine.model)
        synced = await sync_weights(engine, trainer)
        assert synced == {"sync/adapter": True, "sync/adapter_bytes": trainer.adapter().nbytes}
        assert has_lora(engine.model) and engine.weight_version == 0  # injected; still the base model (B = 0)
        await _train_on_own_samples(engine, trainer)
        await sync_weights(engine, trainer)
        after = await engine.generate(PROMPT, SAMPLING)
        assert after.weight_version == trainer.version == 1
        _served_logprobs_match(engine, trainer, after)
        # the engine's base weights are untouched: only the adapter travelled
        base = tiny_llama(64).state_dict()
        served = engine.model.state_dict()
        assert all(torch.equal(v, served[k.replace("proj.weight", "proj.base_layer.weight")]) for k, v in base.items())
    finally:
        engine.shutdown()


async def test_a_colocated_trainer_adds_the_adapters_to_the_served_module():
    engine = _engine()
    try:
        trainer = _trainer(engine.served_module())
        assert has_lora(engine.model)  # the trainer's adapters are the engine's
        before = await engine.generate(PROMPT, SAMPLING)
        await _train_on_own_samples(engine, trainer)
        await sync_weights(engine, trainer)  # the engine's own tensors: nothing copied, the version moves
        after = await engine.generate(PROMPT, SAMPLING)
        assert after.weight_version == before.weight_version + 1 == 1
        _served_logprobs_match(engine, trainer, after)
        assert max(abs(x - y) for x, y in zip(after.logprobs, before.logprobs)) > 1e-4
    finally:
        engine.shutdown()


def test_an_http_engine_takes_adapters_only_from_servers_started_for_them(tmp_path):
    def vllm(**kw: object) -> VLLMEngine:
        return VLLMEngine(
            ["http://127.0.0.1:9"], model_name="m", tokenizer=None, max_context=64, weights_dir=tmp_path, **kw
        )

    assert not takes_adapters(vllm()) and takes_adapters(vllm(serves_adapters=True))
