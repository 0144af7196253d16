"""The built-in objectives' per-sample losses (registered in :mod:`legorl.objectives`;
formulas and references in ``docs/objectives.md``).

Each takes one sample's tensors over its loss-masked positions only: ``logp`` (π_θ, with grad),
``logp_old`` (π_old, detached), the scalar ``advantage`` ``A``, the detached importance ``weight``
``w`` (π_old/π_rollout after TIS/MIS, per token or one per sequence) and the
:class:`~legorl.training.gspo.LossConfig`; it returns the loss to minimise (the KL term is added by
:func:`~legorl.training.gspo.sample_loss`) with the ratio and clip statistics the trainer logs.

Clip statistics follow ``gspo``'s convention: a term is *clipped low* when ``A < 0`` and its ratio
is below ``1 − ε_low``, *clipped high* when ``A > 0`` and above ``1 + ε_high`` (the terms whose
gradient the clip removes); for a sequence ratio, the sample is one term.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from legorl.objectives import register_policy_loss

if TYPE_CHECKING:
    from legorl.training.gspo import LossConfig


@dataclass
class PolicyLoss:
    loss: torch.Tensor  # the sample's loss ℓ_i, before kl_coef · KL
    ratio: float  # the sequence ratio s_i, or the mean token ratio
    clipped_low: float  # fraction of ratio terms clipped below
    clipped_high: float  # fraction clipped above


def _bounds(cfg: LossConfig) -> tuple[float, float]:
    return 1.0 - cfg.eps_low, 1.0 + cfg.eps_high


def _gspo(
    logp: torch.Tensor, logp_old: torch.Tensor, advantage: float, weight: torch.Tensor, cfg: LossConfig, token: bool
) -> PolicyLoss:
    adv = torch.as_tensor(advantage, dtype=logp.dtype)
    lo, hi = _bounds(cfg)
    log_s = (logp - logp_old).mean()
    if not token:
        s = torch.exp(log_s)
        ratio = s.expand_as(logp)
    else:
        # GSPO-token: s_it = sg[s_i] * π(y_it) / sg[π(y_it)] — same value, per-token gradient.
        ratio = torch.exp(log_s.detach() + logp - logp.detach())
        s = torch.exp(log_s.detach())
    sv = float(s.detach())
    low = float(advantage < 0 and sv < lo)
    high = float(advantage > 0 and sv > hi)
    per_token = torch.minimum(ratio * adv, torch.clamp(ratio, lo, hi) * adv) * weight
    return PolicyLoss(-per_token.mean(), sv, low, high)


@register_policy_loss("gspo", is_level="sequence", token_ratio=False)
def gspo(
    logp: torch.Tensor, logp_old: torch.Tensor, advantage: float, weight: torch.Tensor, cfg: LossConfig
) -> PolicyLoss:
    """``−mean_t min(s A, clip(s) A) · w`` with the sequence ratio ``s = exp(mean_t(logp − logp_old))``."""
    return _gspo(logp, logp_old, advantage, weight, cfg, token=False)


@register_policy_loss("gspo_token", is_level="sequence", token_ratio=False)
def gspo_token(
    logp: torch.Tensor, logp_old: torch.Tensor, advantage: float, weight: torch.Tensor, cfg: LossConfig
) -> PolicyLoss:
    """GSPO's value with a per-token gradient: ``s_t = sg[s] · π(y_t) / sg[π(y_t)]``."""
    return _gspo(logp, logp_old, advantage, weight, cfg, token=True)


def _token_surrogate(
    logp: torch.Tensor, logp_old: torch.Tensor, advantage: float, weight: torch.Tensor, cfg: LossConfig
) -> tuple[torch.Tensor, float, float, float]:
    """Per-token ``min(r A, clip(r) A) · w`` with ``r = exp(logp − logp_old)``, and the ratio stats."""
    adv = torch.as_tensor(advantage, dtype=logp.dtype)
    lo, hi = _bounds(cfg)
    ratio = torch.exp(logp - logp_old)
    rd = ratio.detach()
    low = float((rd < lo).float().mean()) if advantage < 0 else 0.0
    high = float((rd > hi).float().mean()) if advantage > 0 else 0.0
    per_token = torch.minimum(ratio * adv, torch.clamp(ratio, lo, hi) * adv) * weight
    return per_token, float(rd.mean()), low, high


@register_policy_loss("grpo")
def grpo(
    logp: torch.Tensor, logp_old: torch.Tensor, advantage: float, weight: torch.Tensor, cfg: LossConfig
) -> PolicyLoss:
    """PPO's clipped surrogate per token, averaged over the sample's tokens."""
    per_token, ratio, low, high = _token_surrogate(logp, logp_old, advantage, weight, cfg)
    return PolicyLoss(-per_token.mean(), ratio, low, high)


@register_policy_loss("dapo", clip_higher=True)
def dapo(
    logp: torch.Tensor, logp_old: torch.Tensor, advantage: float, weight: torch.Tensor, cfg: LossConfig
) -> PolicyLoss:
    """DAPO's token-level clipped surrogate with a decoupled, higher upper clip (``eps_high > eps_low``).
    Per sample it is GRPO's token mean; DAPO's *global* token mean comes from the aggregation
    (``loss_aggregation: token_mean``, ``rollout_weighting: sample``: weight ``n_i`` per sample)."""
    per_token, ratio, low, high = _token_surrogate(logp, logp_old, advantage, weight, cfg)
    return PolicyLoss(-per_token.mean(), ratio, low, high)


@register_policy_loss("dr_grpo", advantage="group_mean")
def dr_grpo(
    logp: torch.Tensor, logp_old: torch.Tensor, advantage: float, weight: torch.Tensor, cfg: LossConfig
) -> PolicyLoss:
    """Dr. GRPO: GRPO's token surrogate summed over the sample's tokens and divided by a constant
    (``cfg.norm_tokens``) instead of the sample's length, so a long wrong answer is not penalised
    less per token than a short one."""
    per_token, ratio, low, high = _token_surrogate(logp, logp_old, advantage, weight, cfg)
    return PolicyLoss(-per_token.sum() / cfg.norm_tokens, ratio, low, high)


@register_policy_loss("cispo")
def cispo(
    logp: torch.Tensor, logp_old: torch.Tensor, advantage: float, weight: torch.Tensor, cfg: LossConfig
) -> PolicyLoss:
    """CISPO: ``−mean_t sg[clip(r_t, 1−ε_low, 1+ε_high)] · A · logp_t · w``. The ratio is clipped as a
    detached weight, so unlike PPO's clip no token loses its gradient (it is only bounded); the clip
    statistics count every clipped token, whatever the sign of ``A``."""
    adv = torch.as_tensor(advantage, dtype=logp.dtype)
    lo, hi = _bounds(cfg)
    rd = torch.exp(logp - logp_old).detach()
    per_token = torch.clamp(rd, lo, hi) * adv * logp * weight
    low = float((rd < lo).float().mean())
    high = float((rd > hi).float().mean())
    return PolicyLoss(-per_token.mean(), float(rd.mean()), low, high)
