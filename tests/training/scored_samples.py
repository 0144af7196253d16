"""Training samples scored by a model: the rollout logprobs are the model's own (plus ``shift``), as
if the engine had sampled them (shared by the trainer, checkpoint and FSDP tests)."""

from __future__ import annotations

import torch

from legorl.training.logprobs import compute_token_logprobs
from legorl.trajectory.records import Sample


def scored_sample(
    model,
    rollout_id: str,
    ids: list[int],
    prompt: int,
    advantage: float,
    shift: float = 0.0,
    reward: float | None = None,
) -> Sample:
    """A Sample of ``ids`` whose first ``prompt`` tokens are prompt; rollout logprobs: the model's
    own, plus ``shift``."""
    with torch.no_grad():
        lp = compute_token_logprobs(model, ids).tolist()
    mask = [0] * prompt + [1] * (len(ids) - prompt)
    return Sample(
        rollout_id=rollout_id,
        thread_id="t",
        segment_index=0,
        token_ids=ids,
        loss_mask=mask,
        rollout_logprobs=[v + shift if m else 0.0 for v, m in zip(lp, mask)],
        advantage=advantage,
        reward=float(advantage > 0) if reward is None else reward,
    )
