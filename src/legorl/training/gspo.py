"""Policy-gradient objectives: GSPO (sequence ratio), GSPO-token and GRPO (token ratio).

All functions take one sample's per-token tensors over its *loss-masked* positions only:
``logp`` (current policy π_θ, with grad), ``logp_old`` (π_old), ``logp_rollout`` (the behaviour
policy) and a scalar advantage.

Which logprobs play which role (defined here, once):

* **behaviour policy** — ``Sample.rollout_logprobs``: what the engine reported while sampling.
  It only enters through truncated importance sampling (TIS): the loss of a sample is weighted by
  ``min(π_old/π_rollout, C)`` (per sequence for GSPO, per token for GRPO), detached, so a rollout
  engine that drifts from the trainer cannot blow up the update.
* **π_old** — the trainer's own weights *before this batch's first optimiser step*, on the exact
  sampled tokens. When the batch gets exactly one optimiser step (:func:`needs_old_recompute`
  is false) π_old equals π_θ at the moment of the training forward, so ``logp_old=None`` means
  ``logp.detach()`` and no separate pass is needed; with several optimiser steps (mini-batches,
  ``ppo_epochs > 1``) the trainer scores every sample once, without grad, before the first step.

The same holds for asynchronous rollouts (``RunConfig.max_staleness``, :mod:`legorl.loop.staleness`):
a sample sampled by older weights still has π_old = the trainer before this step (the proximal
policy) and its behaviour policy = the engine's logprobs, so the TIS weight is what corrects for
its staleness; nothing in the loss changes with the mode.

Clipping (reported per step): a ratio term is *clipped low* when ``A < 0`` and the ratio is below
``1 − ε_low`` and *clipped high* when ``A > 0`` and it is above ``1 + ε_high`` — exactly the terms
whose gradient the clip removes (the convention of TRL's ``clip_ratio/low_mean``/``high_mean``).

Loss aggregation (:func:`aggregate_losses`): each sample has a loss ``ℓ_i`` (GSPO: ``−clipped
surrogate`` of its sequence ratio, times its TIS weight; GRPO: the mean over its tokens of the
per-token clipped surrogate), plus ``kl_coef · KL_i`` (k3 estimator against a frozen reference,
mean over its tokens) when a reference is used. An optimiser step minimises

* ``sample_mean`` (default): ``Σ_i ℓ_i / B`` — every sample weighs the same (GSPO paper);
* ``token_mean``: ``Σ_i n_i ℓ_i / Σ_i n_i`` with ``n_i`` the sample's sampled tokens — every
  sampled token weighs the same (DAPO's token-level loss for GRPO).

``B`` and ``Σ n_i`` are over the whole mini-batch, however many forward passes it is split into,
so splitting a mini-batch into micro-batches does not change the gradient.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import torch

Objective = Literal["gspo", "gspo_token", "grpo"]
LossAggregation = Literal["sample_mean", "token_mean"]


@dataclass(frozen=True)
class LossConfig:
    objective: Objective = "gspo"
    eps_low: float = 3e-4  # GSPO paper defaults; GRPO uses 0.2
    eps_high: float = 4e-4
    tis_cap: float | None = 2.0  # None disables the mismatch correction
    kl_coef: float = 0.0  # weight of the k3 KL to a reference policy (0: none, as in the GSPO paper)
    aggregation: LossAggregation = "sample_mean"


@dataclass
class SampleLoss:
    loss: torch.Tensor
    ratio: float  # sequence ratio s_i (GSPO) or mean token ratio (GRPO)
    clipped: float  # fraction of ratio terms that were clipped (low + high)
    tis_weight: float
    clipped_low: float = 0.0  # fraction of ratio terms clipped below (A < 0, ratio < 1 − ε_low)
    clipped_high: float = 0.0  # fraction clipped above (A > 0, ratio > 1 + ε_high)
    kl: float = 0.0  # k3 KL to the reference (mean over tokens), when one was given


def needs_old_recompute(optimizer_steps: int) -> bool:
    """True when π_old must be scored in a separate no-grad pass before the first update: the batch
    gets more than one optimiser step, so later forwards no longer run under π_old."""
    return optimizer_steps > 1


def aggregate_losses(
    losses: Sequence[torch.Tensor],
    sampled_tokens: Sequence[int],
    aggregation: LossAggregation,
    total_samples: int,
    total_tokens: int,
) -> torch.Tensor:
    """The part of a mini-batch's loss contributed by ``losses`` (see the module doc):
    ``Σ ℓ_i / total_samples`` or ``Σ n_i ℓ_i / total_tokens``. ``total_*`` are the mini-batch's,
    so that micro-batches of one mini-batch add up to its loss."""
    if not losses:
        raise ValueError("no sample losses to aggregate")
    if aggregation == "sample_mean":
        return torch.stack(list(losses)).sum() / total_samples
    if aggregation == "token_mean":
        w = torch.tensor([float(n) for n in sampled_tokens], dtype=losses[0].dtype)
        return (torch.stack(list(losses)) * w).sum() / total_tokens
    raise ValueError(f"unknown loss aggregation {aggregation!r}")


def k3_kl(logp: torch.Tensor, logp_ref: torch.Tensor) -> torch.Tensor:
    """k3 estimator of KL(π_θ || π_ref) on tokens sampled from π_θ: ``E[e^d − d − 1]``, ``d = ref − θ``;
    non-negative, unbiased, differentiable in ``logp``."""
    d = logp_ref.detach() - logp
    return (torch.exp(d) - d - 1).mean()


def group_advantages(rewards: Sequence[float], eps: float = 1e-6) -> list[float] | None:
    """Normalise rewards within one task's group. None when the group carries no signal:
    fewer than 2 valid rollouts or zero reward variance (callers drop env failures first)."""
    n = len(rewards)
    if n < 2:
        return None
    mean = sum(rewards) / n
    var = sum((r - mean) ** 2 for r in rewards) / n
    if var <= eps * eps:
        return None
    std = math.sqrt(var)
    return [(r - mean) / (std + eps) for r in rewards]


def sample_loss(
    logp: torch.Tensor,
    logp_old: torch.Tensor | None,
    logp_rollout: torch.Tensor,
    advantage: float,
    cfg: LossConfig,
    logp_ref: torch.Tensor | None = None,
) -> SampleLoss:
    """Negative clipped surrogate of one sample (to minimise). ``logp_old=None``: π_old is the
    current policy (one optimiser step per batch, see the module doc). ``logp_ref``: the reference
    policy's logprobs, used when ``cfg.kl_coef > 0``."""
    if logp.numel() == 0:
        raise ValueError("sample has no loss-masked tokens")
    logp_old = logp.detach() if logp_old is None else logp_old.detach()
    adv = torch.as_tensor(advantage, dtype=logp.dtype)
    lo, hi = 1.0 - cfg.eps_low, 1.0 + cfg.eps_high
    kl_t: torch.Tensor | None = None
    if cfg.kl_coef > 0:
        if logp_ref is None:
            raise ValueError("kl_coef > 0 needs the reference policy's logprobs")
        kl_t = k3_kl(logp, logp_ref)
    if cfg.objective in ("gspo", "gspo_token"):
        log_s = (logp - logp_old).mean()
        if cfg.objective == "gspo":
            s = torch.exp(log_s)
            s_tok = s.expand_as(logp)
        else:
            # GSPO-token: s_it = sg[s_i] * π(y_it) / sg[π(y_it)] — same value, per-token gradient.
            s_tok = torch.exp(log_s.detach() + logp - logp.detach())
            s = torch.exp(log_s.detach())
        surrogate = torch.minimum(s_tok * adv, torch.clamp(s_tok, lo, hi) * adv).mean()
        sv = float(s.detach())
        low = float(advantage < 0 and sv < lo)
        high = float(advantage > 0 and sv > hi)
        tis = _tis(logp_old - logp_rollout, cfg, per_token=False)
        loss = -(surrogate * tis)
        if kl_t is not None:
            loss = loss + cfg.kl_coef * kl_t
        return SampleLoss(
            loss, sv, low + high, float(tis.mean()), low, high, float(kl_t.detach()) if kl_t is not None else 0.0
        )
    # GRPO: token-level ratio, mean over the sample's tokens.
    r = torch.exp(logp - logp_old)
    tis = _tis(logp_old - logp_rollout, cfg, per_token=True)
    per_tok = torch.minimum(r * adv, torch.clamp(r, lo, hi) * adv) * tis
    rd = r.detach()
    low = float((rd < lo).float().mean()) if advantage < 0 else 0.0
    high = float((rd > hi).float().mean()) if advantage > 0 else 0.0
    loss = -per_tok.mean()
    if kl_t is not None:
        loss = loss + cfg.kl_coef * kl_t
    return SampleLoss(
        loss,
        float(rd.mean()),
        low + high,
        float(tis.mean()),
        low,
        high,
        float(kl_t.detach()) if kl_t is not None else 0.0,
    )


def _tis(log_w: torch.Tensor, cfg: LossConfig, per_token: bool) -> torch.Tensor:
    if cfg.tis_cap is None:
        return torch.ones(() if not per_token else log_w.shape, dtype=log_w.dtype)
    w = torch.exp(log_w.detach() if per_token else log_w.detach().mean())
    return torch.clamp(w, max=cfg.tis_cap)


@dataclass
class MismatchStats:
    """Rollout-engine vs trainer logprobs on the same sampled tokens."""

    pearson: float
    mean_abs_diff: float
    max_abs_diff: float
    k3_kl: float  # E[exp(d) - 1 - d] with d = logp_trainer - logp_rollout (estimates KL(rollout||trainer))
    tokens: int


def mismatch_stats(logp_trainer: torch.Tensor, logp_rollout: torch.Tensor) -> MismatchStats:
    a = logp_trainer.detach().double().flatten()
    b = logp_rollout.detach().double().flatten()
    n = int(a.numel())
    if n == 0:
        return MismatchStats(float("nan"), float("nan"), float("nan"), float("nan"), 0)
    d = a - b
    if n > 1 and a.std() > 0 and b.std() > 0:
        pearson = float(torch.corrcoef(torch.stack([a, b]))[0, 1])
    else:
        pearson = float("nan")
    k3 = float((torch.exp(d) - 1 - d).mean())
    return MismatchStats(pearson, float(d.abs().mean()), float(d.abs().max()), k3, n)
