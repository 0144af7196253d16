"""The Ray cluster a run uses (``RunConfig.executor``): joined at ``executor.address``, or a local
instance started here. Everything that places work on Ray (rollout workers, trainer ranks, the
scale benchmark) enters :func:`ray_cluster`; the one that started Ray shuts it down, the others
leave it running."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from legorl.config import ExecutorConfig

__all__ = ["ray_cluster", "start_local_ray"]


def start_local_ray(num_cpus: int | None, object_store_mb: int) -> None:
    """A Ray instance on this machine alone, its node address on loopback."""
    import ray

    ray.init(
        num_cpus=num_cpus,
        object_store_memory=object_store_mb * 2**20,
        include_dashboard=False,
        log_to_driver=True,
        _node_ip_address="127.0.0.1",
    )


@contextlib.contextmanager
def ray_cluster(cfg: ExecutorConfig) -> Iterator[None]:
    """Ray initialised for the duration (joined at ``cfg.address``, else started locally with
    ``cfg.num_cpus`` and ``cfg.object_store_mb``); shut down on exit only if started here."""
    import ray

    started = False
    if not ray.is_initialized():
        if cfg.address is None:
            start_local_ray(cfg.num_cpus, cfg.object_store_mb)
        else:
            ray.init(address=cfg.address, log_to_driver=True)
        started = True
    try:
        yield
    finally:
        if started:
            ray.shutdown()
