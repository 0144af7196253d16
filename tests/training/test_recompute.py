"""Activation checkpointing of decoder layers (tiny random Llama: fast, no model files)."""

from __future__ import annotations

import pytest
import torch
from tiny_llama import tiny_llama
from transformers import LlamaForCausalLM

from legorl.training.logprobs import compute_token_logprobs_shared_prefix
from legorl.training.recompute import decoder_layers, recompute_decoder_layers


def _model() -> LlamaForCausalLM:
    return tiny_llama(97, layers=3, max_positions=256)


def _grads_and_mlp_calls(model: LlamaForCausalLM, recompute: bool) -> tuple[torch.Tensor, int]:
    calls = []
    hook = model.model.layers[1].mlp.register_forward_pre_hook(lambda *_: calls.append(1))
    seqs = [[5, 6, 7, 8, 9, 10, 11, 1, 2], [5, 6, 7, 8, 9, 10, 11, 3], [5, 6, 7, 8, 9, 10, 11, 4, 4, 4]]
    model.zero_grad(set_to_none=True)
    with recompute_decoder_layers(model, recompute):
        lps = compute_token_logprobs_shared_prefix(model, seqs, 7, temperature=0.8)
    # backward outside the block, as the trainer does: each layer replays the forward it saved
    torch.stack([lp[-1] * (i + 1) for i, lp in enumerate(lps)]).sum().backward()
    hook.remove()
    return torch.cat([p.grad.flatten() for p in model.parameters()]), len(calls)


def test_recomputed_layers_give_the_same_gradients_and_run_twice():
    model = _model()
    plain, plain_calls = _grads_and_mlp_calls(model, recompute=False)
    recomputed, recomputed_calls = _grads_and_mlp_calls(model, recompute=True)
    assert plain.abs().max() > 0
    assert torch.allclose(plain, recomputed, atol=1e-7, rtol=1e-5)
    assert plain_calls == 1 and recomputed_calls == 2  # the forward, then the replay in backward


def test_the_switch_lasts_only_as_long_as_the_block():
    model = _model()
    layers = decoder_layers(model)
    assert len(layers) == 3
    with pytest.raises(RuntimeError, match="boom"):
        with recompute_decoder_layers(model):
            assert all("forward" in layer.__dict__ for layer in layers)
            raise RuntimeError("boom")
    assert not any("forward" in layer.__dict__ for layer in layers)
    # afterwards the model serves cached generation as before (an engine may share the module)
    with torch.no_grad():
        out = model(input_ids=torch.tensor([[1, 2, 3]]), use_cache=True)
    assert out.past_key_values.get_seq_length() == 3


def test_a_model_without_decoder_layers_is_refused():
    with pytest.raises(ValueError, match="no decoder layers"):
        with recompute_decoder_layers(torch.nn.Linear(2, 2)):
            pass
    with recompute_decoder_layers(torch.nn.Linear(2, 2), enabled=False):
        pass
