"""Anthropic Messages dialect, driven by the official ``anthropic`` SDK against a live server."""

from __future__ import annotations

import json

import anthropic
import httpx
import pytest
from gw_helpers import SAMPLED_CALLS, TOOLS_ANTHROPIC, check_samples_exact

from legorl.gateway.renderer import format_tool_call
from legorl.trajectory.builder import build_samples


def sdk(live, token, bearer=False):
    if bearer:  # Claude Code: ANTHROPIC_AUTH_TOKEN -> Authorization: Bearer
        return anthropic.Anthropic(base_url=live.srv.root_url, auth_token=token, max_retries=0)
    return anthropic.Anthropic(base_url=live.srv.root_url, api_key=token, max_retries=0)


def sse_events(resp):
    """(event line, data) pairs of an SSE body; asserts every data line has its event line."""
    out, event = [], None
    for ln in resp.iter_lines():
        if ln.startswith("event: "):
            event = ln[7:]
        elif ln.startswith("data: "):
            data = json.loads(ln[6:])
            assert event == data["type"], (event, data)
            out.append((event, data))
            event = None
    return out


CLAUDE_CODE_BODY = {
    "model": "claude-sonnet-4-5",
    "max_tokens": 64,
    "stream": True,
    "system": [
        {"type": "text", "text": "You are Claude Code.", "cache_control": {"type": "ephemeral"}},
        {"type": "text", "text": "Be brief."},
    ],
    "messages": [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "<system-reminder>ctx</system-reminder>"},
                {"type": "text", "text": "list files", "cache_control": {"type": "ephemeral"}},
            ],
        },
        {"role": "system", "content": "Extra system note."},
    ],
    "tools": TOOLS_ANTHROPIC + [{"type": "web_search_20250305", "name": "web_search", "max_uses": 1}],
    "thinking": {"type": "enabled", "budget_tokens": 1024},
    "context_management": {"edits": []},
    "output_config": {"effort": "low"},
    "metadata": {"user_id": "u"},
    "tool_choice": {"type": "auto"},
}


# ----------------------------------------------------------------------------- fast


def test_stream_wire_shape_claude_code_request(fake):
    gw, eng, live = fake
    eng.replies = ["On it.\n" + format_tool_call("bash", {"cmd": "ls -la"})]
    token = gw.open_session("a-wire")
    with httpx.stream(
        "POST",
        live.srv.root_url + "/v1/messages?beta=true",
        json=CLAUDE_CODE_BODY,
        headers={"Authorization": f"Bearer {token}", "anthropic-version": "2023-06-01"},
        timeout=30,
    ) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        evs = sse_events(r)
    kinds = [e for e, _ in evs]
    assert kinds[0] == "message_start" and kinds[-2:] == ["message_delta", "message_stop"]
    assert kinds[1:4] == ["content_block_start", "content_block_delta", "content_block_delta"]
    start = evs[0][1]["message"]
    assert start["id"].startswith("msg_") and start["content"] == [] and start["role"] == "assistant"
    blocks: dict[int, dict] = {}
    for e, d in evs:
        if e == "content_block_start":
            blocks[d["index"]] = {**d["content_block"], "_json": ""}
        elif e == "content_block_delta":
            b = blocks[d["index"]]
            if d["delta"]["type"] == "text_delta":
                b["text"] += d["delta"]["text"]
            else:
                assert d["delta"]["type"] == "input_json_delta"
                b["_json"] += d["delta"]["partial_json"]
    assert blocks[0]["text"] == "On it."
    assert (
        blocks[1]["type"] == "tool_use"
        and blocks[1]["name"] == "bash"
        and json.loads(blocks[1]["_json"]) == {"cmd": "ls -la"}
    )
    assert blocks[1]["id"].startswith("toolu_")
    delta = evs[-2][1]
    t = gw.session_turns(token)[0]
    assert delta["delta"]["stop_reason"] == "tool_use" and delta["usage"]["output_tokens"] == len(t.output_token_ids)
    u = delta["usage"]
    assert u["input_tokens"] + u["cache_read_input_tokens"] == len(t.prompt_token_ids)
    prompt = gw.renderer.decode(t.prompt_token_ids)
    assert "You are Claude Code.\n\nBe brief." in prompt and "web_search" not in prompt
    # a mid-conversation system entry stays in place (as user text), the system prompt is unchanged
    assert prompt.index("Extra system note.") > prompt.index("list files")
    assert "<system-reminder>ctx</system-reminder>\nlist files" in prompt


def test_sdk_stream_tools_roundtrip_and_count_tokens(fake):
    gw, eng, live = fake
    eng.replies = [format_tool_call("bash", {"cmd": "ls"}), "Done: a.py"]
    token = gw.open_session("a-sdk")
    c = sdk(live, token)
    msgs = [{"role": "user", "content": "list files"}]
    with c.messages.stream(model="m", max_tokens=50, messages=msgs, tools=TOOLS_ANTHROPIC, system="sys") as s:
        m1 = s.get_final_message()
    assert m1.stop_reason == "tool_use" and m1.content[-1].type == "tool_use" and m1.content[-1].input == {"cmd": "ls"}
    msgs += [
        {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in m1.content]},
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": m1.content[-1].id,
                    "content": [{"type": "text", "text": "a.py"}],
                    "cache_control": {"type": "ephemeral"},
                }
            ],
        },
    ]
    n = c.messages.count_tokens(model="m", messages=msgs, tools=TOOLS_ANTHROPIC, system="sys").input_tokens
    m2 = c.beta.messages.create(
        model="m", max_tokens=50, messages=msgs, tools=TOOLS_ANTHROPIC, system="sys"
    )  # ?beta=true
    assert m2.content[0].text == "Done: a.py" and m2.stop_reason == "end_turn" and m2.id != m1.id
    turns = gw.session_turns(token)
    assert n == len(turns[1].prompt_token_ids)
    assert turns[1].alignment.kind in ("extend", "realign")
    assert "<tool_response>\na.py\n</tool_response>" in gw.renderer.decode(turns[1].prompt_token_ids)
    assert m2.usage.input_tokens + (m2.usage.cache_read_input_tokens or 0) == len(turns[1].prompt_token_ids)


def test_stop_sequences_and_max_tokens(fake):
    gw, eng, live = fake
    eng.replies = ["one two STOP three", "a b c d e f g h"]
    token = gw.open_session("a-stop")
    c = sdk(live, token, bearer=True)
    m = c.messages.create(
        model="m", max_tokens=50, messages=[{"role": "user", "content": "x"}], stop_sequences=["STOP"]
    )
    assert (m.stop_reason, m.stop_sequence, m.content[0].text) == ("stop_sequence", "STOP", "one two")
    m = c.messages.create(model="m", max_tokens=3, messages=[{"role": "user", "content": "y"}])
    assert m.stop_reason == "max_tokens" and m.usage.output_tokens == 3


# ----------------------------------------------------------------------------- slow (real model)


@pytest.mark.slow
def test_real_text_stream_and_not(real_gw):
    gw, eng, live = real_gw
    token = gw.open_session("a-real-text")
    c = sdk(live, token)
    msgs = [{"role": "user", "content": "Name a color."}]
    # fixed seeds: the same sampled texts on every run (the gateway takes ``seed`` as an extra field)
    m = c.messages.create(model="m", max_tokens=12, system="You are terse.", messages=msgs, extra_body={"seed": 1})
    t0 = gw.session_turns(token)[0]
    assert m.usage.input_tokens + m.usage.cache_read_input_tokens == len(t0.prompt_token_ids)
    assert m.usage.output_tokens == len(t0.output_token_ids)
    msgs += [
        {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in m.content]},
        {"role": "user", "content": "Another."},
    ]
    with c.messages.stream(
        model="m", max_tokens=12, system="You are terse.", messages=msgs, extra_body={"seed": 2}
    ) as s:
        texts = list(s.text_stream)
        m2 = s.get_final_message()
    t1 = gw.session_turns(token)[1]
    assert "".join(texts) == m2.content[0].text == gw.renderer.parse_output(t1.output_token_ids).content
    assert m2.usage.output_tokens == len(t1.output_token_ids) and m2.id != m.id
    assert t1.alignment.kind == "extend"
    check_samples_exact(gw, token, "a-real-text")


@pytest.mark.slow
def test_real_five_turn_tool_session_realigns(real_gw):
    """Claude Code stores parsed tool inputs: the client sends them back with keys reordered."""
    gw, eng, live = real_gw
    eng.script = list(SAMPLED_CALLS)
    token = gw.open_session("a-real-5")
    c = sdk(live, token, bearer=True)
    msgs = [{"role": "user", "content": "Create a.py and run it."}]
    ids, tool_ids = [], []
    for k in range(5):
        kw = dict(
            model="m",
            max_tokens=16 if k == 4 else 64,
            system="You are a coding agent.",
            messages=msgs,
            tools=TOOLS_ANTHROPIC,
        )
        if k % 2 == 0:
            with c.messages.stream(**kw) as s:
                m = s.get_final_message()
        else:
            m = c.messages.create(**kw)
        ids.append(m.id)
        turn = gw.session_turns(token)[-1]
        assert m.usage.input_tokens + m.usage.cache_read_input_tokens == len(turn.prompt_token_ids)
        assert m.usage.output_tokens == len(turn.output_token_ids)
        if k < 4:
            assert m.stop_reason == "tool_use", (k, m.content)
            blocks = []
            for b in m.content:
                if b.type == "tool_use":
                    tool_ids.append(b.id)
                    blocks.append(
                        {"type": "tool_use", "id": b.id, "name": b.name, "input": dict(reversed(list(b.input.items())))}
                    )
                elif b.text:
                    blocks.append({"type": "text", "text": b.text})
            msgs.append({"role": "assistant", "content": blocks})
            msgs.append(
                {
                    "role": "user",
                    "content": [{"type": "tool_result", "tool_use_id": tool_ids[-1], "content": f"result {k}"}],
                }
            )
    assert len(set(ids)) == 5 and len(set(tool_ids)) == 4
    turns = gw.session_turns(token)
    print("anthropic events:", [(t.alignment.kind, t.alignment.reason[:80]) for t in turns])
    assert [t.alignment.kind for t in turns] == ["start"] + ["realign"] * 4
    check_samples_exact(gw, token, "a-real-5")


@pytest.mark.slow
def test_real_compaction_and_subagent_make_new_segments(real_gw):
    gw, eng, live = real_gw
    token = gw.open_session("a-real-seg")
    c = sdk(live, token, bearer=True)
    kw = dict(model="m", max_tokens=8, system="You are Claude Code.", tools=TOOLS_ANTHROPIC)
    msgs = [{"role": "user", "content": "Say hi."}]
    m = c.messages.create(messages=msgs, **kw)
    msgs += [
        {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in m.content]},
        {"role": "user", "content": "Again."},
    ]
    c.messages.create(messages=msgs, **kw)
    c.messages.create(
        messages=[
            {
                "role": "user",
                "content": "This session is being continued from a previous conversation that ran out "
                "of context. Summary: the user asked for greetings twice.",
            }
        ],
        **kw,
    )
    c.messages.create(
        messages=[{"role": "user", "content": "Explore the repo."}],
        extra_headers={"x-claude-code-agent-id": "agent-7"},
        **kw,
    )
    turns = gw.session_turns(token)
    assert [(t.thread_id, t.alignment.kind) for t in turns] == [
        ("main", "start"),
        ("main", "extend"),
        ("main", "fork"),
        ("agent-7", "start"),
    ]
    assert turns[2].alignment.segment_kind == "compaction"
    assert turns[3].alignment.segment_kind == "subagent" and turns[3].alignment.parent_thread_id == "main"
    samples = build_samples(turns, "a-real-seg")
    assert [(s.thread_id, s.segment_index) for s in samples] == [("main", 0), ("main", 1), ("agent-7", 0)]
    check_samples_exact(gw, token, "a-real-seg", expect_samples=3)
