"""Per-token log-probabilities of a token sequence under the current weights (trainer side).

``compute_token_logprobs(model, ids)[t] = log p(ids[t] | ids[:t])`` for ``t >= 1`` (position 0
has no prefix and gets ``0.0``), computed as ``log_softmax(logits / temperature)`` — the same
distribution the embedded engine samples from at top_k off / top_p 1. The result has the length of
``ids`` so it lines up with ``Sample.rollout_logprobs`` / ``Sample.loss_mask``.

Memory: the sequence is fed in chunks of ``chunk_size`` tokens through a KV cache. For each chunk
only the decoder's hidden states are kept; the ``[chunk, vocab]`` logits and their log-softmax are
computed per chunk and, under grad, recomputed in backward (activation checkpointing of the LM
head), so the vocabulary-sized tensors never exist for more than one chunk (for SmolLM2, 49k vocab:
~200 KB per token in fp32, i.e. 1.6 GB for an 8k sample, cut to ~200 MB with chunk 1024). Without
grad, peak memory is the KV cache + one chunk's activations. Under grad the decoder body still
keeps its activations for every token (that is what backward needs) — chunking bounds the logits,
not the body. The chunked result equals the one-shot result up to float rounding.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch.utils.checkpoint import checkpoint

__all__ = [
    "compute_token_logprobs",
    "compute_token_logprobs_batch",
    "compute_token_logprobs_packed",
    "compute_token_logprobs_shared_prefix",
]


def _as_ids(token_ids: Sequence[int] | torch.Tensor, device: torch.device) -> torch.Tensor:
    ids = token_ids if isinstance(token_ids, torch.Tensor) else torch.tensor(list(token_ids), dtype=torch.long)
    ids = ids.to(device=device, dtype=torch.long).reshape(-1)
    return ids


def _head_logprobs(
    hidden: torch.Tensor, targets: torch.Tensor, head: torch.nn.Module, temperature: float
) -> torch.Tensor:
    logits = head(hidden).float()
    if temperature != 1.0:
        logits = logits / temperature
    return torch.log_softmax(logits, dim=-1).gather(-1, targets[..., None])[..., 0]


def _batch_inputs(
    sequences: Sequence[Sequence[int] | torch.Tensor], device: torch.device, temperature: float
) -> tuple[list[torch.Tensor], list[int], float]:
    """Id tensors, their lengths, and the temperature (``<= 0``, greedy, scores at 1)."""
    seqs = [_as_ids(s, device) for s in sequences]
    return seqs, [int(s.shape[0]) for s in seqs], 1.0 if temperature is None or temperature <= 0 else temperature


def _chunked_head_logprobs(
    hidden: torch.Tensor, targets: torch.Tensor, head: torch.nn.Module, temperature: float, chunk_size: int
) -> torch.Tensor:
    """``[B, T]`` logprobs of ``targets`` from ``[B, T, H]`` hidden states, the LM head run over
    ``chunk_size`` positions at a time, all rows together (``chunk_size // B`` columns per chunk;
    checkpointed under grad: backward recomputes each chunk)."""
    use_ckpt = torch.is_grad_enabled() and hidden.requires_grad
    step = max(1, int(chunk_size) // max(1, hidden.shape[0]))
    parts = []
    for c in range(0, hidden.shape[1], step):
        h, t = hidden[:, c : c + step], targets[:, c : c + step]
        if use_ckpt:
            parts.append(checkpoint(_head_logprobs, h, t, head, temperature, use_reentrant=False))
        else:
            parts.append(_head_logprobs(h, t, head, temperature))
    return torch.cat(parts, dim=1)


def _causal_mask(q: int, past: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    cols = torch.arange(past + q, device=device)
    rows = torch.arange(past, past + q, device=device)
    allowed = cols[None, :] <= rows[:, None]
    m = torch.zeros(1, 1, q, past + q, dtype=dtype, device=device)
    return m.masked_fill_(~allowed[None, None], torch.finfo(dtype).min)


def compute_token_logprobs(
    model: Any,
    token_ids: Sequence[int] | torch.Tensor,
    temperature: float = 1.0,
    chunk_size: int = 1024,
) -> torch.Tensor:
    """Log-prob of every token given its prefix; shape ``[len(token_ids)]``, float32, ``[0] = 0.0``.

    Differentiable when called with grad enabled. ``temperature <= 0`` (greedy rollouts) is
    treated as 1: greedy tokens are scored under the unscaled distribution, as the engine reports.
    """
    from transformers import DynamicCache

    p = next(model.parameters())
    ids = _as_ids(token_ids, p.device)
    n = ids.shape[0]
    if temperature is None or temperature <= 0:
        temperature = 1.0
    out = [torch.zeros(1, dtype=torch.float32, device=p.device)]
    if n <= 1:
        return out[0][:n]
    chunk_size = max(1, int(chunk_size))
    decoder = model.get_decoder() if hasattr(model, "get_decoder") else None
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    cache = DynamicCache()
    use_ckpt = torch.is_grad_enabled()
    for s in range(0, n - 1, chunk_size):  # the last token is never an input that needs logits
        e = min(n - 1, s + chunk_size)
        # feed ids[s:e]; they predict ids[s+1:e+1]
        inp = ids[None, s:e]
        pos = torch.arange(s, e, device=p.device)[None]
        mask = _causal_mask(e - s, s, p.dtype, p.device)
        targets = ids[None, s + 1 : e + 1]
        if decoder is not None and head is not None:
            hidden = decoder(
                input_ids=inp, position_ids=pos, attention_mask=mask, past_key_values=cache, use_cache=True
            ).last_hidden_state
            if use_ckpt and hidden.requires_grad:
                lp = checkpoint(_head_logprobs, hidden, targets, head, temperature, use_reentrant=False)
            else:
                lp = _head_logprobs(hidden, targets, head, temperature)
        else:  # generic fallback: full model call, logits for the chunk only
            logits = model(
                input_ids=inp, position_ids=pos, attention_mask=mask, past_key_values=cache, use_cache=True
            ).logits.float()
            lp = torch.log_softmax(logits / temperature, dim=-1).gather(-1, targets[..., None])[..., 0]
        out.append(lp[0])
    return torch.cat(out)


def compute_token_logprobs_batch(
    model: Any,
    sequences: Sequence[Sequence[int] | torch.Tensor],
    temperature: float = 1.0,
    pad_token_id: int = 0,
    chunk_size: int = 1024,
) -> list[torch.Tensor]:
    """Several sequences of different lengths in one forward (right padding + attention mask).

    Returns one ``[len_i]`` float32 tensor per sequence (``[0] = 0.0``); differentiable under grad.
    The decoder body runs once over the padded ``[B, T]`` batch; the LM head, log-softmax and
    gather run over ``chunk_size`` positions at a time (checkpointed under grad, so backward
    recomputes them chunk by chunk): the ``[B, T, vocab]`` logits never exist, only
    ``[B, chunk / B, vocab]``. Padding is on the right, so every real token sees positions
    ``0..len_i-1`` and only real tokens: the result equals :func:`compute_token_logprobs` per
    sequence up to float rounding.
    """
    p = next(model.parameters())
    seqs, lens, temperature = _batch_inputs(sequences, p.device, temperature)
    if not seqs:
        return []
    T = max(lens)
    if T <= 1:
        return [torch.zeros(n, dtype=torch.float32, device=p.device) for n in lens]
    ids = torch.full((len(seqs), T), pad_token_id, dtype=torch.long, device=p.device)
    attn = torch.zeros((len(seqs), T), dtype=torch.long, device=p.device)
    for i, s in enumerate(seqs):
        ids[i, : lens[i]] = s
        attn[i, : lens[i]] = 1
    decoder = model.get_decoder() if hasattr(model, "get_decoder") else None
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    parts = [torch.zeros(len(seqs), 1, dtype=torch.float32, device=p.device)]
    if decoder is not None and head is not None:
        hidden = decoder(input_ids=ids, attention_mask=attn, use_cache=False).last_hidden_state[:, :-1]
        parts.append(_chunked_head_logprobs(hidden, ids[:, 1:], head, temperature, chunk_size))
    else:  # generic fallback: the model's own logits (all of them at once)
        logits = model(input_ids=ids, attention_mask=attn, use_cache=False).logits[:, :-1].float()
        parts.append(torch.log_softmax(logits / temperature, dim=-1).gather(-1, ids[:, 1:, None])[..., 0])
    lp = torch.cat(parts, dim=1)
    return [lp[i, : lens[i]] for i in range(len(seqs))]


def compute_token_logprobs_packed(
    model: Any,
    sequences: Sequence[Sequence[int] | torch.Tensor],
    temperature: float = 1.0,
    chunk_size: int = 1024,
) -> list[torch.Tensor]:
    """Several sequences packed end to end into one row: no padding at all.

    Each sequence's position ids restart at 0 and no 2D attention mask is passed, which is how
    transformers recognises packed sequences: its mask builder gives every token a causal view of
    its own sequence only (a block-diagonal causal mask). Predictions across a boundary are dropped.
    Returns what :func:`compute_token_logprobs_batch` returns (one ``[len_i]`` tensor per sequence,
    ``[0] = 0.0``, differentiable under grad), equal up to float rounding; the LM head runs over
    ``chunk_size`` positions at a time, as there. Needs a model with ``get_decoder`` and
    ``get_output_embeddings`` (every causal LM of transformers has them).
    """
    p = next(model.parameters())
    seqs, lens, temperature = _batch_inputs(sequences, p.device, temperature)
    if not seqs:
        return []
    ids = torch.cat(seqs)[None]
    positions = torch.cat([torch.arange(n, device=p.device) for n in lens])[None]
    total = ids.shape[1]
    if total <= 1:
        return [torch.zeros(n, dtype=torch.float32, device=p.device) for n in lens]
    hidden = model.get_decoder()(input_ids=ids, position_ids=positions, attention_mask=None, use_cache=False)
    hidden = hidden.last_hidden_state[:, :-1]
    # lp[j] = log p(ids[j+1] | its sequence's prefix), j < total-1
    lp = _chunked_head_logprobs(hidden, ids[:, 1:], model.get_output_embeddings(), temperature, chunk_size)[0]
    zero = torch.zeros(1, dtype=torch.float32, device=p.device)
    out, start = [], 0
    for n in lens:
        out.append(torch.cat([zero, lp[start : start + n - 1]]) if n > 0 else zero[:0])
        start += n
    return out


def compute_token_logprobs_shared_prefix(
    model: Any,
    sequences: Sequence[Sequence[int] | torch.Tensor],
    prefix_len: int,
    temperature: float = 1.0,
    chunk_size: int = 1024,
    score_from: int = 1,
) -> list[torch.Tensor]:
    """Several sequences that start with the same ``prefix_len`` tokens (a GRPO group: one prompt,
    several completions), the prefix run once.

    One row goes through the decoder: the prefix, then every sequence's suffix end to end, each
    suffix's positions continuing at ``prefix_len``. A 4D mask lets a suffix token see the prefix
    and the earlier tokens of its own suffix only (a tree of one trunk and ``B`` branches), so every
    token's hidden state is the one it has in its own sequence. Under grad the prefix's activations
    exist once and backward sums every branch's gradient into them. Unlike repeating a prefix KV
    cache to ``B`` rows, nothing prefix-sized is ever copied per sequence: activation memory is
    that of ``prefix_len + Σ suffix`` tokens. The result is what :func:`compute_token_logprobs_batch`
    returns (one ``[len_i]`` tensor per sequence, ``[0] = 0.0``, differentiable under grad), equal
    up to float rounding. Needs ``1 <= prefix_len < len_i`` for every sequence and a model with
    ``get_decoder`` / ``get_output_embeddings``.

    ``score_from``: prefix positions before it are not scored (``0.0``; the suffixes always are),
    which skips the LM head over a prompt that no loss looks at (the head is about a fifth of
    SmolLM2's compute per position).
    """
    p = next(model.parameters())
    seqs, lens, temperature = _batch_inputs(sequences, p.device, temperature)
    if not seqs:
        return []
    P = int(prefix_len)
    if not 1 <= P < min(lens):
        raise ValueError(f"prefix_len {P} must be >= 1 and shorter than every sequence (shortest: {min(lens)})")
    prefix = seqs[0][:P]
    if any(not torch.equal(s[:P], prefix) for s in seqs[1:]):
        raise ValueError(f"the sequences do not share their first {P} tokens")
    suffix_lens = [n - P for n in lens]
    ids = torch.cat([prefix, *(s[P:] for s in seqs)])
    # branch[j]: 0 on the prefix, i + 1 on sequence i's suffix
    branch = torch.repeat_interleave(
        torch.arange(len(seqs) + 1, device=p.device), torch.tensor([P, *suffix_lens], device=p.device)
    )
    positions = torch.cat([torch.arange(P, device=p.device), *(torch.arange(P, n, device=p.device) for n in lens)])
    at = torch.arange(ids.shape[0], device=p.device)
    visible = (at[None, :] <= at[:, None]) & ((branch[None, :] == 0) | (branch[None, :] == branch[:, None]))
    mask = torch.zeros(1, 1, *visible.shape, dtype=p.dtype, device=p.device)
    mask.masked_fill_(~visible[None, None], torch.finfo(p.dtype).min)
    hidden = model.get_decoder()(
        input_ids=ids[None], position_ids=positions[None], attention_mask=mask, use_cache=False
    ).last_hidden_state[0]
    # each scored token and the position that predicts it: the one before it in its own sequence
    # (a suffix's first token: the prefix's last position)
    first = min(max(1, int(score_from)), P)  # prefix positions first..P-1 are scored
    targets, sources = [torch.arange(first, P, device=p.device)], [torch.arange(first - 1, P - 1, device=p.device)]
    start = P
    for n in suffix_lens:
        targets.append(torch.arange(start, start + n, device=p.device))
        sources.append(
            torch.cat([torch.tensor([P - 1], device=p.device), torch.arange(start, start + n - 1, device=p.device)])
        )
        start += n
    lp = _chunked_head_logprobs(
        hidden[torch.cat(sources)][None],
        ids[torch.cat(targets)][None],
        model.get_output_embeddings(),
        temperature,
        chunk_size,
    )[0]
    zero = torch.zeros(first, dtype=torch.float32, device=p.device)
    prefix_lp = torch.cat([zero, lp[: P - first]])
    out, k = [], P - first
    for n in suffix_lens:
        out.append(torch.cat([prefix_lp, lp[k : k + n]]))
        k += n
    return out
