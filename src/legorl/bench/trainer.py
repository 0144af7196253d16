"""Trainer benchmark: wall time of one GSPO step, ours against TRL's (``legorl bench trainer``).

The workload of the issue: ``samples`` sequences of ``tokens`` tokens each (a prompt of
``prompt_tokens`` context tokens, the rest sampled and loss-masked), advantages ±1, on the embedded
model (SmolLM2-135M by default) in fp32 on CPU. Token ids are drawn from a seeded generator; the
"rollout" logprobs are the model's own (one no-grad pass at setup), so the TIS weights are 1 as on
a faithful engine. One untimed warm-up step, then ``steps`` timed ones; reported: the median
(``ours_s``), every step's time, peak RSS.

The baseline (``trl_s``): TRL's ``GRPOTrainer`` with ``importance_sampling_level="sequence"`` (GSPO),
the same clip range, learning rate and gradient clip, on the identical batch (same model weights,
prompt/completion split, advantages, torch threads): its ``compute_loss``, backward, gradient clip
and optimiser step — generation and reward scoring, which TRL would do first, are not timed. The
two trainers hold separate copies of the model and their steps alternate, so machine noise falls
on both alike. ``grad_norm_rel_diff`` (first step, identical weights) shows both computed the same
gradient. ``ratio = ours_s / trl_s``.

With LoRA (``--set lora.rank=16``, any ``lora.*`` field: ``trainer.lora``) our trainer trains the
adapters, TRL gets the same adapters (its ``peft_config``), and ``lora`` compares LoRA with full
fine-tuning of the same batch, each measured in a fresh process of its own (our trainer alone, so
its peak RSS is that trainer's): ``lora_s`` / ``full_s`` (median step), ``lora_peak_rss_mb`` /
``full_peak_rss_mb``, ``memory_ratio`` (LoRA / full), ``time_ratio``, the trainable parameter counts
and the adapter's size. ``allocator``: the heap allocator the measuring processes ran under
(:mod:`legorl.allocator`: jemalloc under the `legorl` program where the machine has it), which
decides how much freed memory stays resident.
"""

from __future__ import annotations

import contextlib
import io
import logging
import resource
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from legorl.allocator import allocator_in_use

__all__ = ["TrlStep", "make_samples", "run_trainer_bench"]


def _peak_rss_mb() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return r / (1024 * 1024) if sys.platform == "darwin" else r / 1024


def _own_peak_rss_mb() -> float:
    """This process's own peak RSS (Linux: ``VmHWM``, the high-water mark of its address space).
    ``ru_maxrss`` would not do in a spawned child: Linux carries the parent's peak across fork and
    exec into it."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return _peak_rss_mb()


def make_samples(
    model: Any, samples: int, tokens: int, prompt_tokens: int, seed: int = 0, group_size: int = 1
) -> list[Any]:
    """``samples`` Samples of ``tokens`` ids, the last ``tokens - prompt_tokens`` sampled, with the
    model's own logprobs as rollout logprobs and alternating advantages ±1. ``group_size > 1``:
    GRPO-shaped, each run of ``group_size`` samples shares one prompt."""
    from legorl.training.logprobs import compute_token_logprobs_batch
    from legorl.trajectory.records import Sample

    g = torch.Generator().manual_seed(seed)
    vocab = int(model.config.vocab_size)
    group_size = max(1, group_size)
    prompts = [torch.randint(0, vocab, (prompt_tokens,), generator=g).tolist() for _ in range(0, samples, group_size)]
    seqs = [
        prompts[i // group_size] + torch.randint(0, vocab, (tokens - prompt_tokens,), generator=g).tolist()
        for i in range(samples)
    ]
    with torch.no_grad():
        lps = compute_token_logprobs_batch(model, seqs)
    out = []
    for i, (ids, lp) in enumerate(zip(seqs, lps)):
        mask = [0] * prompt_tokens + [1] * (tokens - prompt_tokens)
        rollout = [float(v) if m else 0.0 for v, m in zip(lp.tolist(), mask)]
        out.append(
            Sample(
                rollout_id=f"bench-{i}",
                thread_id="main",
                segment_index=0,
                token_ids=ids,
                loss_mask=mask,
                rollout_logprobs=rollout,
                reward=float(i % 2),
                advantage=1.0 if i % 2 else -1.0,
            )
        )
    return out


def _no_reward(completions: list[Any], **_: Any) -> list[float | None]:
    """TRL requires a reward function; the bench's batch already carries its advantages."""
    return [0.0] * len(completions)


class TrlStep:
    """One TRL ``GRPOTrainer`` GSPO step (loss, backward, clip, optimiser) on a fixed batch; with
    ``cfg.lora``, on the same LoRA adapters (TRL's ``peft_config``)."""

    def __init__(self, model: Any, tokenizer: Any, samples: Sequence[Any], prompt_tokens: int, cfg: Any) -> None:
        try:
            from datasets import Dataset
            from trl import GRPOConfig, GRPOTrainer
        except ImportError as exc:
            from legorl.errors import ConfigError

            raise ConfigError(
                "bench trainer: TRL is not installed (pip install 'legorl[bench]'), or pass --no-trl"
            ) from exc
        n = len(samples)
        prompt = torch.tensor([s.token_ids[:prompt_tokens] for s in samples], dtype=torch.long)
        completion = torch.tensor([s.token_ids[prompt_tokens:] for s in samples], dtype=torch.long)
        self.inputs = {
            "prompt_ids": prompt,
            "prompt_mask": torch.ones_like(prompt),
            "completion_ids": completion,
            "completion_mask": torch.ones_like(completion),
            "advantages": torch.tensor([float(s.advantage) for s in samples], dtype=torch.float32),
        }
        self._tmp = tempfile.TemporaryDirectory(prefix="legorl-trl-")
        args = GRPOConfig(
            output_dir=self._tmp.name,
            per_device_train_batch_size=n,
            num_generations=n,
            importance_sampling_level="sequence",
            loss_type="grpo",  # sequence level: the mean over samples of each sample's clipped term
            beta=0.0,
            epsilon=cfg.eps_low,
            epsilon_high=cfg.eps_high,
            learning_rate=cfg.lr,
            weight_decay=0.0,
            max_grad_norm=cfg.grad_clip,
            max_completion_length=completion.shape[1],
            use_cpu=True,
            bf16=False,
            report_to=[],
            save_strategy="no",
            disable_tqdm=True,
        )
        peft_config = None
        if cfg.lora is not None:
            from peft import LoraConfig as PeftLoraConfig

            lora = cfg.lora
            peft_config = PeftLoraConfig(
                r=lora.rank, lora_alpha=lora.alpha, lora_dropout=lora.dropout, target_modules=lora.target_modules
            )
        with contextlib.redirect_stdout(io.StringIO()):
            self.trainer = GRPOTrainer(
                model=model,
                reward_funcs=_no_reward,
                args=args,
                train_dataset=Dataset.from_dict({"prompt": [""] * n}),
                processing_class=tokenizer,
                peft_config=peft_config,
            )
        self.trainer.create_optimizer_and_scheduler(num_training_steps=1_000)
        # what Trainer.train sets before its first training_step (no gradient accumulation here)
        self.trainer.current_gradient_accumulation_steps = 1
        assert self.trainer.model is not None and self.trainer.optimizer is not None
        self.model: torch.nn.Module = self.trainer.model
        self.optimizer: torch.optim.Optimizer = self.trainer.optimizer
        # what TRL's train() switches on (GRPOConfig's default too) when ours recomputes; the bench
        # calls TRL's parts, not train(), so it is switched on here
        self.recompute = cfg.gradient_checkpointing
        if self.recompute:
            hf_model: Any = self.model  # a transformers (or PEFT) model
            hf_model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        self.max_grad_norm = cfg.grad_clip

    def copy_adapters(self, source: torch.nn.Module) -> None:
        """Start from ``source``'s LoRA weights (PEFT draws lora_A at random): the same gradients."""
        ours = dict(source.named_parameters())
        with torch.no_grad():
            for name, p in self.model.named_parameters():
                if ".lora_" in name:
                    p.copy_(ours[name.removeprefix("base_model.model.")])

    def step(self) -> float:
        """One optimiser step; returns the gradient norm before clipping."""
        # transformers recomputes layers in train mode only; SmolLM2 has no dropout, so both modes
        # compute what ours does (TRL reads the mode only for logging)
        self.model.train(self.recompute)
        loss = self.trainer.compute_loss(self.model, self.inputs)
        self.trainer.accelerator.backward(loss)
        norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.max_grad_norm)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return float(norm)

    def close(self) -> None:
        self._tmp.cleanup()


def trainer_config(overrides: dict[str, Any] | None) -> Any:
    """The TrainerConfig of ``--set`` overrides; dotted keys set nested fields (``lora.rank``)."""
    from pydantic import ValidationError

    from legorl.config import TrainerConfig
    from legorl.errors import ConfigError

    nested: dict[str, Any] = {}
    for dotted, value in (overrides or {}).items():
        *parents, leaf = dotted.split(".")
        node = nested
        for part in parents:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ConfigError(f"bench trainer: --set {dotted}: {part} is not a section")
        node[leaf] = value
    try:
        return TrainerConfig.model_validate(nested)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        raise ConfigError(f"bench trainer: invalid --set: {problems}") from None


def measure_steps(
    model: str, samples: int, tokens: int, prompt_tokens: int, group_size: int, steps: int, cfg_json: str, threads: int
) -> dict[str, Any]:
    """Our trainer alone on the bench's batch (one warm-up, then ``steps`` timed steps): what the
    LoRA comparison runs in a fresh process per variant, so each peak RSS is that trainer's."""
    from legorl.config import TrainerConfig
    from legorl.models.registry import load_model
    from legorl.training.trainer import Trainer

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    m = load_model(model)
    data = make_samples(m, samples, tokens, prompt_tokens, group_size=group_size)
    trainer = Trainer(m, TrainerConfig.model_validate_json(cfg_json))
    trainer.step(data)
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        trainer.step(data)
        times.append(time.perf_counter() - t0)
    adapter = trainer.adapter()
    return {
        "allocator": allocator_in_use(),
        "median_s": statistics.median(times),
        "peak_rss_mb": round(_own_peak_rss_mb(), 1),
        "trainable_params": sum(p.numel() for p in trainer.trainable),
        "adapter_mb": round(adapter.nbytes / 2**20, 2) if adapter is not None else None,
    }


def _lora_comparison(
    progress: Any, cfg: Any, model: str, samples: int, tokens: int, prompt_tokens: int, group_size: int, steps: int
) -> dict[str, Any]:
    """LoRA against full fine-tuning of the same batch, each in a fresh (spawned) process."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    runs: dict[str, dict[str, Any]] = {}
    for name, variant in (("full", cfg.model_copy(update={"lora": None})), ("lora", cfg)):
        progress.print(f"LoRA comparison: {name} fine-tuning in a fresh process ({steps} timed steps)")
        with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
            args = (model, samples, tokens, prompt_tokens, group_size, steps, variant.model_dump_json())
            runs[name] = pool.submit(measure_steps, *args, torch.get_num_threads()).result()
    full, lora = runs["full"], runs["lora"]
    return {
        **cfg.lora.model_dump(),
        "lora_s": lora["median_s"],
        "full_s": full["median_s"],
        "time_ratio": lora["median_s"] / full["median_s"],
        "lora_peak_rss_mb": lora["peak_rss_mb"],
        "full_peak_rss_mb": full["peak_rss_mb"],
        "memory_ratio": lora["peak_rss_mb"] / full["peak_rss_mb"],
        "lora_trainable_params": lora["trainable_params"],
        "full_trainable_params": full["trainable_params"],
        "adapter_mb": lora["adapter_mb"],
        "allocator": lora["allocator"],
    }


def run_trainer_bench(
    model: str = "smollm2-135m",
    samples: int = 16,
    tokens: int = 94,
    prompt_tokens: int = 40,
    steps: int = 5,
    overrides: dict[str, Any] | None = None,
    compare_trl: bool = True,
    group_size: int = 1,
) -> dict[str, Any]:
    from legorl.errors import ConfigError
    from legorl.models.registry import load_model, load_tokenizer
    from legorl.training.trainer import Trainer

    if not 0 <= prompt_tokens < tokens:
        raise ConfigError(f"bench trainer: --tokens ({tokens}) must exceed the prompt's {prompt_tokens} tokens")
    from rich.console import Console

    progress = Console(stderr=True)  # stdout carries the JSON; big shapes take minutes per step
    torch.manual_seed(0)
    progress.print(f"bench trainer: loading {model}, {samples} samples x {tokens} tokens")
    m = load_model(model)
    data = make_samples(m, samples, tokens, prompt_tokens, group_size=group_size)
    cfg = trainer_config(overrides)
    trainer = Trainer(m, cfg)
    trl: TrlStep | None = None
    if compare_trl:
        logging.getLogger("trl").setLevel(logging.ERROR)
        trl = TrlStep(load_model(model), load_tokenizer(model), data, prompt_tokens, cfg)
        if cfg.lora is not None:
            trl.copy_adapters(trainer.model)
    # warm-up (allocator, optimizer state); on identical weights, so the gradients must agree
    progress.print("warm-up step" + (" (ours, then TRL's)" if trl else ""))
    first = trainer.step(data)
    trl_first_norm = trl.step() if trl else None
    times: list[float] = []
    trl_times: list[float] = []
    last: dict[str, Any] = {}
    for _ in range(steps):  # alternate, so machine noise falls on both
        t0 = time.perf_counter()
        last = trainer.step(data)
        times.append(time.perf_counter() - t0)
        if trl is not None:
            t0 = time.perf_counter()
            trl.step()
            trl_times.append(time.perf_counter() - t0)
        progress.print(
            f"timed step {len(times)}/{steps}: ours {times[-1]:.2f} s" + (f", TRL {trl_times[-1]:.2f} s" if trl else "")
        )
    result: dict[str, Any] = {
        "model": model,
        "samples": samples,
        "tokens": tokens,
        "sampled_tokens_per_sample": tokens - prompt_tokens,
        "group_size": group_size,
        "steps": steps,
        "ours_s": statistics.median(times),
        "ours_steps_s": [round(t, 3) for t in times],
        "threads": torch.get_num_threads(),
        "trainer": cfg.model_dump(),
        "last_step": {k: v for k, v in last.items() if k.startswith(("train/", "time/"))},
        "peak_rss_mb": round(_peak_rss_mb(), 1),  # both trainers' models are resident
        "allocator": allocator_in_use(),
        "lora": None,
    }
    if trl is not None and trl_first_norm is not None:
        import trl as trl_pkg

        ours_norm = float(first["train/grad_norm"])
        result.update(
            {
                "trl_s": statistics.median(trl_times),
                "trl_steps_s": [round(t, 3) for t in trl_times],
                "ratio": statistics.median(times) / statistics.median(trl_times),
                "trl_version": trl_pkg.__version__,
                "grad_norm_ours": ours_norm,
                "grad_norm_trl": trl_first_norm,
                "grad_norm_rel_diff": abs(ours_norm - trl_first_norm) / max(abs(trl_first_norm), 1e-12),
            }
        )
        trl.close()
    if cfg.lora is not None:
        del trainer, trl, m
        result["lora"] = _lora_comparison(progress, cfg, model, samples, tokens, prompt_tokens, group_size, steps)
    return result
