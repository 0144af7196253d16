"""True streaming: text reaches the client while the engine is still sampling, in every dialect,
and the recorded Turn is the one a call that does not stream records.

* :class:`LiveText` (what may be sent before the call ends) against the final parse, on SmolLM2's
  tokenizer, token by token;
* a gated engine (a test double for ordering: it samples the first tokens of a scripted reply,
  then waits until the test has seen streamed text) through the real gateway, with each official
  SDK; an engine failure after the first tokens is the dialect's in-stream error; a client that
  leaves mid-stream cancels the generation;
* the real embedded engine: the first text arrives before the Turn exists, and a streamed call
  records the same Turn as an unstreamed one with the same seed.
"""

from __future__ import annotations

import asyncio
import json
import random

import anthropic
import httpx
import openai
import pytest
from gw_helpers import IM_END, FakeEngine, LiveServer

from legorl.engines.base import GenerationResult
from legorl.errors import EngineError
from legorl.gateway.app import Gateway
from legorl.gateway.renderer import ChatTemplateRenderer, format_tool_call
from legorl.gateway.streaming import LiveText

REPLY = "Let me look at the files first, then I will fix the bug.\n" + format_tool_call("bash", {"cmd": "ls -la"})
PREFIX = "Let me look at the files first, then I will fix the bug."


class GatedEngine(FakeEngine):
    """Streams a scripted reply: ``before_gate`` tokens, then waits for ``gate`` (set by the test
    once it has seen streamed text; never set -> the call fails after ``gate_timeout_s``), then the
    rest, one token at a time. ``fail_after_gate``: raise instead of finishing."""

    streams_tokens = True

    def __init__(self, tok, reply: str = REPLY, before_gate: int = 14, gate_timeout_s: float = 30.0):
        super().__init__(tok, max_context=4096)
        self.reply = reply
        self.before_gate = before_gate
        self.gate_timeout_s = gate_timeout_s
        self.fail_after_gate: Exception | None = None
        self.gate_timed_out = 0

    async def generate(self, prompt_token_ids, sampling, *, on_tokens=None):
        ids = self.tok.encode(self.reply, add_special_tokens=False) + [IM_END]
        self.active += 1
        self.gate = asyncio.Event()
        try:
            for i, t in enumerate(ids):
                if i == self.before_gate:
                    try:
                        await asyncio.wait_for(self.gate.wait(), self.gate_timeout_s)
                    except TimeoutError:
                        self.gate_timed_out += 1
                        raise EngineError("nobody read the streamed text (the gate was never opened)") from None
                    if self.fail_after_gate is not None:
                        raise self.fail_after_gate
                if on_tokens is not None:
                    on_tokens([t])
                await asyncio.sleep(0)
            return GenerationResult(ids, [-0.25] * len(ids), "stop", 1, len(prompt_token_ids))
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        finally:
            self.active -= 1


@pytest.fixture
def gated(smol_tok, tmp_path):
    eng = GatedEngine(smol_tok)
    live = LiveServer(eng, smol_tok, tmp_path / "run")
    yield live.gw, eng, live
    live.close()


# --------------------------------------------------------------------------- LiveText


def final_content(renderer: ChatTemplateRenderer, ids: list[int], stop: list[str]) -> str:
    """What the gateway returns for these sampled ids (its own parse, stop strings included)."""
    result = GenerationResult(ids, [0.0] * len(ids), "stop", 0, 1)
    return Gateway._parse(_ParseOnly(renderer), result, stop)[3].content  # type: ignore[arg-type]


class _ParseOnly:
    def __init__(self, renderer):
        self.renderer = renderer


def test_live_text_only_sends_what_the_final_content_starts_with(smol_tok):
    renderer = ChatTemplateRenderer(smol_tok)
    rng = random.Random(7)
    words = ["fix", " the", " bug", "  ", "\n", "<tool", "_call", ">", "</tool_call>", "{", '"name"', ": ", "é", "日本",
             "🙂", " STOP", "ST", "OP", "  done", "\t", "x = 1", "<|im_end|>"]  # fmt: skip
    texts = [
        REPLY,
        "  leading and trailing  \n",
        "Answer: 42 STOP and then more",
        'partial marker <tool_ at the end <tool_call>{"name": "x", "arguments": {}}</tool_call> after',
        "emoji 🙂 and 日本語 text",
    ] + ["".join(rng.choice(words) for _ in range(rng.randint(1, 30))) for _ in range(200)]
    checked = 0
    for k, text in enumerate(texts):
        stop = ["STOP"] if k % 3 == 0 else []
        ids = smol_tok.encode(text, add_special_tokens=False) + ([IM_END] if k % 2 else [])
        final = final_content(renderer, ids, stop)
        live = LiveText(renderer, stop)
        sent = ""
        for t in ids:
            sent += live.feed([t])
            assert final.startswith(sent), (text, sent, final)
        checked += 1
        if not stop and "<" not in text:
            assert sent == final.rstrip("\ufffd"), (text, sent, final)  # nothing held back at the end
    assert checked == len(texts)


# --------------------------------------------------------------------------- ordering, per dialect


def open_gate_at_first_text(live, eng) -> None:
    assert eng.active == 1  # the engine is still generating: it waits for this very gate
    live.call(eng.gate.set)


def test_chat_text_streams_before_generation_ends(gated):
    gw, eng, live = gated
    token = gw.open_session("s-chat")
    client = openai.OpenAI(base_url=live.srv.base_url, api_key=token, max_retries=0)
    text, calls, first_text_at = "", {}, None
    chunks = client.chat.completions.create(
        model="m", messages=[{"role": "user", "content": "fix it"}], stream=True, seed=1
    )
    for n, chunk in enumerate(chunks):
        delta = chunk.choices[0].delta if chunk.choices else None
        if delta is not None and delta.content:
            if first_text_at is None:
                first_text_at = n
                assert gw.session_turns(token) == []  # the Turn is recorded when generation ends
                open_gate_at_first_text(live, eng)
            text += delta.content
        for call in (delta.tool_calls if delta is not None else None) or []:
            name, args = calls.get(call.index, ("", ""))
            calls[call.index] = (name + (call.function.name or ""), args + (call.function.arguments or ""))
    assert first_text_at is not None and eng.gate_timed_out == 0
    assert text == PREFIX
    assert list(calls) == [0] and calls[0][0] == "bash" and json.loads(calls[0][1]) == {"cmd": "ls -la"}
    (turn,) = gw.session_turns(token)
    assert not turn.failed and turn.response["choices"][0]["message"]["content"] == PREFIX
    assert turn.response["id"] == chunk.id  # the stream's id is the stored response's


def test_messages_text_streams_before_generation_ends(gated):
    gw, eng, live = gated
    token = gw.open_session("s-msg")
    client = anthropic.Anthropic(base_url=live.srv.root_url, api_key=token, max_retries=0)
    seen = 0
    with client.messages.stream(model="m", max_tokens=200, messages=[{"role": "user", "content": "fix it"}]) as s:
        for event in s:
            if event.type == "content_block_delta" and event.delta.type == "text_delta":
                if seen == 0:
                    assert gw.session_turns(token) == []
                    open_gate_at_first_text(live, eng)
                seen += 1
        final = s.get_final_message()
    assert seen >= 1 and eng.gate_timed_out == 0
    assert [b.type for b in final.content] == ["text", "tool_use"]
    assert final.content[0].text == PREFIX and final.content[1].input == {"cmd": "ls -la"}
    assert final.stop_reason == "tool_use"
    (turn,) = gw.session_turns(token)
    assert turn.response["id"] == final.id and turn.response["content"][0]["text"] == PREFIX


def test_responses_text_streams_before_generation_ends(gated):
    gw, eng, live = gated
    token = gw.open_session("s-resp")
    client = openai.OpenAI(base_url=live.srv.base_url, api_key=token, max_retries=0)
    seen = 0
    with client.responses.stream(model="m", input="fix it") as s:
        for event in s:
            if event.type == "response.output_text.delta":
                if seen == 0:
                    assert gw.session_turns(token) == []
                    open_gate_at_first_text(live, eng)
                seen += 1
        final = s.get_final_response()
    assert seen >= 1 and eng.gate_timed_out == 0
    assert final.output_text == PREFIX
    assert [o.type for o in final.output] == ["message", "function_call"]
    (turn,) = gw.session_turns(token)
    assert turn.response["id"] == final.id and turn.response["output"][0]["id"] == final.output[0].id


# --------------------------------------------------------------------------- failures mid-stream


def test_an_engine_failure_after_the_first_tokens_is_an_in_stream_error(gated):
    gw, eng, live = gated
    token = gw.open_session("s-fail")
    eng.fail_after_gate = EngineError("the engine died mid-generation")
    o = openai.OpenAI(base_url=live.srv.base_url, api_key=token, max_retries=0)
    with pytest.raises(openai.APIError, match="engine died"):
        for chunk in o.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}], stream=True):
            if chunk.choices and chunk.choices[0].delta.content:
                live.call(eng.gate.set)
    a = anthropic.Anthropic(base_url=live.srv.root_url, api_key=token, max_retries=0)
    with pytest.raises(anthropic.APIStatusError) as ei:
        with a.messages.stream(model="m", max_tokens=50, messages=[{"role": "user", "content": "x"}]) as s:
            for event in s:
                if event.type == "content_block_delta":
                    live.call(eng.gate.set)
    assert ei.value.body["error"]["type"] == "overloaded_error"  # Claude Code retries an overload
    events = []
    with httpx.stream(
        "POST",
        live.srv.base_url + "/responses",
        json={"model": "m", "input": "x", "stream": True},
        headers={"Authorization": f"Bearer {token}"},
        timeout=60,
    ) as r:
        assert r.status_code == 200
        for line in r.iter_lines():
            if line.startswith("event: "):
                events.append(line[7:])
                if events[-1] == "response.output_text.delta":
                    live.call(eng.gate.set)
    assert events[-2:] == ["error", "response.failed"]
    turns = gw.session_turns(token)
    assert len(turns) == 3 and all(t.failed and "engine died" in (t.error or "") for t in turns)
    assert eng.gate_timed_out == 0


def test_a_client_that_leaves_mid_stream_cancels_the_generation(gated):
    gw, eng, live = gated
    token = gw.open_session("s-leave")
    with httpx.stream(
        "POST",
        live.srv.base_url + "/chat/completions",
        json={"model": "m", "messages": [{"role": "user", "content": "x"}], "stream": True},
        headers={"Authorization": f"Bearer {token}"},
        timeout=60,
    ) as r:
        for line in r.iter_lines():
            if '"content":"Let' in line:
                break  # leave while the engine waits at the gate
    for _ in range(200):
        if eng.cancelled:
            break
        asyncio.run(asyncio.sleep(0.05))
    assert eng.cancelled == 1 and eng.gate_timed_out == 0
    (turn,) = gw.session_turns(token)
    assert turn.failed and turn.error == "client_disconnected" and turn.finish_reason == "cancelled"


# --------------------------------------------------------------------------- the real engine


@pytest.mark.slow
def test_embedded_engine_streams_and_records_the_unstreamed_turn(tmp_path):
    from legorl.engines.embedded import EmbeddedEngine

    # no prefix cache: the second call would reuse the first one's prompt KV, computed apart
    engine = EmbeddedEngine.from_pretrained("smollm2-135m", prefix_cache_tokens=0)
    live = LiveServer(engine, engine.tokenizer, tmp_path / "run")
    try:
        gw = live.gw
        body = {
            "model": "m",
            "messages": [{"role": "user", "content": "Write a short poem about the sea, in six lines."}],
            "max_tokens": 120,
            "temperature": 1.0,
            "seed": 1234,
        }
        plain = gw.open_session("plain")
        r = httpx.post(
            live.srv.base_url + "/chat/completions",
            json=body,
            headers={"Authorization": f"Bearer {plain}"},
            timeout=120,
        )
        assert r.status_code == 200
        streamed = gw.open_session("streamed")
        text, before_turn = "", 0
        with httpx.stream(
            "POST",
            live.srv.base_url + "/chat/completions",
            json={**body, "stream": True},
            headers={"Authorization": f"Bearer {streamed}"},
            timeout=120,
        ) as s:
            for line in s.iter_lines():
                if not line.startswith("data: {"):
                    continue
                delta = (json.loads(line[6:]).get("choices") or [{}])[0].get("delta") or {}
                if delta.get("content"):
                    text += delta["content"]
                    before_turn += not gw.session_turns(streamed)
        (a,) = gw.session_turns(plain)
        (b,) = gw.session_turns(streamed)
        assert len(b.output_token_ids) >= 40  # a long enough reply for the ordering to mean something
        assert before_turn >= 1  # text reached the client while the engine was still sampling
        assert b.output_token_ids == a.output_token_ids and b.output_logprobs == a.output_logprobs
        assert (b.prompt_token_ids, b.finish_reason, b.weight_version) == (
            a.prompt_token_ids,
            a.finish_reason,
            a.weight_version,
        )
        assert text == a.response["choices"][0]["message"]["content"] == b.response["choices"][0]["message"]["content"]
    finally:
        live.close()
        engine.shutdown()
