"""LoRA adapters on a tiny random Llama: injection, the adapter record and PEFT's directory format,
merging, applying an adapter to another copy of the model."""

from __future__ import annotations

import json

import pytest
import torch
from tiny_llama import tiny_llama

from legorl.config import LoraConfig
from legorl.errors import ModelError
from legorl.models.lora import (
    ADAPTER_CONFIG,
    LoraAdapter,
    adapter_dropout,
    adapter_of,
    add_lora,
    apply_adapter,
    has_lora,
    merged_state_dict,
)
from legorl.training.logprobs import compute_token_logprobs

VOCAB = 53
IDS = [3, 17, 5, 42, 8, 8, 30, 1, 12]


def _lp(model: torch.nn.Module) -> torch.Tensor:
    with torch.no_grad():
        return compute_token_logprobs(model, IDS)


def _trained(seed: int = 0, **lora: object) -> torch.nn.Module:
    """A tiny Llama with adapters whose B left zero (as after training)."""
    model = add_lora(tiny_llama(VOCAB), LoraConfig(**{"rank": 4, "alpha": 8, **lora}), seed=seed)
    g = torch.Generator().manual_seed(100 + seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if ".lora_B." in name:
                p.copy_(torch.randn(p.shape, generator=g) * 0.1)
    return model


def test_adapters_start_as_the_base_model_and_only_they_train():
    base = _lp(tiny_llama(VOCAB))
    rng_before = torch.get_rng_state()
    model = add_lora(tiny_llama(VOCAB), LoraConfig(rank=4, alpha=8, target_modules=["q_proj", "v_proj"]), seed=3)
    assert torch.equal(torch.get_rng_state(), rng_before)  # lora_A drawn from the seed, not the global RNG
    assert has_lora(model) and torch.equal(_lp(model), base)  # B = 0: the adapted model is the base model
    assert not any(m.training for m in model.modules())  # the new layers take the model's eval mode
    trainable = sorted(n for n, p in model.named_parameters() if p.requires_grad)
    # 2 layers × (q, v) × (A, B); every base weight frozen
    assert len(trainable) == 8 and all(".lora_A." in n or ".lora_B." in n for n in trainable)
    again = add_lora(tiny_llama(VOCAB), LoraConfig(rank=4, alpha=8, target_modules=["q_proj", "v_proj"]), seed=3)
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), again.parameters()))  # same seed, same init
    with pytest.raises(ModelError, match="already"):
        add_lora(model, LoraConfig())
    with pytest.raises(ModelError, match="target_modules"):
        add_lora(tiny_llama(VOCAB), LoraConfig(target_modules=["no_such_proj"]))


def test_all_linear_adapts_every_linear_layer_but_the_head():
    adapter = adapter_of(_trained())
    assert adapter.target_modules == ("down_proj", "gate_proj", "k_proj", "o_proj", "q_proj", "up_proj", "v_proj")
    # 2 layers × 7 modules × (A, B); A: rank × in, B: out × rank
    assert len(adapter.tensors) == 28 and adapter.rank == 4 and adapter.alpha == 8.0
    assert adapter.tensors["model.layers.0.mlp.down_proj.lora_A.weight"].shape == (4, 64)
    assert adapter.tensors["model.layers.0.mlp.down_proj.lora_B.weight"].shape == (32, 4)
    assert adapter.nbytes == sum(t.numel() * 4 for t in adapter.tensors.values())


def test_merged_weights_are_the_adapted_model_under_the_base_names():
    model = _trained()
    merged = merged_state_dict(model)
    plain = tiny_llama(VOCAB)
    assert set(merged) == set(plain.state_dict())
    # by hand for one layer: W + (alpha / r) B A
    layer = model.model.layers[1].self_attn.o_proj
    a, b = layer.lora_A["default"].weight, layer.lora_B["default"].weight
    expected = layer.base_layer.weight + 2.0 * (b @ a)
    assert torch.allclose(merged["model.layers.1.self_attn.o_proj.weight"], expected, atol=1e-7)
    plain.load_state_dict(merged)
    assert torch.allclose(_lp(plain), _lp(model), atol=1e-5)
    assert not torch.allclose(_lp(plain), _lp(tiny_llama(VOCAB)), atol=1e-3)


def test_an_adapter_directory_is_peft_s_own_and_applies_to_another_copy(tmp_path):
    from peft import PeftModel

    model = _trained()
    saved = adapter_of(model).save(tmp_path / "adapter", base_model="tiny")
    config = json.loads((saved / ADAPTER_CONFIG).read_text())
    assert config["r"] == 4 and config["lora_alpha"] == 8 and config["base_model_name_or_path"] == "tiny"
    # PEFT itself loads the directory onto the base model and computes what ours does
    peft_model = PeftModel.from_pretrained(tiny_llama(VOCAB), str(saved))
    assert torch.allclose(_lp(peft_model), _lp(model), atol=1e-6)

    loaded = LoraAdapter.load(saved)
    fresh = tiny_llama(VOCAB)
    apply_adapter(fresh, loaded)  # injects, then copies
    assert torch.allclose(_lp(fresh), _lp(model), atol=1e-6)
    apply_adapter(fresh, adapter_of(_trained(seed=1)))  # a later version into the same layers
    assert torch.allclose(_lp(fresh), _lp(_trained(seed=1)), atol=1e-6)
    with pytest.raises(ModelError, match="does not fit"):
        apply_adapter(fresh, adapter_of(_trained(target_modules=["q_proj"])))


def test_adapter_dropout_runs_only_inside_the_block():
    model = _trained(dropout=0.5).eval()
    torch.manual_seed(0)
    with adapter_dropout(model, active=True):
        dropped = _lp(model)
    assert not torch.allclose(dropped, _lp(model))  # dropout on the adapters' input
    with adapter_dropout(model, active=False):
        assert torch.equal(_lp(model), _lp(model))
