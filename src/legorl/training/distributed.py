"""Data-parallel training on PyTorch FSDP2: the trainer's ranks shard the policy with
``torch.distributed.fsdp.fully_shard`` (gloo on CPU, NCCL on GPU) and split each mini-batch.

Launch: every rank runs the same program (``torchrun --nproc-per-node N ...`` sets ``RANK``,
``WORLD_SIZE`` and the rendezvous; a Ray actor per rank sets the same variables). :func:`init_from_env`
joins the process group; :func:`shard_policy` shards the model (each decoder layer, then a root
around it: :class:`ShardedPolicy`); the :class:`~legorl.training.trainer.Trainer`, given that
root, runs every forward through it and:

* gives each rank a share of every mini-batch, balanced by token count (:func:`split_by_tokens`);
  every rank holds the whole batch, so the split needs no communication;
* normalises each rank's loss by the whole mini-batch's totals, exactly as the single-process
  trainer does, and multiplies it by the world size: FSDP averages gradients over ranks in its
  reduce-scatter (gloo has no pre-scaled sum), so the sharded gradient is the sum of the ranks'
  shares — the single-process gradient, up to float rounding;
* runs as many forward/backward passes on every rank (a rank with fewer samples adds passes of
  weight zero): FSDP's collectives must line up across ranks;
* scores π_old and the monitor samples on every rank (the same forwards everywhere);
* gathers the statistics and fidelity logprobs so every rank reports the whole step.

Checkpoints use ``torch.distributed.checkpoint`` (:mod:`legorl.training.checkpoint`): each rank
writes its shards, and a checkpoint loads at any other world size (resharding), one rank included.
bf16 mixed precision (parameters in bf16, gradients reduced in fp32) is for GPUs
(``mixed_precision=True``); on CPU everything stays fp32.
"""

from __future__ import annotations

import heapq
import os
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.distributed as dist

__all__ = [
    "full_state_dict",
    "ShardedPolicy",
    "barrier",
    "gather_objects",
    "init_from_env",
    "is_distributed",
    "rank",
    "shard_policy",
    "split_by_tokens",
    "sum_over_ranks",
    "world_size",
]


def is_distributed() -> bool:
    """True inside a process group of more than one rank."""
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def rank() -> int:
    return dist.get_rank() if is_distributed() else 0


def world_size() -> int:
    return dist.get_world_size() if is_distributed() else 1


def init_from_env(backend: str | None = None) -> bool:
    """Join the process group the launcher describes (``WORLD_SIZE`` > 1); False when there is none.
    ``backend``: gloo on CPU, NCCL when CUDA is there, unless given."""
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return False
    if not dist.is_initialized():
        chosen = backend or ("nccl" if torch.cuda.is_available() else "gloo")
        if chosen == "nccl":
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        dist.init_process_group(chosen)
    return True


def decoder_layers(model: torch.nn.Module) -> Sequence[torch.nn.Module]:
    """The model's decoder layers (Llama/Qwen/Mistral layout: ``model.model.layers``)."""
    inner = getattr(model, "model", None)
    layers = getattr(inner, "layers", None)
    if layers is None:
        raise ValueError(f"{type(model).__name__} has no model.layers to shard")
    return list(layers)


class ShardedPolicy(torch.nn.Module):
    """The FSDP root around the policy. The trainer's scoring functions run the decoder and the LM
    head separately (chunked head, shared prefixes), never the model's own ``forward``; FSDP
    gathers a unit's parameters in that unit's ``forward``, so the root is this wrapper, whose
    ``forward(fn, ...)`` runs ``fn(policy, ...)``: the embeddings, final norm and (tied) LM head
    are whole for the whole call, and each decoder layer gathers itself."""

    def __init__(self, policy: torch.nn.Module) -> None:
        super().__init__()
        self.policy = policy

    def forward(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        return fn(self.policy, *args, **kwargs)


def shard_policy(model: torch.nn.Module, *, mixed_precision: bool = False) -> ShardedPolicy:
    """Shard ``model`` across the process group with FSDP2: one unit per decoder layer, and the
    root (:class:`ShardedPolicy`: embeddings, final norm, LM head). ``mixed_precision``: bf16
    parameters, fp32 gradient reduction (GPU). Give the result to the Trainer."""
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    kwargs: dict[str, Any] = {}
    if mixed_precision:
        kwargs["mp_policy"] = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for layer in decoder_layers(model):
        fully_shard(layer, **kwargs)
    root = ShardedPolicy(model)
    fully_shard(root, **kwargs)
    return root


def split_by_tokens(lengths: Sequence[int], ranks: int) -> list[list[int]]:
    """Indices of ``lengths`` per rank, balanced by total tokens (longest first onto the lightest
    rank; ties by rank): deterministic, so every rank computes the same split."""
    heap = [(0, r) for r in range(ranks)]
    shares: list[list[int]] = [[] for _ in range(ranks)]
    for i in sorted(range(len(lengths)), key=lambda i: (-lengths[i], i)):
        load, r = heapq.heappop(heap)
        shares[r].append(i)
        heapq.heappush(heap, (load + lengths[i], r))
    return [sorted(s) for s in shares]


def barrier() -> None:
    if is_distributed():
        dist.barrier()


def sum_over_ranks(value: float) -> float:
    if not is_distributed():
        return value
    t = torch.tensor([value], dtype=torch.float64)
    dist.all_reduce(t)
    return float(t.item())


def max_over_ranks(value: int) -> int:
    if not is_distributed():
        return value
    t = torch.tensor([value], dtype=torch.int64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return int(t.item())


def gather_objects(obj: Any) -> list[Any]:
    """``obj`` from every rank, in rank order (``[obj]`` in one process)."""
    if not is_distributed():
        return [obj]
    out: list[Any] = [None] * world_size()
    dist.all_gather_object(out, obj)
    return out


def full_tensor(t: torch.Tensor) -> torch.Tensor:
    """A sharded (DTensor) value as the whole tensor; a plain tensor as itself."""
    gather = getattr(t, "full_tensor", None)
    return gather() if gather is not None else t


def full_state_dict(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The whole model's weights on every rank (CPU), e.g. for a weight sync to the engine."""
    if not is_distributed():
        return {k: v.detach() for k, v in model.state_dict().items()}
    return {k: full_tensor(v.detach()).cpu() for k, v in model.state_dict().items()}
