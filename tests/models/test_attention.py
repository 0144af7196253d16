"""Grouped-query attention without repeated KV heads: the same logits as transformers' sdpa under
every mask the engine and the trainer pass, and transformers' own path under autograd."""

from __future__ import annotations

import pytest
import torch
from tiny_llama import tiny_llama

from legorl.models.attention import GROUPED_SDPA, use_grouped_attention


def _both(model, **inputs):
    with torch.no_grad():
        model.set_attn_implementation("sdpa")
        ref = model(**inputs).logits
        model.set_attn_implementation(GROUPED_SDPA)
        got = model(**inputs).logits
    return ref, got


@pytest.fixture
def model():
    m = tiny_llama(97, layers=2)
    assert use_grouped_attention(m)  # 4 query heads over 2 KV heads
    assert m.config._attn_implementation == GROUPED_SDPA
    return m


def test_padded_batch_2d_mask(model):
    ids = torch.randint(0, 97, (3, 20))
    mask = torch.ones(3, 20, dtype=torch.long)
    mask[0, :7] = 0  # left padding: its rows attend to nothing
    ref, got = _both(model, input_ids=ids, attention_mask=mask)
    assert torch.equal(ref[1:], got[1:])
    assert torch.equal(ref[0, 7:], got[0, 7:])


def test_engine_style_additive_4d_mask_with_cache(model):
    """A decode step as the embedded engine runs it: an explicit additive [B, 1, q, kv] mask over a
    KV cache (the case where sdpa repeats the heads)."""
    ids = torch.randint(0, 97, (2, 12))
    with torch.no_grad():
        cache = model(input_ids=ids, use_cache=True).past_key_values
    step = torch.randint(0, 97, (2, 1))
    mask = torch.zeros(2, 1, 1, 13)
    mask[1, :, :, :3] = torch.finfo(torch.float32).min
    pos = torch.full((2, 1), 12)
    with torch.no_grad():
        model.set_attn_implementation("sdpa")
        ref = model(input_ids=step, attention_mask=mask, position_ids=pos, past_key_values=cache, use_cache=True)
        cache.crop(12)
        model.set_attn_implementation(GROUPED_SDPA)
        got = model(input_ids=step, attention_mask=mask, position_ids=pos, past_key_values=cache, use_cache=True)
    assert torch.allclose(ref.logits, got.logits, atol=1e-6, rtol=0)


def test_autograd_takes_transformers_path(model):
    model.train()
    ids = torch.randint(0, 97, (1, 16))
    grads = {}
    for impl in ("sdpa", GROUPED_SDPA):
        model.set_attn_implementation(impl)
        model.zero_grad()
        model(input_ids=ids).logits.logsumexp(-1).mean().backward()
        grads[impl] = [p.grad.clone() for p in model.parameters()]
    assert all(torch.equal(a, b) for a, b in zip(grads["sdpa"], grads[GROUPED_SDPA]))


def test_multi_head_attention_is_left_alone():
    m = tiny_llama(97)
    m.config.num_key_value_heads = m.config.num_attention_heads  # no grouping: nothing to gain
    assert not use_grouped_attention(m)
    assert m.config._attn_implementation == "sdpa"
