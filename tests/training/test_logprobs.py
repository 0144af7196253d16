"""Trainer-side token logprobs (tiny random Llama: fast, no model files)."""

from __future__ import annotations

import pytest
import torch
from tiny_llama import tiny_llama

from legorl.training.logprobs import (
    compute_token_logprobs,
    compute_token_logprobs_batch,
    compute_token_logprobs_packed,
    compute_token_logprobs_shared_prefix,
)


@pytest.fixture(scope="module")
def model():
    return tiny_llama(97)


def _reference(model, ids, temperature=1.0):
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([ids])).logits[0].float() / temperature
    lp = torch.log_softmax(logits[:-1], -1).gather(-1, torch.tensor(ids[1:])[:, None])[:, 0]
    return torch.cat([torch.zeros(1), lp])


@pytest.mark.parametrize("chunk", [1, 7, 64, 1024])
def test_chunked_equals_unchunked(model, chunk):
    ids = torch.randint(0, 97, (150,), generator=torch.Generator().manual_seed(1)).tolist()
    ref = _reference(model, ids)
    with torch.no_grad():
        got = compute_token_logprobs(model, ids, chunk_size=chunk)
    assert got.shape == (150,) and got[0] == 0.0
    assert torch.allclose(got, ref, atol=1e-5)


def test_temperature_and_tensor_input(model):
    ids = torch.randint(0, 97, (40,), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        got = compute_token_logprobs(model, ids, temperature=0.7, chunk_size=16)
    assert torch.allclose(got, _reference(model, ids.tolist(), 0.7), atol=1e-5)
    assert compute_token_logprobs(model, [5]).tolist() == [0.0]


def test_gradient_flows_through_chunks(model):
    ids = torch.randint(0, 97, (50,), generator=torch.Generator().manual_seed(3)).tolist()
    model.zero_grad()
    lp = compute_token_logprobs(model, ids, chunk_size=16)
    assert lp.requires_grad
    mask = torch.zeros(50)
    mask[30:] = 1  # e.g. loss only on sampled tokens; depends on KV from earlier chunks
    (lp * mask).sum().backward()
    g_chunk = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    assert g_chunk and all(torch.isfinite(g).all() for g in g_chunk.values())
    assert g_chunk["model.embed_tokens.weight"].abs().sum() > 0
    model.zero_grad()
    (compute_token_logprobs(model, ids, chunk_size=4096) * mask).sum().backward()
    for n, p in model.named_parameters():
        assert torch.allclose(p.grad, g_chunk[n], atol=1e-5), n
    model.zero_grad()


def test_batch_matches_single(model):
    g = torch.Generator().manual_seed(4)
    seqs = [torch.randint(0, 97, (n,), generator=g).tolist() for n in (5, 33, 1, 20)]
    with torch.no_grad():
        batch = compute_token_logprobs_batch(model, seqs)
        for s, b in zip(seqs, batch):
            assert b.shape == (len(s),)
            assert torch.allclose(b, compute_token_logprobs(model, s), atol=1e-5)


@pytest.mark.parametrize("chunk", [5, 1024])
def test_packed_equals_one_sequence_at_a_time(model, chunk):
    """Packed end to end, each sequence still sees only its own prefix (block-diagonal mask)."""
    g = torch.Generator().manual_seed(3)
    seqs = [torch.randint(0, 97, (n,), generator=g).tolist() for n in (17, 1, 40, 2, 9)]
    packed = compute_token_logprobs_packed(model, seqs, temperature=0.8, chunk_size=chunk)
    for ids, got in zip(seqs, packed):
        assert got.shape == (len(ids),)
        assert torch.allclose(got, _reference(model, ids, temperature=0.8), atol=1e-5)


def test_packed_gradient_equals_padded_gradient(model):
    g = torch.Generator().manual_seed(4)
    seqs = [torch.randint(0, 97, (n,), generator=g).tolist() for n in (30, 8, 19)]
    grads = []
    for fn in (compute_token_logprobs_packed, compute_token_logprobs_batch):
        model.zero_grad()
        sum(lp.sum() for lp in fn(model, seqs)).backward()
        grads.append(torch.cat([p.grad.flatten() for p in model.parameters()]))
    model.zero_grad()
    assert torch.allclose(grads[0], grads[1], atol=1e-5, rtol=1e-4)


def _group(seed: int, prefix: int, suffixes: tuple[int, ...]) -> list[list[int]]:
    """One prompt, several completions of different lengths."""
    g = torch.Generator().manual_seed(seed)
    head = torch.randint(0, 97, (prefix,), generator=g).tolist()
    return [head + torch.randint(0, 97, (n,), generator=g).tolist() for n in suffixes]


@pytest.mark.parametrize(("prefix", "chunk"), [(1, 1024), (23, 5), (60, 1024)])
def test_shared_prefix_equals_one_sequence_at_a_time(model, prefix, chunk):
    seqs = _group(5, prefix, (7, 1, 19, 3))
    with torch.no_grad():
        got = compute_token_logprobs_shared_prefix(model, seqs, prefix, temperature=0.8, chunk_size=chunk)
    for ids, lp in zip(seqs, got):
        assert lp.shape == (len(ids),) and lp[0] == 0.0
        assert torch.allclose(lp, _reference(model, ids, temperature=0.8), atol=1e-5)


@pytest.mark.parametrize("score_from", [1, 10, 26, 40])
def test_shared_prefix_scores_from_a_position(model, score_from):
    """Prefix positions before ``score_from`` are 0.0 (the head skipped there); the rest unchanged."""
    seqs = _group(8, 26, (5, 9))
    with torch.no_grad():
        got = compute_token_logprobs_shared_prefix(model, seqs, 26, score_from=score_from)
    first = min(score_from, 26)
    for ids, lp in zip(seqs, got):
        ref = _reference(model, ids)
        assert lp.shape == (len(ids),)
        assert torch.all(lp[:first] == 0.0)
        assert torch.allclose(lp[first:], ref[first:], atol=1e-5)


def test_shared_prefix_gradient_equals_padded_gradient(model):
    """The prefix runs once, yet backward gets every row's gradient through it: loss weights that
    differ per row and per token (as GSPO's advantages and masks do) give the padded batch's grads."""
    seqs = _group(6, 25, (6, 11, 2))
    weights = [torch.linspace(-1.0, 2.0, len(s)) * (i + 1) for i, s in enumerate(seqs)]
    grads = []
    for fn in (
        lambda: compute_token_logprobs_shared_prefix(model, seqs, 25, chunk_size=8),
        lambda: compute_token_logprobs_batch(model, seqs),
    ):
        model.zero_grad()
        sum((lp * w).sum() for lp, w in zip(fn(), weights)).backward()
        grads.append(torch.cat([p.grad.flatten() for p in model.parameters()]))
    model.zero_grad()
    assert grads[0].abs().sum() > 0
    assert torch.allclose(grads[0], grads[1], atol=1e-5, rtol=1e-4)


def test_shared_prefix_rejects_what_is_not_shared(model):
    seqs = _group(7, 10, (4, 4))
    with pytest.raises(ValueError, match="do not share"):
        compute_token_logprobs_shared_prefix(model, [seqs[0], [1, *seqs[1][1:]]], 10)
    with pytest.raises(ValueError, match="shorter than every sequence"):
        compute_token_logprobs_shared_prefix(model, seqs, 14)
    with pytest.raises(ValueError, match=">= 1"):
        compute_token_logprobs_shared_prefix(model, seqs, 0)
