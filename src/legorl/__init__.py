"""LEGO-RL: RL for LLM coding agents inside the real agent programs people use.

The public surface is listed in ``__all__``; names load lazily so that importing ``legorl``
(and running ``legorl --help``) stays instant.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_EXPORTS = {
    "RunConfig": "legorl.config",
    "SamplingParams": "legorl.engines.base",
    "GenerationResult": "legorl.engines.base",
    "Engine": "legorl.engines.base",
    "EmbeddedEngine": "legorl.engines.embedded",
    "resolve_model": "legorl.models.registry",
    "Gateway": "legorl.gateway.app",
    "GatewayServer": "legorl.gateway.server",
    "Turn": "legorl.trajectory.records",
    "Sample": "legorl.trajectory.records",
    "Rollout": "legorl.trajectory.records",
    "build_samples": "legorl.trajectory.builder",
    "RunStore": "legorl.trajectory.store",
    "Sandbox": "legorl.sandbox.base",
    "BwrapBackend": "legorl.sandbox.bwrap",
    "Task": "legorl.tasks.model",
    "load_suite": "legorl.tasks.loader",
    "grade": "legorl.grading.grader",
    "Harness": "legorl.harnesses.base",
    "MinimalHarness": "legorl.harnesses.minimal",
    "Trainer": "legorl.training.trainer",
    "compute_token_logprobs": "legorl.training.logprobs",
    "train": "legorl.loop.train",
    "run_rollout": "legorl.loop.rollout",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'legorl' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
