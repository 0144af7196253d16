"""Gemini API dialect, driven by the official ``google-genai`` SDK against a live server (and, for the
wire shape, by the requests the Gemini CLI sends)."""

from __future__ import annotations

import json

import httpx
import pytest
from google import genai
from google.genai import errors as genai_errors
from google.genai import types
from gw_helpers import SAMPLED_CALLS, TOOLS_OPENAI, check_samples_exact

from legorl.errors import EngineOverloadedError, GatewayError
from legorl.gateway.dialects.gemini import Gemini
from legorl.gateway.renderer import format_tool_call
from legorl.trajectory.builder import build_samples

TOOLS = [
    types.Tool(
        function_declarations=[
            types.FunctionDeclaration(
                name=t["function"]["name"],
                description=t["function"]["description"],
                parameters_json_schema=t["function"]["parameters"],
            )
            for t in TOOLS_OPENAI
        ]
    )
]
# the SDK would call Python functions itself; these are declarations the client answers
NO_AUTO_CALLS = types.AutomaticFunctionCallingConfig(disable=True)


def sdk(live, token: str) -> genai.Client:
    """The official client pointed at the gateway (as GOOGLE_GEMINI_BASE_URL would), no retries."""
    options = types.HttpOptions(base_url=live.srv.root_url, retry_options=types.HttpRetryOptions(attempts=1))
    return genai.Client(api_key=token, http_options=options)


def url(live, method: str, model: str = "gemini-2.5-pro") -> str:
    return f"{live.srv.root_url}/v1beta/models/{model}:{method}"


def data_lines(resp: httpx.Response) -> list[dict]:
    """The chunks of a Gemini SSE body: ``data:`` lines only (no ``event:`` lines, no end marker)."""
    lines = [ln for ln in resp.iter_lines() if ln]
    assert all(ln.startswith("data: ") for ln in lines), lines
    return [json.loads(ln[6:]) for ln in lines]


# The body the Gemini CLI sends (0.61, gateway auth: GOOGLE_GEMINI_BASE_URL + GEMINI_API_KEY): a
# system instruction with a role, parametersJsonSchema, thinkingConfig, thought signatures on
# function calls, function responses as {"output": ...}.
CLI_BODY = {
    "contents": [
        {"role": "user", "parts": [{"text": "<session_context>cwd: /repo</session_context>"}, {"text": "list files"}]},
        {
            "role": "model",
            "parts": [
                {"text": "Listing."},
                {
                    "functionCall": {"id": "c-1", "name": "bash", "args": {"cmd": "ls"}},
                    "thoughtSignature": "skip_thought_signature_validator",
                },
            ],
        },
        {
            "role": "user",
            "parts": [{"functionResponse": {"id": "c-1", "name": "bash", "response": {"output": "a.py"}}}],
        },
    ],
    "systemInstruction": {"role": "user", "parts": [{"text": "You are an interactive CLI agent."}]},
    "tools": [
        {"functionDeclarations": [{"name": "bash", "parametersJsonSchema": TOOLS_OPENAI[0]["function"]["parameters"]}]}
    ],
    "generationConfig": {"temperature": 1, "topP": 0.95, "thinkingConfig": {"includeThoughts": True}},
}


# ----------------------------------------------------------------------------- fast


def test_text_sampling_and_usage(fake):
    gw, eng, live = fake
    eng.replies = ["Blue.", "one two STOP three", "a b c d e f g h"]
    token = gw.open_session("g-text")
    c = sdk(live, token)
    config = types.GenerateContentConfig(system_instruction="Be terse.", temperature=0.3, max_output_tokens=20)
    r = c.models.generate_content(model="gemini-2.5-flash", contents="Name a color.", config=config)
    turn = gw.session_turns(token)[0]
    assert r.text == "Blue." and r.candidates[0].finish_reason == types.FinishReason.STOP
    assert r.model_version == gw.model_name and r.response_id
    usage = r.usage_metadata
    assert (usage.prompt_token_count, usage.candidates_token_count) == (
        len(turn.prompt_token_ids),
        len(turn.output_token_ids),
    )
    assert usage.total_token_count == usage.prompt_token_count + usage.candidates_token_count
    assert turn.dialect == "gemini.generate_content" and not turn.failed
    assert (turn.sampling["temperature"], turn.sampling["max_tokens"]) == (0.3, 20)
    assert gw.renderer.decode(turn.prompt_token_ids).startswith("<|im_start|>system\nBe terse.<|im_end|>")
    r = c.models.generate_content(
        model="m", contents="x", config=types.GenerateContentConfig(stop_sequences=["STOP"], seed=3)
    )
    assert (r.text, r.candidates[0].finish_reason) == ("one two", types.FinishReason.STOP)
    r = c.models.generate_content(model="m", contents="y", config=types.GenerateContentConfig(max_output_tokens=3))
    assert r.candidates[0].finish_reason == types.FinishReason.MAX_TOKENS
    assert r.usage_metadata.candidates_token_count == 3


def test_stream_wire_shape_sdk_stream_and_json_array(fake):
    gw, eng, live = fake
    reply = "Hello streamed text."
    eng.replies = [reply, reply, reply]
    token = gw.open_session("g-stream")
    body = {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}
    with httpx.stream(
        "POST", url(live, "streamGenerateContent") + "?alt=sse", json=body, headers={"x-goog-api-key": token}
    ) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        chunks = data_lines(r)
    assert len(chunks) > 2 and len({ch["responseId"] for ch in chunks}) == 1
    assert all("finishReason" not in ch["candidates"][0] for ch in chunks[:-1])
    last = chunks[-1]
    assert last["candidates"][0]["finishReason"] == "STOP"
    turn = gw.session_turns(token)[0]
    assert last["usageMetadata"]["candidatesTokenCount"] == len(turn.output_token_ids)
    assert "".join(p.get("text", "") for ch in chunks for p in ch["candidates"][0]["content"]["parts"]) == reply
    stored = turn.response  # the last chunk is the stored response but for the text streamed before it
    assert {**last, "candidates": None} == {k: v for k, v in stored.items() if k != "x_legorl"} | {"candidates": None}
    assert {**last["candidates"][0], "content": None} == {**stored["candidates"][0], "content": None}

    c = sdk(live, token)  # held: a client that is garbage collected closes its connection pool
    texts = [ch.text for ch in c.models.generate_content_stream(model="m", contents="hi")]
    assert "".join(t or "" for t in texts) == reply

    # without alt=sse: Google's JSON array of chunks (one here)
    r = httpx.post(url(live, "streamGenerateContent"), json=body, headers={"x-goog-api-key": token})
    assert r.status_code == 200 and r.json()[0]["candidates"][0]["content"]["parts"] == [{"text": reply}]


def test_function_call_roundtrip_extends_the_sampled_tokens(fake):
    """functionDeclarations -> a functionCall (streamed) -> the client's functionResponse -> the answer;
    the client sends the model turn back as it received it, so the second call extends the first."""
    gw, eng, live = fake
    eng.replies = ["Checking.\n" + format_tool_call("bash", {"cmd": "ls", "timeout": 5}), "There is a.py."]
    token = gw.open_session("g-tools")
    c = sdk(live, token)
    config = types.GenerateContentConfig(
        system_instruction="You are a coding agent.", tools=TOOLS, automatic_function_calling=NO_AUTO_CALLS
    )
    history = [types.Content(role="user", parts=[types.Part.from_text(text="List the files.")])]
    chunks = list(c.models.generate_content_stream(model="m", contents=history, config=config))
    text = "".join(ch.text or "" for ch in chunks if ch.candidates[0].content.parts[0].text is not None)
    calls = [fc for ch in chunks for fc in ch.function_calls or []]
    assert text == "Checking." and chunks[-1].candidates[0].finish_reason == types.FinishReason.STOP
    assert len(calls) == 1 and (calls[0].name, calls[0].args) == ("bash", {"cmd": "ls", "timeout": 5})
    assert calls[0].id.startswith("call_")
    # what a client holds after the stream: the text, then the call
    history.append(
        types.Content(role="model", parts=[types.Part.from_text(text=text), types.Part(function_call=calls[0])])
    )
    answer = types.FunctionResponse(id=calls[0].id, name="bash", response={"output": "a.py"})
    history.append(types.Content(role="user", parts=[types.Part(function_response=answer)]))
    r = c.models.generate_content(model="m", contents=history, config=config)
    assert r.text == "There is a.py."
    turns = gw.session_turns(token)
    assert [t.alignment.kind for t in turns] == ["start", "extend"]
    assert "<tool_response>\na.py\n</tool_response>" in gw.renderer.decode(turns[1].prompt_token_ids)
    (sample,) = build_samples(turns, "g-tools")
    sampled = [t for turn in turns for t in turn.output_token_ids]
    assert [t for m, t in zip(sample.loss_mask, sample.token_ids) if m] == sampled  # every sampled id, unchanged


def test_gemini_cli_request_shape(fake):
    """The Gemini CLI's body (camelCase, thought signatures, parametersJsonSchema, thinkingConfig) is
    accepted; the function response renders as its output."""
    gw, eng, live = fake
    eng.replies = ["Found a.py."]
    token = gw.open_session("g-cli")
    headers = {"x-goog-api-key": token, "User-Agent": "GeminiCLI/0.61.0/gemini-2.5-pro (linux; x64; terminal)"}
    with httpx.stream("POST", url(live, "streamGenerateContent") + "?alt=sse", json=CLI_BODY, headers=headers) as r:
        assert r.status_code == 200
        chunks = data_lines(r)
    assert chunks[-1]["candidates"][0]["finishReason"] == "STOP"
    prompt = gw.renderer.decode(gw.session_turns(token)[0].prompt_token_ids)
    assert prompt.startswith("<|im_start|>system\nYou are an interactive CLI agent.\n\n# Tools")
    assert "<session_context>cwd: /repo</session_context>\nlist files" in prompt
    assert '<tool_call>\n{"name": "bash", "arguments": {"cmd": "ls"}}\n</tool_call>' in prompt
    assert "<tool_response>\na.py\n</tool_response>" in prompt


def test_count_tokens(fake):
    gw, eng, live = fake
    token = gw.open_session("g-count")
    c = sdk(live, token)
    n = c.models.count_tokens(model="m", contents="hello world").total_tokens
    assert n == len(gw.renderer.render_prompt([{"role": "user", "content": "hello world"}]))
    body = {"generateContentRequest": {k: CLI_BODY[k] for k in ("contents", "systemInstruction", "tools")}}
    r = httpx.post(url(live, "countTokens"), json=body, headers={"x-goog-api-key": token})
    assert r.status_code == 200 and r.json()["totalTokens"] > n
    assert gw.session_turns(token) == []  # counting is not a model call


def test_errors_in_googles_shape(fake):
    gw, eng, live = fake
    token = gw.open_session("g-errors")
    c = sdk(live, token)
    with pytest.raises(genai_errors.ClientError) as e:  # malformed: a content without parts
        c.models.generate_content(model="m", contents=[types.Content(role="user", parts=[])])
    assert (e.value.code, e.value.status) == (400, "INVALID_ARGUMENT")
    assert e.value.message == "* GenerateContentRequest.contents[0].parts: contents.parts must not be empty."
    (violation,) = e.value.details["error"]["details"]
    assert violation["@type"] == "type.googleapis.com/google.rpc.BadRequest"
    assert violation["fieldViolations"][0]["field"] == "contents[0].parts"

    def post(body=None, *, raw=None, headers=None, method="generateContent"):
        h = {"x-goog-api-key": token} if headers is None else headers
        return httpx.post(url(live, method), json=body, content=raw, headers={"content-type": "application/json", **h})

    def error_of(r, code):
        body = r.json()
        assert r.status_code == code and set(body) == {"error"} and body["error"]["code"] == code, r.text
        return body["error"]

    hi = {"contents": [{"parts": [{"text": "hi"}]}]}
    assert error_of(post(raw=b"{not json"), 400)["message"].startswith("Invalid JSON payload received.")
    err = error_of(post({**hi, "generationConfig": {"temperature": "hot"}}), 400)
    assert err["status"] == "INVALID_ARGUMENT" and "generation_config.temperature" in err["message"]
    err = error_of(post({**hi, "generationConfig": {"candidateCount": 2}}), 400)
    assert "generation_config.candidate_count" in err["message"]
    assert "contents is not specified" in error_of(post({"contents": []}), 400)["message"]
    err = error_of(post({"contents": [{"role": "assistant", "parts": [{"text": "x"}]}]}), 400)
    assert err["message"] == "Please use a valid role: user, model."
    assert error_of(post(hi, method="embedContent"), 404)["status"] == "NOT_FOUND"
    assert [t.failed for t in gw.session_turns(token)] == [True] * 6  # refused bodies are recorded, as failed

    stranger = sdk(live, "legorl-not-a-session")
    with pytest.raises(genai_errors.ClientError) as e:  # an unknown (or closed) session token
        stranger.models.generate_content(model="m", contents="hi")
    assert (e.value.code, e.value.status) == (401, "UNAUTHENTICATED")
    assert error_of(post(hi, headers={}), 403)["status"] == "PERMISSION_DENIED"  # no key at all
    assert post(hi, headers={}, method=f"generateContent?key={token}").status_code == 200  # key as a query parameter
    assert post(hi, headers={"Authorization": f"Bearer {token}"}).status_code == 200  # the CLI's bearer mechanism

    eng.replies = [EngineOverloadedError("busy")]
    with pytest.raises(genai_errors.ServerError) as e:
        c.models.generate_content(model="m", contents="hi")
    assert (e.value.code, e.value.status) == (503, "UNAVAILABLE")
    with pytest.raises(genai_errors.ClientError) as e:  # past the engine's context (512 tokens here)
        c.models.generate_content(model="m", contents="word " * 600)
    assert e.value.code == 400 and e.value.message.startswith("The input token count (")
    assert e.value.message.endswith("exceeds the maximum number of tokens allowed (512).")


def test_gateway_refusals_in_googles_vocabulary():
    """Budget and concurrency refusals and engine failures map to the statuses Google's clients know
    (the Gemini CLI retries 429 and 5xx, and waits a 429's RetryInfo)."""
    dialect = Gemini(None, "m")  # type: ignore[arg-type] - error bodies need no renderer
    busy = dialect.error_body(GatewayError(429, "too many calls in flight", code="concurrency_limit_exceeded"))
    assert busy["error"]["status"] == "RESOURCE_EXHAUSTED"
    assert busy["error"]["details"] == [{"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "1s"}]
    spent = dialect.error_body(GatewayError(403, "turn budget spent", code="budget_exhausted"))
    assert spent == {"error": {"code": 403, "message": "turn budget spent", "status": "PERMISSION_DENIED"}}
    late = dialect.error_body(GatewayError(504, "engine timed out", type="server_error", code="engine_timeout"))
    assert late["error"]["status"] == "DEADLINE_EXCEEDED"


# ----------------------------------------------------------------------------- slow (real model)


@pytest.mark.slow
def test_real_smollm2_text_stream_and_function_calls(real_gw):
    gw, eng, live = real_gw
    # text, then a streamed follow-up: real sampling with fixed seeds (the same texts on every run)
    token = gw.open_session("g-real-text")
    c = sdk(live, token)
    config = types.GenerateContentConfig(system_instruction="You are terse.", max_output_tokens=12, seed=1)
    history = [types.Content(role="user", parts=[types.Part.from_text(text="Name a color.")])]
    r = c.models.generate_content(model="m", contents=history, config=config)
    t0 = gw.session_turns(token)[0]
    assert r.usage_metadata.prompt_token_count == len(t0.prompt_token_ids)
    assert r.usage_metadata.candidates_token_count == len(t0.output_token_ids)
    history += [r.candidates[0].content, types.Content(role="user", parts=[types.Part.from_text(text="Another.")])]
    config.seed = 2
    chunks = list(c.models.generate_content_stream(model="m", contents=history, config=config))
    t1 = gw.session_turns(token)[1]
    assert "".join(ch.text or "" for ch in chunks) == gw.renderer.parse_output(t1.output_token_ids).content
    assert t1.alignment.kind == "extend"
    check_samples_exact(gw, token, "g-real-text")

    # function calls: the first model turn sent back as received (extend), the second with its
    # arguments re-serialized, keys reversed (realign); then a real answer
    eng.script = [SAMPLED_CALLS[0], SAMPLED_CALLS[2]]
    token = gw.open_session("g-real-tools")
    c = sdk(live, token)
    config = types.GenerateContentConfig(
        system_instruction="You are a coding agent.", tools=TOOLS, automatic_function_calling=NO_AUTO_CALLS
    )
    history = [types.Content(role="user", parts=[types.Part.from_text(text="Create a.py and run it.")])]
    for k in range(3):
        config.max_output_tokens = 16 if k == 2 else 64
        r = c.models.generate_content(model="m", contents=history, config=config)
        turn = gw.session_turns(token)[-1]
        assert r.usage_metadata.candidates_token_count == len(turn.output_token_ids)
        if k == 2:
            break
        (call,) = r.function_calls
        model_turn = r.candidates[0].content
        if k == 1:
            call = call.model_copy(update={"args": dict(reversed(list(call.args.items())))})
            model_turn = types.Content(role="model", parts=[*model_turn.parts[:-1], types.Part(function_call=call)])
        history.append(model_turn)
        answer = types.FunctionResponse(id=call.id, name=call.name, response={"output": f"result {k}"})
        history.append(types.Content(role="user", parts=[types.Part(function_response=answer)]))
    turns = gw.session_turns(token)
    print("gemini events:", [(t.alignment.kind, t.alignment.reason[:80]) for t in turns])
    assert [t.alignment.kind for t in turns] == ["start", "extend", "realign"]
    check_samples_exact(gw, token, "g-real-tools")
