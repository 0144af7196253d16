import math

import pytest
import torch

from legorl.training.gspo import (
    LossConfig,
    group_advantages,
    mismatch_stats,
    sample_loss,
)


def test_group_advantages_normalise_and_skip_degenerate_groups():
    advs = group_advantages([1.0, 0.0, 0.0, 1.0])
    assert advs == pytest.approx([1.0, -1.0, -1.0, 1.0], abs=1e-5)
    assert group_advantages([1.0, 1.0, 1.0]) is None  # zero variance → no gradient
    assert group_advantages([1.0]) is None  # fewer than 2 valid rollouts


def test_gspo_on_policy_gradient_is_advantage_times_mean_logprob_gradient():
    # With π_old = π_θ (first minibatch), s_i = 1 and ∇ loss = -A · ∇ mean_t log π(y_t).
    theta = torch.tensor([0.3, -0.2, 0.5], requires_grad=True)
    logp = torch.log_softmax(theta, 0)[[0, 2, 2]]
    out = sample_loss(logp, logp.detach(), logp.detach(), advantage=2.0, cfg=LossConfig())
    out.loss.backward()
    g_loss = theta.grad.clone()
    theta.grad = None
    (-(2.0) * torch.log_softmax(theta, 0)[[0, 2, 2]].mean()).backward()
    assert torch.allclose(g_loss, theta.grad, atol=1e-6)
    assert out.ratio == pytest.approx(1.0) and out.clipped == 0.0


def test_gspo_clips_sequence_ratio_outside_range():
    logp = torch.tensor([-1.0, -1.0], requires_grad=True)
    old = torch.tensor([-1.1, -1.1])  # s = e^{0.1} > 1 + ε_h
    out = sample_loss(logp, old, old, advantage=1.0, cfg=LossConfig())
    out.loss.backward()
    assert out.clipped == 1.0
    assert torch.all(logp.grad == 0)  # positive advantage, ratio above the clip: no gradient
    assert out.ratio == pytest.approx(math.exp(0.1), rel=1e-5)


def test_gspo_token_has_same_value_as_gspo_sequence():
    logp = torch.tensor([-0.5, -2.0, -1.0], requires_grad=True)
    old = torch.tensor([-0.5001, -2.0, -1.0001])
    a = sample_loss(logp, old, old, 1.0, LossConfig("gspo"))
    b = sample_loss(logp, old, old, 1.0, LossConfig("gspo_token"))
    assert float(a.loss.detach()) == pytest.approx(float(b.loss.detach()), abs=1e-7)


def test_grpo_token_ratio_and_tis_cap():
    logp = torch.tensor([-1.0, -1.0], requires_grad=True)
    old = torch.tensor([-1.0, -1.0])
    rollout = torch.tensor([-3.0, -1.0])  # trainer thinks token 0 is far likelier: w = e^2 → capped at 2
    out = sample_loss(logp, old, rollout, 1.0, LossConfig("grpo", 0.2, 0.2, tis_cap=2.0))
    assert out.tis_weight == pytest.approx((2.0 + 1.0) / 2)
    assert float(out.loss.detach()) == pytest.approx(-(2.0 + 1.0) / 2)


def test_mismatch_stats():
    a = torch.tensor([-1.0, -2.0, -3.0])
    m = mismatch_stats(a, a + 0.001)
    assert m.pearson == pytest.approx(1.0)
    assert m.max_abs_diff == pytest.approx(0.001, rel=1e-4)
    assert m.k3_kl >= 0
