"""A minimal trainable sample for the batch and staleness tests."""

from __future__ import annotations

from legorl.trajectory.records import Sample


def tiny_sample(weight_version: int | None = None) -> Sample:
    """Three tokens, the last two sampled."""
    return Sample(
        rollout_id="r",
        thread_id="main",
        segment_index=0,
        token_ids=[1, 2, 3],
        loss_mask=[0, 1, 1],
        rollout_logprobs=[0.0, -0.1, -0.2],
        weight_version=weight_version,
    )
