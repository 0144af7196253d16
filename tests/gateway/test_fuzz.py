"""Hostile clients, fuzzed: requests drawn from the official SDKs' request types
(:mod:`sdk_strategies`, lone surrogates, control characters, orphan tool results included) are sent to
the real gateway — real dialects, renderer (SmolLM2's tokenizer and chat template) and run store —
for all four dialects, streaming and not. The engine is :class:`ScriptedEngine` (replies are fixed
text: the engine is not what is tested here). Properties, per request:

* never a 5xx;
* every 4xx in the dialect's error shape, every 200 a body the SDK's response type accepts (streams:
  well-formed SSE ending as the dialect ends them);
* every authenticated request leaves exactly one Turn in the store; a refused one is marked failed
  and never reaches a training Sample;
* the gateway still serves a plain request afterwards.

Budget: ``FUZZ_EXAMPLES`` examples per dialect (default 200; roughly 15-40 s per dialect on 2 cores).
"""

from __future__ import annotations

import json
import os
from typing import Any

import anthropic
import httpx
import openai
import pytest
from google.genai import types as genai_types
from gw_helpers import PATHS, InProcessGateway
from hypothesis import HealthCheck, event, given, settings
from sdk_strategies import (
    anthropic_requests,
    chat_requests,
    gemini_requests,
    has_lone_surrogate,
    orphan_tool_result,
    responses_requests,
)

from legorl.trajectory.builder import build_samples

EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "200"))
STRATEGIES = {
    "chat": chat_requests,
    "anthropic": anthropic_requests,
    "responses": responses_requests,
    "gemini": gemini_requests,
}
GOOD = {
    "chat": {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4},
    "anthropic": {"model": "m", "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}]},
    "responses": {"model": "m", "input": "hi", "max_output_tokens": 4},
    "gemini": {"contents": [{"role": "user", "parts": [{"text": "hi"}]}], "generationConfig": {"maxOutputTokens": 4}},
}


@pytest.fixture(scope="module")
def harness(smol_tok, tmp_path_factory):
    h = InProcessGateway(smol_tok, tmp_path_factory.mktemp("fuzz") / "run")
    yield h
    h.close()


def check_error_shape(dialect: str, r: httpx.Response) -> None:
    body = r.json()
    if dialect == "anthropic":
        assert body["type"] == "error" and isinstance(body["error"]["type"], str), body
        assert isinstance(body["error"]["message"], str) and body["error"]["message"], body
    elif dialect == "gemini":  # Google's shape
        err = body["error"]
        assert err["code"] == r.status_code and isinstance(err["status"], str) and err["status"].isupper(), body
        assert isinstance(err["message"], str) and err["message"], body
    else:
        err = body["error"]
        assert isinstance(err["message"], str) and err["message"] and isinstance(err["type"], str), body
        assert set(err) >= {"message", "type", "param", "code"}, body


def sse_events(text: str, *, named: bool) -> list[tuple[str | None, Any]]:
    """Parse an SSE body: (event name, data) per event; every event of a named stream has its name."""
    out: list[tuple[str | None, Any]] = []
    for block in text.split("\n\n"):
        if not block:
            continue
        name, data = None, None
        for line in block.split("\n"):
            if line.startswith("event: "):
                name = line[7:]
            else:
                assert line.startswith("data: "), line
                data = line[6:] if line[6:] == "[DONE]" else json.loads(line[6:])
        assert data is not None and (name is not None or not named), block
        out.append((name, data))
    return out


def check_gemini_chunk(chunk: dict[str, Any]) -> genai_types.GenerateContentResponse:
    """A Gemini response (or stream chunk) as the SDK reads it: its own type, the gateway's extra
    ``x_legorl`` dropped as the SDK drops unknown fields."""
    assert "error" not in chunk, chunk
    resp = genai_types.GenerateContentResponse._from_response(response=dict(chunk), kwargs={})
    assert resp.candidates and resp.candidates[0].content is not None, chunk
    return resp


def check_success(dialect: str, stream: bool, r: httpx.Response) -> None:
    if dialect == "gemini":
        if not stream:
            assert check_gemini_chunk(r.json()).candidates[0].finish_reason is not None
            return
        assert r.headers["content-type"].startswith("text/event-stream")
        chunks = [check_gemini_chunk(data) for _, data in sse_events(r.text, named=False)]
        assert chunks[-1].candidates[0].finish_reason is not None and chunks[-1].usage_metadata.total_token_count
        assert all(c.candidates[0].finish_reason is None for c in chunks[:-1])
        return
    if not stream:
        body = r.json()
        model = {
            "chat": openai.types.chat.ChatCompletion,
            "anthropic": anthropic.types.Message,
            "responses": openai.types.responses.Response,
        }[dialect]
        model.model_validate(body)
        return
    assert r.headers["content-type"].startswith("text/event-stream")
    events = sse_events(r.text, named=dialect != "chat")
    if dialect == "chat":
        assert events[-1][1] == "[DONE]"
        for _, chunk in events[:-1]:
            openai.types.chat.ChatCompletionChunk.model_validate(chunk)
    elif dialect == "anthropic":
        assert [e for e, _ in events][0] == "message_start" and events[-1][0] == "message_stop"
        assert all(e == d["type"] for e, d in events)
    else:
        assert events[-1][0] in ("response.completed", "response.incomplete")
        openai.types.responses.Response.model_validate(events[-1][1]["response"])


def check_request(h: InProcessGateway, dialect: str, body: dict[str, Any]) -> None:
    h.n += 1
    h.seen[dialect]["requests"] += 1
    token = h.gw.open_session(f"fuzz-{dialect}-{h.n}")
    session_id = h.gw.sessions.session_id(token)
    surrogate, orphan = has_lone_surrogate(body), orphan_tool_result(dialect, body)
    event(f"lone surrogate: {surrogate}")
    event(f"orphan tool result: {orphan}")
    h.seen[dialect]["lone_surrogate"] += surrogate
    h.seen[dialect]["orphan_tool_result"] += orphan
    r = h.post(dialect, token, body)
    event(f"status {r.status_code}")
    h.seen[dialect][f"status_{r.status_code}"] += 1
    assert r.status_code < 500, r.text
    if r.status_code >= 400:
        check_error_shape(dialect, r)
        if surrogate:  # the JSON layer refuses them before anything else, in every dialect
            assert r.status_code == 400
    else:
        check_success(dialect, body.get("stream") is True, r)
    turns = list(h.store.iter_turns(session_id))
    assert len(turns) == 1, [t.error for t in turns]  # every authenticated request leaves one Turn
    assert turns[0].failed == (r.status_code != 200)
    assert h.gw.session(token).in_flight == 0
    if turns[0].failed:
        assert turns[0].alignment.segment_index == -1 and build_samples(turns, session_id) == []
    h.gw.close_session(token)


def run_fuzz(h: InProcessGateway, dialect: str) -> None:
    @settings(  # randomness and deadline: the Hypothesis profile (tests/conftest.py)
        max_examples=EXAMPLES,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
    )
    @given(STRATEGIES[dialect]())
    def fuzz(body: dict[str, Any]) -> None:
        check_request(h, dialect, body)

    fuzz()
    seen = h.seen[dialect]
    print(f"[fuzz {dialect}] {dict(seen)}")
    # the run provably drew what the first hostile-client pass found by hand, and reached the engine
    assert seen["lone_surrogate"] > 0 and seen["orphan_tool_result"] > 0 and seen["status_200"] > 0, seen
    token = h.gw.open_session(f"fuzz-{dialect}-after")  # still serving, normally
    for stream in (False, True):
        r = h.post(dialect, token, {**GOOD[dialect], "stream": stream})
        assert r.status_code == 200, r.text
        check_success(dialect, stream, r)


@pytest.mark.hypothesis  # its @given is inside: the marker makes `make fuzz` (-m hypothesis) select it
@pytest.mark.parametrize("dialect", list(PATHS))
def test_fuzz_dialect(harness, dialect):
    run_fuzz(harness, dialect)
