"""A user's objective and advantage estimator, registered at import: what ``trainer.objective_module``
names (``tests/training/test_objectives_registry.py`` loads it by name through the config)."""

from __future__ import annotations

import torch

from legorl.objectives import register_advantage, register_policy_loss
from legorl.training.policy_losses import PolicyLoss


@register_policy_loss("test_reinforce", is_level="sequence", token_ratio=False)
def reinforce(logp: torch.Tensor, logp_old: torch.Tensor, advantage: float, weight: torch.Tensor, cfg) -> PolicyLoss:
    """Plain REINFORCE, ``−A · Σ_t logp_t · w`` (no ratio, no clip, a sum rather than a mean)."""
    return PolicyLoss(-(advantage * logp * weight).sum(), 1.0, 0.0, 0.0)


@register_advantage("test_centered_ranks")
def centered_ranks(rewards):
    """Each reward's rank among the group, centred (ties not handled: the test's rewards are distinct)."""
    if len(set(rewards)) < 2:
        return None
    order = sorted(rewards)
    mid = (len(rewards) - 1) / 2
    return [order.index(r) - mid for r in rewards]
