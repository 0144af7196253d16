"""The trainer's weights into the engine after a step: the LoRA adapter alone where the engine swaps
adapters (:func:`legorl.engines.base.takes_adapters`: the embedded engine, vLLM servers with LoRA
support), else the whole weights (with LoRA: the adapter merged in)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from legorl.engines.base import takes_adapters

if TYPE_CHECKING:
    from legorl.engines.base import Engine
    from legorl.training.interface import LoopTrainer

__all__ = ["sync_weights"]


async def sync_weights(engine: Engine, trainer: LoopTrainer) -> dict[str, Any]:
    """Send the trainer's policy to ``engine`` under the trainer's weight version; returns the sync's
    metrics (``sync/adapter``: whether the adapter alone went, ``sync/adapter_bytes``: its size)."""
    adapter = trainer.adapter()
    if adapter is not None and takes_adapters(engine):
        await engine.update_adapter(adapter, version=trainer.version)  # type: ignore[attr-defined]
        return {"sync/adapter": True, "sync/adapter_bytes": adapter.nbytes}
    await engine.update_weights(trainer.state_dict(), version=trainer.version)
    return {"sync/adapter": False, "sync/adapter_bytes": 0}
