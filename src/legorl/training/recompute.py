"""Activation checkpointing of a transformers model's decoder layers, for the trainer's forwards only.

``with recompute_decoder_layers(model): ...`` — inside the block each decoder layer keeps only its
input for backward and recomputes its activations there (``torch.utils.checkpoint``,
non-reentrant), so a forward under grad holds one layer's activations instead of all of them
(SmolLM2-135M: ~1.7 MB per token → ~60 KB) for about a third more compute.

Why not transformers' ``gradient_checkpointing_enable``: it acts only in ``train()`` mode (the
trainer scores in ``eval()`` so no dropout makes its logprobs differ from the engine's) and, once
on, drops the KV cache of every call — also the embedded engine's, which may serve the very same
module between training steps. Here the switch lives only as long as the block.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from typing import Any

import torch
from torch.utils.checkpoint import checkpoint

__all__ = ["decoder_layers", "recompute_decoder_layers"]


def decoder_layers(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The model's transformer blocks: the modules transformers marks as checkpointable."""
    from transformers.modeling_layers import GradientCheckpointingLayer

    return [m for m in model.modules() if isinstance(m, GradientCheckpointingLayer)]


def _recomputed(forward: Any, *args: Any, **kwargs: Any) -> Any:
    if not torch.is_grad_enabled():
        return forward(*args, **kwargs)
    return checkpoint(forward, *args, use_reentrant=False, **kwargs)


@contextmanager
def recompute_decoder_layers(model: torch.nn.Module, enabled: bool = True) -> Iterator[None]:
    """Checkpoint every decoder layer of ``model`` while the block runs (a no-op if not ``enabled``).
    Only for forwards without a KV cache: a recomputed layer would append to the cache twice."""
    layers = decoder_layers(model) if enabled else []
    if enabled and not layers:
        raise ValueError(f"{type(model).__name__}: no decoder layers to checkpoint (not a transformers model?)")
    for layer in layers:
        # an instance attribute shadows the class's forward for this module only
        layer.forward = partial(_recomputed, layer.forward)
    try:
        yield
    finally:
        for layer in layers:
            del layer.forward
