"""``legorl sft``: a supervised warm start for tasks where the base policy's solve rate is zero.

GSPO learns nothing from a group whose rollouts all fail. Where the base model never solves a task,
RL starts from a checkpoint fine-tuned on successful trajectories recorded *through the same gateway
and harness*: the run store's :class:`~legorl.trajectory.records.Sample` records of resolved
rollouts (of a scripted policy, or rejection-sampled successes of the training suite), with their
exact tokens and loss masks — the sequences RL will train on, not a re-rendering of them.

Loss: the mean negative log-likelihood of the loss-masked tokens of a mini-batch (the tokens the
policy sampled); prompt, tool-output and template tokens have mask 0 and are selected out before
the sum, so no gradient reaches their log-probabilities (they still condition the sampled ones, as
in RL). Log-probabilities come from :mod:`legorl.training.logprobs` at temperature 1 (the model's
own distribution), forward passes are planned as the RL trainer plans them
(:func:`legorl.training.trainer.plan_forward_passes`).

Output: ``out`` becomes the RL run's directory — ``config.json`` (the run config, ``run_dir`` =
``out``), an empty run store (``run.sqlite``), ``sft.json`` (:class:`SFTReport`: sources, sample
counts, losses) and a checkpoint in the trainer's format (:mod:`legorl.training.checkpoint`) named
``step--00001``: the state *before* RL step 0 (``meta.json``: step -1, loop ``next_step`` 0 and the
task-order RNG of a fresh run with the config's seed, trainer version and schedule index 0; a fresh
AdamW state — SFT's moments belong to another objective). ``legorl train --resume OUT`` starts RL at
step 0 from these weights, ``legorl eval --checkpoint OUT`` and ``legorl export-hf OUT`` read them;
the first RL checkpoints prune it like any older one. Deterministic given ``sft.seed`` (sample
order) and the run's data.
"""

from __future__ import annotations

import random
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import torch
from pydantic import BaseModel, Field

from legorl.config import RunConfig, SFTConfig
from legorl.errors import ConfigError
from legorl.training.checkpoint import latest_checkpoint, save_checkpoint
from legorl.training.logprobs import compute_token_logprobs_batch, compute_token_logprobs_packed
from legorl.training.recompute import recompute_decoder_layers
from legorl.training.trainer import Trainer, lr_factor, plan_forward_passes
from legorl.trajectory.records import Rollout, Sample
from legorl.trajectory.store import DB_NAME, RunStore, open_run

__all__ = [
    "SFT_STEP",
    "SFTReport",
    "SFTSource",
    "masked_nll",
    "select_samples",
    "sequence_logprobs",
    "sft_backward",
    "sft_train",
    "warm_start",
]

SFT_STEP = -1  # the checkpoint's step: the state before RL step 0
REPORT = "sft.json"


class SFTSource(BaseModel):
    """What one run directory gave: the rollouts kept and why the others were not."""

    run_dir: str
    rollouts: list[str] = Field(default_factory=list)  # rollout ids whose samples were kept
    samples: int = 0
    skipped: dict[str, int] = Field(default_factory=dict)  # reason -> rollouts


class SFTReport(BaseModel):
    """``OUT/sft.json``: the warm start's provenance and figures."""

    sources: list[SFTSource]
    samples: int
    sampled_tokens: int  # tokens under the loss
    tokens: int  # all tokens fed (prompts included)
    optimizer_steps: int
    epoch_loss: list[float]  # mean NLL per sampled token, each epoch (before its updates: a running mean)
    checkpoint: str
    base_model: str
    sft: SFTConfig
    seconds: float = 0.0


def rollout_skip_reason(r: Rollout, min_reward: float) -> str | None:
    """Why a rollout's samples are not SFT data (None: they are)."""
    if r.status != "ok":
        return f"status {r.status}"
    if r.flags:  # a blocking reward-hack flag: its reward is not evidence of a fix worth imitating
        return "flagged"
    if r.reward < min_reward:
        return f"reward < {min_reward:g}"
    if not any(s.num_sampled for s in r.samples):
        return "no sampled tokens"
    return None


def select_samples(
    run_dirs: Iterable[str | Path], min_reward: float = 1.0, exclude_tasks: Iterable[str] = ()
) -> tuple[list[Sample], list[SFTSource]]:
    """The samples (with sampled tokens) of every rollout in ``run_dirs`` that ended ``ok`` with
    reward >= ``min_reward`` and no blocking flag, in the run stores' order. A kept rollout of a task
    in ``exclude_tasks`` (the held-out suite) is an error: training on it would leak the evaluation."""
    excluded = set(exclude_tasks)
    samples: list[Sample] = []
    sources: list[SFTSource] = []
    for run_dir in run_dirs:
        path = Path(run_dir)
        if not (path / DB_NAME).is_file():
            raise ConfigError(f"{path}: not a run directory (no run.sqlite)")
        source = SFTSource(run_dir=str(path))
        skipped: Counter[str] = Counter()
        store = open_run(path)
        try:
            for r in store.iter_rollouts():
                why = rollout_skip_reason(r, min_reward)
                if why is not None:
                    skipped[why] += 1
                    continue
                if r.task_id in excluded:
                    raise ConfigError(
                        f"{path}: rollout {r.rollout_id} solved held-out task {r.task_id} (the config's eval "
                        "suite): fine-tune on the training suite's rollouts only"
                    )
                kept = [s for s in r.samples if s.num_sampled > 0]
                samples.extend(kept)
                source.rollouts.append(r.rollout_id)
                source.samples += len(kept)
        finally:
            store.close(compact=False)
        source.skipped = dict(skipped)
        sources.append(source)
    return samples, sources


def sequence_logprobs(model: torch.nn.Module, samples: Sequence[Sample], cfg: SFTConfig) -> list[torch.Tensor]:
    """Every token's log-probability (``[0] = 0``) under ``model`` at temperature 1, in one forward
    pass (padded, or packed with ``cfg.packing``); differentiable under grad."""
    ids = [s.token_ids for s in samples]
    if cfg.packing:
        return compute_token_logprobs_packed(model, ids, temperature=1.0, chunk_size=cfg.chunk_size)
    return compute_token_logprobs_batch(model, ids, temperature=1.0, chunk_size=cfg.chunk_size)


def masked_nll(logprobs: Sequence[torch.Tensor], samples: Sequence[Sample]) -> torch.Tensor:
    """The summed negative log-likelihood of the samples' loss-masked (sampled) tokens. Tokens with
    mask 0 are indexed out before the sum: their log-probabilities get no gradient at all."""
    total = torch.zeros((), dtype=torch.float32, device=logprobs[0].device if logprobs else None)
    for lp, s in zip(logprobs, samples, strict=True):
        mask = torch.tensor(s.loss_mask, dtype=torch.bool, device=lp.device)
        total = total - lp[mask].sum()
    return total


def sft_backward(model: torch.nn.Module, samples: Sequence[Sample], cfg: SFTConfig) -> tuple[float, int]:
    """Forward and backward one mini-batch in as few passes as ``cfg.forward_tokens`` allows, the
    loss normalised by the mini-batch's sampled tokens (so the split does not change the gradient);
    gradients accumulate in ``model``. Returns (mean NLL per sampled token, tokens fed)."""
    sampled = sum(s.num_sampled for s in samples)
    if sampled == 0:
        return 0.0, 0
    loss_sum = 0.0
    fed = 0
    for part in plan_forward_passes([len(s.token_ids) for s in samples], cfg.forward_tokens, cfg.packing):
        rows = [samples[i] for i in part]
        with recompute_decoder_layers(model, cfg.gradient_checkpointing):
            lps = sequence_logprobs(model, rows, cfg)
        nll = masked_nll(lps, rows)
        torch.autograd.backward(nll / sampled)
        loss_sum += float(nll.detach())
        fed += sum(len(s.token_ids) for s in rows)
    return loss_sum / sampled, fed


StepCallback = Callable[[int, int, float], None]  # (optimiser step, of total, mini-batch loss)


def sft_train(
    model: torch.nn.Module, samples: Sequence[Sample], cfg: SFTConfig, on_step: StepCallback | None = None
) -> tuple[list[float], int, int]:
    """``cfg.epochs`` passes over ``samples`` in mini-batches of ``cfg.batch_samples`` (a seeded
    shuffle per epoch), one AdamW step each. Returns (each epoch's mean NLL per sampled token,
    optimiser steps, tokens fed)."""
    if not samples:
        raise ConfigError("no samples to fine-tune on")
    torch.manual_seed(cfg.seed)
    gen = torch.Generator().manual_seed(cfg.seed)
    model.eval()  # no dropout: the policy RL starts from is the one that samples
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=0.0)
    per_epoch = -(-len(samples) // cfg.batch_samples)
    total = cfg.epochs * per_epoch
    epoch_loss: list[float] = []
    step = fed = 0
    for _ in range(cfg.epochs):
        order = torch.randperm(len(samples), generator=gen).tolist()
        nll_sum = tokens = 0.0
        for b in range(per_epoch):
            batch = [samples[i] for i in order[b * cfg.batch_samples : (b + 1) * cfg.batch_samples]]
            for group in optimizer.param_groups:
                group["lr"] = cfg.lr * lr_factor(step, cfg.lr_warmup_steps, cfg.lr_schedule, total)
            optimizer.zero_grad(set_to_none=True)
            loss, n_fed = sft_backward(model, batch, cfg)
            torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
            optimizer.step()
            n = sum(s.num_sampled for s in batch)
            nll_sum, tokens, fed = nll_sum + loss * n, tokens + n, fed + n_fed
            step += 1
            if on_step is not None:
                on_step(step, total, loss)
        epoch_loss.append(nll_sum / tokens if tokens else 0.0)
    optimizer.zero_grad(set_to_none=True)
    return epoch_loss, step, fed


def heldout_task_ids(cfg: RunConfig) -> set[str]:
    """The instance ids of the config's eval suite (every task of it: all are held out)."""
    if cfg.eval.suite is None:
        return set()
    from legorl.tasks import swebench
    from legorl.tasks.loader import load_suite

    if swebench.is_swebench_suite(cfg.eval.suite):  # the records alone: no repository trees needed
        return {t.instance_id for t in swebench.read_records(cfg.eval.suite)}
    return {t.instance_id for t in load_suite(cfg.eval.suite)}


def warm_start(
    cfg: RunConfig, run_dirs: Sequence[str | Path], out: str | Path, on_step: StepCallback | None = None
) -> SFTReport:
    """Fine-tune ``cfg.engine.model`` per ``cfg.sft`` on the successful rollouts of ``run_dirs`` and
    write ``out`` as a run directory that ``legorl train --resume`` continues (module doc)."""
    from legorl.models.registry import load_model, resolve_model

    out = Path(out)
    if cfg.trainer.lora is not None:
        raise ConfigError(
            "legorl sft fine-tunes every weight, and a LoRA run's frozen base is the base model: "
            "unset trainer.lora for the warm start and the run that resumes it (docs/lora.md)"
        )
    if latest_checkpoint(out) is not None or (out / "config.json").exists():
        raise ConfigError(f"{out} already holds a run: write the warm start to a new directory")
    t0 = time.perf_counter()
    samples, sources = select_samples(run_dirs, cfg.sft.min_reward, heldout_task_ids(cfg))
    if not samples:
        why = "; ".join(f"{s.run_dir}: {s.skipped or 'no rollouts'}" for s in sources)
        raise ConfigError(f"no rollout with reward >= {cfg.sft.min_reward:g} to fine-tune on ({why})")
    base = resolve_model(cfg.engine.model)
    model = load_model(base)
    vocab = model.get_input_embeddings().weight.shape[0]
    top = max(max(s.token_ids) for s in samples)
    if top >= vocab:
        raise ConfigError(
            f"the samples hold token id {top} but {cfg.engine.model} has {vocab} embeddings: they were "
            "recorded with another tokenizer"
        )
    epoch_loss, steps, fed = sft_train(model, samples, cfg.sft, on_step)
    run_cfg = cfg.model_copy(update={"run_dir": out})
    # the RL trainer's own state around the fine-tuned weights: what `train --resume` loads into its trainer
    trainer = Trainer(model, cfg.trainer, temperature=cfg.rollout.temperature, total_steps=cfg.steps, seed=cfg.seed)
    loop_state: dict[str, Any] = {"next_step": 0, "task_rng": random.Random(cfg.seed).getstate()}
    metrics = {
        "sft/samples": len(samples),
        "sft/optimizer_steps": steps,
        "sft/loss_first_epoch": epoch_loss[0],
        "sft/loss_last_epoch": epoch_loss[-1],
    }
    out.mkdir(parents=True, exist_ok=True)
    ckpt = save_checkpoint(out, SFT_STEP, trainer, loop_state, metrics, base_model=str(base))
    report = SFTReport(
        sources=sources,
        samples=len(samples),
        sampled_tokens=sum(s.num_sampled for s in samples),
        tokens=fed,
        optimizer_steps=steps,
        epoch_loss=epoch_loss,
        checkpoint=str(ckpt),
        base_model=str(base),
        sft=cfg.sft,
        seconds=round(time.perf_counter() - t0, 3),
    )
    (out / REPORT).write_text(report.model_dump_json(indent=2), encoding="utf-8")
    RunStore(out).close()  # the RL run's (empty) store: a resume checks the run's store before anything else
    # written last: a directory with config.json is a run that `train --resume` may continue
    (out / "config.json").write_text(run_cfg.model_dump_json(indent=2), encoding="utf-8")
    return report
