"""The objectives and advantage estimators of the registry (``docs/objectives.md``) against losses and
gradients computed by hand on small tensors: clip boundaries, zero-variance groups, masked tokens; the
config's validation of the names; a user's module registering its own."""

from __future__ import annotations

import math

import pytest
import torch

from legorl.config import RunConfig, TrainerConfig
from legorl.errors import ConfigError
from legorl.loop.batch import assemble_batch
from legorl.objectives import (
    BUILTIN_ADVANTAGES,
    BUILTIN_OBJECTIVES,
    get_advantage,
    get_policy_loss,
    objective_info,
    register_advantage,
    register_policy_loss,
)
from legorl.training.gspo import LossConfig, group_advantages, sample_loss
from legorl.trajectory.records import Rollout, Sample


def _tokens(ratios, probs=None):
    """``logp`` (leaf, with grad) and ``logp_old`` such that ``exp(logp − logp_old)`` is ``ratios``."""
    probs = probs or [0.5] * len(ratios)
    logp = torch.tensor([math.log(p) for p in probs], dtype=torch.float64, requires_grad=True)
    old = logp.detach() - torch.tensor([math.log(r) for r in ratios], dtype=torch.float64)
    return logp, old


def _loss(objective, ratios, advantage, eps_low=0.2, eps_high=0.2, probs=None, **kw):
    """sample_loss on an on-policy rollout (importance weight 1), with the gradient w.r.t. ``logp``."""
    logp, old = _tokens(ratios, probs)
    cfg = LossConfig(objective=objective, eps_low=eps_low, eps_high=eps_high, **kw)
    out = sample_loss(logp, old, old.clone(), advantage, cfg)
    out.loss.backward()
    return out, logp.grad.tolist()


# --- objectives ---


def test_every_builtin_objective_and_estimator_is_implemented():
    assert set(BUILTIN_OBJECTIVES) == {"gspo", "gspo_token", "grpo", "dr_grpo", "dapo", "cispo"}
    assert set(BUILTIN_ADVANTAGES) == {"group_norm", "group_mean", "rloo"}
    for name in BUILTIN_OBJECTIVES:
        assert callable(get_policy_loss(name))
    # the default importance level each objective declares (trainer.is_level: null)
    assert [LossConfig(objective=n).token_level_is for n in BUILTIN_OBJECTIVES] == [
        False,
        False,
        True,
        True,
        True,
        True,
    ]


def test_gspo_sequence_ratio_unclipped_and_clipped():
    # log s = mean(0.1, −0.3) = −0.1; inside [0.8, 1.2]: ℓ = −s·A, ∂ℓ/∂logp_t = −s·A/n
    out, grad = _loss("gspo", [math.exp(0.1), math.exp(-0.3)], 2.0)
    s = math.exp(-0.1)
    assert out.loss.item() == pytest.approx(-2 * s)
    assert grad == pytest.approx([-s, -s])  # −s·2/2
    assert out.ratio == pytest.approx(s) and out.clipped == 0.0
    # s = e^0.5 > 1.2 with A > 0: the clip holds the value at 1.2 and removes the gradient
    out, grad = _loss("gspo", [math.exp(0.5)] * 2, 1.0)
    assert out.loss.item() == pytest.approx(-1.2)
    assert grad == [0.0, 0.0]
    assert (out.clipped_low, out.clipped_high) == (0.0, 1.0)


def test_gspo_token_shares_the_value_but_not_the_gradient_under_token_weights():
    # per-token importance weights w = (1, 0.5) tell the two apart: GSPO's sequence ratio spreads
    # every token's weighted term over all tokens, GSPO-token gives each token its own
    logp, old = _tokens([math.exp(0.1), math.exp(-0.3)])
    w = torch.tensor([1.0, 0.5], dtype=torch.float64)
    s = math.exp(-0.1)
    grads = {}
    for name in ("gspo", "gspo_token"):
        logp.grad = None
        out = get_policy_loss(name)(logp, old, 1.0, w, LossConfig(objective=name, eps_low=0.2, eps_high=0.2))
        assert out.loss.item() == pytest.approx(-s * 1.5 / 2)
        out.loss.backward()
        grads[name] = logp.grad.tolist()
    assert grads["gspo"] == pytest.approx([-s * 1.5 / 4] * 2)  # −(1/n)·Σw·s/n per token
    assert grads["gspo_token"] == pytest.approx([-s / 2, -s / 4])  # −w_t·s/n


@pytest.mark.parametrize("objective", ["grpo", "dapo"])
def test_token_clip_boundaries_positive_advantage(objective):
    hi = 1.2 if objective == "grpo" else 1.28
    # just inside the upper bound keeps the gradient, just outside loses it; a low ratio with A > 0
    # is never clipped (min picks the unclipped r·A)
    ratios = [hi - 1e-6, hi + 1e-6, 0.5]
    out, grad = _loss(objective, ratios, 1.0, eps_high=hi - 1)
    assert out.loss.item() == pytest.approx(-(ratios[0] + hi + 0.5) / 3)
    assert grad == pytest.approx([-ratios[0] / 3, 0.0, -0.5 / 3])
    assert (out.clipped_low, out.clipped_high) == (0.0, pytest.approx(1 / 3))
    assert out.ratio == pytest.approx(sum(ratios) / 3)


@pytest.mark.parametrize("objective", ["grpo", "dapo"])
def test_token_clip_boundaries_negative_advantage(objective):
    # A = −1: min(−r, −clip(r)) clips the ratio below 1 − ε_low (held at 0.8, no gradient) and never above
    ratios = [0.8 + 1e-6, 0.8 - 1e-6, 1.5]
    out, grad = _loss(objective, ratios, -1.0, eps_high=0.28)
    assert out.loss.item() == pytest.approx((ratios[0] + 0.8 + 1.5) / 3)
    assert grad == pytest.approx([ratios[0] / 3, 0.0, 1.5 / 3])
    assert (out.clipped_low, out.clipped_high) == (pytest.approx(1 / 3), 0.0)


def test_dapo_clips_higher_than_grpo():
    # the same ratio 1.25 is clipped by GRPO's symmetric 0.2 and kept by DAPO's ε_high 0.28
    g, _ = _loss("grpo", [1.25], 1.0)
    d, grad = _loss("dapo", [1.25], 1.0, eps_high=0.28)
    assert g.loss.item() == pytest.approx(-1.2) and g.clipped_high == 1.0
    assert d.loss.item() == pytest.approx(-1.25) and d.clipped_high == 0.0
    assert grad == pytest.approx([-1.25])


def test_dr_grpo_sums_tokens_over_a_constant():
    ratios = [1.1, 0.7, 1.5]
    out, grad = _loss("dr_grpo", ratios, 1.0, norm_tokens=8)
    assert out.loss.item() == pytest.approx(-(1.1 + 0.7 + 1.2) / 8)
    assert grad == pytest.approx([-1.1 / 8, -0.7 / 8, 0.0])
    # no length normalisation: a token's gradient does not shrink as its sample grows (GRPO's does)
    _, long_grad = _loss("dr_grpo", [1.1] * 6, 1.0, norm_tokens=8)
    assert long_grad[0] == pytest.approx(grad[0])
    _, grpo_short = _loss("grpo", [1.1] * 3, 1.0)
    _, grpo_long = _loss("grpo", [1.1] * 6, 1.0)
    assert grpo_long[0] == pytest.approx(grpo_short[0] / 2)


def test_cispo_clips_a_detached_weight_and_keeps_every_gradient():
    ratios, probs = [1.1, 0.7, 1.5], [0.5, 0.25, 0.8]
    out, grad = _loss("cispo", ratios, 1.0, eps_high=0.28, probs=probs)
    clipped = [1.1, 0.8, 1.28]  # clip(r, 0.8, 1.28)
    assert out.loss.item() == pytest.approx(-sum(c * math.log(p) for c, p in zip(clipped, probs)) / 3)
    # ∂ℓ/∂logp_t = −sg[clip(r_t)]·A/n: the clipped tokens keep a (bounded) gradient, unlike PPO's clip
    assert grad == pytest.approx([-c / 3 for c in clipped])
    assert (out.clipped_low, out.clipped_high) == (pytest.approx(1 / 3), pytest.approx(1 / 3))
    # A < 0 flips the gradient and counts the same clipped tokens
    out, grad = _loss("cispo", ratios, -2.0, eps_high=0.28, probs=probs)
    assert grad == pytest.approx([2 * c / 3 for c in clipped])
    assert out.clipped == pytest.approx(2 / 3)


@pytest.mark.parametrize("objective", BUILTIN_OBJECTIVES)
def test_masked_tokens_carry_no_gradient(objective):
    # a sample's full row: the loss mask selects the sampled tokens (as the trainer does), and MIS
    # zeroes a token whose rollout/trainer ratio leaves [1/2, 2]
    logp_full = torch.log(torch.tensor([0.3, 0.5, 0.4, 0.6, 0.2], dtype=torch.float64)).requires_grad_()
    mask = torch.tensor([False, True, True, False, True])
    logp = logp_full[mask]
    old = logp.detach() - 0.05
    rollout = old.clone()
    rollout[1] += 3.0  # π_old/π_rollout = e^−3 on the sample's 2nd token: masked
    cfg = LossConfig(objective=objective, eps_low=0.2, eps_high=0.28, is_level="token", mis_cap=2.0)
    out = sample_loss(logp, old, rollout, 1.0, cfg)
    out.loss.backward()
    grad = logp_full.grad.tolist()
    assert grad[0] == grad[3] == 0.0  # outside the loss mask
    if objective == "gspo":
        # the sequence ratio carries every token's term: the masked one still gets gradient through s
        assert grad[2] != 0.0
    else:
        assert grad[2] == 0.0  # its own term is zeroed, and no other term depends on it
    assert grad[1] != 0.0 and grad[4] != 0.0
    assert out.importance is not None and out.importance.masked == 1


def test_existing_objectives_keep_their_numbers():
    # the registry's grpo is the former `else` branch of sample_loss, term for term
    logp, old = _tokens([1.1, 0.7, 1.5])
    rollout = old + torch.tensor([0.1, -0.2, 0.0], dtype=torch.float64)
    cfg = LossConfig(objective="grpo", eps_low=0.2, eps_high=0.2, tis_cap=1.1)
    out = sample_loss(logp, old, rollout, 1.0, cfg)
    ratio = torch.exp(logp - old)
    w = torch.clamp(torch.exp(old - rollout), max=1.1)
    expected = -(torch.minimum(ratio, torch.clamp(ratio, 0.8, 1.2)) * w).mean()
    assert out.loss.item() == expected.item()


def test_registering_over_a_builtin_is_refused():
    with pytest.raises(ValueError, match="already registered"):
        register_policy_loss("grpo")(lambda *a: None)
    with pytest.raises(ValueError, match="already registered"):
        register_advantage("rloo")(lambda rewards: None)
    with pytest.raises(ValueError, match="unknown objective 'nope'"):
        get_policy_loss("nope")
    with pytest.raises(ValueError, match="unknown advantage estimator 'nope'"):
        get_advantage("nope")


# --- advantage estimators ---


def test_group_norm_is_todays_estimator():
    assert get_advantage("group_norm") is group_advantages
    assert group_advantages([1.0, 0.0, 0.0, 1.0]) == pytest.approx([1.0, -1.0, -1.0, 1.0], abs=1e-5)
    assert group_advantages([3.0, 1.0]) == pytest.approx([1.0, -1.0], abs=1e-5)  # (r − 2)/1


def test_group_mean_drops_the_std():
    est = get_advantage("group_mean")
    assert est([1.0, 0.0, 0.0, 1.0]) == [0.5, -0.5, -0.5, 0.5]
    assert est([3.0, 1.0]) == [1.0, -1.0]
    assert est([1.0, 2.0, 6.0]) == [-2.0, -1.0, 3.0]


def test_rloo_leaves_each_rollout_out_of_its_baseline():
    est = get_advantage("rloo")
    assert est([1.0, 0.0, 0.0, 1.0]) == pytest.approx([2 / 3, -2 / 3, -2 / 3, 2 / 3])
    assert est([3.0, 1.0]) == [2.0, -2.0]  # a group of 2: each against the other
    assert est([1.0, 2.0, 6.0]) == [-3.0, -1.5, 4.5]  # 1 − 4, 2 − 3.5, 6 − 1.5


@pytest.mark.parametrize("name", ["group_norm", "group_mean", "rloo"])
def test_groups_without_signal_get_no_advantage(name):
    est = get_advantage(name)
    assert est([1.0, 1.0, 1.0]) is None  # zero variance
    assert est([0.5, 0.5]) is None
    assert est([1.0]) is None  # fewer than 2 valid rollouts
    assert est([]) is None
    assert est([0.0, 1.0]) is not None


def _rollout(task, reward):
    return Rollout(
        rollout_id=f"{task}-{reward}",
        task_id=task,
        harness="minimal",
        sandbox="bwrap",
        reward=reward,
        status="ok",
        samples=[
            Sample(
                rollout_id=f"{task}-{reward}",
                thread_id="main",
                segment_index=0,
                token_ids=[1, 2],
                loss_mask=[0, 1],
                rollout_logprobs=[0.0, -0.1],
            )
        ],
    )


def test_assemble_batch_uses_the_named_estimator():
    rs = [_rollout("a", 1.0), _rollout("a", 2.0), _rollout("a", 6.0), _rollout("b", 1.0), _rollout("b", 1.0)]
    batch = assemble_batch(rs, advantage="rloo")
    assert [s.advantage for s in batch.samples] == [-3.0, -1.5, 4.5]
    assert len(batch.monitor) == 2 and batch.groups_with_signal == 1
    assert [s.advantage for s in assemble_batch(rs, advantage="group_mean").samples] == [-2.0, -1.0, 3.0]
    with pytest.raises(ValueError, match="unknown advantage estimator 'nope'"):
        assemble_batch([], advantage="nope")


# --- config ---


def test_config_validates_names_and_names_the_field():
    with pytest.raises(ConfigError, match=r"trainer\.objective.*unknown trainer\.objective 'ppo'"):
        RunConfig.load(None, **{"trainer.objective": "ppo"})
    with pytest.raises(ConfigError, match=r"trainer\.advantage.*'median'.*group_norm, group_mean, rloo"):
        RunConfig.load(None, **{"trainer.advantage": "median"})
    with pytest.raises(ConfigError, match=r"trainer\.objective_module.*'no_such_objectives_module'"):
        RunConfig.load(None, **{"trainer.objective_module": "no_such_objectives_module"})
    # the token-ratio objectives refuse GSPO's 1e-4-scale clip range; DAPO needs eps_high > eps_low
    with pytest.raises(ConfigError, match="'cispo' uses token ratios"):
        RunConfig.load(None, **{"trainer.objective": "cispo"})
    with pytest.raises(ConfigError, match="eps_high must exceed trainer.eps_low"):
        RunConfig.load(None, **{"trainer.objective": "dapo", "trainer.eps_low": 0.2, "trainer.eps_high": 0.2})
    cfg = RunConfig.load(None, **{"trainer.objective": "dapo", "trainer.eps_low": 0.2, "trainer.eps_high": 0.28})
    assert cfg.trainer.objective == "dapo" and cfg.trainer.advantage == "group_norm"


def test_dr_grpo_defaults_to_group_mean_unless_the_advantage_is_given():
    eps = {"eps_low": 0.2, "eps_high": 0.2}
    assert TrainerConfig(objective="dr_grpo", **eps).advantage == "group_mean"
    assert TrainerConfig(objective="dr_grpo", advantage="rloo", **eps).advantage == "rloo"
    assert TrainerConfig(objective="dr_grpo", advantage="group_norm", **eps).advantage == "group_norm"
    dumped = TrainerConfig(objective="dr_grpo", **eps).model_dump_json()
    assert TrainerConfig.model_validate_json(dumped).advantage == "group_mean"


def test_user_module_registers_an_objective_and_an_estimator():
    # unknown until the module named in the config is imported by its validation
    cfg = RunConfig.load(
        None,
        **{
            "trainer.objective_module": "user_objective",
            "trainer.objective": "test_reinforce",
            "trainer.advantage": "test_centered_ranks",
        },
    )
    assert cfg.trainer.objective == "test_reinforce"
    assert objective_info("test_reinforce").is_level == "sequence"
    # −A·Σ_t logp_t: ∂ℓ/∂logp_t = −A
    logp, old = _tokens([1.3, 0.6], probs=[0.5, 0.25])
    out = sample_loss(logp, old, old.clone(), 2.0, LossConfig(objective=cfg.trainer.objective))
    out.loss.backward()
    assert out.loss.item() == pytest.approx(-2 * (math.log(0.5) + math.log(0.25)))
    assert logp.grad.tolist() == [-2.0, -2.0]
    rs = [_rollout("a", 5.0), _rollout("a", 1.0), _rollout("a", 3.0)]
    batch = assemble_batch(rs, advantage=cfg.trainer.advantage)
    assert [s.advantage for s in batch.samples] == [1.0, -1.0, 0.0]
