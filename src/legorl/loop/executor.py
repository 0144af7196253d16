"""Where a run's rollouts execute (``RunConfig.executor``).

* ``local``: in the training process (:class:`LocalExecutor`), the sandboxes on this machine;
* ``ray``: on rollout workers, Ray actors with their own sandbox backend, image cache and harness
  layers, one or more per node (:class:`legorl.loop.ray_executor.RayExecutor`).

Either way the gateway, the engine, the run store and the trainer stay in the training process, and
a rollout samples with the seed :func:`~legorl.loop.rollout.rollout_seed` gives it (the run's seed,
the step, the task, the group index): the same run config yields the same rollouts on either
executor. Adding an executor is one new module with this :class:`RolloutExecutor` protocol.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Protocol

from legorl.loop.rollout import RolloutContext, rollout_seed, run_rollout

if TYPE_CHECKING:
    from legorl.config import RunConfig
    from legorl.harnesses.base import Harness
    from legorl.loop.stack import GatewayStack
    from legorl.sandbox.base import SandboxBackend
    from legorl.tasks.model import Task
    from legorl.trajectory.records import Rollout

__all__ = ["LocalExecutor", "RolloutExecutor", "open_executor"]


class RolloutExecutor(Protocol):
    async def rollout(self, task: Task, step: int, group_index: int) -> Rollout:
        """One rollout; a failure of the machinery around it (a lost worker) is an ``env_failure``
        rollout, never an exception."""
        ...


class LocalExecutor:
    def __init__(self, ctx: RolloutContext, run_seed: int) -> None:
        self.ctx, self.run_seed = ctx, run_seed

    async def rollout(self, task: Task, step: int, group_index: int) -> Rollout:
        seed = rollout_seed(self.run_seed, step, task.instance_id, group_index)
        return await run_rollout(self.ctx, task, step, group_index, seed=seed)


@contextlib.asynccontextmanager
async def open_executor(
    cfg: RunConfig, stack: GatewayStack, backend: SandboxBackend, harness: Harness
) -> AsyncIterator[RolloutExecutor]:
    """The executor ``cfg.executor`` names, serving rollouts of ``cfg`` through ``stack``'s gateway."""
    from legorl.loop.stack import rollout_context

    if cfg.executor.type == "ray":
        from legorl.loop.ray_executor import RayExecutor

        async with RayExecutor(cfg, stack) as executor:
            yield executor
    else:
        yield LocalExecutor(rollout_context(cfg, stack, backend, harness), cfg.seed)
