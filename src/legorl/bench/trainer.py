"""Trainer benchmark: wall time of one GSPO step (``legorl bench trainer``).

The workload of the issue: ``samples`` sequences of ``tokens`` tokens each (a prompt of
``prompt_tokens`` context tokens, the rest sampled and loss-masked), advantages ±1, on the embedded
model (SmolLM2-135M by default) in fp32 on CPU. Token ids are drawn from a seeded generator; the
"rollout" logprobs are the model's own (one no-grad pass at setup), so the TIS weights are 1 as on
a faithful engine. One untimed warm-up step, then ``steps`` timed ones; reported: the median
(``ours_s``), every step's time, peak RSS.
"""

from __future__ import annotations

import resource
import statistics
import sys
import time
from typing import Any

import torch

__all__ = ["make_samples", "run_trainer_bench"]


def _peak_rss_mb() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return r / (1024 * 1024) if sys.platform == "darwin" else r / 1024


def make_samples(model: Any, samples: int, tokens: int, prompt_tokens: int, seed: int = 0) -> list[Any]:
    """``samples`` Samples of ``tokens`` ids, the last ``tokens - prompt_tokens`` sampled, with the
    model's own logprobs as rollout logprobs and alternating advantages ±1."""
    from legorl.training.logprobs import compute_token_logprobs_batch
    from legorl.trajectory.records import Sample

    g = torch.Generator().manual_seed(seed)
    vocab = int(model.config.vocab_size)
    seqs = [torch.randint(0, vocab, (tokens,), generator=g).tolist() for _ in range(samples)]
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


def run_trainer_bench(
    model: str = "smollm2-135m",
    samples: int = 16,
    tokens: int = 94,
    prompt_tokens: int = 40,
    steps: int = 5,
    overrides: dict[str, Any] | None = None,
) -> dict[str, Any]:
    from legorl.config import TrainerConfig
    from legorl.errors import ConfigError
    from legorl.models.registry import load_model
    from legorl.training.trainer import Trainer

    if not 0 <= prompt_tokens < tokens:
        raise ConfigError(f"bench trainer: --tokens ({tokens}) must exceed the prompt's {prompt_tokens} tokens")
    torch.manual_seed(0)
    m = load_model(model)
    data = make_samples(m, samples, tokens, prompt_tokens)
    cfg = TrainerConfig(**(overrides or {}))
    trainer = Trainer(m, cfg)
    trainer.step(data)  # warm-up (allocator, optimizer state)
    times = []
    last: dict[str, Any] = {}
    for _ in range(steps):
        t0 = time.perf_counter()
        last = trainer.step(data)
        times.append(time.perf_counter() - t0)
    result: dict[str, Any] = {
        "model": model,
        "samples": samples,
        "tokens": tokens,
        "sampled_tokens_per_sample": tokens - prompt_tokens,
        "steps": steps,
        "ours_s": statistics.median(times),
        "ours_steps_s": [round(t, 3) for t in times],
        "threads": torch.get_num_threads(),
        "trainer": cfg.model_dump(),
        "last_step": {k: v for k, v in last.items() if k.startswith(("train/", "time/"))},
        "peak_rss_mb": round(_peak_rss_mb(), 1),
    }
    return result
