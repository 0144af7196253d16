"""The trainer with LoRA (tiny random Llama): the optimiser holds the adapters alone, checkpoints hold
them alone and resume exactly, exports merge them or write PEFT's adapter directory."""

from __future__ import annotations

import pytest
import torch
from scored_samples import scored_sample
from tiny_llama import tiny_llama
from torch.distributed.checkpoint import FileSystemReader
from transformers import AutoModelForCausalLM, LlamaForCausalLM

from legorl.config import TrainerConfig
from legorl.errors import ConfigError
from legorl.models.lora import LoraAdapter
from legorl.training import checkpoint as ck
from legorl.training.logprobs import compute_token_logprobs
from legorl.training.trainer import Trainer

LORA = {"rank": 4, "alpha": 8}


def _model() -> LlamaForCausalLM:
    return tiny_llama(53, max_positions=128, seed=0)


def _samples(n: int = 4, ref: torch.nn.Module | None = None) -> list:
    """Samples whose rollout logprobs are ``ref``'s (default: the base model's)."""
    ref = ref if ref is not None else _model()
    g = torch.Generator().manual_seed(3)
    return [
        scored_sample(ref, f"r{i}", torch.randint(0, 53, (10 + i,), generator=g).tolist(), 2, (-1.0) ** i, reward=0.0)
        for i in range(n)
    ]


def _base(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in model.state_dict().items() if ".lora_" not in k}


def test_the_optimiser_holds_the_adapters_alone_and_the_base_stays():
    t = Trainer(_model(), TrainerConfig(lr=1e-2, lora=LORA))
    adapters = [p for n, p in t.model.named_parameters() if ".lora_" in n]
    assert t.optimizer.param_groups[0]["params"] == adapters  # 2 layers × 7 linear modules × (A, B)
    assert len(adapters) == 28 and sum(p.numel() for p in adapters) < 0.3 * sum(
        p.numel() for p in _model().parameters()
    )
    base, start = _base(t.model), [p.clone() for p in adapters]
    m = t.step(_samples())
    assert m["train/updated"] and t.version == 1 and m["mismatch/pearson"] == pytest.approx(1.0)
    assert all(torch.equal(v, t.model.state_dict()[k]) for k, v in base.items())  # frozen
    assert any(not torch.equal(a, p) for a, p in zip(start, adapters))
    adapter = t.adapter()
    assert adapter is not None and len(adapter.tensors) == 28
    # what an engine without adapter support loads: the adapters merged, under the base names
    merged = _model()
    merged.load_state_dict(t.state_dict())
    ids = _samples()[0].token_ids
    with torch.no_grad():
        assert torch.allclose(compute_token_logprobs(merged, ids), compute_token_logprobs(t.model, ids), atol=1e-5)


def test_resume_from_a_lora_checkpoint_continues_exactly(tmp_path):
    cfg = TrainerConfig(lr=1e-2, ppo_epochs=2, minibatch_size=2, lr_warmup_steps=2, lora=LORA)
    a = Trainer(_model(), cfg, total_steps=4, seed=7)
    data = _samples()
    a.step(data)
    path = ck.save_checkpoint(tmp_path, 0, a, {"next_step": 1})
    held = FileSystemReader(str(path)).read_metadata().state_dict_metadata
    weights = [k for k in held if k.startswith("model.")]
    assert weights and all(".lora_A." in k or ".lora_B." in k for k in weights)  # the adapters alone
    ref = a.step(data)  # the uninterrupted run's next step

    b = Trainer(_model(), cfg, total_steps=4, seed=7)  # the same base, as a resumed run loads it
    with torch.no_grad():  # other adapters and no optimiser state: everything trained must come from disk
        for p in b.trainable:
            p.normal_()
    meta = ck.load_checkpoint(ck.latest_checkpoint(tmp_path), b)
    assert meta["lora"]["rank"] == 4
    got = b.step(data)
    assert got["train/loss"] == ref["train/loss"] and got["train/grad_norm"] == ref["train/grad_norm"]
    assert all(torch.equal(x, y) for x, y in zip(a.model.parameters(), b.model.parameters()))
    assert b.version == a.version == 2

    with pytest.raises(ConfigError, match="trainer.lora"):  # full weights expected, adapters found
        ck.load_checkpoint(path, Trainer(_model(), TrainerConfig(lr=1e-2)))


def test_exports_merge_the_adapters_or_write_peft_s_directory(tmp_path):
    base = tmp_path / "base"
    _model().save_pretrained(base)
    t = Trainer(_model(), TrainerConfig(lr=1e-2, lora=LORA))
    t.step(_samples())
    path = ck.save_checkpoint(tmp_path / "run", 0, t, {}, base_model=str(base))
    ids = _samples()[1].token_ids
    with torch.no_grad():
        trained = compute_token_logprobs(t.model, ids)
        merged = AutoModelForCausalLM.from_pretrained(ck.export_hf(path, tmp_path / "hf"))
        assert torch.allclose(compute_token_logprobs(merged, ids), trained, atol=1e-5)
    adapter = LoraAdapter.load(ck.export_hf(path, tmp_path / "adapter", adapter=True))
    ours = t.adapter()
    assert ours is not None and adapter.tensors.keys() == ours.tensors.keys()
    assert all(torch.equal(adapter.tensors[k], ours.tensors[k]) for k in ours.tensors)

    full = Trainer(_model(), TrainerConfig(lr=1e-2))
    with pytest.raises(ValueError, match="full weights"):
        ck.export_hf(
            ck.save_checkpoint(tmp_path / "full", 0, full, {}, base_model=str(base)), tmp_path / "x", adapter=True
        )


def test_adapter_dropout_trains_with_it_and_scores_pi_old_without():
    t = Trainer(_model(), TrainerConfig(lr=1e-2, lora={**LORA, "dropout": 0.3}))
    with torch.no_grad():  # B off zero (as after training): the adapters' dropout then changes the output
        for n, p in t.model.named_parameters():
            if ".lora_B." in n:
                p.normal_(std=0.1)
    m = t.step(_samples(ref=t.model))
    # one optimiser step, yet π_old is a pass of its own: the training forward ran the dropout
    assert m["train/optimizer_steps"] == 1 and m["train/old_logprobs_recomputed"] is True
    assert m["mismatch/pearson"] == pytest.approx(1.0) and m["mismatch/max_abs_diff"] < 1e-5
    assert m["train/ratio_mean"] != pytest.approx(1.0, abs=1e-7)  # the dropped-out forward is not π_old's


@pytest.mark.parametrize("option", [{"gradient_checkpointing": True}, {"packing": True, "prefix_sharing": False}])
def test_lora_steps_the_same_under_the_trainer_s_memory_options(option):
    # plain: every activation kept, one forward per sample group (the options' opposites)
    plain = Trainer(_model(), TrainerConfig(lr=1e-2, lora=LORA, gradient_checkpointing=False))
    other = Trainer(_model(), TrainerConfig(lr=1e-2, lora=LORA, **{"gradient_checkpointing": False, **option}))
    start = [p.clone() for p in plain.trainable]
    for t in (plain, other):  # SGD: the update is the gradient (Adam's first step would be its sign)
        t.optimizer = torch.optim.SGD(t.trainable, lr=1e-2)
    a, b = plain.step(_samples()), other.step(_samples())
    assert b["train/loss"] == pytest.approx(a["train/loss"], rel=1e-5)
    assert b["train/grad_norm"] == pytest.approx(a["train/grad_norm"], rel=1e-4)
    with torch.no_grad():  # the weights moved by the step, not a graph through them
        moved = [(x - s, y - s) for x, y, s in zip(plain.trainable, other.trainable, start)]
    assert max(float(d.abs().max()) for d, _ in moved) > 1e-5
    assert all(torch.allclose(d, e, atol=1e-8, rtol=1e-4) for d, e in moved)
