"""Error shapes per dialect, engine failures/timeouts, and client disconnects mid-stream."""

from __future__ import annotations

import asyncio
import time

import anthropic
import httpx
import openai
import pytest

from legorl.errors import EngineOverloadedError

# dialect -> (path, good body, missing-field body + field, wrong-type body + field)
DIALECTS = {
    "chat": (
        "/v1/chat/completions",
        {"model": "m", "messages": [{"role": "user", "content": "x"}]},
        ({"model": "m"}, "messages"),
        ({"messages": [{"role": "user", "content": "x"}], "max_tokens": "lots"}, "max_tokens"),
    ),
    "messages": (
        "/v1/messages",
        {"model": "m", "max_tokens": 20, "messages": [{"role": "user", "content": "x"}]},
        ({"model": "m", "messages": [{"role": "user", "content": "x"}]}, "max_tokens"),
        ({"model": "m", "max_tokens": 20, "messages": [{"role": "user", "content": 5}]}, "messages.0.content"),
    ),
    "responses": (
        "/v1/responses",
        {"model": "m", "input": "x"},
        ({"model": "m"}, "input"),
        ({"model": "m", "input": "x", "max_output_tokens": "many"}, "max_output_tokens"),
    ),
}


def post(live, dialect, token, body, *, raw: bytes | None = None, stream=False, timeout=30):
    path = DIALECTS[dialect][0]
    headers = {"Content-Type": "application/json"}
    if token is not None:
        headers.update({"x-api-key": token} if dialect == "messages" else {"Authorization": f"Bearer {token}"})
    if stream and body is not None:
        body = {**body, "stream": True}
    return httpx.post(
        live.srv.root_url + path, content=raw, json=None if raw is not None else body, headers=headers, timeout=timeout
    )


def err(dialect, resp):
    """-> (type, message, param) after checking the dialect's error shape."""
    body = resp.json()
    if dialect == "messages":
        assert set(body) == {"type", "error"} and body["type"] == "error" and set(body["error"]) == {"type", "message"}
        return body["error"]["type"], body["error"]["message"], None
    assert set(body["error"]) == {"message", "type", "param", "code"}
    return body["error"]["type"], body["error"]["message"], body["error"]["param"]


@pytest.mark.parametrize("dialect", list(DIALECTS))
def test_request_errors(fake, dialect):
    gw, eng, live = fake
    token = gw.open_session(f"e-{dialect}")
    path, good, (missing, mfield), (wrong, wfield) = DIALECTS[dialect]
    r = post(live, dialect, token, None, raw=b"{not json")
    assert r.status_code == 400 and err(dialect, r)[0] == "invalid_request_error"
    r = post(live, dialect, token, None, raw=b"[1, 2]")
    assert r.status_code == 400 and err(dialect, r)[0] == "invalid_request_error"
    r = post(live, dialect, token, missing)
    t, msg, param = err(dialect, r)
    assert r.status_code == 400 and t == "invalid_request_error" and mfield in msg and param in (None, mfield)
    r = post(live, dialect, token, wrong)
    t, msg, param = err(dialect, r)
    assert r.status_code == 400 and wfield in msg and param in (None, wfield)
    r = post(live, dialect, "not-a-token", good)
    assert r.status_code == 401 and err(dialect, r)[0] == (
        "authentication_error" if dialect == "messages" else "invalid_request_error"
    )
    r = post(live, dialect, None, good)
    assert r.status_code == 401
    # prompt over the (512-token) context, streaming or not
    long = "word " * 700
    body = {
        **good,
        **({"input": long} if dialect == "responses" else {"messages": [{"role": "user", "content": long}]}),
    }
    for stream in (False, True):
        r = post(live, dialect, token, body, stream=stream)
        t, msg, param = err(dialect, r)
        assert r.status_code == 400
        if dialect == "messages":
            assert t == "invalid_request_error" and msg.startswith("prompt is too long")
        else:
            assert r.json()["error"]["code"] == "context_length_exceeded" and param == (
                "input" if dialect == "responses" else "messages"
            )
    assert eng.prompts == []  # nothing reached the engine
    turns = gw.session_turns(token)
    assert len(turns) == 6 and all(t.failed for t in turns)  # 401s belong to no session
    assert turns[-1].error and len(turns[-1].prompt_token_ids) > 512


def test_sdk_typed_errors(fake):
    gw, eng, live = fake
    token = gw.open_session("e-sdk")
    a = anthropic.Anthropic(base_url=live.srv.root_url, api_key=token, max_retries=0)
    with pytest.raises(anthropic.BadRequestError) as ei:
        a.messages.create(model="m", max_tokens=5, messages=[{"role": "user", "content": "word " * 700}])
    assert "prompt is too long" in ei.value.message
    with pytest.raises(anthropic.AuthenticationError):
        anthropic.Anthropic(base_url=live.srv.root_url, api_key="bad", max_retries=0).messages.create(
            model="m", max_tokens=5, messages=[{"role": "user", "content": "x"}]
        )
    eng.replies = [EngineOverloadedError("shutting down"), RuntimeError("boom")]
    with pytest.raises(anthropic.OverloadedError) as ei:
        with a.messages.stream(model="m", max_tokens=5, messages=[{"role": "user", "content": "x"}]) as s:
            s.get_final_message()
    assert ei.value.body["error"]["type"] == "overloaded_error"
    o = openai.OpenAI(base_url=live.srv.base_url, api_key=token, max_retries=0)
    with pytest.raises(openai.InternalServerError) as ei:
        o.responses.create(model="m", input="x", stream=True)
    assert ei.value.status_code == 500
    with pytest.raises(openai.BadRequestError) as ei:
        o.responses.create(model="m", input="word " * 700)
    assert ei.value.code == "context_length_exceeded"
    turns = gw.session_turns(token)
    assert [t.failed for t in turns] == [True, True, True, True]
    assert "boom" in turns[2].error


@pytest.mark.parametrize("dialect", list(DIALECTS))
def test_engine_failure_and_timeout(fake, dialect):
    gw, eng, live = fake
    token = gw.open_session(f"f-{dialect}")
    good = DIALECTS[dialect][1]
    eng.replies = [RuntimeError("boom"), EngineOverloadedError("busy")]
    r1, r2 = post(live, dialect, token, good), post(live, dialect, token, good, stream=True)
    if dialect == "messages":
        assert (r1.status_code, r2.status_code) == (529, 529) and err(dialect, r1)[0] == err(dialect, r2)[
            0
        ] == "overloaded_error"
    else:
        assert (r1.status_code, r2.status_code) == (500, 503) and err(dialect, r1)[0] == "server_error"
    gw.generate_timeout_s = 0.3
    eng.gate = asyncio.Event()  # never set: the engine hangs
    r3 = post(live, dialect, token, good)
    assert r3.status_code == (529 if dialect == "messages" else 504)
    turns = gw.session_turns(token)
    assert [t.failed for t in turns] == [True, True, True] and "timed out" in turns[2].error
    assert eng.cancelled == 1 and eng.active == 0
    gw.generate_timeout_s, eng.gate = None, None
    assert post(live, dialect, token, good).status_code == 200


def _wait(pred, timeout=10.0):
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if pred():
            return True
        time.sleep(0.02)
    return False


@pytest.mark.parametrize("dialect", list(DIALECTS))
def test_disconnect_mid_stream_cancels(fake, dialect):
    gw, eng, live = fake
    token = gw.open_session(f"d-{dialect}")
    good = DIALECTS[dialect][1]
    gate = asyncio.Event()
    eng.gate = gate
    with pytest.raises(httpx.ReadTimeout):  # the client gives up and closes the connection
        with httpx.Client(timeout=httpx.Timeout(10, read=0.5)) as c:
            path = DIALECTS[dialect][0]
            hdr = {"x-api-key": token} if dialect == "messages" else {"Authorization": f"Bearer {token}"}
            with c.stream("POST", live.srv.root_url + path, json={**good, "stream": True}, headers=hdr) as r:
                for _ in r.iter_lines():
                    pass
    assert _wait(lambda: len(gw.session_turns(token)) == 1)
    [t] = gw.session_turns(token)
    assert t.failed and t.error == "client_disconnected" and t.finish_reason == "cancelled" and t.prompt_token_ids
    assert eng.cancelled == 1 and eng.active == 0
    live.call(gate.set)
    eng.gate = None
    r = post(live, dialect, token, good, stream=True)  # the thread is usable; nothing was committed
    assert r.status_code == 200
    assert gw.session_turns(token)[-1].alignment.kind == "start"


@pytest.mark.slow
def test_real_disconnect_frees_engine(real_gw):
    gw, eng, live = real_gw
    real = eng.real
    token = gw.open_session("d-real")
    # a long, unique prompt so that generation surely outlasts the client's patience
    text = " ".join(f"item{i}" for i in range(900))
    body = {
        "model": "m",
        "max_tokens": 24,
        "stream": True,
        "messages": [{"role": "user", "content": f"Repeat: {text}"}],
    }
    t0 = time.monotonic()
    with pytest.raises(httpx.ReadTimeout):
        with httpx.Client(timeout=httpx.Timeout(10, read=0.3)) as c:
            with c.stream("POST", live.srv.root_url + "/v1/messages", json=body, headers={"x-api-key": token}) as r:
                for _ in r.iter_lines():
                    pass
    assert _wait(lambda: len(gw.session_turns(token)) == 1, 30)
    [t] = gw.session_turns(token)
    assert t.failed and t.error == "client_disconnected"
    assert _wait(lambda: real.health().active_requests == 0, 10)
    print(
        f"disconnect -> turn recorded and engine idle after {time.monotonic() - t0:.2f}s; cancelled after {t.timings.get('cancelled_after_s', 0):.2f}s"
    )
