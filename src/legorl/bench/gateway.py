"""Gateway overhead benchmark with a zero-cost engine.

``run_gateway_bench`` starts the real gateway (FastAPI + uvicorn on 127.0.0.1, SmolLM2 renderer,
alignment, RunStore) in a *separate process* pinned to one core (``os.sched_setaffinity``) with
:class:`ZeroCostEngine` (returns ``output_tokens`` fixed token ids instantly), and drives it with
``httpx.AsyncClient`` from this process (pinned to the other cores when there are any).

Reported (all JSON-able):

* ``engine_in_process_us`` — p50 of awaiting ``engine.generate`` directly (the baseline);
* ``nonstream`` — client-observed latency p50/p99 per non-streaming ``/v1/chat/completions``
  request at 1 client, and the *added* latency (observed − in-process engine call). Each client
  runs multi-turn conversations (start, then extends of its own growing history), so alignment,
  rendering of the new suffix and the store write are all on the measured path;
* ``throughput`` — requests/s at 1 and ``concurrency`` concurrent clients (one session each);
* ``stream`` — when ``stream: true`` is served: time to first chunk, per-chunk gap p50/p99,
  added latency per chunk; else the error it answered;
* ``store_append_turn_ms`` — p50/p99 of ``RunStore.append_turn`` alone (fsync off and on).
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import Any

from legorl.engines.base import EngineHealth, FinishReason, GenerationResult, SamplingParams

__all__ = ["ZeroCostEngine", "run_gateway_bench"]


class ZeroCostEngine:
    """Engine protocol implementation that returns fixed token ids instantly (tests, benchmarks)."""

    def __init__(
        self,
        token_ids: list[int],
        *,
        stop_token_id: int | None = None,
        max_context: int = 1 << 20,
        model_name: str = "zero",
    ):
        self.token_ids = list(token_ids)
        self.stop_token_id = stop_token_id
        self.model_name = model_name
        self.max_context = max_context
        self.calls = 0

    @property
    def weight_version(self) -> int:
        return 0

    async def generate(self, prompt_token_ids: list[int], sampling: SamplingParams) -> GenerationResult:
        self.calls += 1
        ids = self.token_ids[: sampling.max_tokens]
        finish: FinishReason = "length" if len(ids) < len(self.token_ids) else "stop"
        if finish == "stop" and self.stop_token_id is not None and len(ids) < sampling.max_tokens:
            ids = ids + [self.stop_token_id]
        return GenerationResult(ids, [-0.5] * len(ids), finish, 0, len(prompt_token_ids))

    async def update_weights(self, state_dict, version=None) -> int:
        return 0

    def health(self) -> EngineHealth:
        return EngineHealth(True, self.model_name, 0, 0)

    async def close(self) -> None:
        pass


def zero_engine_for(tokenizer: Any, output_tokens: int) -> ZeroCostEngine:
    """A zero-cost engine whose ``output_tokens`` ids decode to plain text, then ``<|im_end|>``."""
    ids = tokenizer.encode("ok" + " ok" * (output_tokens + 4), add_special_tokens=False)[: max(0, output_tokens - 1)]
    stop = tokenizer.convert_tokens_to_ids("<|im_end|>")
    return ZeroCostEngine(ids, stop_token_id=stop)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


_SERVER = r"""
import asyncio, json, os, sys
cfg = json.loads(sys.argv[1])
if cfg["core"] is not None:
    os.sched_setaffinity(0, {cfg["core"]})
from legorl.bench.gateway import zero_engine_for
from legorl.config import EngineConfig
from legorl.gateway.renderer import load_smollm2_gguf_tokenizer
from legorl.loop.stack import open_gateway_stack
tok = load_smollm2_gguf_tokenizer()
async def main():
    async with open_gateway_stack(EngineConfig(), engine_instance=zero_engine_for(tok, cfg["output_tokens"]),
                                  tokenizer=tok, model_name="zero", run_dir=cfg["run_dir"], fsync=cfg["fsync"],
                                  port=cfg["port"], unix_socket=False, log_level="error") as stack:
        for i in range(cfg["sessions"]):
            stack.gateway.open_session(f"bench-{i}", token=f"tok-{i}")
        print("READY", flush=True)
        await asyncio.Event().wait()
asyncio.run(main())
"""


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else float("nan")


async def _client_run(
    base: str,
    token: str,
    n: int,
    conv_len: int,
    tag: str,
    lat: list[float],
    stream: bool = False,
    gaps: list[float] | None = None,
    ttfc: list[float] | None = None,
) -> None:
    import httpx

    async with httpx.AsyncClient(base_url=base, headers={"Authorization": f"Bearer {token}"}, timeout=60) as c:
        msgs: list[dict] = []
        conv = 0
        for i in range(n):
            if i % conv_len == 0:
                conv += 1
                msgs = [
                    {"role": "system", "content": "You are a coding agent."},
                    {"role": "user", "content": f"task {tag} {conv}"},
                ]
            body = {"model": "zero", "messages": msgs, "max_tokens": 64}
            headers = {"x-legorl-thread": f"{tag}-{conv}"}
            t0 = time.perf_counter()
            if stream:
                body["stream"] = True
                last = t0
                text = []
                async with c.stream("POST", "/chat/completions", json=body, headers=headers) as r:
                    r.raise_for_status()
                    first = True
                    async for line in r.aiter_lines():
                        if not line.startswith("data:"):
                            continue
                        now = time.perf_counter()
                        if first:
                            ttfc.append(now - t0)  # type: ignore[union-attr]
                            first = False
                        else:
                            gaps.append(now - last)  # type: ignore[union-attr]
                        last = now
                        data = line[5:].strip()
                        if data != "[DONE]":
                            ch = json.loads(data).get("choices") or [{}]
                            text.append((ch[0].get("delta") or {}).get("content") or "")
                lat.append(time.perf_counter() - t0)
                content = "".join(text)
            else:
                r = await c.post("/chat/completions", json=body, headers=headers)
                lat.append(time.perf_counter() - t0)
                r.raise_for_status()
                content = r.json()["choices"][0]["message"]["content"]
            msgs = msgs + [{"role": "assistant", "content": content}, {"role": "user", "content": f"next {i}"}]


async def _bench_async(base: str, requests: int, concurrency: int, conv_len: int) -> dict[str, Any]:
    import httpx

    out: dict[str, Any] = {}
    warm: list[float] = []
    await _client_run(base, "tok-0", 40, conv_len, "warm", warm)
    lat1: list[float] = []
    t0 = time.perf_counter()
    await _client_run(base, "tok-0", requests, conv_len, "c1", lat1)
    out["rps_1_client"] = requests / (time.perf_counter() - t0)
    out["lat1"] = lat1
    per = max(1, requests // concurrency)
    latn: list[float] = []
    t0 = time.perf_counter()
    await asyncio.gather(
        *[_client_run(base, f"tok-{k + 1}", per, conv_len, f"cN{k}", latn) for k in range(concurrency)]
    )
    out["rps_n_clients"] = per * concurrency / (time.perf_counter() - t0)
    out["latN"] = latn
    # streaming, if served
    async with httpx.AsyncClient(base_url=base, headers={"Authorization": "Bearer tok-0"}, timeout=60) as c:
        r = await c.post("/chat/completions", json={"messages": [{"role": "user", "content": "s"}], "stream": True})
        ctype = r.headers.get("content-type", "")
    if r.status_code == 200 and "text/event-stream" in ctype:
        lat: list[float] = []
        gaps: list[float] = []
        ttfc: list[float] = []
        await _client_run(base, "tok-0", max(20, requests // 4), conv_len, "st", lat, True, gaps, ttfc)
        out["stream"] = {"supported": True, "gaps": gaps, "ttfc": ttfc, "lat": lat}
    else:
        out["stream"] = {"supported": False, "status": r.status_code, "detail": r.text[:200]}
    return out


def _store_bench(n: int = 300) -> dict[str, Any]:
    from legorl.trajectory.records import AlignmentEvent, Turn
    from legorl.trajectory.store import RunStore

    res: dict[str, Any] = {}
    for fsync in (False, True):
        with tempfile.TemporaryDirectory() as d:
            st = RunStore(d, fsync=fsync)
            ds = []
            for i in range(n):
                t = Turn(
                    session_id="s",
                    thread_id="main",
                    turn_index=i,
                    dialect="openai.chat",
                    prompt_token_ids=list(range(2000)),
                    output_token_ids=list(range(64)),
                    output_logprobs=[-0.5] * 64,
                    sampling={},
                    weight_version=0,
                    finish_reason="stop",
                    alignment=AlignmentEvent(turn_index=i, kind="extend"),
                    request={"messages": [{"role": "user", "content": "x" * 4000}]},
                    response={"c": "y" * 300},
                )
                t0 = time.perf_counter()
                st.append_turn(t)
                ds.append(time.perf_counter() - t0)
            st.close(compact=False)
        res["fsync" if fsync else "no_fsync"] = {
            "p50": round(_pct(ds, 0.5) * 1e3, 3),
            "p99": round(_pct(ds, 0.99) * 1e3, 3),
        }
    return res


def run_gateway_bench(
    output_tokens: int = 16,
    requests: int = 400,
    concurrency: int = 32,
    conv_len: int = 8,
    fsync: bool = False,
    pin: bool = True,
    store_turns: int = 300,
) -> dict[str, Any]:
    """Measure the gateway's added latency and throughput (see the module doc); ``store_turns``: turns
    appended for the ``store_append_turn_ms`` figure (with and without fsync)."""
    from legorl.gateway.renderer import load_smollm2_gguf_tokenizer

    tok = load_smollm2_gguf_tokenizer()
    engine_ds = asyncio.run(_engine_latencies(zero_engine_for(tok, output_tokens)))
    cores = sorted(os.sched_getaffinity(0))
    pins = _Pinning(
        server_core=cores[-1] if pin else None,
        client_cores=set(cores[:-1]) if pin and len(cores) > 1 else None,
    )
    port = _free_port()
    cfg = {
        "core": pins.server_core,
        "output_tokens": output_tokens,
        "run_dir": tempfile.mkdtemp(prefix="legorl-gwbench-"),
        "fsync": fsync,
        "sessions": concurrency + 1,
        "port": port,
    }
    raw = _serve_and_drive(cfg, pins, f"http://127.0.0.1:{port}/v1", requests, concurrency, conv_len)
    eng_us = _pct(engine_ds, 0.5) * 1e6
    lat1 = raw["lat1"]
    result: dict[str, Any] = {
        "setup": {
            "server": "separate process, uvicorn, 127.0.0.1" + (f", pinned to core {pins.server_core}" if pin else ""),
            "client": "httpx.AsyncClient"
            + (f" on cores {sorted(pins.client_cores)}" if pins.client_cores else ", same cores"),
            "cpu_count": os.cpu_count(),
            "output_tokens": output_tokens,
            "requests": requests,
            "conversation_turns": conv_len,
            "store_fsync": fsync,
        },
        "engine_in_process_us": round(eng_us, 2),
        "nonstream": {
            "latency_ms_p50": round(_pct(lat1, 0.5) * 1e3, 3),
            "latency_ms_p99": round(_pct(lat1, 0.99) * 1e3, 3),
            "added_ms_p50": round(_pct(lat1, 0.5) * 1e3 - eng_us / 1e3, 3),
            "added_ms_p99": round(_pct(lat1, 0.99) * 1e3 - eng_us / 1e3, 3),
            f"latency_ms_p50_at_{concurrency}": round(_pct(raw["latN"], 0.5) * 1e3, 3),
            f"latency_ms_p99_at_{concurrency}": round(_pct(raw["latN"], 0.99) * 1e3, 3),
        },
        "throughput": {
            "rps_1_client": round(raw["rps_1_client"], 1),
            f"rps_{concurrency}_clients": round(raw["rps_n_clients"], 1),
        },
    }
    result["stream"] = _stream_figures(raw["stream"], lat1)
    result["store_append_turn_ms"] = _store_bench(store_turns)
    return result


@dataclass(frozen=True)
class _Pinning:
    """Cores for the server process and for this (client) process; None: not pinned."""

    server_core: int | None
    client_cores: set[int] | None


async def _engine_latencies(eng: ZeroCostEngine) -> list[float]:
    """Seconds of 2,000 direct ``generate`` calls: the in-process baseline."""
    sp = SamplingParams(max_tokens=64)
    ds = []
    for _ in range(2000):
        t0 = time.perf_counter()
        await eng.generate([1, 2, 3], sp)
        ds.append(time.perf_counter() - t0)
    return ds


def _serve_and_drive(
    cfg: dict[str, Any], pins: _Pinning, base: str, requests: int, concurrency: int, conv_len: int
) -> dict[str, Any]:
    """Start the gateway server process, drive it from this process (pinned to the client cores),
    stop it; the raw client timings."""
    env = dict(
        os.environ, PYTHONUNBUFFERED="1", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", TOKENIZERS_PARALLELISM="false"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", _SERVER, json.dumps(cfg)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    old_aff = os.sched_getaffinity(0)
    try:
        line = proc.stdout.readline()  # type: ignore[union-attr]
        if "READY" not in line:
            raise RuntimeError(f"bench server failed: {line} {proc.stderr.read()[-2000:]}")  # type: ignore[union-attr]
        if pins.client_cores:
            os.sched_setaffinity(0, pins.client_cores)
        return asyncio.run(_bench_async(base, requests, concurrency, conv_len))
    finally:
        os.sched_setaffinity(0, old_aff)
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()


def _stream_figures(st: dict[str, Any], lat1: list[float]) -> dict[str, Any]:
    """Streaming figures when the gateway streams; else what it answered."""
    if not st.get("supported"):
        return st
    chunks = max(1, round(len(st["gaps"]) / max(1, len(st["lat"]))) + 1)
    return {
        "supported": True,
        "chunks_per_response": chunks,
        "ttfc_ms_p50": round(_pct(st["ttfc"], 0.5) * 1e3, 3),
        "chunk_gap_ms_p50": round(_pct(st["gaps"], 0.5) * 1e3, 4),
        "chunk_gap_ms_p99": round(_pct(st["gaps"], 0.99) * 1e3, 4),
        "total_ms_p50": round(_pct(st["lat"], 0.5) * 1e3, 3),
        "added_ms_per_chunk": round((_pct(st["lat"], 0.5) - _pct(lat1, 0.5)) * 1e3 / chunks, 4),
    }
