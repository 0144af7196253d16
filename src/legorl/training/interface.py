"""The trainer as the RL loop drives it (:mod:`legorl.loop.train`, :mod:`legorl.loop.weight_sync`).

:class:`LoopTrainer` is satisfied by the trainer in this process
(:class:`~legorl.training.trainer.Trainer`) and by the one over FSDP2 ranks on Ray
(:class:`~legorl.training.ranks.RankedTrainer`), so the loop never asks which one it holds.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import torch

    from legorl.models.lora import LoraAdapter
    from legorl.training.checkpoint import CheckpointRequest
    from legorl.trajectory.records import Sample

__all__ = ["LoopTrainer"]


class LoopTrainer(Protocol):
    version: int  # weight version: the steps that changed the weights (the engine serves them under it)

    def step(self, samples: list[Sample], monitor: list[Sample]) -> dict[str, Any]:
        """One training step on ``samples`` (``monitor``: scored for fidelity, no gradient); its metrics."""

    def step_logprobs(self, sample: Sample) -> list[float] | None:
        """The last step's pre-update logprobs of ``sample``'s tokens (None: the step did not score it)."""

    def state_dict(self) -> dict[str, torch.Tensor]:
        """The whole policy weights (LoRA merged in): what a full weight sync sends."""

    def adapter(self) -> LoraAdapter | None:
        """The LoRA adapter alone (None without ``trainer.lora``): what an adapter sync sends."""

    def save_checkpoint(self, request: CheckpointRequest) -> Path:
        """Checkpoint the state after ``request.step`` (:mod:`legorl.training.checkpoint`); its directory."""

    def load_checkpoint(self, path: str | Path) -> dict[str, Any]:
        """Restore the checkpoint at ``path`` (and the global RNGs); its ``meta.json``."""

    def close(self) -> None:
        """Release what the trainer holds beyond this process's memory (the ranked one: its ranks, Ray)."""
