"""One rank of the FSDP2 checks in ``test_fsdp.py`` (launched by torchrun; see there).

``train`` (2 ranks): the sharded trainer and the single-process trainer take the same step on the
same batch; every optimiser step's gradients (per tensor) and the losses are written to
``result-train.json``. The sharded trainer then saves a checkpoint, takes a second step, and rank 0
writes the parameters after it (``uninterrupted.pt``).

``resume`` (1 process, no process group): a plain trainer loads that checkpoint and takes the same
second step; ``result-resume.json`` holds how far its parameters are from ``uninterrupted.pt``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import torch
from scored_samples import scored_sample
from transformers import LlamaConfig, LlamaForCausalLM

from legorl.config import TrainerConfig
from legorl.models.lora import add_lora
from legorl.training import distributed as dp
from legorl.training.checkpoint import latest_checkpoint, load_checkpoint, save_checkpoint
from legorl.training.trainer import Trainer
from legorl.trajectory.records import Sample

VOCAB = 61
BASE = {"lr": 1e-3, "minibatch_size": 5, "eps_low": 0.2, "eps_high": 0.2}  # two optimiser steps per batch


def policy() -> LlamaForCausalLM:
    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=64,
        intermediate_size=96,
        num_hidden_layers=3,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        tie_word_embeddings=True,  # as SmolLM2: the LM head is the embedding
    )
    return LlamaForCausalLM(cfg).eval()


def batch(seed: int) -> list[Sample]:
    """Two groups sharing a prompt (the shared-prefix passes) and lone samples, of unequal lengths."""
    ref = policy()
    g = torch.Generator().manual_seed(seed)
    rows: list[tuple[list[int], int]] = []
    for _ in range(2):
        head = torch.randint(0, VOCAB, (12,), generator=g).tolist()
        rows += [(head + torch.randint(0, VOCAB, (3 + 5 * j,), generator=g).tolist(), 12) for j in range(3)]
    rows += [(torch.randint(0, VOCAB, (9 + 7 * j,), generator=g).tolist(), 4) for j in range(4)]
    return [
        scored_sample(ref, f"r{i}", ids, prompt, (1.0, -0.5, 0.75, -1.0)[i % 4], shift=-0.01 * (i % 3))
        for i, (ids, prompt) in enumerate(rows)
    ]


def capture_gradients(trainer: Trainer) -> list[dict[str, torch.Tensor]]:
    """Every optimiser step's gradients (whole tensors), taken just before the step."""
    seen: list[dict[str, torch.Tensor]] = []
    names = {id(p): n for n, p in trainer.model.named_parameters()}

    def hook(optimizer: torch.optim.Optimizer, args: object, kwargs: object) -> None:
        seen.append(
            {
                names[id(p)]: dp.full_tensor(p.grad).detach().cpu().clone()
                for group in optimizer.param_groups
                for p in group["params"]
                if p.grad is not None
            }
        )

    trainer.optimizer.register_step_pre_hook(hook)
    return seen


def params(trainer: Trainer) -> dict[str, torch.Tensor]:
    return {k: v.cpu().clone() for k, v in dp.full_state_dict(trainer.model).items()}


def train(out: Path, cfg: TrainerConfig, device: str = "cpu") -> None:
    assert dp.init_from_env() and dp.world_size() == 2
    if device == "cuda":  # scripts/gpu_check.sh: NCCL, one GPU per rank
        device = f"cuda:{torch.cuda.current_device()}"
    samples = batch(1)
    single = Trainer(policy().to(device), cfg, seed=3)
    single_grads = capture_gradients(single)
    single_metrics = single.step(samples)

    model = policy()
    if cfg.lora is not None:  # before sharding, as the loop's ranks do: FSDP shards the adapters with their layers
        add_lora(model, cfg.lora, seed=3)
    sharded = Trainer(dp.shard_policy(model.to(device)), cfg, seed=3)
    sharded_grads = capture_gradients(sharded)
    sharded_metrics = sharded.step(samples)

    steps = []
    for a, b in zip(single_grads, sharded_grads):
        assert a.keys() == b.keys()
        steps.append({k: float((a[k] - b[k]).norm() / a[k].norm().clamp_min(1e-30)) for k in a})
    sharded_steps = len(sharded_grads)
    save_checkpoint(out / "run", 1, sharded, {"cursor": 1})
    sharded.step(batch(2))
    after = params(sharded)
    if dp.rank() == 0:
        torch.save(after, out / "uninterrupted.pt")
        result = {
            "world_size": dp.world_size(),
            "optimizer_steps": [len(single_grads), sharded_steps],
            "relative_gradient_diff": steps,
            "loss": [single_metrics["train/loss"], sharded_metrics["train/loss"]],
            "grad_norm": [single_metrics["train/grad_norm"], sharded_metrics["train/grad_norm"]],
            "ratio_mean": [single_metrics["train/ratio_mean"], sharded_metrics["train/ratio_mean"]],
            "sampled_tokens": [single_metrics["train/sampled_tokens"], sharded_metrics["train/sampled_tokens"]],
            "fidelity_tokens": [single_metrics.get("mismatch/tokens"), sharded_metrics.get("mismatch/tokens")],
        }
        (out / "result-train.json").write_text(json.dumps(result, indent=1))
    dp.barrier()
    torch.distributed.destroy_process_group()


def resume(out: Path, cfg: TrainerConfig) -> None:
    assert not dp.init_from_env()
    trainer = Trainer(policy(), cfg, seed=3)
    checkpoint = latest_checkpoint(out / "run")
    assert checkpoint is not None
    load_checkpoint(checkpoint, trainer)
    trainer.step(batch(2))
    ours = params(trainer)
    theirs = torch.load(out / "uninterrupted.pt")
    diff = {k: float((ours[k] - theirs[k]).norm() / theirs[k].norm()) for k in theirs}
    (out / "result-resume.json").write_text(json.dumps({"relative_param_diff": diff, "version": trainer.version}))


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("phase", choices=["train", "resume"])
    parser.add_argument("out", type=Path)
    parser.add_argument("--cfg", default="{}", help="TrainerConfig fields over BASE, as JSON")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"], help="train: where the ranks compute")
    args = parser.parse_args()
    config = TrainerConfig(**{**BASE, **json.loads(args.cfg)})
    train(args.out, config, args.device) if args.phase == "train" else resume(args.out, config)
    # Everything is written and the process group is destroyed. A normal exit then runs C++ static
    # destructors, and one of torch's threads was sometimes still joinable there: "terminate called
    # without an active exception", SIGABRT, with no Python frame left (seen once in ~40 CI runs).
    # Leave without them.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
