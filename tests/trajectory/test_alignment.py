"""Token-exact alignment: start / extend / fork, held tokens reused verbatim."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from legorl.gateway.renderer import ChatTemplateRenderer, load_smollm2_gguf_tokenizer, normalize_messages
from legorl.trajectory.alignment import ThreadState, align, messages_extend
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
            session_id="s", thread_id="main", turn_index=i, dialect="test", prompt_token_ids=a.prompt_token_ids,
            output_token_ids=output_ids, output_logprobs=[-0.5] * len(output_ids), sampling={}, weight_version=0,
            finish_reason="stop", alignment=a.event(i), reused_prefix_len=a.reused_prefix_len,
        )
        self.turns.append(t)
        reply = {"role": "assistant", "content": parsed.content}
        if parsed.tool_calls:
            reply["content"] = None
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
    assert r.decode(t2.prompt_token_ids[t2.reused_prefix_len :]) == "\n<|im_start|>user\nagain<|im_end|>\n<|im_start|>assistant\n"
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


def test_client_trims_and_respells_tool_json_still_extends(r):
    tools = [{"type": "function", "function": {"name": "bash", "parameters": {"type": "object"}}}]
    sim = Sim(r)
    msgs = [{"role": "user", "content": "ls"}]
    out = enc(r, ' <tool_call>\n{"name":"bash","arguments":{"cmd":  "ls"}}\n</tool_call>') + [IM_END]
    t1, rep = sim.call(msgs, out, tools)
    assert rep["tool_calls"][0]["function"]["name"] == "bash"
    rep["tool_calls"][0]["function"]["arguments"] = '{ "cmd" : "ls" }'  # harness re-serialized
    msgs += [rep, {"role": "tool", "tool_call_id": rep["tool_calls"][0]["id"], "content": "a.py"}]
    t2, _ = sim.call(msgs, enc(r, "done") + [IM_END], tools)
    assert t2.alignment.kind == "extend"
    assert t2.prompt_token_ids[: t2.reused_prefix_len] == t1.prompt_token_ids + out
    assert "<tool_response>\na.py\n</tool_response>" in r.decode(t2.prompt_token_ids[t2.reused_prefix_len :])


@pytest.mark.parametrize(
    "mutate,why",
    [
        (lambda m: [{"role": "user", "content": "summary of earlier work"}, {"role": "assistant", "content": "ok"}, *m[-1:]], "message 0 (user) differs in content"),
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
    assert t2.reused_prefix_len == 0
    assert t2.prompt_token_ids == r.render_prompt(normalize_messages(mutate(msgs)))


def test_tools_change_forks(r):
    sim = Sim(r)
    msgs = [{"role": "user", "content": "hi"}]
    _, rep = sim.call(msgs, enc(r, "yo") + [IM_END])
    t2, _ = sim.call(msgs + [rep, {"role": "user", "content": "x"}], [IM_END], tools=[{"type": "function", "function": {"name": "f", "parameters": {}}}])
    assert t2.alignment.kind == "fork" and "tools changed" in t2.alignment.reason


def test_side_request_does_not_break_main_chain(r):
    """A title call (fork) between two main turns: the main turn still extends its own segment."""
    sim = Sim(r)
    msgs = [{"role": "user", "content": "fix bug"}]
    _, rep = sim.call(msgs, enc(r, "looking") + [IM_END])
    side, _ = sim.call([{"role": "user", "content": "title for: fix bug"}], enc(r, "Bug fix") + [IM_END])
    t3, _ = sim.call(msgs + [rep, {"role": "user", "content": "ok"}], enc(r, "done") + [IM_END])
    assert (side.alignment.kind, side.alignment.segment_index) == ("fork", 1)
    assert (t3.alignment.kind, t3.alignment.segment_index) == ("extend", 0)
    samples = build_samples(sim.turns, "R")
    assert sorted((s.segment_index, s.turn_indices) for s in samples) == [(0, [0, 2]), (1, [1])]


def test_messages_extend_requires_strictly_more():
    held = normalize_messages([{"role": "user", "content": "a"}])
    assert messages_extend(held, held)[0] is False
    assert messages_extend(held, held + normalize_messages([{"role": "user", "content": "b"}]))[0] is True


# ----------------------------------------------------------------------------- property

_text = st.text(alphabet="abcdefgh xyz.,\n", min_size=1, max_size=12).filter(lambda s: s.strip())
_out = st.lists(st.integers(min_value=17, max_value=49151), min_size=1, max_size=6)
_step = st.tuples(st.sampled_from(["extend", "extend", "extend", "fork_rewrite", "fork_new"]), _text, _out, st.booleans())


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(first=_text, steps=st.lists(_step, min_size=1, max_size=6))
def test_property_extend_keeps_tokens_and_fork_loses_no_turn(r, first, steps):
    sim = Sim(r)
    msgs = [{"role": "user", "content": first}]
    held: list[int] | None = None
    for op, text, out, stopped in steps:
        out = out + ([IM_END] if stopped else [])
        if op == "fork_rewrite":
            msgs = [{"role": "user", "content": "rewritten: " + text}]
        elif op == "fork_new":
            msgs = [{"role": "system", "content": "side"}, {"role": "user", "content": text}]
        t, rep = sim.call(msgs, out)
        if t.alignment.kind == "extend":
            # extend never changes earlier tokens
            assert held is not None and t.prompt_token_ids[: len(held)] == held
            assert t.reused_prefix_len == len(held)
        held = t.prompt_token_ids + t.output_token_ids
        msgs = msgs + [rep, {"role": "user", "content": text}]
    samples = build_samples(sim.turns, "R")
    # fork never loses a turn: every turn lands in exactly one sample, its sampled ids in place
    seen = sorted(i for s in samples for i in s.turn_indices)
    assert seen == list(range(len(sim.turns)))
    for s in samples:
        for ev_i in s.turn_indices:
            t = sim.turns[ev_i]
            start = len(t.prompt_token_ids)
            assert s.token_ids[start : start + len(t.output_token_ids)] == t.output_token_ids
        assert s.num_sampled == sum(len(sim.turns[i].output_token_ids) for i in s.turn_indices)
