"""Token-exact alignment: start / extend / fork, held tokens reused verbatim."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from legorl.gateway.alignment import ThreadState, messages_extend
from legorl.gateway.renderer import (
    ChatTemplateRenderer,
    load_smollm2_gguf_tokenizer,
    normalize_messages,
)
from legorl.trajectory.builder import build_samples
from legorl.trajectory.records import Turn

IM_END = 2


@pytest.fixture(scope="module")
def r():
    return ChatTemplateRenderer(load_smollm2_gguf_tokenizer())


class Sim:
    """Plays the gateway's part for one thread without HTTP or an engine."""

    def __init__(self, r: ChatTemplateRenderer):
        self.r = r
        self.state = ThreadState("main")
        self.turns: list[Turn] = []

    def call(self, messages: list[dict], output_ids: list[int], tools=None) -> tuple[Turn, dict]:
        msgs = normalize_messages(messages)
        a = self.state.align(self.r, msgs, tools)
        parsed = self.r.parse_output(output_ids)
        i = len(self.turns)
        self.state.commit(a, msgs, tools, parsed.message(), output_ids, self.r.bridge_text(output_ids), i)
        t = Turn(
            session_id="s",
            thread_id="main",
            turn_index=i,
            dialect="test",
            prompt_token_ids=a.prompt_token_ids,
            output_token_ids=output_ids,
            output_logprobs=[-0.5] * len(output_ids),
            sampling={},
            weight_version=0,
            finish_reason="stop",
            alignment=a.event(i),
            reused_prefix_len=a.reused_prefix_len,
        )
        self.turns.append(t)
        reply = {"role": "assistant", "content": parsed.content}
        if parsed.tool_calls:
            reply["content"] = parsed.content or None  # as the gateway's OpenAI dialect answers
            reply["tool_calls"] = [
                {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments_json()}}
                for c in parsed.tool_calls
            ]
        return t, reply


def enc(r, text):
    return r.encode(text)


def test_start_extend_extend_reuses_tokens_verbatim(r):
    sim = Sim(r)
    msgs = [{"role": "user", "content": "hello"}]
    # non-canonical tokenization of "hello" (he + llo): re-tokenizing would change it
    out1 = enc(r, "he") + enc(r, "llo") + [IM_END]
    assert r.encode("hello") != out1[:-1]
    t1, rep = sim.call(msgs, out1)
    msgs += [rep, {"role": "user", "content": "again"}]
    t2, rep = sim.call(msgs, enc(r, "ok then") + [IM_END])
    msgs += [rep, {"role": "user", "content": "bye"}]
    t3, _ = sim.call(msgs, enc(r, "bye"))  # cut by max_tokens: no stop token
    assert [t.alignment.kind for t in sim.turns] == ["start", "extend", "extend"]
    assert t2.prompt_token_ids[: len(t1.prompt_token_ids) + len(out1)] == t1.prompt_token_ids + out1
    assert t2.reused_prefix_len == len(t1.prompt_token_ids) + len(out1)
    # the rest is exactly the rendering of the new messages
    assert (
        r.decode(t2.prompt_token_ids[t2.reused_prefix_len :])
        == "\n<|im_start|>user\nagain<|im_end|>\n<|im_start|>assistant\n"
    )
    assert r.decode(t3.prompt_token_ids[t3.reused_prefix_len :]).startswith("\n<|im_start|>user\nbye")
    # text of the whole prompt equals the rendering of the conversation
    assert r.decode(t3.prompt_token_ids) == r.render_text(normalize_messages(msgs), add_generation_prompt=True)
    # canonical case: prompt ids equal a from-scratch render
    assert t2.prompt_token_ids != r.render_prompt(normalize_messages(msgs[:3]))  # because of he+llo
    [s] = build_samples(sim.turns, "R")
    assert s.num_sampled == len(out1) + len(t2.output_token_ids) + len(t3.output_token_ids)


def test_extend_after_max_tokens_cut_closes_turn(r):
    sim = Sim(r)
    msgs = [{"role": "user", "content": "count"}]
    out = enc(r, "one two")  # no <|im_end|>
    _, rep = sim.call(msgs, out)
    t2, _ = sim.call(msgs + [rep, {"role": "user", "content": "go on"}], enc(r, "three") + [IM_END])
    assert t2.alignment.kind == "extend"
    assert r.decode(t2.prompt_token_ids[t2.reused_prefix_len :]).startswith("<|im_end|>\n<|im_start|>user\ngo on")


def test_client_trims_and_respells_tool_json_realigns(r):
    tools = [{"type": "function", "function": {"name": "bash", "parameters": {"type": "object"}}}]
    sim = Sim(r)
    msgs = [{"role": "user", "content": "ls"}]
    out = enc(r, ' <tool_call>\n{"name":"bash","arguments":{"cmd":  "ls"}}\n</tool_call>') + [IM_END]
    t1, rep = sim.call(msgs, out, tools)
    assert rep["tool_calls"][0]["function"]["name"] == "bash"
    rep["tool_calls"][0]["function"]["arguments"] = '{ "cmd" : "ls" }'  # harness re-serialized
    msgs += [rep, {"role": "tool", "tool_call_id": rep["tool_calls"][0]["id"], "content": "a.py"}]
    t2, _ = sim.call(msgs, enc(r, "done") + [IM_END], tools)
    assert t2.alignment.kind == "realign" and t2.alignment.realigned_messages == [1]
    assert t2.prompt_token_ids[: t2.reused_prefix_len] == t1.prompt_token_ids + out
    assert "<tool_response>\na.py\n</tool_response>" in r.decode(t2.prompt_token_ids[t2.reused_prefix_len :])


@pytest.mark.parametrize(
    "mutate,why",
    [
        (
            lambda m: [
                {"role": "user", "content": "summary of earlier work"},
                {"role": "assistant", "content": "ok"},
                *m[-1:],
            ],
            "message 0 (user) differs in content",
        ),
        (lambda m: [m[0], {"role": "assistant", "content": "something else"}, m[2]], "differs in content"),
        (lambda m: m[:1], "messages"),
    ],
)
def test_fork_on_divergence(r, mutate, why):
    sim = Sim(r)
    msgs = [{"role": "user", "content": "hi"}]
    _, rep = sim.call(msgs, enc(r, "yo") + [IM_END])
    msgs = msgs + [rep, {"role": "user", "content": "next"}]
    t2, _ = sim.call(mutate(msgs), enc(r, "k") + [IM_END])
    assert t2.alignment.kind == "fork" and t2.alignment.segment_index == 1
    assert why in t2.alignment.reason
    assert t2.alignment.parent_segment_index == 0 and t2.alignment.forked_from_turn == 0
    assert t2.reused_prefix_len == 0
    assert t2.prompt_token_ids == r.render_prompt(normalize_messages(mutate(msgs)))


def test_tools_change_forks(r):
    sim = Sim(r)
    msgs = [{"role": "user", "content": "hi"}]
    _, rep = sim.call(msgs, enc(r, "yo") + [IM_END])
    t2, _ = sim.call(
        msgs + [rep, {"role": "user", "content": "x"}],
        [IM_END],
        tools=[{"type": "function", "function": {"name": "f", "parameters": {}}}],
    )
    assert t2.alignment.kind == "fork" and "tools changed" in t2.alignment.reason


def test_side_request_does_not_break_main_chain(r):
    """A title call (fork) between two main turns: the main turn still extends its own segment."""
    sim = Sim(r)
    msgs = [{"role": "user", "content": "fix bug"}]
    _, rep = sim.call(msgs, enc(r, "looking") + [IM_END])
    side, _ = sim.call(
        [{"role": "system", "content": "Write a title"}, {"role": "user", "content": "title for: fix bug"}],
        enc(r, "Bug fix") + [IM_END],
    )
    t3, _ = sim.call(msgs + [rep, {"role": "user", "content": "ok"}], enc(r, "done") + [IM_END])
    assert (side.alignment.kind, side.alignment.segment_index) == ("fork", 1)
    assert side.alignment.segment_kind == "side"
    assert (t3.alignment.kind, t3.alignment.segment_index) == ("extend", 0)
    samples = build_samples(sim.turns, "R")
    assert sorted((s.segment_index, s.turn_indices) for s in samples) == [(0, [0, 2]), (1, [1])]


def test_messages_extend_requires_strictly_more():
    held = normalize_messages([{"role": "user", "content": "a"}])
    assert messages_extend(held, held)[0] is False
    assert messages_extend(held, held + normalize_messages([{"role": "user", "content": "b"}]))[0] is True


# ----------------------------------------------------------------------------- realign

TOOLS = [
    {"type": "function", "function": {"name": "bash", "parameters": {"type": "object"}}},
    {"type": "function", "function": {"name": "edit", "parameters": {"type": "object"}}},
]


def tc_text(name, args_json):
    return f'<tool_call>\n{{"name": "{name}", "arguments": {args_json}}}\n</tool_call>'


def _first_turn(r, sampled_text, tools=TOOLS):
    sim = Sim(r)
    msgs = [{"role": "system", "content": "sys"}, {"role": "user", "content": "go"}]
    out = enc(r, sampled_text) + [IM_END]
    t1, rep = sim.call(msgs, out, tools)
    return sim, msgs, t1, out, rep


def _tool_results(rep):
    return [
        {"role": "tool", "tool_call_id": c["id"], "content": f"ok {i}"}
        for i, c in enumerate(rep.get("tool_calls") or [])
    ]


def test_realign_reordered_keys(r):
    sim, msgs, t1, out, rep = _first_turn(r, tc_text("edit", '{"path": "a.py", "text": "x = 1"}'))
    rep["tool_calls"][0]["function"]["arguments"] = '{"text": "x = 1", "path": "a.py"}'
    t2, _ = sim.call(msgs + [rep, *_tool_results(rep)], enc(r, "done") + [IM_END], TOOLS)
    assert t2.alignment.kind == "realign" and "key order" in t2.alignment.reason
    assert t2.prompt_token_ids[: len(t1.prompt_token_ids) + len(out)] == t1.prompt_token_ids + out
    # the suffix is only the new message (the re-serialized turn is not rendered again)
    assert r.decode(t2.prompt_token_ids[t2.reused_prefix_len :]).startswith("\n<|im_start|>user\n<tool_response>\nok 0")


def test_echo_of_returned_spelling_extends_respelling_realigns(r):
    # the model sampled compact JSON; the harness sends the gateway's spaced spelling back as it
    # received it: an echo of the returned message -> extend (held tokens kept, nothing re-encoded)
    sim, msgs, t1, out, rep = _first_turn(r, '<tool_call>\n{"name":"bash","arguments":{"cmd":"ls"}}\n</tool_call>')
    assert rep["tool_calls"][0]["function"]["arguments"] == '{"cmd": "ls"}'
    hist = msgs + [rep, *_tool_results(rep)]
    t2, rep2 = sim.call(hist, enc(r, tc_text("bash", '{"cmd": "pwd"}')) + [IM_END], TOOLS)
    assert t2.alignment.kind == "extend" and t2.alignment.realigned_messages == []
    assert t2.prompt_token_ids[: t2.reused_prefix_len] == t1.prompt_token_ids + out
    # the model sampled spaced JSON, OpenCode compacts it: not what was returned, but it renders
    # as the model emitted it -> extend
    rep2["tool_calls"][0]["function"]["arguments"] = '{"cmd":"pwd"}'
    hist = hist + [rep2, *_tool_results(rep2)]
    t3, rep3 = sim.call(hist, enc(r, "fine") + [IM_END], TOOLS)
    assert t3.alignment.kind == "extend"
    # now it compacts the first (compact-sampled) turn's returned string as well: neither what was
    # returned (raw string differs) nor what was sampled (the wrapper was compact too) -> realign
    rep["tool_calls"][0]["function"]["arguments"] = '{"cmd":"ls"}'
    t4, _ = sim.call(hist + [rep3, {"role": "user", "content": "go on"}], enc(r, "k") + [IM_END], TOOLS)
    assert t4.alignment.kind == "realign" and t4.alignment.realigned_messages == [2]
    assert "spelling" in t4.alignment.reason
    assert t4.prompt_token_ids[: t4.reused_prefix_len] == t3.prompt_token_ids + t3.output_token_ids


def test_claude_style_parsed_input_and_text_whitespace(r):
    sampled = "Let me look.\n\n" + tc_text("edit", '{"path": "a.py", "text": "y"}')
    sim, msgs, t1, out, rep = _first_turn(r, sampled)
    # Claude Code: text block + tool_use with the parsed input (dict, keys re-ordered)
    claude = {
        "role": "assistant",
        "content": "Let me look.",
        "tool_calls": [{"id": "toolu_1", "name": "edit", "arguments": {"text": "y", "path": "a.py"}}],
    }
    t2, _ = sim.call(
        msgs + [claude, {"role": "tool", "tool_call_id": "toolu_1", "content": "done"}], enc(r, "ok") + [IM_END], TOOLS
    )
    assert t2.alignment.kind == "realign" and "key order" in t2.alignment.reason
    assert t2.prompt_token_ids[: t2.reused_prefix_len] == t1.prompt_token_ids + out
    # the blocks exactly as the Anthropic dialect returned them (text stripped, input in the
    # returned key order): an echo -> extend, although the sampled text had "\n\n" and a layout
    sim2, msgs2, t1b, out2, rep2 = _first_turn(r, sampled)
    claude["tool_calls"][0]["arguments"] = {"path": "a.py", "text": "y"}
    t2b, _ = sim2.call(
        msgs2 + [claude, {"role": "tool", "tool_call_id": "toolu_1", "content": "done"}], enc(r, "ok") + [IM_END], TOOLS
    )
    assert t2b.alignment.kind == "extend"
    assert t2b.prompt_token_ids[: t2b.reused_prefix_len] == t1b.prompt_token_ids + out2
    # an OpenAI harness that re-indents the arguments string (same keys, same order) and one that
    # pads the text: neither returned nor sampled -> realign, saying what differed
    sim3, msgs3, t1c, out3, rep3 = _first_turn(r, sampled)
    rep3["tool_calls"][0]["function"]["arguments"] = json.dumps({"path": "a.py", "text": "y"}, indent=2)
    t2c, _ = sim3.call(msgs3 + [rep3, *_tool_results(rep3)], enc(r, "ok") + [IM_END], TOOLS)
    assert t2c.alignment.kind == "realign" and "layout" in t2c.alignment.reason
    sim4, msgs4, t1d, out4, rep4 = _first_turn(r, sampled)
    rep4["content"] = " Let me  look."
    t2d, _ = sim4.call(msgs4 + [rep4, *_tool_results(rep4)], enc(r, "ok") + [IM_END], TOOLS)
    assert t2d.alignment.kind == "realign" and "content whitespace" in t2d.alignment.reason
    assert t2d.prompt_token_ids[: t2d.reused_prefix_len] == t1d.prompt_token_ids + out4


def test_realign_every_earlier_assistant_turn_and_tool_call_order(r):
    two = tc_text("bash", '{"cmd": "ls"}') + "\n" + tc_text("bash", '{"cmd": "pwd"}')
    sim, msgs, t1, out, rep = _first_turn(r, two)
    hist = msgs + [rep, *_tool_results(rep)]
    t2, rep2 = sim.call(hist, enc(r, "Now  reading.") + [IM_END], TOOLS)
    assert t2.alignment.kind == "extend"
    hist = hist + [rep2, {"role": "user", "content": "continue"}]
    # the harness now swaps the two calls of turn 1 and collapses the spaces of turn 2
    rep["tool_calls"].reverse()
    rep2["content"] = "Now reading."
    t3, _ = sim.call(hist, enc(r, "k") + [IM_END], TOOLS)
    assert t3.alignment.kind == "realign" and t3.alignment.realigned_messages == [2, 5]
    assert "tool call order" in t3.alignment.reason and "content whitespace" in t3.alignment.reason
    assert t3.prompt_token_ids[: t3.reused_prefix_len] == t2.prompt_token_ids + t2.output_token_ids
    [s] = build_samples(sim.turns, "R")
    assert [e.kind for e in s.alignment_events] == ["start", "extend", "realign"]
    assert s.num_sampled == sum(len(t.output_token_ids) for t in sim.turns)


@pytest.mark.parametrize(
    "change,kind,why",
    [
        ("args", "rebuild", "message 2 (assistant) differs in tool calls"),
        ("tool_result", "rebuild", "message 3 (tool) differs in content"),
        ("user_edit", "rebuild", "message 1 (user) differs in content"),
        ("compaction", "compaction", "request has 2 messages, thread holds 5"),
        ("compaction_keeps_opening", "compaction", "compaction (common prefix 2 messages)"),
        ("side", "side", ""),
        ("retry", "retry", "request has 4 messages, thread holds 5"),
    ],
)
def test_fork_kinds_and_reasons(r, change, kind, why):
    sim, msgs, t1, out, rep = _first_turn(r, tc_text("bash", '{"cmd": "ls"}'))
    hist1 = msgs + [rep, *_tool_results(rep)]
    t2, rep2 = sim.call(hist1, enc(r, "listed") + [IM_END], TOOLS)
    hist = hist1 + [rep2, {"role": "user", "content": "next"}]
    if change == "args":
        rep["tool_calls"][0]["function"]["arguments"] = '{"cmd": "rm -rf /"}'
    elif change == "tool_result":
        hist[3] = {**hist[3], "content": "different"}
    elif change == "user_edit":
        hist[1] = {"role": "user", "content": "go go"}
    elif change == "compaction":
        hist = [msgs[0], {"role": "user", "content": "This session is being continued from a previous conversation..."}]
    elif change == "compaction_keeps_opening":  # Codex: the opening messages, then a summary
        hist = [*msgs, {"role": "user", "content": "Another language model started to solve this problem..."}]
    elif change == "side":
        hist = [{"role": "system", "content": "Generate a title"}, {"role": "user", "content": "go"}]
    elif change == "retry":
        hist = hist1
    t3, _ = sim.call(hist, enc(r, "x") + [IM_END], None if change == "side" else TOOLS)
    ev = t3.alignment
    assert (ev.kind, ev.segment_kind, ev.segment_index) == ("fork", kind, 1)
    assert why in ev.reason and kind in ev.reason
    assert (ev.parent_segment_index, ev.forked_from_turn) == (0, 1)
    samples = build_samples(sim.turns, "R")
    assert [(s.segment_index, s.segment_kind, s.turn_indices) for s in samples] == [(0, "main", [0, 1]), (1, kind, [2])]
    assert samples[1].forked_from_turn == 1


# ----------------------------------------------------------------------------- property

_word = st.text(alphabet="abcdefgh", min_size=1, max_size=5)
_text = st.lists(_word, min_size=1, max_size=3).map(" ".join)
_args = st.dictionaries(
    st.sampled_from(["cmd", "path", "n", "flag"]),
    st.one_of(_word, st.integers(0, 99), st.booleans()),
    min_size=1,
    max_size=3,
)
_spell = st.sampled_from(["spaced", "compact", "reversed"])


def _spelled(args: dict, how: str) -> str:
    if how == "compact":
        return json.dumps(args, separators=(",", ":"))
    if how == "reversed":
        return json.dumps(dict(reversed(list(args.items()))))
    return json.dumps(args)


_call = st.tuples(st.sampled_from(["bash", "edit"]), _args, _spell)
_output = st.tuples(st.one_of(st.just(""), _text), st.lists(_call, max_size=2), st.booleans())
_op = st.sampled_from(["extend", "extend", "extend", "reserialize", "compact", "side", "edit"])


def _sample_text(content: str, calls) -> str:
    blocks = [f'<tool_call>\n{{"name": "{n}", "arguments": {_spelled(a, how)}}}\n</tool_call>' for n, a, how in calls]
    return "\n".join(([content] if content else []) + blocks) or "ok"


def _reserialize(msgs: list[dict], how: str) -> list[dict]:
    out = []
    for m in msgs:
        if m["role"] == "assistant":
            m = dict(m)
            if m.get("tool_calls"):
                m["tool_calls"] = [
                    {
                        **c,
                        "function": {
                            **c["function"],
                            "arguments": _spelled(json.loads(c["function"]["arguments"]), how),
                        },
                    }
                    for c in m["tool_calls"]
                ]
                if how == "reversed" and len(m["tool_calls"]) > 1:
                    m["tool_calls"] = m["tool_calls"][::-1]
            if m.get("content"):
                m["content"] = "  " + m["content"].replace(" ", "  ") + "\n"
        out.append(m)
    return out


@settings(max_examples=30, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(first=_text, steps=st.lists(st.tuples(_op, _text, _output, _spell), min_size=1, max_size=7))
def test_property_extend_realign_fork_keep_every_sampled_token(r, first, steps):
    sim = Sim(r)
    sys_msg = {"role": "system", "content": "agent"}
    msgs = [sys_msg, {"role": "user", "content": first}]
    held: dict[int, list[int]] = {}
    for op, text, (content, calls, stopped), how in steps:
        req = msgs
        if op == "reserialize":
            req = _reserialize(msgs, how)
        elif op == "compact":
            req = [sys_msg, {"role": "user", "content": "Summary: " + text}]
        elif op == "side":
            req = [{"role": "system", "content": "title"}, {"role": "user", "content": text}]
        elif op == "edit" and len(msgs) > 2:
            req = [sys_msg, {"role": "user", "content": "edited " + text}] + msgs[2:]
        out = enc(r, _sample_text(content, calls)) + ([IM_END] if stopped else [])
        t, rep = sim.call(req, out, None if op == "side" else TOOLS)
        ev = t.alignment
        if ev.kind in ("extend", "realign"):
            # extend/realign never change earlier tokens: the held sequence is reused verbatim
            prev = held[ev.segment_index]
            assert t.prompt_token_ids[: len(prev)] == prev and t.reused_prefix_len == len(prev)
        else:
            assert t.reused_prefix_len == 0
        if op == "reserialize" and len(msgs) > 2 and msgs[-1]["role"] != "assistant":
            assert ev.kind in ("extend", "realign"), ev.reason  # a re-serialization never forks
        held[ev.segment_index] = t.prompt_token_ids + t.output_token_ids
        if op == "side":
            continue  # the main conversation goes on as before
        base = req if op in ("compact", "edit") else msgs
        tail = [{"role": "tool", "tool_call_id": c["id"], "content": text} for c in rep.get("tool_calls") or []]
        msgs = base + [rep] + (tail or [{"role": "user", "content": text}])
    samples = build_samples(sim.turns, "R")
    # fork never loses a turn: every turn lands in exactly one sample, its sampled ids in place
    seen = sorted(i for s in samples for i in s.turn_indices)
    assert seen == list(range(len(sim.turns)))
    for s in samples:
        for i in s.turn_indices:
            t = sim.turns[i]
            start = len(t.prompt_token_ids)
            assert s.token_ids[start : start + len(t.output_token_ids)] == t.output_token_ids
            assert all(s.loss_mask[start : start + len(t.output_token_ids)])
        assert s.num_sampled == sum(len(sim.turns[i].output_token_ids) for i in s.turn_indices)
    assert sum(s.num_sampled for s in samples) == sum(len(t.output_token_ids) for t in sim.turns)
