"""The objective's weighting and off-policy corrections against hand-computed losses and gradients:
rollouts split into 1, 2 and 5 samples (``rollout_weighting``), token- and sequence-level truncated
importance sampling, masked importance sampling, the effective sample size (docs/objective.md)."""

from __future__ import annotations

import math

import pytest
import torch
from scored_samples import scored_sample
from tiny_llama import tiny_llama

from legorl.config import TrainerConfig
from legorl.training.gspo import (
    LossConfig,
    effective_sample_size,
    importance_weights,
    sample_loss,
    sample_weights,
)
from legorl.training.logprobs import compute_token_logprobs
from legorl.training.trainer import Trainer
from legorl.trajectory.records import Sample

VOCAB = 61
# rollouts split into 1, 2 and 5 samples (compaction, a rebuild, sub-agents), their advantages
SPLITS = {"one": 1, "two": 2, "five": 5}
ADVANTAGE = {"one": 1.0, "two": -0.5, "five": 0.75}


def _split_samples(model) -> list[Sample]:
    g = torch.Generator().manual_seed(3)
    out = []
    for rid, k in SPLITS.items():
        for j in range(k):
            ids = torch.randint(0, VOCAB, (6 + 2 * j + k,), generator=g).tolist()
            out.append(scored_sample(model, rid, ids, 3, ADVANTAGE[rid]))
    return out


def _by_rollout(rids: list[str], weights: list[float]) -> dict[str, float]:
    total: dict[str, float] = {}
    for r, w in zip(rids, weights):
        total[r] = total.get(r, 0.0) + w
    return total


# ---------------------------------------------------------------------------------- weights


@pytest.mark.parametrize("aggregation", ["sample_mean", "token_mean"])
def test_rollout_weighting_gives_every_rollout_one_weight_however_it_splits(aggregation):
    rids = [r for r, k in SPLITS.items() for _ in range(k)]
    tokens = [3, 4, 7, 1, 2, 3, 4, 10]  # "one": 3; "two": 4+7; "five": 1+2+3+4+10
    w = sample_weights(rids, tokens, aggregation, "rollout")
    assert _by_rollout(rids, w) == pytest.approx({"one": 1.0, "two": 1.0, "five": 1.0})
    if aggregation == "sample_mean":  # shared equally
        assert w == pytest.approx([1, 1 / 2, 1 / 2, 1 / 5, 1 / 5, 1 / 5, 1 / 5, 1 / 5])
    else:  # shared by sampled tokens
        assert w == pytest.approx([1, 4 / 11, 7 / 11, 1 / 20, 2 / 20, 3 / 20, 4 / 20, 10 / 20])


def test_sample_weighting_lets_a_split_rollout_weigh_k_times():
    rids = [r for r, k in SPLITS.items() for _ in range(k)]
    tokens = [3, 4, 7, 1, 2, 3, 4, 10]
    by_samples = _by_rollout(rids, sample_weights(rids, tokens, "sample_mean", "sample"))
    assert by_samples == {"one": 1.0, "two": 2.0, "five": 5.0}
    by_tokens = _by_rollout(rids, sample_weights(rids, tokens, "token_mean", "sample"))
    assert by_tokens == {"one": 3.0, "two": 11.0, "five": 20.0}


def test_bad_weighting_inputs_are_refused():
    with pytest.raises(ValueError, match="rollout weighting"):
        sample_weights(["r"], [1], "sample_mean", "task")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="aggregation"):
        sample_weights(["r"], [1], "seq_mean", "rollout")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="one rollout id"):
        sample_weights(["r", "s"], [1], "sample_mean", "rollout")


# --------------------------------------------------------------- the trainer, by hand


def _hand_loss(model, samples: list[Sample], aggregation: str, weighting: str) -> torch.Tensor:
    """On-policy (ratio 1, TIS weight 1): ℓ_i = -A_i · mean_t logp_it in value and gradient;
    L = Σ c_i ℓ_i / Σ c_i with c_i from the table written out here, not from the library."""
    k = {r: sum(s.rollout_id == r for s in samples) for r in SPLITS}
    n_r = {r: sum(s.num_sampled for s in samples if s.rollout_id == r) for r in SPLITS}
    terms, weights = [], []
    for s in samples:
        logp = compute_token_logprobs(model, s.token_ids)[torch.tensor(s.loss_mask, dtype=torch.bool)]
        # -A·s with s = exp(mean(logp - sg(logp))): value -A, gradient -A·mean(∇logp)
        terms.append(-float(s.advantage) * torch.exp((logp - logp.detach()).mean()))
        if weighting == "rollout":
            weights.append(1 / k[s.rollout_id] if aggregation == "sample_mean" else s.num_sampled / n_r[s.rollout_id])
        else:
            weights.append(1.0 if aggregation == "sample_mean" else float(s.num_sampled))
    return sum(c * t for c, t in zip(weights, terms)) / sum(weights)


@pytest.mark.parametrize("weighting", ["rollout", "sample"])
@pytest.mark.parametrize("aggregation", ["sample_mean", "token_mean"])
def test_trainer_step_equals_the_hand_written_loss_and_gradient(aggregation, weighting):
    model, ref = tiny_llama(VOCAB, max_positions=64, seed=0), tiny_llama(VOCAB, max_positions=64, seed=0)
    samples = _split_samples(model)
    cfg = TrainerConfig(lr=1e-2, grad_clip=1e9, loss_aggregation=aggregation, rollout_weighting=weighting)
    trainer = Trainer(model, cfg)
    trainer.optimizer = torch.optim.SGD(model.parameters(), lr=1e-2)
    m = trainer.step(samples)
    hand = _hand_loss(ref, samples, aggregation, weighting)
    assert m["train/loss"] == pytest.approx(float(hand), abs=1e-6)
    assert m["train/rollouts"] == 3 and m["train/trainable_samples"] == 8
    hand.backward()
    torch.optim.SGD(ref.parameters(), lr=1e-2).step()
    moved = [(p - q).abs().max() for p, q in zip(model.parameters(), ref.parameters())]
    assert max(moved) < 1e-6
    assert any((p.grad.abs().max() > 0) for p in ref.parameters() if p.grad is not None)


def test_rollout_weighting_values_by_hand():
    """The loss value of the table, with numbers: on-policy ℓ_i = -A_i."""
    model = tiny_llama(VOCAB, max_positions=64, seed=0)
    samples = _split_samples(model)
    m = Trainer(model, TrainerConfig(lr=1e-3)).step(samples)
    # rollout + sample_mean: (-1 + 0.5 - 0.75) / 3, whatever the splits
    assert m["train/loss"] == pytest.approx((-1.0 + 0.5 - 0.75) / 3, abs=1e-6)
    model = tiny_llama(VOCAB, max_positions=64, seed=0)
    m = Trainer(model, TrainerConfig(lr=1e-3, rollout_weighting="sample")).step(_split_samples(model))
    # sample + sample_mean: the five-way split weighs five times
    assert m["train/loss"] == pytest.approx((-1.0 + 2 * 0.5 - 5 * 0.75) / 8, abs=1e-6)


def test_minibatches_keep_each_samples_rollout_share():
    """Several optimiser steps: each mini-batch's loss is Σ c_i ℓ_i / Σ c_i over its own samples,
    with c_i from the whole step (a rollout's samples may land in different mini-batches)."""
    model = tiny_llama(VOCAB, max_positions=64, seed=0)
    samples = _split_samples(model)
    cfg = TrainerConfig(lr=1e-9, minibatch_size=3, ppo_epochs=1)
    trainer = Trainer(model, cfg, seed=5)
    m = trainer.step(samples)
    assert m["train/optimizer_steps"] == 3
    c = dict(
        zip(
            [id(s) for s in samples], sample_weights([s.rollout_id for s in samples], [1] * 8, "sample_mean", "rollout")
        )
    )
    order = torch.randperm(8, generator=torch.Generator().manual_seed(5 * 1_000_003)).tolist()
    expected = []
    for mb in (order[0:3], order[3:6], order[6:8]):
        w = [c[id(samples[i])] for i in mb]
        expected.append(sum(-float(samples[i].advantage) * wi for i, wi in zip(mb, w)) / sum(w))
    assert m["train/loss"] == pytest.approx(sum(expected) / 3, abs=1e-5)


# ------------------------------------------------------------ importance weights, by hand


def test_gspo_token_level_tis_weights_each_token():
    logp = torch.tensor([-1.0, -2.0, -0.5], requires_grad=True)
    old = logp.detach().clone()
    rollout = old - torch.tensor([0.1, 1.5, -0.3])  # ratios π_old/π_rollout e^.1, e^1.5 (> cap 2), e^-.3
    cfg = LossConfig("gspo", eps_low=0.2, eps_high=0.2, tis_cap=2.0, is_level="token")
    out = sample_loss(logp, old, rollout, advantage=0.5, cfg=cfg)
    w = [math.exp(0.1), 2.0, math.exp(-0.3)]
    # s = 1 (on π_old): loss = -mean_t(s · A · w_t); ∂/∂logp_u = -A · s · mean_t(w_t) / n
    assert float(out.loss) == pytest.approx(-0.5 * sum(w) / 3, rel=1e-6)
    out.loss.backward()
    assert logp.grad.tolist() == pytest.approx([-0.5 * (sum(w) / 3) / 3] * 3, rel=1e-6)
    assert out.importance is not None
    assert (out.importance.units, out.importance.clipped, out.importance.masked) == (3, 1, 0)


def test_gspo_sequence_level_tis_is_the_capped_geometric_mean():
    logp = torch.tensor([-1.0, -2.0, -0.5])
    rollout = logp - torch.tensor([0.1, 1.5, -0.3])
    out = sample_loss(logp, logp, rollout, advantage=0.5, cfg=LossConfig("gspo", tis_cap=2.0))
    w = math.exp((0.1 + 1.5 - 0.3) / 3)  # 1.54, under the cap
    assert float(out.loss) == pytest.approx(-0.5 * w, rel=1e-6)
    assert out.importance is not None and (out.importance.units, out.importance.clipped) == (1, 0)


def test_grpo_sequence_level_when_asked():
    logp = torch.tensor([-1.0, -2.0])
    rollout = logp - torch.tensor([0.2, 0.4])
    cfg = LossConfig("grpo", 0.2, 0.2, tis_cap=2.0, is_level="sequence")
    out = sample_loss(logp, logp, rollout, 1.0, cfg)
    assert float(out.loss) == pytest.approx(-math.exp(0.3), rel=1e-6)


def test_token_mis_masks_tokens_outside_the_range():
    logp = torch.tensor([-1.0, -2.0, -0.5, -0.7], requires_grad=True)
    old = logp.detach().clone()
    # ratios e^1.2 (> 3), e^-1.3 (< 1/3), e^0.5, 1
    rollout = old - torch.tensor([1.2, -1.3, 0.5, 0.0])
    cfg = LossConfig("grpo", 0.2, 0.2, tis_cap=2.0, is_level="token", mis_cap=3.0)
    out = sample_loss(logp, old, rollout, advantage=1.0, cfg=cfg)
    assert out.importance is not None
    assert out.importance.weight.tolist() == pytest.approx([0.0, 0.0, math.exp(0.5), 1.0])
    assert (out.importance.clipped, out.importance.masked) == (1, 2)  # e^1.2 > 2 is clipped and masked
    # GRPO on π_old: per-token -A·r_t·w_t, mean over all 4 tokens (masked ones count as 0)
    assert float(out.loss) == pytest.approx(-(math.exp(0.5) + 1.0) / 4, rel=1e-6)
    out.loss.backward()
    assert logp.grad.tolist() == pytest.approx([0.0, 0.0, -math.exp(0.5) / 4, -1.0 / 4], rel=1e-6)


def test_sequence_mis_masks_the_whole_sample():
    logp = torch.tensor([-1.0, -2.0], requires_grad=True)
    rollout = logp.detach() - torch.tensor([2.0, 2.0])  # geometric mean ratio e^2 > 5
    cfg = LossConfig("gspo", tis_cap=2.0, mis_cap=5.0)
    out = sample_loss(logp, None, rollout, advantage=1.0, cfg=cfg)
    assert float(out.loss) == 0.0
    out.loss.backward()
    assert logp.grad.abs().max() == 0.0
    assert out.importance is not None and (out.importance.units, out.importance.masked) == (1, 1)


def test_effective_sample_size():
    assert effective_sample_size(4.0, 4.0, 4) == pytest.approx(1.0)  # all weights 1
    # weights (10, ε, ε, ε): about 1/4
    w = torch.tensor([10.0, 1e-3, 1e-3, 1e-3])
    assert effective_sample_size(float(w.sum()), float((w * w).sum()), 4) == pytest.approx(0.25, abs=1e-3)
    iw = importance_weights(torch.log(w), LossConfig("grpo", tis_cap=None))
    assert effective_sample_size(iw.raw_sum, iw.raw_sq_sum, iw.units) == pytest.approx(0.25, abs=1e-3)
    assert iw.weight.tolist() == [1.0, 1.0, 1.0, 1.0]  # no cap: no correction


def test_huge_log_ratios_stay_finite():
    iw = importance_weights(torch.tensor([500.0, -500.0]), LossConfig("grpo", tis_cap=2.0, mis_cap=4.0))
    assert iw.weight.tolist() == [0.0, 0.0] and iw.masked == 2 and iw.clipped == 1
    assert math.isfinite(effective_sample_size(iw.raw_sum, iw.raw_sq_sum, iw.units))


def test_step_reports_clipped_masked_and_ess():
    model = tiny_llama(VOCAB, max_positions=64, seed=0)
    # rollout logprobs 1.0 below the trainer's: every token's ratio π_old/π_rollout is e > 2
    samples = [scored_sample(model, f"r{i}", list(range(5 + i, 15 + i)), 3, (-1.0) ** i, shift=-1.0) for i in range(4)]
    cfg = TrainerConfig(lr=1e-3, objective="grpo", is_level="token", tis_cap=2.0)
    m = Trainer(model, cfg).step(samples)
    assert m["train/tis_clipped_share"] == 1.0 and m["train/mis_masked_share"] == 0.0
    assert m["train/is_ess"] == pytest.approx(1.0)  # equal weights
    model = tiny_llama(VOCAB, max_positions=64, seed=0)
    w0 = [p.detach().clone() for p in model.parameters()]
    cfg = TrainerConfig(lr=1e-3, objective="grpo", is_level="token", tis_cap=2.0, mis_cap=2.0)
    m = Trainer(model, cfg).step(samples)
    assert m["train/mis_masked_share"] == 1.0 and m["train/loss"] == 0.0
    assert all(torch.equal(a, b) for a, b in zip(w0, model.parameters()))  # no gradient at all


def test_mis_cap_must_exceed_one():
    with pytest.raises(ValueError, match="mis_cap"):
        TrainerConfig(mis_cap=1.0)
