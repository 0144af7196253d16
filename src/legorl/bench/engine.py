"""Embedded-engine benchmark: generation throughput at 1 and N concurrent requests, prefill and
recompute throughput, peak RSS. ``run_engine_bench`` returns JSON-able figures."""

from __future__ import annotations

import asyncio
import platform
import resource
import statistics
import sys
import time
from typing import Any

import torch

__all__ = ["run_engine_bench"]

_PROMPT = (
    "You are a careful Python programmer. The function below should return the sum of its two "
    "arguments but returns their difference. Explain the bug, then write the corrected file.\n\n"
    "def add(a, b):\n    return a - b\n"
)


def _peak_rss_mb() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return r / (1024 * 1024) if sys.platform == "darwin" else r / 1024  # bytes on macOS, KiB on Linux


def run_engine_bench(
    model: str = "smollm2-135m",
    max_tokens: int = 64,
    concurrency: int = 8,
    repeats: int = 3,
    prefill_tokens: int = 512,
    device: str = "cpu",
    engine: Any = None,
) -> dict[str, Any]:
    """Measure the embedded engine. Pass ``engine`` to reuse a loaded ``EmbeddedEngine`` (its
    tokenizer is used for the prompt); otherwise one is loaded (prefix cache off, eos ignored so
    every request generates exactly ``max_tokens`` tokens)."""
    from legorl.engines.base import SamplingParams
    from legorl.engines.embedded import EmbeddedEngine
    from legorl.training.logprobs import compute_token_logprobs

    own = engine is None
    t0 = time.perf_counter()
    if own:
        engine = EmbeddedEngine.from_pretrained(
            model, device=device, max_batch_size=max(16, concurrency), prefix_cache_tokens=0, eos_token_ids=()
        )
    load_s = time.perf_counter() - t0
    tok = engine.tokenizer
    prompt = list(tok(_PROMPT)["input_ids"]) if tok is not None else list(range(10, 60))
    vocab = engine.vocab_size

    async def gen_round(n: int, seed0: int) -> tuple[int, float]:
        t = time.perf_counter()
        rs = await asyncio.gather(
            *[engine.generate(prompt, SamplingParams(max_tokens=max_tokens, seed=seed0 + i)) for i in range(n)]
        )
        return sum(len(r.token_ids) for r in rs), time.perf_counter() - t

    async def prefill_round(seed: int) -> float:
        g = torch.Generator().manual_seed(seed)
        ids = torch.randint(10, vocab, (prefill_tokens,), generator=g).tolist()
        r = await engine.generate(ids, SamplingParams(max_tokens=1, seed=seed))
        return prefill_tokens / r.timings["ttft_s"]

    async def main() -> dict[str, Any]:
        await gen_round(1, 10_000)  # warm-up
        single, multi = [], []
        for k in range(repeats):
            n, dt = await gen_round(1, 100 * k)
            single.append(n / dt)
            n, dt = await gen_round(concurrency, 100 * k + 1)
            multi.append(n / dt)
        engine.clear_prefix_cache()
        prefill = [await prefill_round(7 + k) for k in range(repeats)]
        return {"single": single, "multi": multi, "prefill": prefill}

    res = asyncio.run(main())

    # recompute: trainer-side logprobs of concurrency samples of prompt + max_tokens tokens
    g = torch.Generator().manual_seed(0)
    seqs = [prompt + torch.randint(10, vocab, (max_tokens,), generator=g).tolist() for _ in range(concurrency)]
    rec = []
    for _ in range(repeats):
        t = time.perf_counter()
        with torch.no_grad():
            for s in seqs:
                compute_token_logprobs(engine.model, s)
        rec.append(sum(len(s) for s in seqs) / (time.perf_counter() - t))

    if own:
        engine.shutdown()
    single = statistics.median(res["single"])
    multi = statistics.median(res["multi"])
    return {
        "model": model if own else engine.model_name,
        "device": str(device),
        "dtype": str(engine.dtype).replace("torch.", ""),
        "torch_threads": torch.get_num_threads(),
        "platform": platform.platform(),
        "max_tokens": max_tokens,
        "prompt_tokens": len(prompt),
        "concurrency": concurrency,
        "repeats": repeats,
        "load_s": round(load_s, 3),
        "gen_tokens_per_s_1": round(single, 2),
        f"gen_tokens_per_s_{concurrency}": round(multi, 2),
        "gen_tokens_per_s_concurrent": round(multi, 2),
        "batching_speedup": round(multi / single, 2) if single else None,
        "prefill_tokens": prefill_tokens,
        "prefill_tokens_per_s": round(statistics.median(res["prefill"]), 1),
        "recompute_tokens_per_s": round(statistics.median(rec), 1),
        "peak_rss_mb": round(_peak_rss_mb(), 1),
    }
