"""Sessions, threads and segments over real HTTP: isolation between sessions, header and content
routing, parent links. Uses a zero-cost engine (fixed token ids, instantly)."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from legorl.bench.gateway import zero_engine_for
from legorl.gateway.app import Gateway
from legorl.gateway.renderer import (
    ChatTemplateRenderer,
    load_smollm2_gguf_tokenizer,
    normalize_messages,
)
from legorl.gateway.server import GatewayServer
from legorl.gateway.sessions import SessionRegistry, thread_info_from_headers
from legorl.trajectory.builder import build_samples
from legorl.trajectory.store import RunStore

TOOLS = [{"type": "function", "function": {"name": "bash", "parameters": {"type": "object"}}}]


@pytest.fixture(scope="module")
def tok():
    return load_smollm2_gguf_tokenizer()


@pytest.fixture
def gw(tok, tmp_path):
    return Gateway(
        zero_engine_for(tok, 6), ChatTemplateRenderer(tok), SessionRegistry(), RunStore(tmp_path / "run"), "zero"
    )


def test_thread_headers():
    assert thread_info_from_headers({}) == ("main", None, False)
    assert thread_info_from_headers({"x-claude-code-agent-id": "a1"}) == ("a1", "main", False)
    assert thread_info_from_headers({"x-session-id": "c", "x-parent-session-id": "p"}) == ("c", "p", False)
    assert thread_info_from_headers({"x-legorl-thread": "t", "x-session-id": "c"}) == ("t", None, True)


async def _post(c, token, messages, headers=None, tools=None):
    body = {"model": "zero", "messages": messages, "max_tokens": 32}
    if tools:
        body["tools"] = tools
    r = await c.post("/chat/completions", json=body, headers={"Authorization": f"Bearer {token}", **(headers or {})})
    r.raise_for_status()
    j = r.json()
    return j["choices"][0]["message"], j["x_legorl"]


async def test_64_concurrent_sessions_isolated(gw):
    n = 64
    tokens = {f"r{i}": gw.open_session(f"r{i}") for i in range(n)}

    async def agent(c, rid, token):
        sys_msg = {"role": "system", "content": "agent"}
        # identical content in every session: only the token may separate them
        msgs = [sys_msg, {"role": "user", "content": "fix the bug"}]
        seen = []
        for step in range(3):
            msg, x = await _post(c, token, msgs, tools=TOOLS)
            seen.append(x)
            msgs = msgs + [msg, {"role": "user", "content": f"step {step}"}]
            if step == 0:  # a side request (title) and a sub-agent (Claude Code header) in between
                _, xs = await _post(
                    c, token, [{"role": "system", "content": "title"}, {"role": "user", "content": "fix the bug"}]
                )
                _, xa = await _post(
                    c,
                    token,
                    [sys_msg, {"role": "user", "content": "sub task"}],
                    {"x-claude-code-agent-id": "ag1"},
                    TOOLS,
                )
                seen += [xs, xa]
            await asyncio.sleep(0)
        return seen

    async with GatewayServer(gw, port=0) as srv:
        async with httpx.AsyncClient(base_url=srv.base_url, timeout=60) as c:
            results = await asyncio.gather(*[agent(c, rid, tok) for rid, tok in tokens.items()])
            # a closed session's token stops working
            gw.close_session(tokens["r0"])
            r = await c.post(
                "/chat/completions",
                json={"messages": [{"role": "user", "content": "x"}]},
                headers={"Authorization": f"Bearer {tokens['r0']}"},
            )
            assert r.status_code == 401
    for (rid, _token), seen in zip(tokens.items(), results):
        assert {x["session_id"] for x in seen} == {rid}
        kinds = [(x["thread_id"], x["alignment"], x["segment_index"]) for x in seen]
        assert kinds == [
            ("main", "start", 0),
            ("main", "fork", 1),
            ("ag1", "start", 0),
            ("main", "extend", 0),
            ("main", "extend", 0),
        ]
    store = gw.store
    all_turns = list(store.iter_turns())
    assert len(all_turns) == 5 * n
    for rid in tokens:
        turns = list(store.iter_turns(rid))
        assert len(turns) == 5 and {t.session_id for t in turns} == {rid}
        assert sorted(t.turn_index for t in turns) == list(range(5))
        samples = build_samples(turns, rid)
        assert sorted((s.thread_id, s.segment_index, s.segment_kind) for s in samples) == [
            ("ag1", 0, "subagent"),
            ("main", 0, "main"),
            ("main", 1, "side"),
        ]
        sub = next(s for s in samples if s.thread_id == "ag1")
        assert sub.parent_thread_id == "main"
        assert sum(s.num_sampled for s in samples) == sum(len(t.output_token_ids) for t in turns)


async def test_content_routing_and_parent_links(gw):
    token = gw.open_session("route")
    other = gw.open_session("other")
    async with GatewayServer(gw, port=0) as srv:
        async with httpx.AsyncClient(base_url=srv.base_url, timeout=60) as c:
            main = [{"role": "system", "content": "main"}, {"role": "user", "content": "task"}]
            m1, x1 = await _post(c, token, main, tools=TOOLS)
            # OpenCode child session: its own thread with the parent link
            child = [{"role": "system", "content": "main"}, {"role": "user", "content": "child task"}]
            c1, xc = await _post(c, token, child, {"x-session-id": "ses_child", "x-parent-session-id": "main"}, TOOLS)
            assert (xc["thread_id"], xc["alignment"]) == ("ses_child", "start")
            # the child's next request arrives *without* headers: routed to the child by content
            c2, xc2 = await _post(c, token, child + [c1, {"role": "user", "content": "more"}], tools=TOOLS)
            assert (xc2["thread_id"], xc2["alignment"]) == ("ses_child", "extend")
            # the main thread is unaffected and still extends
            _, x2 = await _post(c, token, main + [m1, {"role": "user", "content": "go on"}], tools=TOOLS)
            assert (x2["thread_id"], x2["alignment"], x2["segment_index"]) == ("main", "extend", 0)
            # the same content in another session never lands in this one
            _, xo = await _post(c, other, child + [c1, {"role": "user", "content": "more"}], tools=TOOLS)
            assert (xo["session_id"], xo["thread_id"], xo["alignment"]) == ("other", "main", "start")
            # explicit x-legorl-thread is never re-routed
            _, xe = await _post(
                c, token, child + [c1, {"role": "user", "content": "more"}], {"x-legorl-thread": "main"}, TOOLS
            )
            assert (xe["thread_id"], xe["alignment"]) == ("main", "fork")
    turns = gw.session_turns(token)
    child_start = next(t for t in turns if t.thread_id == "ses_child" and t.alignment.kind == "start")
    assert child_start.alignment.parent_thread_id == "main" and child_start.alignment.segment_kind == "subagent"
    assert all(t.session_id == "route" for t in turns)
    assert [t.session_id for t in gw.session_turns(other)] == ["other"]


def test_route_prefers_header_thread_and_reuses_alignment(tok):
    from legorl.gateway.sessions import Session

    r = ChatTemplateRenderer(tok)
    s = Session(session_id="s", rollout_id="s", token="t")
    msgs = normalize_messages([{"role": "user", "content": "hi"}])
    th = s.route("main", msgs, None, r)
    a = th.state.align(r, msgs, None)
    assert th.thread_id == "main" and a is th.state.align(r, msgs, None)  # cached while the state is unchanged
