"""What a session may leave behind (issue 37): failed calls' bodies kept truncated and within the
session's budget, session ids never shared, a closed session's Responses conversations gone."""

from __future__ import annotations

import json

import pytest
from gw_helpers import PATHS, InProcessGateway

import legorl.gateway.sessions as sessions_mod
from legorl.gateway.sessions import FAILED_BODY_CAP, SessionBudget, SessionRegistry

BAD = {  # a body each dialect refuses at parse (400), before the engine
    "chat": {"model": "m", "messages": 5},
    "anthropic": {"model": "m", "max_tokens": 8, "messages": 5},
    "responses": {"model": "m", "input": 5},
}


@pytest.fixture
def live(smol_tok, tmp_path):
    h = InProcessGateway(smol_tok, tmp_path / "run")
    yield h
    h.close()


def _padded(body: dict, size: int) -> dict:
    return {**body, "padding": "x" * size}  # unknown fields are accepted and ignored: the size is the point


def _post_raw(live: InProcessGateway, dialect: str, token: str, data: bytes):
    headers = {"Authorization": f"Bearer {token}", "content-type": "application/json"}
    return live.loop.run_until_complete(live.http.post(PATHS[dialect], content=data, headers=headers))


def _turns(live: InProcessGateway, token: str):
    return list(live.store.iter_turns(live.gw.session_id(token)))


# -- failed bodies -----------------------------------------------------------------------------


@pytest.mark.parametrize("dialect", sorted(BAD))
def test_a_huge_rejected_body_is_kept_truncated_with_its_size(live, dialect):
    token = live.gw.open_session(f"big-{dialect}")
    body = _padded(BAD[dialect], 3 * 1024 * 1024)
    sent = len(json.dumps(body).encode())
    r = live.post(dialect, token, body)
    assert r.status_code == 400 and r.json()["error"]["type"] == "invalid_request_error", r.text
    [turn] = _turns(live, token)
    assert turn.failed and turn.finish_reason == "error"
    kept = turn.request
    assert kept["truncated"] is True and kept["size_bytes"] == sent and kept["kept_bytes"] == FAILED_BODY_CAP
    assert json.dumps(body).startswith(kept["body_prefix"]) and len(kept["body_prefix"]) == FAILED_BODY_CAP
    assert len(json.dumps(turn.request)) < FAILED_BODY_CAP + 1024  # what the store and the session hold
    assert live.gw.session(token).turns[0].request == kept
    rep = live.gw.session_report(token)
    assert (rep.calls_rejected, rep.failed_body_bytes, rep.failed_body_bytes_kept) == (1, sent, FAILED_BODY_CAP)


def test_a_small_rejected_body_is_kept_whole(live):
    token = live.gw.open_session("small")
    assert live.post("chat", token, BAD["chat"]).status_code == 400
    [turn] = _turns(live, token)
    assert turn.request == BAD["chat"]


def test_a_body_that_is_not_json_keeps_its_first_bytes(live):
    token = live.gw.open_session("raw")
    data = b"\xff\xfe" + b"y" * (2 * FAILED_BODY_CAP)
    r = _post_raw(live, "chat", token, data)
    assert r.status_code == 400 and "could not parse the JSON body" in r.json()["error"]["message"], r.text
    [turn] = _turns(live, token)
    assert turn.request["size_bytes"] == len(data) and turn.request["kept_bytes"] == FAILED_BODY_CAP
    assert turn.request["body_prefix"].endswith("y" * 100) and turn.request["body_prefix"].startswith("\ufffd")


def test_a_context_length_failure_keeps_its_body_truncated(live):
    """A body that parses but cannot be served (too long for the context): the same cap."""
    token = live.gw.open_session("ctx")
    body = {"model": "m", "messages": [{"role": "user", "content": "word " * 40000}]}
    r = live.post("chat", token, body)
    assert r.status_code == 400 and r.json()["error"]["code"] == "context_length_exceeded", r.text
    [turn] = _turns(live, token)
    assert turn.request["truncated"] is True and turn.request["size_bytes"] == len(json.dumps(body).encode())


def test_failed_bodies_spend_the_sessions_budget(live, monkeypatch):
    """Past the session's byte budget only sizes are kept; past the record slots only counts. A refused
    call (spent turn budget) with a huge body spends the same budget."""
    monkeypatch.setattr(sessions_mod, "FAILED_BODY_BUDGET", 2 * FAILED_BODY_CAP + 10)
    monkeypatch.setattr(sessions_mod, "REFUSALS_RECORDED", 5)
    token = live.gw.open_session("spend", budget=SessionBudget(max_turns=1))
    ok = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    assert live.post("chat", token, ok).status_code == 200
    big = _padded(BAD["chat"], 2 * FAILED_BODY_CAP)
    for _ in range(3):
        assert live.post("chat", token, big).status_code == 400
    r = live.post("chat", token, _padded(ok, 2 * FAILED_BODY_CAP))
    assert r.status_code == 403 and r.json()["error"]["code"] == "budget_exhausted"
    for _ in range(2):
        assert live.post("chat", token, big).status_code == 400
    failed = [t for t in _turns(live, token) if t.failed]
    assert len(failed) == 5  # REFUSALS_RECORDED: the sixth failed call is counted only
    assert [t.request["kept_bytes"] for t in failed] == [FAILED_BODY_CAP, FAILED_BODY_CAP, 10, 0, 0]
    assert failed[3].finish_reason == "refused" and failed[3].request["body_prefix"] == ""
    rep = live.gw.session_report(token)
    assert rep.calls_rejected == 5 and rep.refusals_unrecorded == 1 and rep.calls_refused == {"turns": 1}
    assert rep.failed_body_bytes_kept == 2 * FAILED_BODY_CAP + 10
    assert rep.failed_body_bytes > 5 * 2 * FAILED_BODY_CAP


# -- session ids -------------------------------------------------------------------------------


def test_session_ids_are_never_shared():
    reg = SessionRegistry()
    first = reg.session_id(reg.open("r~1"))  # a rollout id that looks like a suffixed one
    ids = [first] + [reg.session_id(reg.open("r")) for _ in range(3)]
    assert ids == ["r~1", "r", "r~2", "r~3"]
    tok = reg.open("q")
    reg.close(tok)
    assert reg.session_id(reg.open("q")) == "q~1"  # closed ones stay taken
    many = [reg.session_id(reg.open(f"r~{i % 5}" if i % 2 else "r")) for i in range(200)]
    assert len(set(many + ids)) == len(many) + len(ids)


def test_a_gateway_never_reuses_a_session_id_of_its_run_store(smol_tok, tmp_path):
    """A resumed run (a new gateway on the same store) opening a rollout id again gets a new session id:
    its turns cannot mix with the old session's (nor be hidden as abandoned with them)."""
    ok = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    before = InProcessGateway(smol_tok, tmp_path / "run")
    assert before.post("chat", before.gw.open_session("r-1"), ok).status_code == 200
    before.close()
    after = InProcessGateway(smol_tok, tmp_path / "run")
    try:
        token = after.gw.open_session("r-1")
        assert after.gw.session_id(token) == "r-1~1"
        assert after.post("chat", token, ok).status_code == 200
        assert [len(list(after.store.iter_turns(s))) for s in ("r-1", "r-1~1")] == [1, 1]
    finally:
        after.close()


# -- Responses state ---------------------------------------------------------------------------


def _not_found(r, rid: str) -> None:
    """The Responses API's own error for an unknown previous_response_id."""
    assert r.status_code == 400, r.text
    assert r.json() == {
        "error": {
            "message": f"Previous response with id '{rid}' not found.",
            "type": "invalid_request_error",
            "param": "previous_response_id",
            "code": "previous_response_not_found",
        }
    }


def test_a_closed_sessions_responses_are_gone(live):
    token = live.gw.open_session("a")
    first = live.post("responses", token, {"model": "m", "input": "hello"})
    assert first.status_code == 200
    rid = first.json()["id"]
    follow = {"model": "m", "input": "and then?", "previous_response_id": rid}
    assert live.post("responses", token, follow).status_code == 200  # reachable while the session is open
    live.gw.close_session(token)
    assert "a" not in live.gw.responses._convs  # nothing of it held in memory
    assert live.post("responses", token, follow).status_code == 401  # its own token is dead
    other = live.gw.open_session("b")
    _not_found(live.post("responses", other, follow), rid)
    streamed = live.post("responses", other, {**follow, "stream": True})
    _not_found(streamed, rid)


def test_a_reopened_rollout_id_cannot_reach_the_closed_sessions_responses(live):
    """Before ids were unique, the second `x` got `x~1`, the closed session's id, and with it its
    conversations."""
    old = live.gw.open_session("x~1")
    rid = live.post("responses", old, {"model": "m", "input": "secret"}).json()["id"]
    live.gw.close_session(old)
    live.gw.open_session("x")
    token = live.gw.open_session("x")
    assert live.gw.session_id(token) != "x~1"
    _not_found(live.post("responses", token, {"model": "m", "input": "more", "previous_response_id": rid}), rid)
