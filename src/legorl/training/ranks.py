"""The training loop's trainer on several FSDP2 ranks, placed by Ray (``trainer.ranks`` > 1).

The training process keeps the engine, the gateway and the loop; the trainer's ranks are Ray actors
(:class:`TrainerRank`) in one placement group: a bundle of 1 CPU per rank, or 1 GPU each when
``use_gpus`` (NCCL, bf16 mixed precision). Every rank loads the model, shards it
(:func:`~legorl.training.distributed.shard_policy`) and runs the same
:class:`~legorl.training.trainer.Trainer` code. :class:`RankedTrainer` gives the loop the Trainer's
interface over them:

* ``step(samples, monitor)``: every rank gets the whole batch and takes its token-balanced share; the
  metrics (global already) and the per-token logprobs for the UI come back from rank 0;
* ``state_dict()``: the whole weights for the engine's weight sync, gathered by the ranks and
  handed over by disk (safetensors under ``weights_dir``), not through Ray's object store;
  ``adapter()`` (``trainer.lora``): the LoRA adapter alone, the same way (each rank adds the
  adapters before it shards the model, so the adapters are sharded with their layers);
* ``save_checkpoint`` / ``load_checkpoint``: every rank writes or reads its DCP shards of the same
  checkpoint directory (reshardable: a run saved on 2 ranks resumes on 1, and back).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
from pathlib import Path
from typing import TYPE_CHECKING, Any

from legorl.cluster import ray_cluster
from legorl.engines.server_process import say

if TYPE_CHECKING:
    import torch

    from legorl.config import ExecutorConfig, TrainerConfig
    from legorl.models.lora import LoraAdapter
    from legorl.training.checkpoint import CheckpointRequest
    from legorl.trajectory.records import Sample

__all__ = ["RankedTrainer", "TrainerRank"]


class TrainerRank:
    """One trainer rank (a Ray actor): joins the process group, then builds its sharded trainer."""

    def __init__(self, rank: int, world_size: int) -> None:
        self.rank, self.world_size = rank, world_size
        self.trainer: Any = None

    def rendezvous_address(self) -> tuple[str, int]:
        """Where rank 0 hosts the process group's store: this node's address and a free port."""
        import ray

        host = str(ray.util.get_node_ip_address())  # type: ignore[no-untyped-call]
        with socket.socket() as s:
            s.bind((host, 0))
            return host, int(s.getsockname()[1])

    def build(
        self,
        master: tuple[str, int],
        model_path: str,
        cfg_json: str,
        temperature: float,
        total_steps: int | None,
        seed: int,
        mixed_precision: bool,
    ) -> None:
        from legorl.config import TrainerConfig
        from legorl.models.lora import add_lora
        from legorl.models.registry import load_model
        from legorl.training import distributed as dp
        from legorl.training.trainer import Trainer

        os.environ.update(
            RANK=str(self.rank),
            WORLD_SIZE=str(self.world_size),
            LOCAL_RANK="0",  # Ray gives each rank its own GPU (CUDA_VISIBLE_DEVICES): device 0
            MASTER_ADDR=master[0],
            MASTER_PORT=str(master[1]),
        )
        dp.init_from_env()
        cfg = TrainerConfig.model_validate_json(cfg_json)
        model = load_model(model_path)
        if cfg.lora is not None:  # before sharding: FSDP shards the adapters with their layers
            add_lora(model, cfg.lora, seed=seed)
        if mixed_precision:
            model = model.cuda()
        self.trainer = Trainer(
            dp.shard_policy(model, mixed_precision=mixed_precision),
            cfg,
            temperature=temperature,
            total_steps=total_steps,
            seed=seed,
        )

    def step(self, samples: list[Sample], monitor: list[Sample]) -> tuple[dict[str, Any], list[Any], int, int]:
        metrics = self.trainer.step(samples, monitor)
        logprobs = [self.trainer.step_logprobs(s) for s in [*samples, *monitor]] if self.rank == 0 else []
        return metrics, logprobs, self.trainer.version, self.trainer.step_index

    def save_weights(self, path: str) -> None:
        """Every rank gathers the whole weights (a collective); rank 0 writes them to ``path``."""
        from safetensors.torch import save_file

        weights = self.trainer.state_dict()
        if self.rank == 0:
            tmp = f"{path}.tmp"
            save_file({k: v.contiguous() for k, v in weights.items()}, tmp)
            os.replace(tmp, path)

    def save_adapter(self, path: str) -> None:
        """Every rank gathers the whole adapter (a collective); rank 0 writes it to ``path`` (PEFT's format)."""
        adapter = self.trainer.adapter()
        if self.rank == 0 and adapter is not None:
            adapter.save(path)

    def save_checkpoint(self, request: CheckpointRequest) -> str:
        return str(request.save(self.trainer))

    def load_checkpoint(self, path: str) -> tuple[dict[str, Any], int, int]:
        from legorl.training.checkpoint import load_checkpoint

        meta = load_checkpoint(path, self.trainer)
        return meta, self.trainer.version, self.trainer.step_index

    def close(self) -> None:
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()


class RankedTrainer:
    """The Trainer's interface (what the loop calls: :class:`~legorl.training.interface.LoopTrainer`)
    over ``ranks`` FSDP2 ranks on Ray. Close it (``close()`` or ``with``) to end the ranks and, if it
    started Ray, Ray."""

    def __init__(
        self,
        ranks: int,
        model_path: str | Path,
        cfg: TrainerConfig,
        cluster: ExecutorConfig,
        weights_dir: str | Path,
        *,
        temperature: float = 1.0,
        total_steps: int | None = None,
        seed: int = 0,
        use_gpus: bool = False,
    ) -> None:
        import ray
        from ray.util.placement_group import placement_group, remove_placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        self.cfg = cfg
        self.version = 0
        self.step_index = 0
        self.weights_dir = Path(weights_dir)
        self._logprobs: dict[int, Any] = {}
        self._exit = contextlib.ExitStack()
        self._exit.enter_context(ray_cluster(cluster))
        self.ranks: list[Any] = []
        try:
            bundle = {"CPU": 1.0, "GPU": 1.0} if use_gpus else {"CPU": 1.0}
            group = placement_group([bundle] * ranks, strategy="PACK")
            self._exit.callback(remove_placement_group, group)
            ray.get(group.ready(), timeout=120)
            actor = ray.remote(TrainerRank)
            for r in range(ranks):
                strategy = PlacementGroupSchedulingStrategy(group, placement_group_bundle_index=r)
                options = {"num_cpus": 1, "num_gpus": 1 if use_gpus else 0, "scheduling_strategy": strategy}
                self.ranks.append(actor.options(**options).remote(r, ranks))
            say(f"trainer: {ranks} FSDP2 ranks on Ray, each loading {Path(model_path).name} (a minute or less)")
            master = ray.get(self.ranks[0].rendezvous_address.remote())
            ray.get(
                [
                    rank.build.remote(
                        master, str(model_path), cfg.model_dump_json(), temperature, total_steps, seed, use_gpus
                    )
                    for rank in self.ranks
                ]
            )
        except BaseException:
            self.close()
            raise

    def _all(self, method: str, *args: Any) -> list[Any]:
        import ray

        return list(ray.get([getattr(rank, method).remote(*args) for rank in self.ranks]))

    def step(self, samples: list[Sample], monitor: list[Sample] | tuple[Sample, ...] = ()) -> dict[str, Any]:
        import ray

        batch = (ray.put(samples), ray.put(list(monitor)))  # stored once, read by every rank
        metrics, logprobs, self.version, self.step_index = self._all("step", *batch)[0]
        self._logprobs = {id(s): lp for s, lp in zip([*samples, *monitor], logprobs)}
        return dict(metrics)

    def step_logprobs(self, sample: Sample) -> list[float] | None:
        """The last step's pre-update logprobs of ``sample``'s tokens (as :meth:`Trainer.step_logprobs`)."""
        found: list[float] | None = self._logprobs.get(id(sample))
        return found

    def state_dict(self) -> dict[str, torch.Tensor]:
        """The whole weights, by disk from the ranks (for the engine's weight sync)."""
        from safetensors.torch import load_file

        self.weights_dir.mkdir(parents=True, exist_ok=True)
        path = self.weights_dir / f"trainer-v{self.version:06d}.safetensors"
        self._all("save_weights", str(path))
        try:
            return load_file(str(path))
        finally:
            path.unlink(missing_ok=True)

    def adapter(self) -> LoraAdapter | None:
        """The LoRA adapter (``trainer.lora``), by disk from the ranks; None without LoRA."""
        if self.cfg.lora is None:
            return None
        from legorl.models.lora import LoraAdapter

        path = self.weights_dir / f"adapter-v{self.version:06d}"
        self._all("save_adapter", str(path))
        try:
            return LoraAdapter.load(path)
        finally:
            shutil.rmtree(path, ignore_errors=True)

    def save_checkpoint(self, request: CheckpointRequest) -> Path:
        return Path(self._all("save_checkpoint", request)[0])

    def load_checkpoint(self, path: str | Path) -> dict[str, Any]:
        meta, self.version, self.step_index = self._all("load_checkpoint", str(path))[0]
        return dict(meta)

    def close(self) -> None:
        import ray

        for rank in self.ranks:
            with contextlib.suppress(Exception):
                ray.get(rank.close.remote(), timeout=30)
            ray.kill(rank)
        self.ranks = []
        self._exit.close()
        shutil.rmtree(self.weights_dir, ignore_errors=True)

    def __enter__(self) -> RankedTrainer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
