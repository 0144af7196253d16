"""Policy-gradient objectives: GSPO (sequence ratio), GSPO-token and GRPO (token ratio).

All functions take one sample's per-token tensors over its *loss-masked* positions only:
``logp`` (current policy, with grad), ``logp_old`` (policy that generated the batch, recomputed by
the trainer), ``logp_rollout`` (what the engine reported while sampling) and a scalar advantage.

Training–inference mismatch is corrected with truncated importance sampling (TIS): the loss of a
sample is weighted by ``min(π_old/π_rollout, C)`` (per sequence for GSPO, per token for GRPO),
detached, so a rollout engine that drifts from the trainer cannot blow up the update.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal, Sequence

import torch

Objective = Literal["gspo", "gspo_token", "grpo"]


@dataclass(frozen=True)
class LossConfig:
    objective: Objective = "gspo"
    eps_low: float = 3e-4  # GSPO paper defaults; GRPO uses 0.2
    eps_high: float = 4e-4
    tis_cap: float | None = 2.0  # None disables the mismatch correction


@dataclass
class SampleLoss:
    loss: torch.Tensor
    ratio: float  # sequence ratio s_i (GSPO) or mean token ratio (GRPO)
    clipped: float  # fraction of ratio terms that were clipped
    tis_weight: float


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
    logp_old: torch.Tensor,
    logp_rollout: torch.Tensor,
    advantage: float,
    cfg: LossConfig,
) -> SampleLoss:
    """Negative clipped surrogate of one sample (to minimise)."""
    if logp.numel() == 0:
        raise ValueError("sample has no loss-masked tokens")
    logp_old = logp_old.detach()
    adv = torch.as_tensor(advantage, dtype=logp.dtype)
    lo, hi = 1.0 - cfg.eps_low, 1.0 + cfg.eps_high
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
        clipped = float(((s.detach() < lo) | (s.detach() > hi)).float().item())
        tis = _tis(logp_old - logp_rollout, cfg, per_token=False)
        loss = -(surrogate * tis)
        return SampleLoss(loss, float(s.detach()), clipped, float(tis.mean()))
    # GRPO: token-level ratio, mean over the sample's tokens.
    r = torch.exp(logp - logp_old)
    tis = _tis(logp_old - logp_rollout, cfg, per_token=True)
    per_tok = torch.minimum(r * adv, torch.clamp(r, lo, hi) * adv) * tis
    clipped = float(((r.detach() < lo) | (r.detach() > hi)).float().mean())
    return SampleLoss(-per_tok.mean(), float(r.detach().mean()), clipped, float(tis.mean()))


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
