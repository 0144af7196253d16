"""One policy-gradient step on a batch of Samples, and the weights to sync to the engine.

The trainer holds its own copy of the policy (fp32, with grads). For each step it
1. recomputes logprobs of every sample's tokens under the current weights (π_old; also the
   rollout-vs-trainer fidelity check), then
2. takes one optimiser step on the GSPO/GRPO objective over samples with a non-zero advantage,
   accumulating gradients one sample at a time so memory is bounded by the longest sample.
"""

from __future__ import annotations

import time
from dataclasses import asdict
from typing import Any

import torch

from legorl.config import TrainerConfig
from legorl.trajectory.records import Sample
from legorl.training.gspo import LossConfig, mismatch_stats, sample_loss
from legorl.training.logprobs import compute_token_logprobs


class Trainer:
    def __init__(self, model: torch.nn.Module, cfg: TrainerConfig, temperature: float = 1.0) -> None:
        self.model = model
        self.cfg = cfg
        self.temperature = temperature
        self.loss_cfg = LossConfig(cfg.objective, cfg.eps_low, cfg.eps_high, cfg.tis_cap)
        self.optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=0.0)
        self.version = 0

    def _masked(self, sample: Sample) -> tuple[torch.Tensor, torch.Tensor]:
        mask = torch.tensor(sample.loss_mask, dtype=torch.bool)
        rollout = torch.tensor(sample.rollout_logprobs, dtype=torch.float32)[mask]
        return mask, rollout

    def logprobs(self, sample: Sample) -> torch.Tensor:
        return compute_token_logprobs(self.model, sample.token_ids, temperature=self.temperature,
                                      chunk_size=self.cfg.chunk_size)

    def step(self, samples: list[Sample], monitor: list[Sample] = ()) -> dict[str, Any]:
        """One update on ``samples``. ``monitor`` samples (e.g. from groups without reward variance)
        are only recomputed, so the rollout-vs-trainer fidelity is measured on every sampled token."""
        t0 = time.perf_counter()
        self.model.eval()  # no dropout: the recompute must match the engine
        old: list[torch.Tensor] = []
        all_old, all_rollout = [], []
        with torch.no_grad():
            for i, s in enumerate([*samples, *monitor]):
                mask, rollout = self._masked(s)
                lp = self.logprobs(s)[mask]
                if i < len(samples):
                    old.append(lp)
                all_old.append(lp)
                all_rollout.append(rollout)
        mm = mismatch_stats(torch.cat(all_old), torch.cat(all_rollout)) if all_old else None
        t_recompute = time.perf_counter() - t0

        trainable = [(i, s) for i, s in enumerate(samples) if s.advantage and s.num_sampled > 0]
        losses, ratios, clipped, tis = [], [], [], []
        self.optimizer.zero_grad(set_to_none=True)
        for i, s in trainable:
            mask, rollout = self._masked(s)
            logp = self.logprobs(s)[mask]
            out = sample_loss(logp, old[i], rollout, float(s.advantage), self.loss_cfg)
            (out.loss / len(trainable)).backward()
            losses.append(float(out.loss.detach()))
            ratios.append(out.ratio)
            clipped.append(out.clipped)
            tis.append(out.tis_weight)
        grad_norm = 0.0
        if trainable:
            grad_norm = float(torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.cfg.grad_clip))
            self.optimizer.step()
            self.version += 1
        self.optimizer.zero_grad(set_to_none=True)

        def mean(xs: list[float]) -> float:
            return sum(xs) / len(xs) if xs else 0.0

        metrics: dict[str, Any] = {
            "train/samples": len(samples),
            "train/trainable_samples": len(trainable),
            "train/sampled_tokens": sum(s.num_sampled for s in samples),
            "train/loss": mean(losses),
            "train/ratio_mean": mean(ratios),
            "train/clip_frac": mean(clipped),
            "train/tis_weight": mean(tis),
            "train/grad_norm": grad_norm,
            "train/updated": bool(trainable),
            "time/recompute_s": t_recompute,
            "time/train_s": time.perf_counter() - t0 - t_recompute,
        }
        if mm is not None:
            metrics.update({f"mismatch/{k}": v for k, v in asdict(mm).items()})
        return metrics

    def state_dict(self) -> dict[str, torch.Tensor]:
        return {k: v.detach() for k, v in self.model.state_dict().items()}
