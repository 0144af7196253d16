"""Shared test doubles and helpers for the dialect tests (live server on 127.0.0.1).

* :class:`FakeEngine` — no model: replies with scripted texts (tokenized), fake logprobs; can
  block (``gate``) to test disconnects; counts active requests like the real engine's health.
* :class:`ScriptedRealEngine` — wraps the real :class:`EmbeddedEngine`. While ``script`` holds
  texts, a call emits exactly ``encode(text) + [<|im_end|>]`` with logprobs from a plain full
  forward pass of the engine's own model (fp32, no KV cache: a different code path from
  ``compute_token_logprobs``), so tool calls are sampled deterministically *and* the
  recompute check is meaningful; when the script is empty it delegates to the real engine
  (real sampling, real logprobs).
"""

from __future__ import annotations

import asyncio
import collections
import json
import threading
from typing import Any

import httpx
import pytest

from legorl.config import EngineConfig
from legorl.engines.base import EngineHealth, GenerationResult
from legorl.engines.scripted import ScriptedEngine
from legorl.gateway.app import Gateway
from legorl.gateway.renderer import ChatTemplateRenderer, format_tool_call, load_smollm2_gguf_tokenizer
from legorl.gateway.sessions import SessionRegistry
from legorl.loop.stack import GatewayStack, open_gateway_stack
from legorl.trajectory.store import RunStore

IM_END = 2

TOOLS_OPENAI = [
    {
        "type": "function",
        "function": {
            "name": "bash",
            "description": "Run a shell command.",
            "parameters": {
                "type": "object",
                "properties": {"cmd": {"type": "string"}, "timeout": {"type": "integer"}},
                "required": ["cmd"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "write",
            "description": "Write a file.",
            "parameters": {
                "type": "object",
                "properties": {"path": {"type": "string"}, "text": {"type": "string"}},
                "required": ["path", "text"],
            },
        },
    },
]
TOOLS_ANTHROPIC = [
    {
        "name": t["function"]["name"],
        "description": t["function"]["description"],
        "input_schema": t["function"]["parameters"],
    }
    for t in TOOLS_OPENAI
]
TOOLS_RESPONSES = [{"type": "function", **t["function"]} for t in TOOLS_OPENAI]

# Four tool calls as the model "samples" them, each spelled differently from the renderer's
# canonical format (compact JSON, keys reordered, no newlines around the block, ...).
SAMPLED_CALLS = [
    '<tool_call>\n{"name":"bash","arguments":{"cmd":"ls -la","timeout":5}}\n</tool_call>',
    '<tool_call>\n{"arguments": {"text": "x = 1\\n", "path": "a.py"}, "name": "write"}\n</tool_call>',
    'Let me check.\n<tool_call>\n{"name": "bash",  "arguments": {"timeout": 3, "cmd": "cat a.py"}}\n</tool_call>',
    '<tool_call>{"name": "bash", "arguments": {"cmd": "python a.py"}}</tool_call>',
]


def respell(args: dict, k: int) -> str:
    """How a client might re-serialize tool-call arguments (differently from what was sampled)."""
    items = list(args.items())
    if k % 3 == 0:
        return json.dumps(dict(reversed(items)), separators=(",", ":"))
    if k % 3 == 1:
        return json.dumps(dict(sorted(items)), indent=2)
    return json.dumps(dict(reversed(items)))


class FakeEngine:
    def __init__(self, tokenizer, replies=None, max_context: int = 512):
        self.tok = tokenizer
        self.replies = list(replies or [])
        self.model_name = "fake"
        self.max_context = max_context
        self.prompts: list[list[int]] = []
        self.gate: asyncio.Event | None = None  # when set, generate() waits for it
        self.active = 0
        self.cancelled = 0

    @property
    def weight_version(self) -> int:
        return 1

    async def generate(self, prompt_token_ids, sampling):
        self.prompts.append(list(prompt_token_ids))
        self.active += 1
        try:
            if self.gate is not None:
                await self.gate.wait()
            reply = self.replies.pop(0) if self.replies else "ok"
            if isinstance(reply, BaseException):
                raise reply
            ids = self.tok.encode(reply, add_special_tokens=False)
            if len(ids) >= sampling.max_tokens:
                ids, finish = ids[: sampling.max_tokens], "length"
            else:
                ids, finish = ids + [IM_END], "stop"
            return GenerationResult(ids, [-0.5] * len(ids), finish, 1, len(prompt_token_ids), cached_prompt_tokens=3)
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        finally:
            self.active -= 1

    async def update_weights(self, state_dict, version=None):
        return 1

    def health(self):
        return EngineHealth(True, "fake", 1, self.active)

    async def close(self):
        pass


class ScriptedRealEngine:
    def __init__(self, real):
        self.real = real
        self.model_name = real.model_name
        self.max_context = real.max_context
        self.script: list[str] = []
        self.scripted_calls = 0

    @property
    def weight_version(self) -> int:
        return self.real.weight_version

    def _forward_logprobs(self, prompt: list[int], out: list[int]) -> list[float]:
        import torch

        ids = torch.tensor([prompt + out], dtype=torch.long)
        with torch.no_grad():
            logits = self.real.model(input_ids=ids, use_cache=False).logits[0].float()
        lp = torch.log_softmax(logits, dim=-1)
        n = len(prompt)
        return [float(lp[n - 1 + j, t]) for j, t in enumerate(out)]

    async def generate(self, prompt_token_ids, sampling):
        if not self.script:
            return await self.real.generate(prompt_token_ids, sampling)
        text = self.script.pop(0)
        out = self.real.tokenizer.encode(text, add_special_tokens=False) + [IM_END]
        lps = await asyncio.to_thread(self._forward_logprobs, list(prompt_token_ids), out)
        self.scripted_calls += 1
        return GenerationResult(out, lps, "stop", self.weight_version, len(prompt_token_ids))

    async def update_weights(self, state_dict, version=None):
        return await self.real.update_weights(state_dict, version)

    def health(self):
        return self.real.health()

    async def close(self):
        pass


class LiveServer:
    """A gateway stack served on 127.0.0.1 (no Unix socket), built like a run's
    (:func:`legorl.loop.stack.open_gateway_stack`) around a test engine, on its own event loop in a
    background thread. ``.srv`` is the GatewayServer, ``.gw`` the Gateway."""

    def __init__(self, engine, tokenizer, run_dir):
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self._cm = open_gateway_stack(
            EngineConfig(), engine_instance=engine, tokenizer=tokenizer, run_dir=run_dir, unix_socket=False
        )
        try:
            self.stack: GatewayStack = asyncio.run_coroutine_threadsafe(self._cm.__aenter__(), self.loop).result(30)
        except BaseException:
            self._stop_loop()
            raise
        self.gw, self.srv = self.stack.gateway, self.stack.server

    def call(self, fn):
        """Run ``fn()`` on the server's loop (e.g. to set an asyncio.Event)."""
        return self.loop.call_soon_threadsafe(fn)

    def _stop_loop(self):
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)

    def close(self):
        try:
            asyncio.run_coroutine_threadsafe(self._cm.__aexit__(None, None, None), self.loop).result(30)
        finally:
            self._stop_loop()


PATHS = {
    "chat": "/v1/chat/completions",
    "anthropic": "/v1/messages",
    "responses": "/v1/responses",
    "gemini": "/v1beta/models/m:generateContent",
}
GEMINI_STREAM_PATH = "/v1beta/models/m:streamGenerateContent?alt=sse"
REPLIES = ["Sure.", format_tool_call("bash", {"cmd": "ls -la"}), "odd \u2028 text \x00 here", ""]


class InProcessGateway:
    """A real gateway (dialects, SmolLM2 renderer, RunStore in ``run_dir``) served in process (ASGI) on
    one event loop, in front of a :class:`ScriptedEngine` cycling through :data:`REPLIES` (for tests
    where the engine is not what is tested). ``seen``: counters a test may keep per dialect."""

    def __init__(self, tok: Any, run_dir: Any, *, strict: bool = True) -> None:
        n = {"i": 0}

        def policy(_prompt: str) -> str:
            n["i"] += 1
            return REPLIES[n["i"] % len(REPLIES)]

        self.renderer = ChatTemplateRenderer(tok)
        self.store = RunStore(run_dir)
        self.gw = Gateway(
            ScriptedEngine(tok, policy, max_context=4096),
            self.renderer,
            SessionRegistry(),
            self.store,
            "m",
            default_max_tokens=16,
            strict=strict,
        )
        self.loop = asyncio.new_event_loop()
        self.http = httpx.AsyncClient(transport=httpx.ASGITransport(app=self.gw.app), base_url="http://gw", timeout=30)
        self.n = 0
        self.seen: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)

    def post(self, dialect: str, token: str, body: dict[str, Any]) -> httpx.Response:
        # json.dumps (ensure_ascii) writes lone surrogates as \\udxxx escapes: valid JSON text, as a
        # JavaScript client's JSON.stringify sends them
        path, headers = PATHS[dialect], {"Authorization": f"Bearer {token}", "content-type": "application/json"}
        if dialect == "gemini":  # the method is in the path, the key in x-goog-api-key; "stream" is not sent
            body = dict(body)
            path = GEMINI_STREAM_PATH if body.pop("stream", False) is True else path
            headers = {"x-goog-api-key": token, "content-type": "application/json"}
        data = json.dumps(body).encode()
        return self.loop.run_until_complete(self.http.post(path, content=data, headers=headers))

    def close(self) -> None:
        self.loop.run_until_complete(self.http.aclose())
        self.loop.close()
        self.store.close(compact=False)


@pytest.fixture(scope="session")
def smol_tok():
    # one load per run (reading the GGUF takes 10-30 s); nothing mutates the tokenizer
    return load_smollm2_gguf_tokenizer()


@pytest.fixture
def fake(smol_tok, tmp_path):
    eng = FakeEngine(smol_tok)
    live = LiveServer(eng, smol_tok, tmp_path / "run")
    yield live.gw, eng, live
    live.close()


@pytest.fixture(scope="module")
def real_gw(tmp_path_factory):
    from legorl.engines.embedded import EmbeddedEngine

    real = EmbeddedEngine.from_pretrained("smollm2-135m")
    eng = ScriptedRealEngine(real)  # its close() leaves the real engine running: shut down below
    d = tmp_path_factory.mktemp("real")
    live = LiveServer(eng, real.tokenizer, d / "run")
    yield live.gw, eng, live
    live.close()
    real.shutdown()


def pearson(a, b) -> float:
    import math

    n = len(a)
    ma, mb = sum(a) / n, sum(b) / n
    cov = sum((x - ma) * (y - mb) for x, y in zip(a, b))
    va = math.sqrt(sum((x - ma) ** 2 for x in a))
    vb = math.sqrt(sum((y - mb) ** 2 for y in b))
    return cov / (va * vb)


def check_samples_exact(gw, token, rid, expect_samples: int = 1):
    """The built Samples hold 100% of the sampled ids in order; recomputed logprobs (fp32, the
    engine's model) correlate ≥ 0.9999 with the recorded ones at loss-mask positions."""
    import torch

    from legorl.training.logprobs import compute_token_logprobs
    from legorl.trajectory.builder import build_samples

    turns = [t for t in gw.session_turns(token) if not t.failed]
    samples = build_samples(turns, rid)
    assert len(samples) == expect_samples
    model = gw.engine.real.model
    rec, rcp = [], []
    total = 0
    for s in samples:
        seg_turns = [t for t in turns if t.turn_index in s.turn_indices]
        sampled = [tid for t in seg_turns for tid in t.output_token_ids]
        assert [tid for m, tid in zip(s.loss_mask, s.token_ids) if m] == sampled
        total += len(sampled)
        with torch.no_grad():
            lp = compute_token_logprobs(model, s.token_ids).tolist()
        rec += [x for m, x in zip(s.loss_mask, s.rollout_logprobs) if m]
        rcp += [x for m, x in zip(s.loss_mask, lp) if m]
    assert total == sum(len(t.output_token_ids) for t in turns)  # 100% of sampled ids
    r = pearson(rec, rcp)
    mad = sum(abs(x - y) for x, y in zip(rec, rcp)) / len(rec)
    print(f"[{rid}] samples={len(samples)} sampled_tokens={total} pearson={r:.6f} mean|dlogp|={mad:.5f}")
    assert r >= 0.9999
    return samples, r
