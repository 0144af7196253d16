"""Rollouts on Ray actors (``executor: {type: ray}``; docs/scale-out.md).

What runs where:

* the **training process** (Ray's driver): engine, gateway, run store, trainer; it joins the Ray
  cluster at ``executor.address`` (null: starts a local Ray instance with ``executor.num_cpus``);
* one or more **rollout workers** per alive node (``executor.workers_per_node``), pinned to their node:
  each builds its own sandbox backend (and with it the node's image cache and harness layers),
  harness and budget from the run config, and serves a Unix socket that relays to the gateway
  (:class:`~legorl.gateway.relay.Relay`), which its sandboxes bind-mount as in one process. A
  rollout's gateway session is opened, read and closed over the gateway's control routes
  (:mod:`legorl.gateway.control`; a per-run secret that sandboxes never see).

A rollout goes to the least busy worker. If its worker dies (the process killed, its node gone),
the rollout is an ``env_failure`` naming the lost worker: no verdict on the policy, no gradient.
Its session is closed on the gateway (the Turns it had made are kept) and the worker is replaced
on the same node when the node is alive, else on another. Every rollout's sampling seed comes
from the run (:func:`~legorl.loop.rollout.rollout_seed`), so a rollout samples the same tokens on
any worker, or in the training process with the local executor.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from legorl.cluster import ray_cluster
from legorl.engines.server_process import say
from legorl.errors import ConfigError
from legorl.gateway.control import RemoteGateway, enable_control, new_control_secret
from legorl.gateway.relay import Relay
from legorl.gateway.sessions import new_token
from legorl.loop.rollout import new_rollout_id, rollout_seed, run_rollout
from legorl.trajectory.builder import build_samples
from legorl.trajectory.records import Rollout

if TYPE_CHECKING:
    from legorl.config import RunConfig
    from legorl.loop.rollout import RolloutContext
    from legorl.loop.stack import GatewayStack
    from legorl.tasks.model import Task

log = logging.getLogger(__name__)

__all__ = ["RayExecutor", "RolloutWorker", "WORKER_LOST"]

WORKER_LOST = "rollout worker lost"


class RolloutWorker:
    """One rollout worker (a Ray actor; its methods are coroutines, so it serves many rollouts at
    once). ``cfg_json``: the run config; ``gateway_url``: the gateway's root URL, reachable from
    this worker's node; ``secret``: the run's control secret."""

    def __init__(self, cfg_json: str, gateway_url: str, secret: str) -> None:
        from legorl.config import RunConfig

        self.cfg = RunConfig.model_validate_json(cfg_json)
        self.gateway_url, self.secret = gateway_url, secret
        self.relay: Relay | None = None
        self.ctx: RolloutContext | None = None
        self.socket_dir: Path | None = None

    async def start(self) -> dict[str, Any]:
        """Build the sandbox backend, harness and relay; returns where this worker runs."""
        import ray

        from legorl.loop.stack import build_harness, context_for, sandbox_backend

        where = urlsplit(self.gateway_url)
        # a short private directory: a Unix socket path must fit in 108 bytes
        self.socket_dir = Path(tempfile.mkdtemp(prefix="legorl-w-", dir="/tmp"))
        self.relay = await Relay(self.socket_dir / "gw.sock", where.hostname or "127.0.0.1", where.port or 80).start()
        self.ctx = context_for(
            self.cfg,
            RemoteGateway(self.gateway_url, self.secret),
            str(self.relay.socket_path),
            sandbox_backend(self.cfg.sandbox),
            build_harness(self.cfg.rollout),
        )
        return {"node_id": ray.get_runtime_context().get_node_id(), "pid": os.getpid()}

    async def rollout(self, task: Task, step: int, group_index: int, rollout_id: str, token: str, seed: int) -> Rollout:
        if self.ctx is None:
            raise RuntimeError("RolloutWorker.start() was not called")
        return await run_rollout(self.ctx, task, step, group_index, rollout_id=rollout_id, token=token, seed=seed)

    async def stop(self) -> None:
        if self.relay is not None:
            await self.relay.stop()
        if self.socket_dir is not None:
            shutil.rmtree(self.socket_dir, ignore_errors=True)


@dataclass
class _Worker:
    handle: Any  # ray.actor.ActorHandle
    name: str
    node_id: str
    pid: int
    in_flight: int = 0


class RayExecutor:
    """The rollout executor on Ray: ``async with RayExecutor(cfg, stack) as ex: await ex.rollout(...)``.
    ``stats``: workers alive and lost so far (the loop logs them as ``executor/*``)."""

    def __init__(self, cfg: RunConfig, stack: GatewayStack) -> None:
        self.cfg, self.stack = cfg, stack
        self.secret = new_control_secret()
        self.workers: list[_Worker] = []
        self.stats: dict[str, int] = {"workers": 0, "workers_lost": 0}
        self._cluster = contextlib.ExitStack()
        self._spawned = 0
        self._replacing: dict[str, asyncio.Future[None]] = {}

    # -- lifecycle -----------------------------------------------------------------------------
    async def __aenter__(self) -> RayExecutor:
        import ray

        if self.stack.server.port is None:
            raise ConfigError("executor ray: the gateway needs a TCP listener the workers reach")
        enable_control(self.stack.gateway, self.secret)
        ex = self.cfg.executor
        self._cluster.enter_context(ray_cluster(ex))
        try:
            nodes = [n["NodeID"] for n in ray.nodes() if n.get("Alive")]
            say(f"ray executor: starting {len(nodes) * ex.workers_per_node} rollout worker(s)")
            spawned = [self._spawn(node) for node in nodes for _ in range(ex.workers_per_node)]
            self.workers = list(await asyncio.gather(*spawned))
        except BaseException:
            await self.__aexit__()
            raise
        self.stats["workers"] = len(self.workers)
        say(f"ray executor: {len(self.workers)} rollout worker(s) on {len(nodes)} node(s)")
        return self

    async def __aexit__(self, *exc: object) -> None:
        import ray

        for worker in self.workers:
            try:
                await asyncio.wait_for(worker.handle.stop.remote(), timeout=10)
            except Exception:  # a dead or stuck worker: killed below anyway
                pass
            ray.kill(worker.handle)
        self.workers = []
        self._cluster.close()

    async def _spawn(self, node_id: str) -> _Worker:
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        self._spawned += 1
        name = f"rollout-worker-{self._spawned}"
        actor = ray.remote(RolloutWorker).options(
            name=None,
            num_cpus=0,  # rollouts wait on sandboxes and the engine; their processes are not Ray tasks
            max_restarts=0,  # a lost worker is replaced by the executor, its rollouts reported lost
            scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False),
        )
        handle: Any = actor.remote(self.cfg.model_dump_json(), self.stack.server.root_url, self.secret)
        info = await handle.start.remote()
        return _Worker(handle, name, info["node_id"], info["pid"])

    # -- rollouts ------------------------------------------------------------------------------
    async def rollout(self, task: Task, step: int, group_index: int) -> Rollout:
        from ray.exceptions import RayActorError

        rollout_id, token = new_rollout_id(), new_token()
        seed = rollout_seed(self.cfg.seed, step, task.instance_id, group_index)
        if not self.workers:  # all lost: wait for their replacements
            await asyncio.gather(*self._replacing.values(), return_exceptions=True)
        if not self.workers:
            return self._failed(task, step, group_index, rollout_id, token, f"{WORKER_LOST}: no rollout worker is left")
        worker = min(self.workers, key=lambda w: w.in_flight)
        worker.in_flight += 1
        try:
            done: Rollout = await worker.handle.rollout.remote(task, step, group_index, rollout_id, token, seed)
            return done
        except RayActorError as e:
            await self._replace(worker)
            return self._lost(task, step, group_index, rollout_id, token, worker, e)
        finally:
            worker.in_flight -= 1

    async def _replace(self, worker: _Worker) -> None:
        """Start a worker in place of ``worker`` (once, however many of its rollouts report it)."""
        import ray

        pending = self._replacing.get(worker.name)
        if pending is not None:
            await pending
            return
        if worker not in self.workers:
            return

        async def replace() -> None:
            self.workers.remove(worker)
            self.stats["workers_lost"] += 1
            alive = {n["NodeID"] for n in ray.nodes() if n.get("Alive")}
            node = worker.node_id if worker.node_id in alive or not alive else next(iter(alive))
            try:
                self.workers.append(await self._spawn(node))
                log.warning("%s (pid %d) was lost; a new worker took its place", worker.name, worker.pid)
            except Exception as e:  # the run goes on with the workers it has
                log.error("%s (pid %d) was lost and could not be replaced: %s", worker.name, worker.pid, e)
            finally:
                self.stats["workers"] = len(self.workers)

        self._replacing[worker.name] = future = asyncio.ensure_future(replace())
        try:
            await future
        finally:
            self._replacing.pop(worker.name, None)

    def _lost(
        self, task: Task, step: int, group_index: int, rollout_id: str, token: str, worker: _Worker, error: Exception
    ) -> Rollout:
        """The record of a rollout whose worker died."""
        reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        cause = f"{WORKER_LOST}: {worker.name} (pid {worker.pid}, node {worker.node_id[:12]}): {reason}"
        return self._failed(task, step, group_index, rollout_id, token, cause)

    def _failed(self, task: Task, step: int, group_index: int, rollout_id: str, token: str, cause: str) -> Rollout:
        """An environment failure, with the Turns the gateway had recorded for the rollout (its
        session is closed here)."""
        turns = self.stack.gateway.close_session(token)
        return Rollout(
            rollout_id=rollout_id,
            session_id=turns[0].session_id if turns else rollout_id,
            task_id=task.instance_id,
            harness=self.cfg.rollout.harness,
            sandbox=self.cfg.sandbox.type,
            step=step,
            group_index=group_index,
            status="env_failure",
            cause=cause,
            samples=build_samples(turns, rollout_id),
        )
