"""Session tokens and per-session budgets enforced at the gateway, over real HTTP: turn, token and
concurrency limits, each dialect's refusal shape, what the real client SDKs do with a refusal, how
refused calls are recorded (failed Turns, never Samples) and the session report's flags."""

from __future__ import annotations

import argparse
import asyncio
import re
import shlex
import threading
import time

import anthropic
import httpx
import openai
import pytest

from legorl.errors import EngineOverloadedError
from legorl.gateway import sessions as sessions_mod
from legorl.gateway.sessions import (
    SessionBudget,
    SessionRegistry,
    default_turn_slack,
    new_token,
)
from legorl.harnesses.base import Budget
from legorl.trajectory.builder import build_samples

# dialect -> (path, body)
CALLS = {
    "chat": ("/v1/chat/completions", {"model": "m", "messages": [{"role": "user", "content": "hi"}]}),
    "messages": ("/v1/messages", {"model": "m", "max_tokens": 50, "messages": [{"role": "user", "content": "hi"}]}),
    "responses": ("/v1/responses", {"model": "m", "input": "hi"}),
}


def post(live, dialect, token, *, stream=False, headers=None, body=None):
    path, default = CALLS[dialect]
    body = dict(body or default)
    if stream:
        body["stream"] = True
    h = {"x-api-key": token} if dialect == "messages" else {"Authorization": f"Bearer {token}"}
    return httpx.post(live.srv.root_url + path, json=body, headers={**h, **(headers or {})}, timeout=30)


# --------------------------------------------------------------------------- tokens


def test_session_tokens_never_look_like_options_nor_need_quoting():
    pattern = re.compile(r"^legorl-[0-9a-f]{48}$")
    parser = argparse.ArgumentParser()
    parser.add_argument("--api-key")
    parser.add_argument("positional")
    draws = [new_token() for _ in range(5000)]  # token_urlsafe starts with '-' once in 64 draws
    assert len(set(draws)) == len(draws)
    for tok in draws:
        assert pattern.match(tok), tok
        assert tok[0].isalpha() and shlex.quote(tok) == tok
        # as an option's value (separate word) and as an operand: argparse takes it for neither an option
        assert parser.parse_args(["--api-key", tok, tok]).api_key == tok
    reg = SessionRegistry()
    opened = [reg.open(f"r{i}") for i in range(200)]
    assert all(pattern.match(t) for t in opened) and len(reg) == 200
    assert reg.open("fixed", token="dev-token") == "dev-token"  # a chosen token is kept as given


# --------------------------------------------------------------------------- budget object


def test_session_budget_from_rollout_budget_and_validation():
    b = SessionBudget.from_budget(Budget(max_turns=2, max_tokens_per_turn=64), declared_concurrency=1)
    assert (
        b.max_turns,
        b.turn_slack,
        b.max_calls,
        b.max_tokens_per_turn,
        b.max_total_tokens,
        b.max_concurrent,
        b.declared_concurrency,
    ) == (2, 2, 4, 64, None, 8, 1)
    assert SessionBudget.from_budget(Budget(max_turns=8)).max_calls == 10
    assert SessionBudget.from_budget(Budget(max_turns=30)).max_calls == 38
    assert (
        SessionBudget.from_budget(
            Budget(max_turns=3, turn_slack=0, max_total_tokens=100, max_concurrent_requests=2)
        ).max_calls
        == 3
    )
    assert [default_turn_slack(n) for n in (1, 4, 8, 9, 40)] == [2, 2, 2, 3, 10]
    for bad in ({"max_turns": 0}, {"max_total_tokens": -1}, {"turn_slack": -1}, {"max_concurrent": 1.5}):
        with pytest.raises(ValueError):
            SessionBudget(**bad)
    with pytest.raises(TypeError):
        SessionRegistry().open("r", budget=Budget(max_turns=2))  # the harness Budget must be converted


# --------------------------------------------------------------------------- turns


@pytest.mark.parametrize("dialect", list(CALLS))
def test_turn_budget_refusal_in_each_dialects_shape(fake, dialect):
    gw, eng, live = fake
    token = gw.open_session(f"b-{dialect}", budget=SessionBudget(max_turns=2, turn_slack=1))
    n_prompts = len(eng.prompts)
    for _ in range(3):
        assert post(live, dialect, token).status_code == 200
    for stream in (False, True, False):  # streaming or not, the refusal is a plain JSON error
        r = post(live, dialect, token, stream=stream)
        assert r.status_code == 403, r.text
        assert r.headers["content-type"].startswith("application/json")
        assert r.headers["x-should-retry"] == "false"
        body = r.json()
        if dialect == "messages":
            assert body == {"type": "error", "error": {"type": "permission_error", "message": body["error"]["message"]}}
        else:
            assert set(body) == {"error"} and set(body["error"]) == {"message", "type", "param", "code"}
            assert body["error"]["code"] == "budget_exhausted" and body["error"]["type"] == "budget_exhausted"
        msg = body["error"]["message"]
        assert "budget exhausted" in msg and "3 model calls" in msg and "max_turns=2" in msg
    assert len(eng.prompts) - n_prompts == 3  # refused calls never reached the engine

    turns = gw.session_turns(token)
    assert [t.finish_reason for t in turns] == ["stop"] * 3 + ["refused"] * 3
    refused = [t for t in turns if t.finish_reason == "refused"]
    assert all(t.failed and t.prompt_token_ids == [] and t.output_token_ids == [] for t in refused)
    assert all(t.error.startswith("budget_exhausted:") and t.request.get("model") == "m" for t in refused)
    assert all(t.alignment.segment_index == -1 for t in refused)
    stored = list(gw.store.iter_turns(gw.session(token).session_id))
    assert [t.finish_reason for t in stored] == ["stop"] * 3 + ["refused"] * 3  # in the run store too
    samples = build_samples(turns, "rid")
    assert sorted(i for s in samples for i in s.turn_indices) == [0, 1, 2]

    rep = gw.session_report(token)
    assert rep.exhausted and rep.calls_admitted == 3 and rep.calls_refused == {"turns": 3}
    assert rep.first_refused_turn == 3
    (flag,) = [f for f in rep.flags() if f.kind == "gateway_budget_exhausted"]
    assert flag.severity == "info" and flag.evidence["refused"] == 3 and flag.evidence["turn"] == 3
    assert "3 of 2+1 model calls used, 3 more refused" in rep.describe()


def test_real_sdks_stop_at_once_on_a_spent_budget(fake):
    """The client libraries the harnesses use treat the refusal as final: no retries (the OpenAI SDK
    retries 429/5xx twice by default, Anthropic's too, mini-swe-agent backs off ten times on 429/400)."""
    gw, _eng, live = fake
    tok = gw.open_session("sdk-openai", budget=SessionBudget(max_turns=1))
    oc = openai.OpenAI(base_url=live.srv.base_url, api_key=tok, max_retries=2)
    oc.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
    with pytest.raises(openai.PermissionDeniedError) as ei:
        oc.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
    assert ei.value.code == "budget_exhausted"
    with pytest.raises(openai.PermissionDeniedError):
        oc.responses.create(model="m", input="hi")
    # one request per call: not retried (counted by the gateway, not timed: a loaded machine is slow)
    assert gw.session_report(tok).calls_refused == {"turns": 2}

    tok = gw.open_session("sdk-anthropic", budget=SessionBudget(max_turns=1))
    ac = anthropic.Anthropic(base_url=live.srv.root_url, api_key=tok, max_retries=2)
    ac.messages.create(model="m", max_tokens=20, messages=[{"role": "user", "content": "hi"}])
    with pytest.raises(anthropic.PermissionDeniedError) as ei:
        ac.messages.create(model="m", max_tokens=20, messages=[{"role": "user", "content": "hi"}])
    assert ei.value.body["type"] == "error" and ei.value.body["error"]["type"] == "permission_error"
    assert gw.session_report(tok).calls_refused == {"turns": 1}


def test_failed_calls_give_their_turn_back(fake):
    gw, eng, live = fake
    token = gw.open_session("refund", budget=SessionBudget(max_turns=1))
    eng.replies = [EngineOverloadedError("busy"), "fine"]
    assert post(live, "chat", token).status_code == 503  # no output: not charged
    r = post(live, "chat", token)
    assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"] == "fine"
    assert post(live, "chat", token).status_code == 403
    rep = gw.session_report(token)
    assert rep.calls_admitted == 1 and rep.calls_refused == {"turns": 1}
    kinds = [(t.finish_reason, t.failed) for t in gw.session_turns(token)]
    assert kinds == [("error", True), ("stop", False), ("refused", True)]


def test_bad_bodies_are_not_charged(fake):
    gw, _eng, live = fake
    token = gw.open_session("bad", budget=SessionBudget(max_turns=1))
    r = httpx.post(
        live.srv.base_url + "/chat/completions",
        json={"model": "m"},
        headers={"Authorization": f"Bearer {token}"},
        timeout=30,
    )
    assert r.status_code == 400
    assert post(live, "chat", token).status_code == 200
    assert gw.session_report(token).calls_admitted == 1


def test_refusals_past_the_record_limit_are_only_counted(fake, monkeypatch):
    gw, _eng, live = fake
    monkeypatch.setattr(sessions_mod, "REFUSALS_RECORDED", 3)
    token = gw.open_session("flood", budget=SessionBudget(max_turns=1))
    assert post(live, "chat", token).status_code == 200
    assert [post(live, "chat", token).status_code for _ in range(7)] == [403] * 7
    assert [t.finish_reason for t in gw.session_turns(token)] == ["stop"] + ["refused"] * 3
    rep = gw.session_report(token)
    assert rep.calls_refused == {"turns": 7} and rep.refusals_unrecorded == 4


# --------------------------------------------------------------------------- tokens


def test_per_turn_clip_and_total_token_budget(fake):
    gw, eng, live = fake
    token = gw.open_session("tok", budget=SessionBudget(max_tokens_per_turn=5, max_total_tokens=12))
    long = "one two three four five six seven eight nine ten eleven twelve"
    eng.replies = [long, long, long, long]
    got = []
    for _ in range(3):
        r = post(
            live,
            "chat",
            token,
            body={"model": "m", "max_tokens": 100, "messages": [{"role": "user", "content": "count"}]},
        )
        assert r.status_code == 200, r.text
        got.append(r.json()["usage"]["completion_tokens"])
    assert got == [5, 5, 2]  # clipped to the turn cap, then to what was left of the total
    assert [t.sampling["max_tokens"] for t in gw.session_turns(token)] == [5, 5, 2]
    r = post(live, "messages", token)
    assert r.status_code == 403 and r.json()["error"]["type"] == "permission_error"
    assert "12 of the rollout's 12 tokens" in r.json()["error"]["message"]
    rep = gw.session_report(token)
    assert rep.tokens_generated == 12 and rep.calls_refused == {"tokens": 1} and rep.exhausted
    assert sum(s.num_sampled for s in build_samples(gw.session_turns(token), "rid")) == 12


# --------------------------------------------------------------------------- concurrency


def _in_thread(fn):
    out = {}

    def run():
        out["r"] = fn()

    th = threading.Thread(target=run, daemon=True)
    th.start()
    return th, out


def _wait(pred, timeout=10.0):
    t0 = time.perf_counter()
    while not pred():
        if time.perf_counter() - t0 > timeout:
            raise AssertionError("condition not reached")
        time.sleep(0.01)


@pytest.mark.parametrize("dialect", ["chat", "messages"])
def test_concurrency_limit_refuses_transiently(fake, dialect):
    gw, eng, live = fake
    token = gw.open_session(
        f"conc-{dialect}", budget=SessionBudget(max_turns=10, max_concurrent=2, declared_concurrency=1)
    )
    session = gw.session(token)
    eng.gate = asyncio.Event()
    try:
        # two calls on different threads (both generating), both admitted: in flight together
        a = _in_thread(lambda: post(live, dialect, token, headers={"x-legorl-thread": "a"}))
        b = _in_thread(lambda: post(live, dialect, token, headers={"x-legorl-thread": "b"}))
        _wait(lambda: session.in_flight == 2 and eng.active == 2)
        r = post(live, dialect, token)
        assert r.status_code == 429 and r.headers["retry-after"] == "1"
        if dialect == "messages":
            assert r.json()["error"]["type"] == "rate_limit_error"
        else:
            assert r.json()["error"]["code"] == "concurrency_limit_exceeded"
        assert "concurrency limit" in r.json()["error"]["message"]
    finally:
        live.call(eng.gate.set)
    for th, out in (a, b):
        th.join(30)
        assert out["r"].status_code == 200
    eng.gate = None
    assert post(live, dialect, token).status_code == 200  # transient: served once the others ended
    rep = gw.session_report(token)
    assert rep.calls_refused == {"concurrency": 1} and not rep.exhausted
    assert rep.peak_in_flight == 2 and rep.over_declared_concurrency == 1 and rep.calls_admitted == 3
    (flag,) = [f for f in rep.flags() if f.kind == "gateway_concurrency"]
    assert flag.evidence["peak_in_flight"] == 2 and flag.evidence["declared"] == 1 and flag.evidence["refused"] == 1
    assert [t.finish_reason for t in gw.session_turns(token)].count("refused") == 1


def test_queued_calls_of_one_thread_count_as_in_flight(fake):
    gw, eng, live = fake
    token = gw.open_session("queue", budget=SessionBudget(max_concurrent=2))
    session = gw.session(token)
    eng.gate = asyncio.Event()
    try:
        a = _in_thread(lambda: post(live, "chat", token))
        b = _in_thread(lambda: post(live, "chat", token))  # same thread "main": waits for a's lock
        _wait(lambda: session.in_flight == 2)
        assert eng.active == 1
        assert post(live, "chat", token).status_code == 429
    finally:
        live.call(eng.gate.set)
    for th, out in (a, b):
        th.join(30)
        assert out["r"].status_code == 200
    eng.gate = None
    assert session.in_flight == 0


# --------------------------------------------------------------------------- clients


def test_requests_from_another_client_are_flagged(fake):
    gw, _eng, live = fake
    token = gw.open_session("clients")
    assert (
        post(
            live, "chat", token, headers={"user-agent": "OpenAI/Python 1.99.0", "x-stainless-lang": "python"}
        ).status_code
        == 200
    )
    assert (
        post(
            live,
            "chat",
            token,
            headers={
                "user-agent": "OpenAI/Python 1.99.0",
                "x-stainless-lang": "python",
                "x-stainless-retry-count": "1",
            },
        ).status_code
        == 200
    )  # same client
    rep = gw.session_report(token)
    assert rep.client["user-agent"] == "OpenAI/Python 1.99.0" and rep.other_clients == []
    assert not [f for f in rep.flags() if f.kind == "gateway_foreign_client"]
    for _ in range(2):
        assert post(live, "chat", token, headers={"user-agent": "curl/8.5.0"}).status_code == 200
    rep = gw.session_report(token)
    assert rep.other_clients == [
        {"headers": {**{h: "" for h in sessions_mod.CLIENT_HEADERS}, "user-agent": "curl/8.5.0"}, "requests": 2}
    ]
    (flag,) = [f for f in rep.flags() if f.kind == "gateway_foreign_client"]
    assert flag.severity == "info" and flag.evidence["requests"] == 2 and "OpenAI/Python" in flag.evidence["detail"]


def test_unbudgeted_sessions_are_unlimited(fake):
    gw, _eng, live = fake
    token = gw.open_session("free")
    assert all(post(live, "chat", token).status_code == 200 for _ in range(6))
    rep = gw.session_report(token)
    assert rep.calls_admitted == 6 and rep.calls_refused == {} and rep.flags() == []
