"""Policy-gradient steps on a batch of Samples, and the weights to sync to the engine.

The trainer holds its own copy of the policy (fp32, with grads). One :meth:`Trainer.step` on a
batch:

1. splits the samples with a non-zero advantage into mini-batches of ``minibatch_size`` and makes
   ``ppo_epochs`` passes over them (a fresh seeded shuffle per pass), one optimiser step per
   mini-batch;
2. scores π_old in a separate no-grad pass only when that is more than one optimiser step
   (:func:`legorl.training.gspo.needs_old_recompute`); with one step the training forward itself
   is π_old (and the rollout-vs-trainer fidelity check);
3. runs each mini-batch as few forward passes as ``forward_tokens`` allows: samples sorted by
   length, right-padded into ``[rows, longest]`` blocks, gradients accumulated across blocks
   (the loss is normalised by the mini-batch's totals, so the split does not change the step);
   with ``packing``, samples are instead packed end to end into one row per pass (no padding; a
   block-diagonal causal mask keeps them apart: :func:`compute_token_logprobs_packed`);
   with ``prefix_sharing`` (default), samples that share a prompt run it once, their completions
   after it in the same row, each seeing the prompt and itself only
   (:func:`plan_shared_prefix_passes`, :func:`compute_token_logprobs_shared_prefix`); the LM head
   is chunked over positions, so full-vocabulary logits exist for ``chunk_size`` positions at a
   time; with ``gradient_checkpointing``, decoder layers recompute their activations in backward
   (:mod:`legorl.training.recompute`);
4. samples without a gradient (zero advantage, or ``monitor``) are scored without grad for the
   fidelity statistics only.

Inside a process group of several ranks (FSDP2, :mod:`legorl.training.distributed`) each rank runs
its token-balanced share of every mini-batch and the step equals the single-process one.

With ``lora`` (:mod:`legorl.models.lora`) the trainer trains LoRA adapters on the frozen model: it
injects them (a sharded model must hold them before it was sharded, so its ranks shard the adapters
with the layers), its optimiser holds the adapters alone, :meth:`Trainer.adapter` is what an adapter
weight sync sends and :meth:`Trainer.state_dict` the merged weights. With adapter dropout, the
training forwards run it and π_old (with the fidelity check) is scored in a separate pass without.

The learning rate follows ``lr_warmup_steps`` / ``lr_schedule`` in training steps (batches), set at
the start of each step from the step index alone, so a resumed trainer needs no scheduler state.
Everything a resume needs is in :meth:`Trainer.state` / :meth:`Trainer.load_state`.
"""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from legorl.config import TrainerConfig
from legorl.errors import ConfigError
from legorl.models.lora import LoraAdapter, adapter_dropout, adapter_of, add_lora, has_lora, merged_state_dict
from legorl.training import checkpoint
from legorl.training import distributed as dp
from legorl.training.gspo import (
    ImportanceWeights,
    LossConfig,
    aggregate_losses,
    effective_sample_size,
    mismatch_stats,
    needs_old_recompute,
    sample_loss,
    sample_weights,
)
from legorl.training.logprobs import (
    compute_token_logprobs_batch,
    compute_token_logprobs_packed,
    compute_token_logprobs_shared_prefix,
)
from legorl.training.recompute import recompute_decoder_layers
from legorl.trajectory.records import Sample

__all__ = ["ForwardPass", "Trainer", "lr_factor", "plan_forward_passes", "plan_shared_prefix_passes"]


def lr_factor(step_index: int, warmup_steps: int, schedule: str, total_steps: int | None) -> float:
    """Multiplier of the peak learning rate at training step ``step_index`` (0-based): linear
    warm-up ``(k+1)/(warmup+1)``, then constant or a linear/cosine decay reaching 0 after the
    run's last step (``total_steps``; None: constant)."""
    if step_index < warmup_steps:
        return (step_index + 1) / (warmup_steps + 1)
    if schedule == "constant" or total_steps is None:
        return 1.0
    span = max(1, total_steps - warmup_steps)
    progress = min(1.0, (step_index - warmup_steps) / span)
    if schedule == "linear":
        return 1.0 - progress
    if schedule == "cosine":
        return 0.5 * (1.0 + math.cos(math.pi * progress))
    raise ValueError(f"unknown lr schedule {schedule!r}")


def plan_forward_passes(lengths: Sequence[int], forward_tokens: int, packing: bool = False) -> list[list[int]]:
    """Indices into ``lengths`` grouped into forward passes, longest first. Padded: each pass as many
    rows as keep ``rows × longest_row <= forward_tokens``. Packed (one row of sequences end to end):
    first-fit decreasing, each pass's summed lengths ``<= forward_tokens``. At least one sample a pass."""
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    passes: list[list[int]] = []
    if packing:
        room: list[int] = []
        for i in order:
            k = next((k for k, r in enumerate(room) if lengths[i] <= r), None)
            if k is None:
                passes.append([i])
                room.append(forward_tokens - lengths[i])
            else:
                passes[k].append(i)
                room[k] -= lengths[i]
        return passes
    for i in order:
        if passes and (len(passes[-1]) + 1) * lengths[passes[-1][0]] <= forward_tokens:
            passes[-1].append(i)
        else:
            passes.append([i])
    return passes


@dataclass(frozen=True)
class ForwardPass:
    """Samples (indices into a batch) run in one forward pass; ``prefix_len``: they start with the
    same that many tokens, which run once (:func:`compute_token_logprobs_shared_prefix`)."""

    indices: list[int]
    prefix_len: int | None = None


def _first_sampled(loss_mask: Sequence[int]) -> int:
    """Index of the first token under the loss (the prompt ends there)."""
    return next((k for k, m in enumerate(loss_mask) if m), len(loss_mask))


def _common_prefix_len(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    return next((k for k in range(n) if a[k] != b[k]), n)


def plan_shared_prefix_passes(
    token_ids: Sequence[Sequence[int]], loss_masks: Sequence[Sequence[int]], forward_tokens: int, packing: bool = False
) -> list[ForwardPass]:
    """Forward passes for a batch, samples that share a prompt run on one copy of it.

    Samples whose tokens before the first sampled one are equal form a family (a GRPO group: one
    prompt, several completions); its shared prefix is the members' longest common prefix, capped
    so every member keeps at least one token of its own. A family is split into passes of
    ``prefix + Σ suffixes <= forward_tokens`` (longest suffixes first; at least one member). Samples left alone (no family, or the last member of a split) are planned by
    :func:`plan_forward_passes` (padded, or packed)."""
    families: dict[tuple[int, ...], list[int]] = {}
    for i, (ids, mask) in enumerate(zip(token_ids, loss_masks)):
        families.setdefault(tuple(ids[: _first_sampled(mask)]), []).append(i)
    passes: list[ForwardPass] = []
    alone: list[int] = []
    for members in families.values():
        lead = token_ids[members[0]]
        shared = min(_common_prefix_len(lead, token_ids[i]) for i in members)
        shared = min(shared, min(len(token_ids[i]) for i in members) - 1)
        if len(members) < 2 or shared < 1:
            alone.extend(members)
            continue
        members = sorted(members, key=lambda i: -len(token_ids[i]))
        while members:
            rows, fed = 1, len(token_ids[members[0]])  # the prefix and the first suffix
            while rows < len(members) and fed + len(token_ids[members[rows]]) - shared <= forward_tokens:
                fed += len(token_ids[members[rows]]) - shared
                rows += 1
            chunk, members = members[:rows], members[rows:]
            if len(chunk) == 1:
                alone.extend(chunk)
            else:
                passes.append(ForwardPass(chunk, shared))
    lengths = [len(token_ids[i]) for i in alone]
    passes.extend(
        ForwardPass([alone[j] for j in part]) for part in plan_forward_passes(lengths, forward_tokens, packing)
    )
    return passes


@dataclass
class _StepStats:
    losses: list[float] = field(default_factory=list)  # per optimiser step
    grad_norms: list[float] = field(default_factory=list)
    ratios: list[float] = field(default_factory=list)  # per sample term, every pass
    clipped_low: list[float] = field(default_factory=list)
    clipped_high: list[float] = field(default_factory=list)
    tis: list[float] = field(default_factory=list)
    kl: list[float] = field(default_factory=list)
    # importance weights π_old/π_rollout over every term (tokens or sequences, per is_level)
    is_units: int = 0
    is_clipped: int = 0
    is_masked: int = 0
    is_raw_sum: float = 0.0
    is_raw_sq_sum: float = 0.0
    forward_passes: int = 0
    fed_tokens: int = 0  # token positions the decoder ran (padding and shared prefixes counted as fed)
    pad_tokens: int = 0
    sample_tokens: int = 0  # the samples' own lengths, summed


def _mean(xs: Sequence[float]) -> float:
    return sum(xs) / len(xs) if xs else 0.0


class Trainer:
    def __init__(
        self,
        model: torch.nn.Module,
        cfg: TrainerConfig,
        temperature: float = 1.0,
        *,
        total_steps: int | None = None,
        seed: int = 0,
        pad_token_id: int = 0,
    ) -> None:
        # several ranks: the FSDP root (every forward goes through it); the policy is inside it
        self.root = model if isinstance(model, dp.ShardedPolicy) else None
        self.model: torch.nn.Module = self.root.policy if self.root is not None else model
        self.sharded = self.root is not None and dp.is_distributed()
        self.ranks, self.rank = (dp.world_size(), dp.rank()) if self.sharded else (1, 0)
        self.cfg = cfg
        self.temperature = temperature
        self.total_steps = total_steps
        self.seed = seed
        self.pad_token_id = pad_token_id
        self.loss_cfg = LossConfig(
            objective=cfg.objective,
            eps_low=cfg.eps_low,
            eps_high=cfg.eps_high,
            tis_cap=cfg.tis_cap,
            kl_coef=cfg.kl_coef,
            aggregation=cfg.loss_aggregation,
            rollout_weighting=cfg.rollout_weighting,
            is_level=cfg.is_level,
            mis_cap=cfg.mis_cap,
            norm_tokens=cfg.loss_norm_tokens,
        )
        if cfg.lora is not None and not has_lora(self.model):
            if self.root is not None:
                raise ConfigError("trainer.lora: add the adapters before sharding (shard_policy(add_lora(model, ...)))")
            add_lora(self.model, cfg.lora, seed=seed)
        self.lora = cfg.lora is not None
        self.adapter_dropout = cfg.lora is not None and cfg.lora.dropout > 0
        # what the optimiser updates: every weight, or (LoRA) the adapters alone
        self.trainable = [p for p in self.model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(self.trainable, lr=cfg.lr, weight_decay=0.0)
        # KL anchor: the initial policy, frozen (only kept when it is used)
        self.reference: torch.nn.Module | None = None
        if cfg.kl_coef > 0 and self.sharded:
            raise ConfigError(
                "trainer.kl_coef > 0 is not supported on several ranks yet (the reference model is not sharded)"
            )
        if cfg.kl_coef > 0:
            self.reference = copy.deepcopy(self.model).eval().requires_grad_(False)
        self.version = 0  # weight version: batches that changed the weights
        self.step_index = 0  # training steps taken (the schedule's clock)
        # The last step's pre-update logprobs of each sample's sampled tokens (by sample identity):
        # what the trainer saw as π_old, kept so the run can record them for the per-token UI
        # without another forward pass.
        self._step_logprobs: dict[int, torch.Tensor] = {}

    # -- scoring ---------------------------------------------------------------------------------
    def _run(
        self, model: torch.nn.Module, fn: Callable[..., list[torch.Tensor]], *args: Any, **kw: Any
    ) -> list[torch.Tensor]:
        """``fn(model, ...)``; the sharded policy through its FSDP root."""
        if self.root is not None and model is self.model:
            out: list[torch.Tensor] = self.root(fn, *args, **kw)
            return out
        return fn(model, *args, **kw)

    def _logprobs(
        self, model: torch.nn.Module, samples: Sequence[Sample], prefix_len: int | None = None
    ) -> list[torch.Tensor]:
        if prefix_len is not None:
            return self._run(
                model,
                compute_token_logprobs_shared_prefix,
                [s.token_ids for s in samples],
                prefix_len,
                temperature=self.temperature,
                chunk_size=self.cfg.chunk_size,
                # only sampled tokens are read (loss and fidelity): no LM head over the prompt
                score_from=min(_first_sampled(s.loss_mask) for s in samples),
            )
        if self.cfg.packing:
            return self._run(
                model,
                compute_token_logprobs_packed,
                [s.token_ids for s in samples],
                temperature=self.temperature,
                chunk_size=self.cfg.chunk_size,
            )
        return self._run(
            model,
            compute_token_logprobs_batch,
            [s.token_ids for s in samples],
            temperature=self.temperature,
            pad_token_id=self.pad_token_id,
            chunk_size=self.cfg.chunk_size,
        )

    def _score(self, model: torch.nn.Module, samples: Sequence[Sample]) -> list[torch.Tensor]:
        """No-grad logprobs on each sample's loss-masked tokens, in as few forwards as allowed."""
        out: list[torch.Tensor] = [torch.empty(0)] * len(samples)
        with torch.no_grad():
            for fp in self._plan(samples):
                lps = self._logprobs(model, [samples[i] for i in fp.indices], fp.prefix_len)
                for i, lp in zip(fp.indices, lps):
                    out[i] = lp[_mask(samples[i])]
        return out

    def _plan(self, samples: Sequence[Sample]) -> list[ForwardPass]:
        if self.cfg.prefix_sharing:
            return plan_shared_prefix_passes(
                [s.token_ids for s in samples],
                [s.loss_mask for s in samples],
                self.cfg.forward_tokens,
                packing=self.cfg.packing,
            )
        lengths = [len(s.token_ids) for s in samples]
        return [ForwardPass(p) for p in plan_forward_passes(lengths, self.cfg.forward_tokens, packing=self.cfg.packing)]

    def step_logprobs(self, sample: Sample) -> list[float] | None:
        """The last :meth:`step`'s pre-update logprob of every token of ``sample`` (0.0 where the
        loss mask is 0), or None if that step did not score it."""
        sampled = self._step_logprobs.get(id(sample))
        if sampled is None:
            return None
        full = torch.zeros(len(sample.token_ids), dtype=torch.float32)
        full[_mask(sample)] = sampled.float()
        return full.tolist()

    def logprobs(self, sample: Sample) -> torch.Tensor:
        """Every token's logprob under the current weights (``[0] = 0``), no grad."""
        with torch.no_grad():
            return self._logprobs(self.model, [sample])[0]

    # -- the step --------------------------------------------------------------------------------
    def step(self, samples: list[Sample], monitor: Sequence[Sample] = ()) -> dict[str, Any]:
        """One training step on ``samples``. ``monitor`` samples (e.g. from groups without reward
        variance) are only scored, so the rollout-vs-trainer fidelity covers every sampled token."""
        t0 = time.perf_counter()
        self.model.eval()  # no dropout: the trainer's logprobs must match the engine's
        lr = self.cfg.lr * lr_factor(self.step_index, self.cfg.lr_warmup_steps, self.cfg.lr_schedule, self.total_steps)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        trainable = [s for s in samples if s.advantage and s.num_sampled > 0]
        idle = [s for s in samples if not (s.advantage and s.num_sampled > 0)] + [*monitor]
        # each sample's share of its rollout's weight (gspo.sample_weights), over the whole step
        weights = sample_weights(
            [s.rollout_id for s in trainable],
            [s.num_sampled for s in trainable],
            self.loss_cfg.aggregation,
            self.loss_cfg.rollout_weighting,
        )
        mb_size = self.cfg.minibatch_size or max(1, len(trainable))
        minibatches_per_epoch = math.ceil(len(trainable) / mb_size)
        opt_steps = self.cfg.ppo_epochs * minibatches_per_epoch
        # adapter dropout: the training forwards are not π_old's, so π_old gets a pass of its own
        recompute = needs_old_recompute(opt_steps) or (self.adapter_dropout and opt_steps > 0)

        # π_old (only with several optimiser steps) and the idle samples' fidelity scores
        old: list[torch.Tensor | None] = [None] * len(trainable)
        fid_trainer: list[torch.Tensor] = []
        fid_rollout: list[torch.Tensor] = []
        scored_samples = [*(trainable if recompute else []), *idle]
        scored = self._score(self.model, scored_samples)
        self._step_logprobs = {id(s): t for s, t in zip(scored_samples, scored)}
        if recompute:
            old = list(scored[: len(trainable)])
            fid_trainer.extend(scored[: len(trainable)])
            fid_rollout.extend(_rollout_lp(s) for s in trainable)
        fid_trainer.extend(scored[len(scored) - len(idle) :])
        fid_rollout.extend(_rollout_lp(s) for s in idle)
        t_score = time.perf_counter() - t0

        stats = _StepStats()
        gen = torch.Generator().manual_seed(self.seed * 1_000_003 + self.step_index)
        for epoch in range(self.cfg.ppo_epochs):
            order = (
                torch.randperm(len(trainable), generator=gen).tolist() if opt_steps > 1 else list(range(len(trainable)))
            )
            for m in range(minibatches_per_epoch):
                mb = order[m * mb_size : (m + 1) * mb_size]
                fid = fid_trainer if (not recompute and epoch == 0) else None
                loss = self._optimizer_step(
                    [trainable[i] for i in mb], [old[i] for i in mb], [weights[i] for i in mb], stats, fid
                )
                if fid is not None:
                    fid_rollout.extend(_rollout_lp(trainable[i]) for i in mb)
                    self._step_logprobs.update((id(trainable[i]), t) for i, t in zip(mb, fid[len(fid) - len(mb) :]))
                stats.losses.append(loss)
        if opt_steps:
            self.version += 1
        self.step_index += 1
        self.optimizer.zero_grad(set_to_none=True)
        if self.sharded:
            stats = _merge_ranks(stats)
        mm = mismatch_stats(torch.cat(fid_trainer), torch.cat(fid_rollout)) if fid_trainer else None

        metrics: dict[str, Any] = {
            "train/samples": len(samples),
            "train/trainable_samples": len(trainable),
            "train/sampled_tokens": sum(s.num_sampled for s in samples),
            "train/loss": _mean(stats.losses),
            "train/ratio_mean": _mean(stats.ratios),
            "train/ratio_min": min(stats.ratios) if stats.ratios else 0.0,
            "train/ratio_max": max(stats.ratios) if stats.ratios else 0.0,
            "train/clip_frac_low": _mean(stats.clipped_low),
            "train/clip_frac_high": _mean(stats.clipped_high),
            "train/clip_frac": _mean([a + b for a, b in zip(stats.clipped_low, stats.clipped_high)]),
            "train/tis_weight": _mean(stats.tis),
            "train/tis_clipped_share": stats.is_clipped / stats.is_units if stats.is_units else 0.0,
            "train/mis_masked_share": stats.is_masked / stats.is_units if stats.is_units else 0.0,
            "train/is_ess": effective_sample_size(stats.is_raw_sum, stats.is_raw_sq_sum, stats.is_units),
            "train/rollouts": len({s.rollout_id for s in trainable}),
            "train/grad_norm": _mean(stats.grad_norms),
            "train/grad_norm_max": max(stats.grad_norms) if stats.grad_norms else 0.0,
            "train/optimizer_steps": opt_steps,
            "train/old_logprobs_recomputed": recompute,
            "train/forward_passes": stats.forward_passes,
            "train/padding_frac": stats.pad_tokens / stats.fed_tokens if stats.fed_tokens else 0.0,
            "train/fed_tokens": stats.fed_tokens,
            "train/sample_tokens": stats.sample_tokens,
            "train/lr": lr,
            "train/updated": opt_steps > 0,
            "time/score_s": t_score,
            "time/train_s": time.perf_counter() - t0 - t_score,
        }
        if self.reference is not None:
            metrics["train/kl_ref"] = _mean(stats.kl)
        if mm is not None:
            metrics.update({f"mismatch/{k}": v for k, v in asdict(mm).items()})
        return metrics

    def _optimizer_step(
        self,
        mb: list[Sample],
        old: list[torch.Tensor | None],
        weights: list[float],
        stats: _StepStats,
        fidelity: list[torch.Tensor] | None,
    ) -> float:
        """Forward/backward ``mb`` in as few passes as ``forward_tokens`` allows, then one clipped
        optimiser step; returns the mini-batch loss. ``weights``: each sample's ``c_i``
        (:func:`~legorl.training.gspo.sample_weights`). ``fidelity``: append the (pre-update)
        logprobs of the sampled tokens there, in ``mb`` order."""
        self.optimizer.zero_grad(set_to_none=True)
        total_weight = sum(weights)
        loss_value = 0.0
        fid: list[torch.Tensor] = [torch.empty(0)] * len(mb)
        # this rank's share (all of it in one process); FSDP averages gradients over ranks, the
        # loss is already normalised by the whole mini-batch: scale back to the sum of the shares
        mine = dp.split_by_tokens([len(s.token_ids) for s in mb], self.ranks)[self.rank]
        scale = float(self.ranks)
        passes = self._plan([mb[i] for i in mine])
        # FSDP's collectives must line up: as many passes on every rank (extra ones weigh nothing)
        n_passes = dp.max_over_ranks(len(passes)) if self.sharded else len(passes)
        for _ in range(n_passes - len(passes)):
            self._zero_pass()
        for fp in passes:
            part = [mine[k] for k in fp.indices]
            rows = [mb[i] for i in part]
            with (
                recompute_decoder_layers(self.model, self.cfg.gradient_checkpointing),
                adapter_dropout(self.model, self.adapter_dropout),
            ):
                lps = self._logprobs(self.model, rows, fp.prefix_len)
            refs: list[torch.Tensor | None] = [None] * len(rows)
            if self.reference is not None:
                refs = list(self._score(self.reference, rows))
            stats.forward_passes += 1
            _count_tokens(stats, [len(s.token_ids) for s in rows], fp.prefix_len, self.cfg.packing)
            losses = []
            for j, (i, s) in enumerate(zip(part, rows)):
                logp = lps[j][_mask(s)]
                fid[i] = logp.detach()
                advantage = float(s.advantage or 0.0) * (-1.0 if self.cfg.flip_advantages else 1.0)
                out = sample_loss(logp, old[i], _rollout_lp(s), advantage, self.loss_cfg, refs[j])
                losses.append(out.loss)
                stats.ratios.append(out.ratio)
                stats.clipped_low.append(out.clipped_low)
                stats.clipped_high.append(out.clipped_high)
                stats.tis.append(out.tis_weight)
                stats.kl.append(out.kl)
                _count_importance(stats, out.importance)
            part_loss = aggregate_losses(losses, [weights[i] for i in part], total_weight)
            # a recomputed layer replays its own saved forward, the adapters' dropout as it ran there
            # (the same RNG state; a mode switched off would save other tensors)
            with adapter_dropout(self.model, self.adapter_dropout):
                torch.autograd.backward(part_loss * scale if scale != 1.0 else part_loss)
            loss_value += float(part_loss.detach())
        grad_norm = torch.nn.utils.clip_grad_norm_(self.trainable, self.cfg.grad_clip)
        stats.grad_norms.append(float(dp.full_tensor(grad_norm)))
        self.optimizer.step()
        if fidelity is not None:
            if self.sharded:
                for share in dp.gather_objects({i: fid[i] for i in mine}):
                    for i, t in share.items():
                        fid[i] = t
            fidelity.extend(fid)
        return dp.sum_over_ranks(loss_value) if self.sharded else loss_value

    def _zero_pass(self) -> None:
        """A forward/backward through every layer that adds nothing to the gradients."""
        (lp,) = self._run(self.model, compute_token_logprobs_batch, [[self.pad_token_id] * 2])
        torch.autograd.backward(lp.sum() * 0.0)

    # -- weights and state -----------------------------------------------------------------------
    def state_dict(self) -> dict[str, torch.Tensor]:
        """The policy's weights (what the engine loads) under the model's own names: whole tensors,
        also when sharded; with LoRA, the adapters merged into the base weights."""
        if self.lora:
            return merged_state_dict(self.model)
        return dp.full_state_dict(self.model)

    def adapter(self) -> LoraAdapter | None:
        """The LoRA adapter trained (whole tensors), or None without LoRA: what an adapter sync sends."""
        return adapter_of(self.model) if self.lora else None

    def state(self) -> dict[str, Any]:
        """Everything a resumed trainer needs besides the model: optimizer, counters."""
        return {"optimizer": self.optimizer.state_dict(), "version": self.version, "step_index": self.step_index}

    def load_state(self, state: dict[str, Any]) -> None:
        self.optimizer.load_state_dict(state["optimizer"])
        self.version = int(state["version"])
        self.step_index = int(state["step_index"])

    # -- what else the loop calls (legorl.training.interface.LoopTrainer) ------------------------
    def save_checkpoint(self, request: checkpoint.CheckpointRequest) -> Path:
        """Checkpoint the state after ``request.step``: :func:`legorl.training.checkpoint.save_checkpoint`."""
        return request.save(self)

    def load_checkpoint(self, path: str | Path) -> dict[str, Any]:
        """Restore a checkpoint and the global RNGs: :func:`legorl.training.checkpoint.load_checkpoint`."""
        return checkpoint.load_checkpoint(path, self)

    def close(self) -> None:
        """Nothing to release: all this trainer holds is this process's memory (the loop closes every
        trainer alike; :meth:`legorl.training.ranks.RankedTrainer.close` ends ranks and Ray)."""


def _merge_ranks(stats: _StepStats) -> _StepStats:
    """The step's statistics over every rank's share (losses and gradient norms are global already)."""
    shares: list[_StepStats] = dp.gather_objects(stats)
    merged = _StepStats(losses=stats.losses, grad_norms=stats.grad_norms)
    for share in shares:
        for name in ("ratios", "clipped_low", "clipped_high", "tis", "kl"):
            getattr(merged, name).extend(getattr(share, name))
        for name in (
            "forward_passes",
            "fed_tokens",
            "pad_tokens",
            "sample_tokens",
            "is_units",
            "is_clipped",
            "is_masked",
            "is_raw_sum",
            "is_raw_sq_sum",
        ):
            setattr(merged, name, getattr(merged, name) + getattr(share, name))
    return merged


def _count_importance(stats: _StepStats, iw: ImportanceWeights | None) -> None:
    if iw is None:
        return
    stats.is_units += iw.units
    stats.is_clipped += iw.clipped
    stats.is_masked += iw.masked
    stats.is_raw_sum += iw.raw_sum
    stats.is_raw_sq_sum += iw.raw_sq_sum


def _count_tokens(stats: _StepStats, lengths: Sequence[int], prefix_len: int | None, packing: bool) -> None:
    if prefix_len is not None:  # the prefix once, then every suffix end to end: no padding
        real = fed = prefix_len + sum(n - prefix_len for n in lengths)
    else:
        real = sum(lengths)
        fed = real if packing else len(lengths) * max(lengths)
    stats.fed_tokens += fed
    stats.pad_tokens += fed - real
    stats.sample_tokens += sum(lengths)


def _mask(sample: Sample) -> torch.Tensor:
    return torch.tensor(sample.loss_mask, dtype=torch.bool)


def _rollout_lp(sample: Sample) -> torch.Tensor:
    return torch.tensor(sample.rollout_logprobs, dtype=torch.float32)[_mask(sample)]
