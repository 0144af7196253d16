"""Policy-gradient objectives: GSPO (sequence ratio), GSPO-token and GRPO (token ratio), and the
others of the registry (:mod:`legorl.objectives`, ``docs/objectives.md``): Dr. GRPO, DAPO,
CISPO, or a user's. :func:`sample_loss` computes what they share (importance weights, the KL term)
and calls the objective's function by the name ``LossConfig.objective``.

All functions take one sample's per-token tensors over its *loss-masked* positions only:
``logp`` (current policy π_θ, with grad), ``logp_old`` (π_old, the trainer before this batch's first
optimiser step; ``None`` means ``logp.detach()``, valid when :func:`needs_old_recompute` is false),
``logp_rollout`` (the behaviour policy, ``Sample.rollout_logprobs``; it enters only through the
detached importance weights :func:`importance_weights`, with TIS/MIS) and a scalar advantage.
:func:`sample_weights` and :func:`aggregate_losses` weigh samples so a step minimises
``Σ c_i ℓ_i / Σ c_i`` over its mini-batch, independent of micro-batching.

Design (roles of the logprobs, staleness, clipping convention, aggregation): docs/objective.md#gspo
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import torch

from legorl.objectives import get_policy_loss, group_norm, objective_info
from legorl.training.policy_losses import PolicyLoss

Objective = str  # a name in the objectives registry (built-in: gspo, gspo_token, grpo, dr_grpo, dapo, cispo)
LossAggregation = Literal["sample_mean", "token_mean"]
RolloutWeighting = Literal["rollout", "sample"]
ImportanceLevel = Literal["sequence", "token"]


@dataclass(frozen=True)
class LossConfig:
    objective: Objective = "gspo"
    eps_low: float = 3e-4  # GSPO paper defaults; GRPO uses 0.2
    eps_high: float = 4e-4
    tis_cap: float | None = 2.0  # None disables the mismatch correction
    kl_coef: float = 0.0  # weight of the k3 KL to a reference policy (0: none, as in the GSPO paper)
    aggregation: LossAggregation = "sample_mean"
    rollout_weighting: RolloutWeighting = "rollout"
    is_level: ImportanceLevel | None = None  # None: the objective's own (GRPO per token, GSPO per sequence)
    mis_cap: float | None = None  # None: no masking
    # dr_grpo divides each sample's token sum by this constant instead of its length (Dr. GRPO uses
    # the generation budget); a constant only rescales the gradient, so it is not a config key yet
    norm_tokens: int = 1024

    @property
    def token_level_is(self) -> bool:
        """Importance weights per token (else one per sequence)."""
        if self.is_level is not None:
            return self.is_level == "token"
        return objective_info(self.objective).is_level == "token"


@dataclass
class SampleLoss:
    loss: torch.Tensor
    ratio: float  # sequence ratio s_i (GSPO) or mean token ratio (GRPO)
    clipped: float  # fraction of ratio terms that were clipped (low + high)
    tis_weight: float
    clipped_low: float = 0.0  # fraction of ratio terms clipped below (A < 0, ratio < 1 − ε_low)
    clipped_high: float = 0.0  # fraction clipped above (A > 0, ratio > 1 + ε_high)
    kl: float = 0.0  # k3 KL to the reference (mean over tokens), when one was given
    importance: ImportanceWeights | None = None


def needs_old_recompute(optimizer_steps: int) -> bool:
    """True when π_old must be scored in a separate no-grad pass before the first update: the batch
    gets more than one optimiser step, so later forwards no longer run under π_old."""
    return optimizer_steps > 1


def sample_weights(
    rollout_ids: Sequence[str],
    sampled_tokens: Sequence[int],
    aggregation: LossAggregation,
    weighting: RolloutWeighting,
) -> list[float]:
    """Each sample's weight ``c_i`` in the loss (the table in docs/objective.md). ``rollout_ids`` say
    which samples came from one rollout; call it on the step's trainable samples."""
    if len(rollout_ids) != len(sampled_tokens):
        raise ValueError("one rollout id and one sampled-token count per sample")
    if aggregation not in ("sample_mean", "token_mean"):
        raise ValueError(f"unknown loss aggregation {aggregation!r}")
    if weighting == "sample":
        return [1.0 if aggregation == "sample_mean" else float(n) for n in sampled_tokens]
    if weighting != "rollout":
        raise ValueError(f"unknown rollout weighting {weighting!r}")
    count: Counter[str] = Counter(rollout_ids)
    tokens: defaultdict[str, int] = defaultdict(int)
    for r, n in zip(rollout_ids, sampled_tokens):
        tokens[r] += n
    if aggregation == "sample_mean":
        return [1.0 / count[r] for r in rollout_ids]
    return [n / tokens[r] if tokens[r] else 1.0 / count[r] for r, n in zip(rollout_ids, sampled_tokens)]


def aggregate_losses(losses: Sequence[torch.Tensor], weights: Sequence[float], total_weight: float) -> torch.Tensor:
    """The part of a mini-batch's loss contributed by ``losses``: ``Σ c_i ℓ_i / total_weight``,
    ``total_weight`` the mini-batch's ``Σ c_i`` (docs/objective.md), so that micro-batches of one
    mini-batch add up to its loss."""
    if not losses:
        raise ValueError("no sample losses to aggregate")
    if len(weights) != len(losses):
        raise ValueError("one weight per sample loss")
    if total_weight <= 0:
        raise ValueError("the mini-batch's total weight must be positive")
    w = torch.tensor([float(c) for c in weights], dtype=losses[0].dtype)
    return (torch.stack(list(losses)) * w).sum() / total_weight


def k3_kl(logp: torch.Tensor, logp_ref: torch.Tensor) -> torch.Tensor:
    """k3 estimator of KL(π_θ || π_ref) on tokens sampled from π_θ: ``E[e^d − d − 1]``, ``d = ref − θ``;
    non-negative, unbiased, differentiable in ``logp``."""
    d = logp_ref.detach() - logp
    return (torch.exp(d) - d - 1).mean()


# the estimator ``group_norm`` (:mod:`legorl.objectives`), under its historical name
group_advantages = group_norm


@dataclass(frozen=True)
class ImportanceWeights:
    """The rollout-vs-trainer importance weights of one sample (per token or one per sequence) and
    what truncation and masking did to them; counts are over ``units`` (tokens or the sequence)."""

    weight: torch.Tensor  # detached; shape of the sample's tokens (token level) or a scalar
    units: int
    clipped: int  # raw ratio above tis_cap (truncated)
    masked: int  # raw ratio outside [1/mis_cap, mis_cap] (weight 0)
    raw_sum: float  # Σ raw ratio and Σ raw ratio²: the effective sample size of the step
    raw_sq_sum: float


# exp(±40) is far past any cap and keeps Σ w² finite in float64 for the ESS
_LOG_RATIO_BOUND = 40.0


def importance_weights(log_ratio: torch.Tensor, cfg: LossConfig) -> ImportanceWeights:
    """``w = π_old/π_rollout`` from per-token ``log_ratio`` (detached): per token, or the sequence's
    geometric mean; truncated at ``cfg.tis_cap`` (no cap: ``w = 1``, no correction) and zeroed
    outside ``[1/cfg.mis_cap, cfg.mis_cap]``. The counts and sums describe the raw ratio."""
    lr = log_ratio.detach().double().clamp(-_LOG_RATIO_BOUND, _LOG_RATIO_BOUND)
    raw = torch.exp(lr if cfg.token_level_is else lr.mean())
    # no tis_cap: no reweighting at all (weight 1), only MIS's mask if one is set
    w = torch.ones_like(raw)
    clipped = masked = 0
    if cfg.tis_cap is not None:
        clipped = int((raw > cfg.tis_cap).sum())
        w = torch.clamp(raw, max=cfg.tis_cap)
    if cfg.mis_cap is not None:
        keep = (raw >= 1.0 / cfg.mis_cap) & (raw <= cfg.mis_cap)
        masked = int((~keep).sum())
        w = torch.where(keep, w, torch.zeros_like(w))
    return ImportanceWeights(
        w.to(log_ratio.dtype), raw.numel(), clipped, masked, float(raw.sum()), float((raw * raw).sum())
    )


def effective_sample_size(raw_sum: float, raw_sq_sum: float, units: int) -> float:
    """Normalised effective sample size of importance weights, ``(Σw)² / (n Σw²)`` in ``(0, 1]``:
    1 when every weight is equal (on-policy), near ``1/n`` when one weight dominates."""
    if units == 0 or raw_sq_sum <= 0:
        return 1.0
    return raw_sum * raw_sum / (units * raw_sq_sum)


def sample_loss(
    logp: torch.Tensor,
    logp_old: torch.Tensor | None,
    logp_rollout: torch.Tensor,
    advantage: float,
    cfg: LossConfig,
    logp_ref: torch.Tensor | None = None,
) -> SampleLoss:
    """Negative clipped surrogate of one sample (to minimise). ``logp_old=None``: π_old is the
    current policy (one optimiser step per batch, docs/objective.md#gspo). ``logp_ref``: the reference
    policy's logprobs, used when ``cfg.kl_coef > 0``."""
    if logp.numel() == 0:
        raise ValueError("sample has no loss-masked tokens")
    logp_old = logp.detach() if logp_old is None else logp_old.detach()
    kl_t: torch.Tensor | None = None
    if cfg.kl_coef > 0:
        if logp_ref is None:
            raise ValueError("kl_coef > 0 needs the reference policy's logprobs")
        kl_t = k3_kl(logp, logp_ref)
    iw = importance_weights(logp_old - logp_rollout, cfg)
    out: PolicyLoss = get_policy_loss(cfg.objective)(logp, logp_old, advantage, iw.weight, cfg)
    loss = out.loss
    if kl_t is not None:
        loss = loss + cfg.kl_coef * kl_t
    return SampleLoss(
        loss,
        out.ratio,
        out.clipped_low + out.clipped_high,
        float(iw.weight.mean()),
        out.clipped_low,
        out.clipped_high,
        float(kl_t.detach()) if kl_t is not None else 0.0,
        iw,
    )


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
