"""LEGO-RL: RL for LLM coding agents inside the real agent programs people use.

The public surface is listed in ``__all__``; names load lazily so that importing ``legorl``
(and running ``legorl --help``) stays instant.
"""

from __future__ import annotations

from legorl.lazy import lazy_exports

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
    "RolloutContext": "legorl.loop.rollout",
    "GatewayStack": "legorl.loop.stack",
    "SandboxBackend": "legorl.sandbox.base",
    "open_gateway_stack": "legorl.loop.stack",
    "rollout_context": "legorl.loop.stack",
    "sandbox_backend": "legorl.loop.stack",
    "build_harness": "legorl.loop.stack",
    "get_task": "legorl.tasks.loader",
    "ScriptedEngine": "legorl.engines.scripted",
}
__all__, __getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
