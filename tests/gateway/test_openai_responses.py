"""OpenAI Responses dialect, driven by the official ``openai`` SDK against a live server."""

from __future__ import annotations

import json

import httpx
import openai
import pytest
from gw_helpers import SAMPLED_CALLS, TOOLS_RESPONSES, check_samples_exact, respell

from legorl.gateway.renderer import format_tool_call
from legorl.trajectory.builder import build_samples


def sdk(live, token):
    return openai.OpenAI(base_url=live.srv.base_url, api_key=token, max_retries=0)


def final_of(stream):
    """Iterate a ``responses.stream`` -> (text deltas, final response from ``response.completed``
    or ``response.incomplete``; the SDK's get_final_response only knows the former)."""
    deltas, final = [], None
    for e in stream:
        if e.type == "response.output_text.delta":
            deltas.append(e.delta)
        elif e.type in ("response.completed", "response.incomplete"):
            final = e.response
    assert final is not None
    return deltas, final


def calls_of(resp):
    return [o for o in resp.output if o.type == "function_call"]


# ----------------------------------------------------------------------------- fast


def test_stream_wire_shape(fake):
    gw, eng, live = fake
    eng.replies = ["Checking.\n" + format_tool_call("bash", {"cmd": "ls"})]
    token = gw.open_session("r-wire")
    body = {
        "model": "m",
        "input": "list files",
        "instructions": "Be brief.",
        "tools": TOOLS_RESPONSES,
        "stream": True,
        "reasoning": {"effort": "low"},
        "store": False,
    }
    with httpx.stream(
        "POST", live.srv.base_url + "/responses", json=body, headers={"Authorization": f"Bearer {token}"}, timeout=30
    ) as r:
        assert r.status_code == 200
        lines = [ln for ln in r.iter_lines() if ln]
    evs = []
    for a, b in zip(lines[::2], lines[1::2]):
        assert a.startswith("event: ") and b.startswith("data: ")
        d = json.loads(b[6:])
        assert d["type"] == a[7:]
        evs.append(d)
    kinds = [e["type"] for e in evs]
    assert [e["sequence_number"] for e in evs] == list(range(len(evs)))
    assert kinds[:4] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
    ]
    assert kinds[-1] == "response.completed"
    for k in (
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "response.output_item.done",
    ):
        assert k in kinds
    text = "".join(e["delta"] for e in evs if e["type"] == "response.output_text.delta")
    args = "".join(e["delta"] for e in evs if e["type"] == "response.function_call_arguments.delta")
    assert text == "Checking." and json.loads(args) == {"cmd": "ls"}
    final = evs[-1]["response"]
    t = gw.session_turns(token)[0]
    assert final["usage"]["input_tokens"] == len(t.prompt_token_ids) and final["usage"]["output_tokens"] == len(
        t.output_token_ids
    )
    assert final["id"] == evs[0]["response"]["id"] == t.response["id"]
    assert "Be brief." in gw.renderer.decode(t.prompt_token_ids)


def test_sdk_stream_helper_and_previous_response_id(fake):
    gw, eng, live = fake
    eng.replies = [format_tool_call("bash", {"cmd": "ls"}), "Two files.", "Bye."]
    token = gw.open_session("r-prev")
    c = sdk(live, token)
    with c.responses.stream(
        model="m", input=[{"role": "user", "content": "list"}], tools=TOOLS_RESPONSES, instructions="sys"
    ) as s:
        r1 = s.get_final_response()
    [fc] = calls_of(r1)
    assert fc.name == "bash" and json.loads(fc.arguments) == {"cmd": "ls"} and r1.status == "completed"
    r2 = c.responses.create(
        model="m",
        previous_response_id=r1.id,
        instructions="sys",
        tools=TOOLS_RESPONSES,
        input=[{"type": "function_call_output", "call_id": fc.call_id, "output": "a.py b.py"}],
    )
    assert r2.output_text == "Two files." and r2.previous_response_id == r1.id and r2.id != r1.id
    r3 = c.responses.create(
        model="m", previous_response_id=r2.id, instructions="sys", tools=TOOLS_RESPONSES, input="Thanks"
    )
    assert r3.output_text == "Bye."
    turns = gw.session_turns(token)
    assert [t.alignment.kind for t in turns][0] == "start" and "fork" not in [t.alignment.kind for t in turns]
    assert "<tool_response>\na.py b.py\n</tool_response>" in gw.renderer.decode(turns[2].prompt_token_ids)
    assert len(build_samples(turns, "r-prev")) == 1
    with pytest.raises(openai.BadRequestError) as ei:
        c.responses.create(model="m", previous_response_id="resp_nope", input="x")
    assert ei.value.code == "previous_response_not_found"


def test_incomplete_when_max_output_tokens(fake):
    gw, eng, live = fake
    eng.replies = ["a b c d e f g"]
    token = gw.open_session("r-inc")
    r = sdk(live, token).responses.create(model="m", input="x", max_output_tokens=2)
    assert (
        r.status == "incomplete" and r.incomplete_details.reason == "max_output_tokens" and r.usage.output_tokens == 2
    )


# ----------------------------------------------------------------------------- slow (real model)


@pytest.mark.slow
def test_real_text_stream_and_not(real_gw):
    gw, eng, live = real_gw
    token = gw.open_session("r-real-text")
    c = sdk(live, token)
    # fixed seeds: the same sampled texts on every run (the gateway takes ``seed`` as an extra field)
    r = c.responses.create(
        model="m", instructions="You are terse.", input="Name a color.", max_output_tokens=12, extra_body={"seed": 1}
    )
    t0 = gw.session_turns(token)[0]
    assert (r.usage.input_tokens, r.usage.output_tokens) == (len(t0.prompt_token_ids), len(t0.output_token_ids))
    with c.responses.stream(
        model="m",
        instructions="You are terse.",
        max_output_tokens=12,
        extra_body={"seed": 2},
        input=[
            {"role": "user", "content": "Name a color."},
            {"role": "assistant", "content": r.output_text},
            {"role": "user", "content": "Another."},
        ],
    ) as s:
        deltas, r2 = final_of(s)
    t1 = gw.session_turns(token)[1]
    assert "".join(deltas) == r2.output_text == gw.renderer.parse_output(t1.output_token_ids).content
    assert (r2.usage.input_tokens, r2.usage.output_tokens) == (len(t1.prompt_token_ids), len(t1.output_token_ids))
    assert t1.alignment.kind == "extend" and r2.id != r.id
    check_samples_exact(gw, token, "r-real-text")


@pytest.mark.slow
def test_real_five_turn_tool_session_realigns(real_gw):
    """The client resends the whole item list, re-serializing function_call arguments."""
    gw, eng, live = real_gw
    eng.script = list(SAMPLED_CALLS)
    token = gw.open_session("r-real-5")
    c = sdk(live, token)
    items: list[dict] = [{"role": "user", "content": "Create a.py and run it."}]
    ids, call_ids = [], []
    for k in range(5):
        kw = dict(
            model="m",
            instructions="You are a coding agent.",
            input=items,
            tools=TOOLS_RESPONSES,
            max_output_tokens=16 if k == 4 else 64,
        )
        if k % 2 == 0:
            with c.responses.stream(**kw) as s:
                _, r = final_of(s)
        else:
            r = c.responses.create(**kw)
        ids.append(r.id)
        turn = gw.session_turns(token)[-1]
        assert (r.usage.input_tokens, r.usage.output_tokens) == (len(turn.prompt_token_ids), len(turn.output_token_ids))
        if k < 4:
            fcs = calls_of(r)
            assert len(fcs) == 1, (k, r.output)
            call_ids.append(fcs[0].call_id)
            if r.output_text:
                items.append({"role": "assistant", "content": r.output_text})
            items.append(
                {
                    "type": "function_call",
                    "call_id": fcs[0].call_id,
                    "name": fcs[0].name,
                    "arguments": respell(json.loads(fcs[0].arguments), k + 1),
                }
            )
            items.append({"type": "function_call_output", "call_id": fcs[0].call_id, "output": f"result {k}"})
    assert len(set(ids)) == 5 and len(set(call_ids)) == 4
    turns = gw.session_turns(token)
    print("responses events:", [(t.alignment.kind, t.alignment.reason[:80]) for t in turns])
    assert [t.alignment.kind for t in turns] == ["start"] + ["realign"] * 4
    check_samples_exact(gw, token, "r-real-5")
