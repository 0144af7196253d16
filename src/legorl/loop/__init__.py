"""The RL loop: rollouts in sandboxes through the gateway, batches, training steps, evaluation."""

from legorl.lazy import lazy_exports

__all__, __getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "RolloutContext": "legorl.loop.rollout",
        "run_rollout": "legorl.loop.rollout",
        "GatewayStack": "legorl.loop.stack",
        "open_gateway_stack": "legorl.loop.stack",
        "rollout_context": "legorl.loop.stack",
        "sandbox_backend": "legorl.loop.stack",
        "build_harness": "legorl.loop.stack",
        "rollout_budget": "legorl.loop.stack",
        "Batch": "legorl.loop.batch",
        "assemble_batch": "legorl.loop.batch",
        "train": "legorl.loop.train",
    },
)
