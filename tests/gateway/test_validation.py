"""Text and conversation validation at the edge (issue 16; docs/gateway-validation.md): regression
tests for what a hostile client found, each dialect answering in its own error shape, the refused
request recorded as a failed Turn that never becomes a training sample."""

from __future__ import annotations

import pytest
from gw_helpers import InProcessGateway

from legorl.errors import GatewayError
from legorl.gateway.app import gateway_error
from legorl.gateway.dialects.base import lone_surrogate, parse_json_object
from legorl.trajectory.builder import build_samples
from legorl.trajectory.store import RunStore

SURROGATE = {
    "chat": {"model": "m", "messages": [{"role": "user", "content": "bad \ud800 text"}]},
    "anthropic": {"model": "m", "max_tokens": 4, "messages": [{"role": "user", "content": "bad \ud800 text"}]},
    "responses": {"model": "m", "input": "bad \ud800 text"},
    "gemini": {"contents": [{"role": "user", "parts": [{"text": "bad \ud800 text"}]}]},
}


@pytest.fixture(scope="module")
def gw(smol_tok, tmp_path_factory):
    h = InProcessGateway(smol_tok, tmp_path_factory.mktemp("validation") / "run")
    yield h
    h.close()


def refused(h: InProcessGateway, dialect: str, body: dict, *, stream: bool = False) -> tuple[dict, list]:
    token = h.gw.open_session(f"v-{dialect}-{h.n}")
    h.n += 1
    sid = h.gw.sessions.session_id(token)
    r = h.post(dialect, token, {**body, "stream": stream})
    assert r.status_code == 400, r.text
    turns = list(h.store.iter_turns(sid))
    assert len(turns) == 1 and turns[0].failed and turns[0].finish_reason == "error"
    assert turns[0].alignment.segment_index == -1 and build_samples(turns, sid) == []
    return r.json(), turns


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("dialect", list(SURROGATE))
def test_lone_surrogate_is_400_in_each_dialects_shape_and_recorded(gw, dialect, stream):
    body, turns = refused(gw, dialect, SURROGATE[dialect], stream=stream)
    if dialect == "anthropic":  # as Anthropic's API answers it (serde_json behind it)
        assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error"
        assert body["error"]["message"].startswith("The request body is not valid JSON: no low surrogate in string")
    elif dialect == "gemini":  # Google's shape and wording
        assert body["error"]["status"] == "INVALID_ARGUMENT" and body["error"]["code"] == 400
        assert body["error"]["message"].startswith("Invalid JSON payload received. no low surrogate in string")
    else:
        assert body["error"]["type"] == "invalid_request_error"
        assert body["error"]["message"].startswith("We could not parse the JSON body of your request")
    assert "no low surrogate" in turns[0].error
    # a body that is not strict JSON is kept as the text the client sent
    assert "bad \\ud800 text" in turns[0].request["raw"]


def test_orphan_tool_result_is_400_as_anthropics_api(gw):
    body = {
        "model": "m",
        "max_tokens": 4,
        "messages": [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "Hello."},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_x", "content": "out"}]},
        ],
    }
    err, _ = refused(gw, "anthropic", body)
    assert err["type"] == "error" and err["error"]["type"] == "invalid_request_error"
    assert err["error"]["message"] == (
        "messages.2.content.0: unexpected `tool_use_id` found in `tool_result` blocks: toolu_x. Each `tool_result` "
        "block must have a corresponding `tool_use` block in the previous message."
    )


def test_conversation_rules_of_the_openai_dialects(gw):
    orphan = {
        "model": "m",
        "messages": [{"role": "user", "content": "hi"}, {"role": "tool", "tool_call_id": "c1", "content": "x"}],
    }
    err, _ = refused(gw, "chat", orphan)
    assert "must be a response to a preceeding message with 'tool_calls'" in err["error"]["message"]
    unanswered = {
        "model": "m",
        "messages": [
            {"role": "user", "content": "hi"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "bash", "arguments": "{}"}}],
            },
            {"role": "user", "content": "and?"},
        ],
    }
    err, _ = refused(gw, "chat", unanswered)
    assert "did not have response messages: c1" in err["error"]["message"]
    err, _ = refused(
        gw, "responses", {"model": "m", "input": [{"type": "function_call_output", "call_id": "c9", "output": "x"}]}
    )
    assert err["error"]["message"] == "No tool call found for function call output with call_id c9."


GEMINI_CALL = {"role": "model", "parts": [{"functionCall": {"name": "bash", "args": {"cmd": "ls"}}}]}
GEMINI_ANSWER = {"functionResponse": {"name": "bash", "response": {"output": "a.py"}}}


def test_conversation_rules_of_the_gemini_dialect(gw):
    """The Gemini API's own refusals of function-calling turns, word for word."""
    user = {"role": "user", "parts": [{"text": "hi"}]}
    cases = [
        (
            [GEMINI_CALL, {"role": "user", "parts": [GEMINI_ANSWER]}],
            "Please ensure that function call turn comes immediately after a user turn or after a function "
            "response turn.",
        ),
        (
            [user, {"role": "model", "parts": [{"text": "Hello."}]}, {"role": "user", "parts": [GEMINI_ANSWER]}],
            "Please ensure that function response turn comes immediately after a function call turn.",
        ),
        (
            [user, GEMINI_CALL, {"role": "user", "parts": [GEMINI_ANSWER, GEMINI_ANSWER]}],
            "Please ensure that the number of function response parts is equal to the number of function call "
            "parts of the function call turn.",
        ),
        (
            [{"role": "user", "parts": [{"text": ""}]}],
            "* GenerateContentRequest.contents[0].parts[0].data: required oneof field 'data' must have one "
            "initialized field",
        ),
        (
            [{"role": "user", "parts": [{"text": "a", "functionCall": {"name": "bash"}}]}],
            "Invalid JSON payload received. Oneof field 'data' is already set. Cannot set 'functionCall'",
        ),
    ]
    for contents, message in cases:
        err, _ = refused(gw, "gemini", {"contents": contents})
        assert (err["error"]["status"], err["error"]["message"]) == ("INVALID_ARGUMENT", message)
    tools = [{"functionDeclarations": [{"name": "run shell"}]}]
    err, _ = refused(gw, "gemini", {"contents": [user], "tools": tools})
    assert err["error"]["message"].startswith(
        "* GenerateContentRequest.tools[0].function_declarations[0].name: Invalid function name."
    )
    # an answered call is fine, and so is a call nothing answers yet
    token = gw.gw.open_session("gemini-ok")
    for contents in ([user, GEMINI_CALL, {"role": "user", "parts": [GEMINI_ANSWER]}], [user, GEMINI_CALL]):
        assert gw.post("gemini", token, {"contents": contents}).status_code == 200


def test_lenient_mode_accepts_what_strict_refuses(smol_tok, tmp_path):
    h = InProcessGateway(smol_tok, tmp_path / "run", strict=False)
    try:
        token = h.gw.open_session("lenient")
        body = {
            "model": "m",
            "max_tokens": 4,
            "messages": [
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "nobody", "content": "out"}]}
            ],
        }
        assert h.post("anthropic", token, body).status_code == 200
        orphan = {"contents": [{"role": "user", "parts": [GEMINI_ANSWER]}]}
        assert h.post("gemini", token, orphan).status_code == 200
        r = h.post("anthropic", token, SURROGATE["anthropic"])  # text at the edge stays strict: it cannot be encoded
        assert r.status_code == 400
    finally:
        h.close()


def test_control_characters_are_accepted_and_recorded(gw):
    token = gw.gw.open_session("ctl")
    text = "nul \x00 bell \x07 esc \x1b del \x7f nel \x85 ls \u2028"
    for dialect, body in {
        "chat": {"model": "m", "messages": [{"role": "user", "content": text}]},
        "anthropic": {"model": "m", "max_tokens": 4, "messages": [{"role": "user", "content": text}]},
        "responses": {"model": "m", "input": text},
        "gemini": {"contents": [{"parts": [{"text": text}]}]},
    }.items():
        assert gw.post(dialect, token, body).status_code == 200, dialect
    turns = list(gw.store.iter_turns(gw.gw.sessions.session_id(token)))
    assert [t.failed for t in turns] == [False] * 4


def test_gateway_bug_is_500_internal_error_never_an_engine_failure():
    err = gateway_error(TypeError("boom"))
    assert (err.status, err.code) == (500, "internal_error") and "TypeError" in err.message
    assert gateway_error(GatewayError(400, "x")).status == 400


def test_strict_json_edge_cases():
    assert lone_surrogate('"\\ud83d\\ude00"') is None  # a pair is one character
    assert lone_surrogate('"\\\\ud800"') is None  # an escaped backslash, then text
    assert lone_surrogate('"\\udc00"')[1] == "lone low surrogate in string"
    for raw in (
        b'{"a": "\\ud800"}',
        b"\xff{}",
        b'{"a": "\x01"}',
        b"[]",
        '{"a": "\ud800"}'.encode("utf-8", "surrogatepass"),
    ):
        with pytest.raises(GatewayError) as ei:
            parse_json_object(raw)
        assert ei.value.status == 400 and ei.value.code == "invalid_json"


def test_store_writes_any_text(tmp_path):
    from legorl.trajectory.records import AlignmentEvent, Turn

    store = RunStore(tmp_path / "run")
    turn = Turn(
        session_id="s",
        thread_id="main",
        turn_index=0,
        dialect="openai.chat",
        prompt_token_ids=[],
        output_token_ids=[],
        output_logprobs=[],
        sampling={},
        weight_version=0,
        finish_reason="error",
        alignment=AlignmentEvent(turn_index=0, kind="fork", reason="r \ud800", segment_index=-1),
        request={"messages": [{"content": "x \ud800 \x00"}]},
        response={},
        failed=True,
        error="e \udfff",
    )
    store.append_turn(turn)
    back = list(store.iter_turns("s"))[0]
    assert back.request == turn.request and back.alignment.reason == "r \ud800"
    assert back.error == "e \\udfff"  # a plain text column: escaped
    store.close(compact=False)
