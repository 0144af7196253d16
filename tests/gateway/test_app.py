"""Gateway over HTTP, driven by the official openai SDK against a live server.

Fast tests use a scripted engine (predetermined token ids, fake logprobs) to exercise protocol
plumbing and failure paths; ``slow`` tests use the real EmbeddedEngine (SmolLM2-135M).
"""

from __future__ import annotations

import asyncio
import threading
import time

import httpx
import openai
import pytest

from legorl.engines.base import EngineHealth, GenerationResult, SamplingParams
from legorl.errors import EngineError, EngineOverloadedError
from legorl.gateway.app import Gateway
from legorl.gateway.renderer import (
    ChatTemplateRenderer,
    format_tool_call,
    load_smollm2_gguf_tokenizer,
)
from legorl.gateway.server import GatewayServer
from legorl.gateway.sessions import SessionRegistry
from legorl.trajectory.builder import build_samples
from legorl.trajectory.store import RunStore

IM_END = 2
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "bash",
            "description": "run",
            "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}},
        },
    }
]


class ScriptedEngine:
    """Engine protocol test double: replies with scripted texts (tokenized) and fake logprobs."""

    def __init__(self, tokenizer, replies: list[str | BaseException] | None = None, max_context: int = 8192):
        self.tok = tokenizer
        self.replies = list(replies or [])
        self.model_name = "scripted"
        self.max_context = max_context
        self.prompts: list[list[int]] = []
        self.samplings: list[SamplingParams] = []

    @property
    def weight_version(self) -> int:
        return 3

    async def generate(self, prompt_token_ids, sampling):
        self.prompts.append(list(prompt_token_ids))
        self.samplings.append(sampling)
        reply = self.replies.pop(0) if self.replies else "ok"
        if isinstance(reply, BaseException):
            raise reply
        ids = self.tok.encode(reply, add_special_tokens=False)
        finish = "stop"
        if len(ids) >= sampling.max_tokens:
            ids, finish = ids[: sampling.max_tokens], "length"
        else:
            ids = ids + [IM_END]
        return GenerationResult(ids, [-1.0] * len(ids), finish, 3, len(prompt_token_ids))

    async def update_weights(self, state_dict, version=None):
        return 3

    def health(self):
        return EngineHealth(True, "scripted", 3, 0)

    async def close(self):
        pass


class LiveServer:
    """A GatewayServer running on its own event loop in a background thread."""

    def __init__(self, gw: Gateway, uds: str | None = None):
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.srv = GatewayServer(gw, port=0, uds=uds)
        asyncio.run_coroutine_threadsafe(self.srv.start(), self.loop).result(30)

    def close(self):
        asyncio.run_coroutine_threadsafe(self.srv.stop(), self.loop).result(30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


@pytest.fixture(scope="module")
def tok():
    return load_smollm2_gguf_tokenizer()


@pytest.fixture
def scripted(tok, tmp_path):
    eng = ScriptedEngine(tok, max_context=512)
    store = RunStore(tmp_path / "run")
    gw = Gateway(eng, ChatTemplateRenderer(tok), SessionRegistry(), store, "smollm2-135m")
    live = LiveServer(gw, uds=str(tmp_path / "gw.sock"))
    yield gw, eng, live.srv, store
    live.close()


def client(srv, token, **kw):
    return openai.OpenAI(base_url=srv.base_url, api_key=token, max_retries=0, **kw)


def raw(srv, token, body, headers=None):
    h = {"Authorization": f"Bearer {token}", "Content-Type": "application/json", **(headers or {})}
    return httpx.post(srv.base_url + "/chat/completions", content=body, headers=h, timeout=30)


# ----------------------------------------------------------------------------- fast (scripted)


def test_completion_shape_usage_and_recording(scripted):
    gw, eng, srv, store = scripted
    token = gw.open_session("r-1")
    c = client(srv, token)
    r1 = c.chat.completions.create(
        model="whatever",
        messages=[{"role": "user", "content": "hi"}],
        max_tokens=50,
        temperature=0.7,
        top_p=0.9,
        seed=5,
        extra_body={"reasoning_effort": "low", "prompt_cache_key": "k"},
    )
    r2 = c.chat.completions.create(
        model="whatever", messages=[{"role": "user", "content": "hi"}], max_completion_tokens=7
    )
    assert r1.id.startswith("chatcmpl-") and r1.id != r2.id
    assert r1.object == "chat.completion" and r1.model == "smollm2-135m"
    assert r1.choices[0].message.content == "ok" and r1.choices[0].finish_reason == "stop"
    assert r1.usage.prompt_tokens == len(eng.prompts[0]) and r1.usage.completion_tokens == 2
    assert r1.usage.total_tokens == r1.usage.prompt_tokens + 2
    s = eng.samplings[0]
    assert (s.max_tokens, s.temperature, s.top_p, s.seed, s.stop_token_ids) == (
        50,
        0.7,
        0.9,
        5,
        gw.renderer.stop_token_ids,
    )
    assert eng.samplings[1].max_tokens == 7
    # recorded (and fsync'd) before the response came back
    turns = list(store.iter_turns("r-1"))
    assert [t.turn_index for t in turns] == [0, 1]
    assert turns[0].response["id"] == r1.id and turns[0].request["reasoning_effort"] == "low"
    assert [t.alignment.kind for t in gw.session_turns(token)] == ["start", "fork"]
    assert turns[0].weight_version == 3 and r1.model_extra["x_legorl"]["alignment"] == "start"


def test_tool_calls_roundtrip(scripted):
    gw, eng, srv, _ = scripted
    eng.replies = [
        "Sure.\n" + format_tool_call("bash", {"cmd": "ls"}) + " <tool_call>{broken</tool_call>",
        "All done.",
    ]
    token = gw.open_session("r-tools")
    c = client(srv, token)
    msgs = [{"role": "user", "content": "list files"}]
    r = c.chat.completions.create(model="m", messages=msgs, tools=TOOLS)
    ch = r.choices[0]
    assert ch.finish_reason == "tool_calls"
    assert ch.message.tool_calls[0].function.name == "bash"
    assert ch.message.tool_calls[0].function.arguments == '{"cmd": "ls"}'
    assert ch.message.tool_calls[0].id.startswith("call_")
    assert r.model_extra["x_legorl"]["unparsed_tool_calls"] == 1
    assert "<tool_call>{broken</tool_call>" in ch.message.content
    msgs += [
        ch.message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": ch.message.tool_calls[0].id, "content": "a.py b.py"},
    ]
    r2 = c.chat.completions.create(model="m", messages=msgs, tools=TOOLS)
    assert r2.choices[0].message.content == "All done."
    turns = gw.session_turns(token)
    # the sampled text ("Sure.\n<tool_call>..." + a broken block) is not the canonical rendering of
    # the returned message: realign (held tokens kept) since realign landed
    assert [t.alignment.kind for t in turns] in (["start", "extend"], ["start", "realign"])
    assert gw.renderer.decode(eng.prompts[1]).count("<tool_response>\na.py b.py\n</tool_response>") == 1
    assert (
        turns[1].prompt_token_ids[: turns[1].reused_prefix_len] == turns[0].prompt_token_ids + turns[0].output_token_ids
    )


def test_stop_strings_cut_output(scripted):
    gw, eng, srv, _ = scripted
    eng.replies = ["alpha beta END gamma delta"]
    token = gw.open_session("r-stop")
    r = client(srv, token).chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}], stop=["END"])
    assert r.choices[0].message.content == "alpha beta" and r.choices[0].finish_reason == "stop"
    t = gw.session_turns(token)[0]
    assert "END" in gw.renderer.decode(t.output_token_ids) and "gamma" not in gw.renderer.decode(t.output_token_ids)
    assert r.usage.completion_tokens == len(t.output_token_ids)


def _err(resp):
    body = resp.json()
    assert set(body["error"]) == {"message", "type", "param", "code"}
    return body["error"]


def test_error_shapes(scripted):
    gw, eng, srv, _ = scripted
    token = gw.open_session("r-err")
    r = raw(srv, token, b"{not json")
    assert r.status_code == 400 and _err(r)["type"] == "invalid_request_error"
    r = raw(srv, token, b'{"model": "m"}')
    e = _err(r)
    assert r.status_code == 400 and e["param"] == "messages" and "messages" in e["message"]
    r = raw(srv, token, b'{"model": "m", "messages": "hi"}')
    assert r.status_code == 400 and _err(r)["param"] == "messages"
    r = raw(srv, token, b'{"messages": [{"role": "user", "content": "x"}], "max_tokens": "lots"}')
    assert r.status_code == 400 and _err(r)["param"] == "max_tokens"
    r = raw(srv, token, b'{"messages": [{"role": "user", "content": 5}]}')
    assert r.status_code == 400 and _err(r)["param"].startswith("messages[0].content")
    r = raw(srv, token, b'{"messages": [{"role": "user", "content": "x"}], "n": 2}')
    assert r.status_code == 400 and _err(r)["param"] == "n"
    r = raw(srv, "nope", b'{"messages": [{"role": "user", "content": "x"}]}')
    assert r.status_code == 401 and _err(r)["code"] == "invalid_api_key"
    r = httpx.post(srv.base_url + "/chat/completions", json={"messages": []}, timeout=10)
    assert r.status_code == 401
    r = raw(srv, token, b'{"messages": [{"role": "user", "content": "' + b"word " * 600 + b'"}]}')
    assert r.status_code == 400 and _err(r)["code"] == "context_length_exceeded"
    assert eng.prompts == []  # nothing reached the engine
    # SDK raises the typed errors
    with pytest.raises(openai.AuthenticationError):
        client(srv, "bad").chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
    with pytest.raises(openai.BadRequestError) as ei:
        client(srv, token).chat.completions.create(model="m", messages=[{"role": "user", "content": "word " * 600}])
    assert ei.value.code == "context_length_exceeded"
    turns = gw.session_turns(token)
    assert all(t.failed for t in turns) and len(turns) == 8  # 401s belong to no session
    assert turns[-1].error and len(turns[-1].prompt_token_ids) > 512


def test_engine_failures_recorded(scripted):
    gw, eng, srv, store = scripted
    eng.replies = [RuntimeError("boom"), EngineOverloadedError("shutting down"), EngineError("bad"), "fine"]
    token = gw.open_session("r-fail")
    msgs = [{"role": "user", "content": "x"}]
    assert raw(srv, token, httpx.Request("POST", "/", json={"messages": msgs}).content).status_code == 500
    r = raw(srv, token, httpx.Request("POST", "/", json={"messages": msgs}).content)
    assert r.status_code == 503 and _err(r)["type"] == "server_error"
    assert raw(srv, token, httpx.Request("POST", "/", json={"messages": msgs}).content).status_code == 500
    r = client(srv, token).chat.completions.create(model="m", messages=msgs)
    assert r.model_extra["x_legorl"]["alignment"] == "start"  # failed turns never became held state
    turns = list(store.iter_turns("r-fail"))
    assert [t.failed for t in turns] == [True, True, True, False]
    assert "boom" in turns[0].error and turns[0].prompt_token_ids
    assert len(build_samples(turns, "r-fail")) == 1


def test_threads_models_health_head_and_uds(scripted, tmp_path):
    gw, eng, srv, _ = scripted
    token = gw.open_session("r-misc")
    c = client(srv, token)
    c.chat.completions.create(model="m", messages=[{"role": "user", "content": "a"}])
    c.chat.completions.create(
        model="m", messages=[{"role": "user", "content": "b"}], extra_headers={"x-legorl-thread": "sub-1"}
    )
    c.chat.completions.create(
        model="m", messages=[{"role": "user", "content": "c"}], extra_headers={"x-session-id": "oc-2"}
    )
    assert [(t.thread_id, t.alignment.kind) for t in gw.session_turns(token)] == [
        ("main", "start"),
        ("sub-1", "start"),
        ("oc-2", "start"),
    ]
    assert [m.id for m in c.models.list()] == ["smollm2-135m"]
    assert httpx.head(srv.root_url + "/").status_code == 200
    h = httpx.get(srv.root_url + "/health").json()
    assert h["ok"] and h["weight_version"] == 3
    # x-api-key works too, and the Unix socket serves the same app
    uds_client = httpx.Client(transport=httpx.HTTPTransport(uds=str(srv.uds_path)))
    r = uds_client.post(
        "http://gateway/v1/chat/completions",
        json={"messages": [{"role": "user", "content": "d"}]},
        headers={"x-api-key": token},
    )
    assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"] == "ok"
    sdk = openai.OpenAI(
        base_url="http://gateway/v1",
        api_key=token,
        http_client=httpx.Client(transport=httpx.HTTPTransport(uds=str(srv.uds_path))),
        max_retries=0,
    )
    assert (
        sdk.chat.completions.create(model="m", messages=[{"role": "user", "content": "e"}]).choices[0].message.content
        == "ok"
    )
    closed = gw.close_session(token)
    assert len(closed) == 5
    with pytest.raises(openai.AuthenticationError):
        c.chat.completions.create(model="m", messages=[{"role": "user", "content": "a"}])


async def test_async_context_manager_in_running_loop(tok, tmp_path):
    gw = Gateway(ScriptedEngine(tok), ChatTemplateRenderer(tok), SessionRegistry(), None, "m")
    token = gw.open_session("r-async")
    async with GatewayServer(gw, port=0, uds=tmp_path / "s.sock") as srv:
        c = openai.AsyncOpenAI(base_url=srv.base_url, api_key=token, max_retries=0)
        rs = await asyncio.gather(
            *[
                c.chat.completions.create(
                    model="m",
                    messages=[{"role": "user", "content": str(i)}],
                    extra_headers={"x-legorl-thread": f"t{i}"},
                )
                for i in range(4)
            ]
        )
        assert all(r.choices[0].message.content == "ok" for r in rs)
        assert (tmp_path / "s.sock").exists()
    assert not (tmp_path / "s.sock").exists()


# ----------------------------------------------------------------------------- slow (real engine)


@pytest.fixture(scope="module")
def real(tmp_path_factory):
    from legorl.engines.embedded import EmbeddedEngine

    eng = EmbeddedEngine.from_pretrained("smollm2-135m")
    d = tmp_path_factory.mktemp("real")
    store = RunStore(d / "run")
    gw = Gateway(eng, ChatTemplateRenderer(eng.tokenizer), SessionRegistry(), store, "smollm2-135m")
    live = LiveServer(gw, uds=str(d / "gw.sock"))
    yield gw, live.srv, store
    live.close()
    eng.shutdown()


@pytest.mark.slow
def test_real_three_turn_conversation_is_token_exact(real):
    gw, srv, store = real
    token = gw.open_session("rollout-3turn")
    c = client(srv, token)
    msgs = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Name a fruit."}]
    for i, follow in enumerate(["Another one.", "And one more."]):
        r = c.chat.completions.create(model="smollm2-135m", messages=msgs, max_tokens=16, seed=100 + i)
        msgs += [{"role": "assistant", "content": r.choices[0].message.content}, {"role": "user", "content": follow}]
    r = c.chat.completions.create(model="smollm2-135m", messages=msgs, max_tokens=16, seed=7)
    turns = gw.session_turns(token)
    assert [t.alignment.kind for t in turns] == ["start", "extend", "extend"]
    assert [t.turn_index for t in store.iter_turns("rollout-3turn")] == [0, 1, 2]
    for a, b in zip(turns, turns[1:]):
        assert b.prompt_token_ids[: b.reused_prefix_len] == a.prompt_token_ids + a.output_token_ids
    assert r.usage.completion_tokens == len(turns[-1].output_token_ids)
    assert r.usage.prompt_tokens == len(turns[-1].prompt_token_ids)
    [s] = build_samples(turns, "rollout-3turn")
    sampled = [tid for t in turns for tid in t.output_token_ids]
    assert [tid for m, tid in zip(s.loss_mask, s.token_ids) if m] == sampled
    assert s.num_sampled == len(sampled)
    assert [lp for m, lp in zip(s.loss_mask, s.rollout_logprobs) if m] == [
        lp for t in turns for lp in t.output_logprobs
    ]
    assert all(lp == 0.0 for m, lp in zip(s.loss_mask, s.rollout_logprobs) if not m)
    assert all(lp <= 0.0 for lp in s.rollout_logprobs)
    assert s.token_ids == turns[-1].prompt_token_ids + turns[-1].output_token_ids


@pytest.mark.slow
def test_real_errors(real):
    gw, srv, _ = real
    token = gw.open_session("rollout-errors")
    assert raw(srv, token, b"{oops").status_code == 400
    e = _err(raw(srv, token, b'{"model": "x"}'))
    assert e["param"] == "messages"
    assert (
        _err(raw(srv, token, b'{"messages": [{"role": "user", "content": "x"}], "temperature": "hot"}'))["param"]
        == "temperature"
    )
    assert raw(srv, "not-a-token", b'{"messages": [{"role": "user", "content": "x"}]}').status_code == 401
    with pytest.raises(openai.BadRequestError) as ei:
        client(srv, token).chat.completions.create(
            model="m", messages=[{"role": "user", "content": "word " * 9000}], max_tokens=4
        )
    assert ei.value.status_code == 400 and ei.value.code == "context_length_exceeded"


@pytest.mark.slow
async def test_real_16_concurrent_sessions(real):
    gw, srv, store = real
    tokens = {f"conc-{i}": gw.open_session(f"conc-{i}") for i in range(16)}

    async def run(rid: str, token: str) -> list[str]:
        c = openai.AsyncOpenAI(base_url=srv.base_url, api_key=token, max_retries=0)
        msgs = [{"role": "user", "content": f"Session {rid}: say a number."}]
        ids = []
        for k in range(2):
            r = await c.chat.completions.create(model="m", messages=msgs, max_tokens=5, seed=k)
            ids.append(r.id)
            msgs += [
                {"role": "assistant", "content": r.choices[0].message.content},
                {"role": "user", "content": "More."},
            ]
        await c.close()
        return ids

    t0 = time.perf_counter()
    results = await asyncio.gather(*[run(rid, tok) for rid, tok in tokens.items()])
    elapsed = time.perf_counter() - t0
    for (rid, token), ids in zip(tokens.items(), results):
        turns = gw.session_turns(token)
        assert [t.response["id"] for t in turns] == ids
        assert all(rid in gw.renderer.decode(t.prompt_token_ids) for t in turns)
        assert [t.alignment.kind for t in turns] in (
            ["start", "extend"],
            ["start", "realign"],
        )  # realign: client trimmed the sampled text
        assert [t.session_id for t in store.iter_turns(rid)] == [rid, rid]
        assert len(build_samples(turns, rid)) == 1
    print(f"16 sessions x 2 turns in {elapsed:.1f}s")
