"""OpenAI Chat Completions dialect, driven by the official ``openai`` SDK against a live server.

Fast tests use :class:`FakeEngine` (no model); ``slow`` ones the real SmolLM2-135M engine
(:class:`ScriptedRealEngine`: scripted tool calls scored by the real model, real sampling
otherwise). Re-serialization: the client sends earlier tool-call arguments spelled differently
from what was sampled (see ``conftest.SAMPLED_CALLS`` / ``respell``).
"""

from __future__ import annotations

import json

import httpx
import openai
import pytest
from gw_helpers import SAMPLED_CALLS, TOOLS_OPENAI, check_samples_exact, respell

from legorl.gateway.renderer import format_tool_call
from legorl.trajectory.builder import build_samples


def sdk(live, token):
    return openai.OpenAI(base_url=live.srv.base_url, api_key=token, max_retries=0)


def collect(stream):
    """Accumulate an SDK chat stream -> dict(content, tool_calls, finish, usage, ids, n_chunks)."""
    out = {"content": "", "calls": {}, "finish": None, "usage": None, "ids": set(), "n": 0, "role": None}
    for ch in stream:
        out["ids"].add(ch.id)
        out["n"] += 1
        if ch.usage is not None:
            out["usage"] = ch.usage
        for c in ch.choices:
            d = c.delta
            out["role"] = out["role"] or d.role
            if d.content:
                out["content"] += d.content
            for tc in d.tool_calls or []:
                e = out["calls"].setdefault(tc.index, {"id": None, "name": None, "arguments": ""})
                if tc.id:
                    e["id"] = tc.id
                if tc.function is not None and tc.function.name:
                    e["name"] = tc.function.name
                if tc.function is not None and tc.function.arguments:
                    e["arguments"] += tc.function.arguments
            if c.finish_reason:
                out["finish"] = c.finish_reason
    out["calls"] = [out["calls"][i] for i in sorted(out["calls"])]
    return out


# ----------------------------------------------------------------------------- fast


def test_stream_wire_shape(fake):
    gw, eng, live = fake
    eng.replies = ["Hello there, friend."]
    token = gw.open_session("c-wire")
    body = {
        "model": "m",
        "messages": [{"role": "user", "content": "hi"}],
        "stream": True,
        "stream_options": {"include_usage": True},
        "reasoning_effort": "low",
        "prompt_cache_key": "k1",
        "max_completion_tokens": 40,
    }
    with httpx.stream(
        "POST",
        live.srv.base_url + "/chat/completions",
        json=body,
        headers={"Authorization": f"Bearer {token}"},
        timeout=30,
    ) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        lines = [ln for ln in r.iter_lines() if ln]
    assert all(ln.startswith("data: ") for ln in lines)
    assert lines[-1] == "data: [DONE]"
    chunks = [json.loads(ln[6:]) for ln in lines[:-1]]
    assert len({c["id"] for c in chunks}) == 1 and all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    assert text == "Hello there, friend."
    assert (
        len([c for c in chunks if c["choices"] and c["choices"][0]["delta"].get("content")]) >= 4
    )  # one chunk per token
    assert chunks[-2]["choices"][0]["finish_reason"] == "stop" and chunks[-2]["choices"][0]["delta"] == {}
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == len(
        gw.session_turns(token)[0].output_token_ids
    )
    t = gw.session_turns(token)[0]
    assert chunks[-1]["usage"]["prompt_tokens"] == len(t.prompt_token_ids) and t.response["id"] == chunks[0]["id"]
    assert t.request["reasoning_effort"] == "low"


def test_stream_tool_calls_via_sdk(fake):
    gw, eng, live = fake
    eng.replies = [
        "Sure.\n"
        + format_tool_call("bash", {"cmd": "ls"})
        + "\n"
        + format_tool_call("write", {"path": "a", "text": "b"})
    ]
    token = gw.open_session("c-tools")
    s = collect(
        sdk(live, token).chat.completions.create(
            model="m",
            messages=[{"role": "user", "content": "go"}],
            tools=TOOLS_OPENAI,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    assert s["finish"] == "tool_calls" and s["content"] == "Sure." and s["role"] == "assistant"
    assert [(c["name"], json.loads(c["arguments"])) for c in s["calls"]] == [
        ("bash", {"cmd": "ls"}),
        ("write", {"path": "a", "text": "b"}),
    ]
    assert all(c["id"].startswith("call_") for c in s["calls"]) and len({c["id"] for c in s["calls"]}) == 2
    assert s["usage"].completion_tokens == len(gw.session_turns(token)[0].output_token_ids)
    # without include_usage: no usage chunk
    s2 = collect(
        sdk(live, token).chat.completions.create(
            model="m", messages=[{"role": "user", "content": "again"}], stream=True
        )
    )
    assert s2["usage"] is None and s2["content"] == "ok" and not (s2["ids"] & s["ids"])


# ----------------------------------------------------------------------------- slow (real model)


@pytest.mark.slow
def test_real_text_stream_and_not(real_gw):
    gw, eng, live = real_gw
    token = gw.open_session("c-real-text")
    c = sdk(live, token)
    msgs = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Name a color."}]
    r = c.chat.completions.create(model="m", messages=msgs, max_tokens=12, seed=1)
    t0 = gw.session_turns(token)[0]
    assert r.usage.prompt_tokens == len(t0.prompt_token_ids) and r.usage.completion_tokens == len(t0.output_token_ids)
    assert r.choices[0].message.content == gw.renderer.parse_output(t0.output_token_ids).content
    msgs += [{"role": "assistant", "content": r.choices[0].message.content}, {"role": "user", "content": "Another."}]
    s = collect(
        c.chat.completions.create(
            model="m", messages=msgs, max_tokens=12, seed=2, stream=True, stream_options={"include_usage": True}
        )
    )
    t1 = gw.session_turns(token)[1]
    assert s["usage"].prompt_tokens == len(t1.prompt_token_ids) and s["usage"].completion_tokens == len(
        t1.output_token_ids
    )
    assert s["content"] == gw.renderer.parse_output(t1.output_token_ids).content
    assert s["ids"] == {t1.response["id"]} and r.id != t1.response["id"]
    assert t1.alignment.kind == "extend"
    check_samples_exact(gw, token, "c-real-text")


@pytest.mark.slow
def test_real_five_turn_tool_session_realigns(real_gw):
    """4 scripted tool calls (spelled unlike the canonical format) + 1 real answer; the client
    re-serializes every earlier call's arguments differently again. Streams on turns 0, 2, 4."""
    gw, eng, live = real_gw
    eng.script = list(SAMPLED_CALLS)
    token = gw.open_session("c-real-5")
    c = sdk(live, token)
    msgs = [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": "Create a.py and run it."},
    ]
    ids, call_ids = [], []
    for k in range(5):
        kw = dict(model="m", messages=msgs, tools=TOOLS_OPENAI, max_tokens=16 if k == 4 else 64, seed=k)
        if k % 2 == 0:
            s = collect(c.chat.completions.create(stream=True, stream_options={"include_usage": True}, **kw))
            content, calls, finish, usage = s["content"], s["calls"], s["finish"], s["usage"]
            ids += list(s["ids"])
        else:
            r = c.chat.completions.create(**kw)
            m = r.choices[0].message
            content, finish, usage = m.content or "", r.choices[0].finish_reason, r.usage
            calls = [
                {"id": tc.id, "name": tc.function.name, "arguments": tc.function.arguments} for tc in m.tool_calls or []
            ]
            ids.append(r.id)
        turn = gw.session_turns(token)[-1]
        assert (usage.prompt_tokens, usage.completion_tokens) == (
            len(turn.prompt_token_ids),
            len(turn.output_token_ids),
        )
        if k < 4:
            assert finish == "tool_calls" and len(calls) == 1, (k, content, calls)
            call_ids += [x["id"] for x in calls]
            msgs.append(
                {
                    "role": "assistant",
                    "content": content or None,
                    "tool_calls": [
                        {
                            "id": x["id"],
                            "type": "function",
                            "function": {"name": x["name"], "arguments": respell(json.loads(x["arguments"]), k)},
                        }
                        for x in calls
                    ],
                }
            )
            msgs.append({"role": "tool", "tool_call_id": calls[0]["id"], "content": f"result {k}"})
    assert len(set(ids)) == 5 and len(set(call_ids)) == 4
    turns = gw.session_turns(token)
    kinds = [t.alignment.kind for t in turns]
    print("chat events:", [(t.alignment.kind, t.alignment.reason[:80]) for t in turns])
    assert kinds == ["start"] + ["realign"] * 4
    check_samples_exact(gw, token, "c-real-5")


@pytest.mark.slow
def test_real_compaction_and_subagent_make_new_segments(real_gw):
    gw, eng, live = real_gw
    token = gw.open_session("c-real-seg")
    c = sdk(live, token)
    sys = {"role": "system", "content": "You are a coding agent."}
    msgs = [sys, {"role": "user", "content": "Say hi."}]
    r = c.chat.completions.create(model="m", messages=msgs, tools=TOOLS_OPENAI, max_tokens=8, seed=3)
    msgs += [
        {"role": "assistant", "content": r.choices[0].message.content or ""},
        {"role": "user", "content": "Again."},
    ]
    c.chat.completions.create(model="m", messages=msgs, tools=TOOLS_OPENAI, max_tokens=8, seed=4)
    # OpenCode-style compaction: history replaced by a summary
    c.chat.completions.create(
        model="m",
        tools=TOOLS_OPENAI,
        max_tokens=8,
        seed=5,
        messages=[
            sys,
            {
                "role": "user",
                "content": "Summary of the conversation so far: the user asked for greetings twice. Continue.",
            },
        ],
    )
    # OpenCode child session (task tool)
    c.chat.completions.create(
        model="m",
        messages=[sys, {"role": "user", "content": "Sub task: say bye."}],
        tools=TOOLS_OPENAI,
        max_tokens=8,
        seed=6,
        extra_headers={"x-session-id": "child-1", "x-parent-session-id": "main"},
    )
    turns = gw.session_turns(token)
    assert [(t.thread_id, t.alignment.kind) for t in turns] == [
        ("main", "start"),
        ("main", "extend"),
        ("main", "fork"),
        ("child-1", "start"),
    ]
    assert turns[2].alignment.segment_kind == "compaction" and turns[2].alignment.segment_index == 1
    assert turns[3].alignment.parent_thread_id == "main"
    samples = build_samples(turns, "c-real-seg")
    assert [(s.thread_id, s.segment_index) for s in samples] == [("main", 0), ("main", 1), ("child-1", 0)]
    check_samples_exact(gw, token, "c-real-seg", expect_samples=3)
