"""Trainer depth: mini-batches and epochs, forward passes, π_old reuse, aggregation, schedule, KL
(tiny random Llama: the trainer's arithmetic is what is tested, not the model)."""

from __future__ import annotations

import copy
import math

import pytest
import torch
from scored_samples import scored_sample
from tiny_llama import tiny_llama
from transformers import LlamaForCausalLM

from legorl.config import TrainerConfig
from legorl.training.gspo import LossConfig, aggregate_losses, needs_old_recompute, sample_loss
from legorl.training.logprobs import compute_token_logprobs
from legorl.training.trainer import ForwardPass, Trainer, lr_factor, plan_forward_passes, plan_shared_prefix_passes
from legorl.trajectory.records import Sample

VOCAB = 61


def _model(seed: int = 0) -> LlamaForCausalLM:
    return tiny_llama(VOCAB, max_positions=256, seed=seed)


def _samples(model, n: int = 6, seed: int = 1, rollout_shift: float = 0.0) -> list[Sample]:
    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(n):
        ids = torch.randint(0, VOCAB, (8 + 3 * i,), generator=g).tolist()
        out.append(scored_sample(model, f"r{i}", ids, 3, 1.0 if i % 2 == 0 else -1.0, rollout_shift))
    return out


def _group_samples(model, groups: int = 2, size: int = 4, prompt: int = 20, seed: int = 2) -> list[Sample]:
    """GRPO-shaped batch: ``groups`` prompts, ``size`` completions each (different lengths, and
    the completions of a group share their first token, so the common prefix reaches past the prompt)."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for k in range(groups):
        head = torch.randint(0, VOCAB, (prompt + 1,), generator=g).tolist()
        for j in range(size):
            ids = head + torch.randint(0, VOCAB, (2 + 3 * j,), generator=g).tolist()
            out.append(scored_sample(model, f"g{k}r{j}", ids, prompt, (1.0, -1.0, 0.5, -0.5)[j % 4]))
    return out


def _sgd(model, lr: float = 1e-3) -> torch.optim.Optimizer:
    """Plain SGD (the trainer sets the lr each step): weight deltas are lr × gradient."""
    return torch.optim.SGD(model.parameters(), lr=lr)


def _weights(model) -> torch.Tensor:
    return torch.cat([p.detach().flatten() for p in model.parameters()])


def test_aggregation_against_hand_computed_values():
    losses = [torch.tensor(1.0), torch.tensor(3.0)]
    # rollout_weighting sample: c = 1 (sample_mean) or n_i (token_mean), tokens 1 and 3
    assert float(aggregate_losses(losses, [1.0, 1.0], 2.0)) == pytest.approx(2.0)
    assert float(aggregate_losses(losses, [1.0, 3.0], 4.0)) == pytest.approx((1 * 1 + 3 * 3) / 4)
    # a micro-batch contributes its share of the mini-batch's loss
    assert float(aggregate_losses(losses[:1], [1.0], 2.0)) == pytest.approx(0.5)
    assert float(aggregate_losses(losses[1:], [3.0], 4.0)) == pytest.approx(9 / 4)


def test_gspo_loss_against_hand_computed_value():
    logp = torch.tensor([-1.0, -2.0], requires_grad=True)
    old = torch.tensor([-1.1, -2.1])
    rollout = torch.tensor([-1.2, -2.2])
    cfg = LossConfig("gspo", eps_low=0.2, eps_high=0.2, tis_cap=2.0)
    out = sample_loss(logp, old, rollout, advantage=-0.5, cfg=cfg)
    s = math.exp(0.1)  # mean(logp - old)
    tis = math.exp(0.1)  # mean(old - rollout), under the cap
    assert out.ratio == pytest.approx(s, rel=1e-6)
    assert float(out.loss) == pytest.approx(-(s * -0.5) * tis, rel=1e-6)  # inside the clip range
    assert (out.clipped_low, out.clipped_high) == (0.0, 0.0)
    # the same ratio with a narrow range: A<0 and s>1+ε clips nothing (min keeps s·A); A>0 clips high
    narrow = LossConfig("gspo", eps_low=0.01, eps_high=0.01, tis_cap=None)
    pos = sample_loss(logp, old, rollout, 2.0, narrow)
    assert float(pos.loss) == pytest.approx(-(1.01 * 2.0), rel=1e-6) and pos.clipped_high == 1.0
    neg = sample_loss(logp, old, rollout, -2.0, narrow)
    assert float(neg.loss) == pytest.approx(-(s * -2.0), rel=1e-6) and neg.clipped == 0.0
    low = sample_loss(logp, logp.detach() + 0.1, rollout, -2.0, narrow)  # s = e^-0.1 < 0.99, A<0
    assert low.clipped_low == 1.0 and float(low.loss) == pytest.approx(-(0.99 * -2.0), rel=1e-6)


def test_grpo_clip_fractions_are_per_token():
    logp = torch.tensor([-1.0, -1.0, -1.0, -1.0])
    old = torch.tensor([-1.5, -1.0, -1.0, -0.5])  # ratios e^.5, 1, 1, e^-.5
    cfg = LossConfig("grpo", 0.2, 0.2, tis_cap=None)
    assert sample_loss(logp, old, old, 1.0, cfg).clipped_high == pytest.approx(0.25)
    assert sample_loss(logp, old, old, -1.0, cfg).clipped_low == pytest.approx(0.25)


def test_pi_old_is_the_training_forward_only_with_one_optimiser_step():
    assert not needs_old_recompute(1) and not needs_old_recompute(0)
    assert needs_old_recompute(2)


def test_lr_schedule():
    assert [lr_factor(k, 3, "constant", 10) for k in range(5)] == [0.25, 0.5, 0.75, 1.0, 1.0]
    assert lr_factor(3, 3, "linear", 7) == 1.0 and lr_factor(5, 3, "linear", 7) == pytest.approx(0.5)
    assert lr_factor(5, 3, "cosine", 7) == pytest.approx(0.5) and lr_factor(7, 3, "cosine", 7) == pytest.approx(0.0)
    assert lr_factor(100, 0, "cosine", None) == 1.0


def test_plan_forward_passes_bounds_padded_tokens():
    lengths = [10, 40, 20, 20, 5]
    passes = plan_forward_passes(lengths, 45)
    assert sorted(i for p in passes for i in p) == [0, 1, 2, 3, 4]
    for p in passes:
        assert len(p) == 1 or len(p) * max(lengths[i] for i in p) <= 45
    assert passes[0] == [1]  # 40 alone (two rows of 40 would be 80)
    assert plan_forward_passes(lengths, 10_000) == [[1, 2, 3, 0, 4]]


def test_plan_forward_passes_packed_bounds_real_tokens():
    lengths = [10, 40, 20, 20, 5]
    passes = plan_forward_passes(lengths, 45, packing=True)
    assert sorted(i for p in passes for i in p) == [0, 1, 2, 3, 4]
    assert all(sum(lengths[i] for i in p) <= 45 for p in passes)
    assert passes == [[1, 4], [2, 3], [0]]  # first fit, longest first
    assert plan_forward_passes([50], 45, packing=True) == [[0]]  # a sample longer than a pass gets its own


def _sgd_step(**trainer_cfg) -> tuple[dict, torch.Tensor]:
    """One SGD trainer step on the standard model and samples: its metrics and the weight change."""
    model = _model()
    w0 = _weights(model).clone()
    trainer = Trainer(model, TrainerConfig(lr=1e-3, **trainer_cfg))
    trainer.optimizer = _sgd(model)
    m = trainer.step(_samples(model))
    return m, _weights(model) - w0


def test_packing_does_not_change_the_update():
    """Packed or padded forwards give the same step (loss, weights), without padding."""
    (m_pad, w_pad), (m_pack, w_pack) = _sgd_step(packing=False), _sgd_step(packing=True)
    assert m_pack["train/padding_frac"] == 0.0 and m_pad["train/padding_frac"] > 0
    assert m_pack["train/loss"] == pytest.approx(m_pad["train/loss"], abs=1e-6)
    assert m_pack["mismatch/max_abs_diff"] < 1e-4
    assert w_pad.abs().max() > 1e-5 and torch.allclose(w_pad, w_pack, atol=1e-8, rtol=1e-4)


def test_flipped_advantages_reverse_the_update():
    """The control run's trainer: the same step with negated advantages moves the weights the other way."""
    (_, plain), (_, flipped) = _sgd_step(), _sgd_step(flip_advantages=True)
    assert plain.abs().max() > 1e-5
    assert (plain + flipped).abs().max() < 1e-3 * plain.abs().max()  # float rounding of w - w0 only


def test_one_step_reuses_the_training_forward_and_matches_a_hand_computed_loss():
    model = _model()
    samples = _samples(model)
    trainer = Trainer(model, TrainerConfig(lr=1e-3))
    m = trainer.step(samples)
    assert m["train/optimizer_steps"] == 1 and m["train/old_logprobs_recomputed"] is False
    assert m["train/forward_passes"] == 1  # all six samples in one padded forward
    assert m["train/ratio_mean"] == pytest.approx(1.0) and m["train/clip_frac"] == 0.0
    # ratio 1, rollout logprobs = trainer's: TIS weight 1, so loss = -mean_i A_i
    assert m["train/loss"] == pytest.approx(-sum(s.advantage for s in samples) / len(samples), abs=1e-5)
    assert m["mismatch/max_abs_diff"] < 1e-4 and m["mismatch/tokens"] == sum(s.num_sampled for s in samples)
    assert trainer.version == 1 and trainer.step_index == 1


@pytest.mark.parametrize("aggregation", ["sample_mean", "token_mean"])
def test_forward_split_does_not_change_the_update(aggregation):
    """Invariant: one padded forward or one forward per sample give the same weights."""
    results = []
    for forward_tokens in (10_000, 16):
        model = _model()
        w0 = _weights(model).clone()
        samples = _samples(model)
        cfg = TrainerConfig(lr=1e-3, forward_tokens=forward_tokens, loss_aggregation=aggregation)
        trainer = Trainer(model, cfg)
        trainer.optimizer = _sgd(model)  # Adam's first step is ~lr·sign(g): it would magnify rounding
        m = trainer.step(samples)
        results.append((m, _weights(model) - w0))
    (m_one, w_one), (m_many, w_many) = results
    assert m_one["train/forward_passes"] == 1 and m_many["train/forward_passes"] == 6
    assert m_one["train/loss"] == pytest.approx(m_many["train/loss"], abs=1e-6)
    assert w_one.abs().max() > 1e-5  # the step did move the weights
    assert torch.allclose(w_one, w_many, atol=1e-8, rtol=1e-4)


def test_batched_step_equals_per_sample_gradient():
    """The batched path gives the gradient of the loss written out sample by sample."""
    model = _model()
    samples = _samples(model, n=4)
    ref = _model()
    trainer = Trainer(model, TrainerConfig(lr=1e-3, grad_clip=1e9))
    trainer.optimizer = _sgd(model)
    trainer.step(samples)
    # by hand: on-policy, TIS 1 → loss = -1/B Σ A_i mean_t logp_it (value), gradient of it
    loss = sum(
        -(s.advantage) * compute_token_logprobs(ref, s.token_ids)[torch.tensor(s.loss_mask, dtype=torch.bool)].mean()
        for s in samples
    ) / len(samples)
    loss.backward()
    _sgd(ref).step()
    assert torch.allclose(_weights(model), _weights(ref), atol=1e-8, rtol=1e-5)


def test_minibatches_and_epochs_move_the_ratio_and_measure_clipping():
    model = _model()
    samples = _samples(model)
    cfg = TrainerConfig(lr=5e-3, ppo_epochs=2, minibatch_size=2, eps_low=3e-4, eps_high=4e-4)
    m = Trainer(model, cfg).step(samples)
    assert m["train/optimizer_steps"] == 6 and m["train/old_logprobs_recomputed"] is True
    assert m["train/ratio_min"] < 1.0 - 1e-4 or m["train/ratio_max"] > 1.0 + 1e-4
    assert m["train/clip_frac_low"] + m["train/clip_frac_high"] > 0
    assert 0 <= m["train/clip_frac"] <= 1
    assert m["mismatch/tokens"] == sum(s.num_sampled for s in samples)  # fidelity on π_old, before updates


def test_idle_and_monitor_samples_are_scored_not_trained():
    model = _model()
    samples = _samples(model, n=4)
    for s in samples[2:]:
        s.advantage = 0.0
    monitor = _samples(model, n=2, seed=9)
    m = Trainer(model, TrainerConfig(lr=1e-3)).step(samples, monitor)
    assert m["train/trainable_samples"] == 2
    assert m["mismatch/tokens"] == sum(s.num_sampled for s in [*samples, *monitor])


def test_nothing_trainable_leaves_weights_alone():
    model = _model()
    samples = _samples(model, n=2)
    for s in samples:
        s.advantage = 0.0
    before = _weights(model).clone()
    trainer = Trainer(model, TrainerConfig(lr=1e-3))
    m = trainer.step(samples)
    assert m["train/updated"] is False and trainer.version == 0 and trainer.step_index == 1
    assert torch.equal(before, _weights(model))


def test_kl_to_reference_is_zero_at_start_and_grows():
    model = _model()
    samples = _samples(model)
    trainer = Trainer(model, TrainerConfig(lr=5e-3, kl_coef=0.1))
    first = trainer.step(samples)
    second = trainer.step(samples)
    assert first["train/kl_ref"] == pytest.approx(0.0, abs=1e-7)
    assert second["train/kl_ref"] > 0


def test_warmup_sets_the_learning_rate_per_step():
    model = _model()
    samples = _samples(model, n=2)
    trainer = Trainer(model, TrainerConfig(lr=1e-3, lr_warmup_steps=1, lr_schedule="linear"), total_steps=3)
    lrs = [trainer.step(samples)["train/lr"] for _ in range(3)]
    assert lrs == pytest.approx([5e-4, 1e-3, 5e-4])


def test_state_round_trip():
    model = _model()
    samples = _samples(model, n=2)
    trainer = Trainer(model, TrainerConfig(lr=1e-3))
    trainer.step(samples)
    other = Trainer(_model(), TrainerConfig(lr=1e-3))
    other.model.load_state_dict(model.state_dict())
    other.load_state(copy.deepcopy(trainer.state()))  # a checkpoint holds copies
    a, b = trainer.step(samples), other.step(samples)
    assert a["train/loss"] == pytest.approx(b["train/loss"], abs=1e-7)
    assert torch.equal(_weights(trainer.model), _weights(other.model))


@pytest.mark.parametrize("epochs", [1, 2])
def test_step_logprobs_are_the_pre_update_view_of_every_scored_sample(epochs):
    """What the run records for the UI's heat map: π_old of each sample, 0 where the mask is 0."""
    model = _model()
    samples = _samples(model, n=4)
    samples[3].advantage = 0.0  # idle: scored only
    before = [compute_token_logprobs(model, s.token_ids).tolist() for s in samples]
    trainer = Trainer(model, TrainerConfig(lr=5e-2, ppo_epochs=epochs, minibatch_size=2))
    trainer.step(samples)
    assert compute_token_logprobs(model, samples[0].token_ids).tolist() != before[0]  # the weights moved
    for s, ref in zip(samples, before):
        got = trainer.step_logprobs(s)
        assert got is not None and len(got) == len(s.token_ids)
        for g, r, m in zip(got, ref, s.loss_mask):
            assert g == pytest.approx(r if m else 0.0, abs=1e-5)
    assert trainer.step_logprobs(_samples(model, n=1, seed=7)[0]) is None


def test_plan_shared_prefix_passes():
    prompt_a, prompt_b = [1, 2, 3, 4], [9, 9, 9]
    ids = [
        prompt_a + [5, 6],  # 0: family a; a's members also share the token 5
        prompt_a + [5, 7, 8, 9],  # 1
        prompt_b + [1],  # 2: alone (its prompt is nobody else's)
        prompt_a + [5, 6, 6, 6, 6, 6, 6],  # 3
        [7, 7, 7, 7, 7],  # 4: alone
    ]
    masks = [[0] * 4 + [1] * 2, [0] * 4 + [1] * 4, [0] * 3 + [1], [0] * 4 + [1] * 7, [0, 0, 1, 1, 1]]
    passes = plan_shared_prefix_passes(ids, masks, forward_tokens=1000)
    assert passes[0] == ForwardPass([3, 1, 0], prefix_len=5)  # longest common prefix, prompt + "5"
    assert sorted(i for p in passes[1:] for i in p.indices) == [2, 4] and all(p.prefix_len is None for p in passes[1:])
    # prefix + the suffixes end to end bounded: 5 + 6 + 3 > 13, so the family splits (5 + 3 + 1 fits);
    # a chunk of one runs alone
    small = plan_shared_prefix_passes(ids, masks, forward_tokens=13)
    shared = [p for p in small if p.prefix_len is not None]
    assert shared == [ForwardPass([1, 0], prefix_len=5)]
    assert sorted(i for p in small for i in p.indices) == [0, 1, 2, 3, 4]
    # a member that is the whole common prefix keeps one token of its own
    dup = plan_shared_prefix_passes([[1, 2, 3], [1, 2, 3]], [[0, 1, 1], [0, 1, 1]], 100)
    assert dup == [ForwardPass([0, 1], prefix_len=2)]


def test_prefix_sharing_does_not_change_the_update():
    """A GRPO-shaped batch with the prompt run once per group gives the unshared step (loss,
    weights, fidelity), for fewer tokens fed."""
    results = []
    for sharing in (False, True):
        model = _model()
        w0 = _weights(model).clone()
        trainer = Trainer(model, TrainerConfig(lr=1e-3, prefix_sharing=sharing, packing=True))
        trainer.optimizer = _sgd(model)
        m = trainer.step(_group_samples(model))
        results.append((m, _weights(model) - w0))
    (m_plain, w_plain), (m_shared, w_shared) = results
    assert m_plain["train/sample_tokens"] == m_shared["train/sample_tokens"]
    assert m_plain["train/fed_tokens"] == m_plain["train/sample_tokens"]  # packed: no padding
    # 2 groups × (21 shared + the 4 suffixes end to end, 2 + 5 + 8 + 11): 2 × (21 + 26) = 94
    assert m_shared["train/forward_passes"] == 2 and m_shared["train/fed_tokens"] == 94
    assert m_shared["train/fed_tokens"] < 0.7 * m_plain["train/fed_tokens"]
    assert m_shared["train/loss"] == pytest.approx(m_plain["train/loss"], abs=1e-6)
    assert m_shared["mismatch/max_abs_diff"] < 1e-4
    assert w_plain.abs().max() > 1e-5 and torch.allclose(w_plain, w_shared, atol=1e-8, rtol=1e-4)
