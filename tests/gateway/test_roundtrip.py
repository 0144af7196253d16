"""Round trip of a sampled assistant turn through each dialect (property tests).

The model samples token ids -> the gateway decodes/parses them and answers on the wire -> the
official SDK parses that answer (JSON or SSE) -> the harness echoes the assistant message back in
its next request with a new tool/user message -> the gateway must recognise its own turn: the
second turn aligns as ``extend`` and the first turn's sampled ids sit unchanged in the Sample.

Outputs are drawn two ways: random token ids from the real SmolLM2 vocabulary (lone UTF-8 bytes,
partial multi-byte sequences, special tokens such as ``<|im_start|>`` mid-text) and "sampled-like"
texts (whitespace at the ends, ``\\r\\n``, combining characters, ``<|im_end|>`` spelled with
ordinary tokens, tool-call blocks spelled compact/spaced/keys reordered/unclosed/broken/with
NaN or a lone surrogate escape, ...) tokenized canonically or not. The engine is forced to emit
exactly those ids (no model). Everything runs in process over ASGI (httpx ``ASGITransport``).

``test_text_roundtrip_characterisation`` pins down exactly when re-encoding the text a client
received reproduces what was sampled (see the renderer's module docstring): that is *not*
needed for ``extend``, which is decided on the returned message, never on re-encoded text.
"""

from __future__ import annotations

import asyncio
import json
import os

import anthropic
import httpx
import httpx2
import openai
import pytest
from gw_helpers import TOOLS_ANTHROPIC, TOOLS_OPENAI, TOOLS_RESPONSES
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from legorl.engines.base import EngineHealth, GenerationResult
from legorl.gateway.app import Gateway
from legorl.gateway.renderer import ChatTemplateRenderer
from legorl.gateway.sessions import SessionRegistry
from legorl.trajectory.builder import build_samples

EOS, IM_START, IM_END = 0, 1, 2
SECOND_REPLY = "ok"
N_EXAMPLES = int(os.environ.get("RT_N", "300"))  # per test; RT_N=3000 for a deeper local search
# Derandomized (the same examples on every run) with no deadline by the Hypothesis profile
# (tests/conftest.py); `make fuzz` draws fresh ones.
SETTINGS = settings(
    max_examples=N_EXAMPLES,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large],
)


# ----------------------------------------------------------------------------- vocabulary tables


def _byte_decoder() -> dict[str, int]:
    """GPT-2 byte-level alphabet (used by SmolLM2's ByteLevel pre-tokenizer) -> byte."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


class Vocab:
    def __init__(self, tok):
        self.tok = tok
        self.special = {int(i): t.content for i, t in tok.added_tokens_decoder.items()}
        dec = _byte_decoder()
        toks = tok.convert_ids_to_tokens(list(range(len(tok))))
        self.bytes: list[bytes | None] = [
            None if i in self.special else bytes(dec[ch] for ch in t) for i, t in enumerate(toks)
        ]
        ordinary = [i for i, b in enumerate(self.bytes) if b is not None]
        self.ordinary_range = (min(ordinary), max(ordinary))
        # tokens that are not valid UTF-8 on their own: lone continuation bytes, lead bytes, cut
        # multi-byte sequences -> decode to U+FFFD unless neighbours complete them
        self.partial = [i for i in ordinary if not _valid_utf8(self.bytes[i])]
        self.whitespace = [i for i in ordinary if self.bytes[i].strip() == b"" and self.bytes[i]]
        self.by_byte = {b: i for i, b in enumerate(self.bytes) if b is not None and len(b) == 1}
        self.nonstop_special = sorted(i for i in self.special if i not in (EOS, IM_END))

    def raw(self, ids) -> bytes:
        return b"".join(self.bytes[i] for i in ids)


def _valid_utf8(b: bytes) -> bool:
    try:
        b.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


@pytest.fixture(scope="module")
def vocab(smol_tok):
    return Vocab(smol_tok)


# ----------------------------------------------------------------------------- strategies


def random_ids(v: Vocab):
    """Decoded random token sequences: any ordinary id, with lone/partial UTF-8 byte tokens,
    whitespace tokens and non-stop special tokens over-represented."""
    lo, hi = v.ordinary_range
    one = st.one_of(
        st.integers(lo, hi),
        st.sampled_from(v.partial),
        st.sampled_from(v.whitespace),
        st.sampled_from(v.nonstop_special),
    )
    return st.lists(one, max_size=24)


_WORDS = [
    "Blue.",
    "Hello there",
    "x = 1",
    "ls -la",
    "Let me check.",
    "é",
    "e\u0301",
    "n\u0303\u0323",
    "👍🏽",
    "日本語",
    "\ufffd",
    "\u2028",
    "\u2029",
    "\x85",
    "\x00",
    "\x1b[0m",
    "\t",
    "\r\n",
    "\r",
    "\n\n",
    "  ",
    "\\",
    '"',
    "{",
    "}",
    "<|im_end|>",
    "<|im_start|>",
    "<|endoftext|>",
    "<file_sep>",
    "<tool_call>",
    "</tool_call>",
    "```json",
    "<tool_response>",
]
_ws = st.sampled_from(["", " ", "  ", "\n", "\n\n", "\r\n", "\t", " \n ", "\u3000", "\xa0"])
SENTINEL = "\x00BAD"
_json_scalar = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=6),
    st.sampled_from(["", "é", "a\nb", "\ufffd", "<|im_end|>", "日本", "\u2028"]),
)
_json = st.recursive(
    _json_scalar, lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=4), c, max_size=3), max_leaves=6
)
_args = st.dictionaries(
    st.one_of(st.sampled_from(["cmd", "path", "text", "timeout"]), st.text(max_size=5)), _json, max_size=4
)


@st.composite
def tool_call_block(draw) -> str:
    """One Hermes block, spelled in any of the ways a model might."""
    name = draw(st.sampled_from(["bash", "write", "x", "über", ""]))
    args = draw(_args)
    how = draw(st.sampled_from(["spaced", "compact", "indent", "ascii", "sorted", "reversed"]))

    def dumps(o):
        if how == "compact":
            return json.dumps(o, separators=(",", ":"), ensure_ascii=False)
        if how == "indent":
            return json.dumps(o, indent=2, ensure_ascii=False)
        if how == "ascii":
            return json.dumps(o)  # \\u escapes
        if how == "sorted":
            return json.dumps(o, sort_keys=True, ensure_ascii=False)
        if how == "reversed" and isinstance(o, dict):
            return json.dumps(dict(reversed(list(o.items()))), ensure_ascii=False)
        return json.dumps(o, ensure_ascii=False)

    # values inside the arguments (where they would reach the wire) that some client cannot take
    # back: NaN, 1e999 (= inf), a lone surrogate, nesting past the gateway's bound of 64 (70), past
    # the Anthropic SDK's parser (250), past Python's json (1100); 60 is deep but fine
    bad = draw(st.sampled_from(["", "", "", "", "nan", "inf", "surrogate", "deep", "broken", "junk", "fence"]))
    depth = draw(st.sampled_from([60, 70, 250, 1100]))
    if bad in ("nan", "inf", "surrogate", "deep"):
        args = {**args, "v": SENTINEL}
    key = draw(st.sampled_from(["arguments", "arguments", "parameters", "arguments-as-string"]))
    if key == "arguments-as-string":
        obj = {"name": name, "arguments": dumps(args)}
    else:
        obj = {"name": name, key: args}
    if draw(st.booleans()):
        obj = dict(reversed(list(obj.items())))
    body = dumps(obj)
    literal = {"nan": "NaN", "inf": "1e999", "surrogate": '"\\ud800"', "deep": "[" * depth + "]" * depth}.get(bad)
    if literal is not None:
        spelled = json.dumps(SENTINEL)  # '"\\u0000BAD"' in every spelling above (control chars are escaped)
        esc = json.dumps(spelled)[1:-1]  # the same inside a JSON string (arguments-as-string)
        body = body.replace(spelled, literal) if spelled in body else body.replace(esc, json.dumps(literal)[1:-1])
    elif bad == "broken":
        body = body[: max(1, len(body) // 2)]
    elif bad == "junk":
        body = "sure: " + body + " ok"
    elif bad == "fence":
        body = "```json\n" + body + "\n```"
    nl = draw(st.sampled_from(["\n", "", " "]))
    close = draw(st.sampled_from(["</tool_call>", "</tool_call>", "</tool_call>", ""]))  # "" = unclosed (cut)
    return f"<tool_call>{nl}{body}{nl}{close}"


@st.composite
def sampled_text(draw) -> str:
    parts = draw(st.lists(st.one_of(st.sampled_from(_WORDS), st.text(max_size=6), tool_call_block()), max_size=5))
    sep = draw(st.sampled_from(["", " ", "\n", "\n\n"]))
    return draw(_ws) + sep.join(parts) + draw(_ws)


def text_ids(v: Vocab, draw, text: str) -> list[int]:
    """Token ids a model could have sampled for ``text``: canonical BPE or split into smaller
    pieces (non-canonical), a special-token literal either as its special id (when that is not a
    stop token: the engine would have stopped there) or spelled with ordinary tokens."""
    import re

    tok = v.tok
    specials = sorted(v.special.values(), key=len, reverse=True)
    pat = re.compile("(" + "|".join(re.escape(s) for s in specials) + ")")
    ids: list[int] = []
    for k, seg in enumerate(pat.split(text)):
        if not seg:
            continue
        if k % 2 == 1:  # a special-token literal
            sid = tok.convert_tokens_to_ids(seg)
            if sid not in (EOS, IM_END) and draw(st.booleans()):
                ids.append(sid)
            else:
                for ch in seg:
                    ids += tok.encode(ch, add_special_tokens=False)
            continue
        how = draw(st.sampled_from(["canonical", "canonical", "chars", "bytes", "split"]))
        if how == "canonical":
            ids += tok.encode(seg, add_special_tokens=False)
        elif how == "chars":
            for ch in seg:
                ids += tok.encode(ch, add_special_tokens=False)
        elif how == "bytes":  # one token per byte where the vocabulary has it, else per character
            for ch in seg:
                b = ch.encode("utf-8")
                if all(bytes([x]) in v.by_byte for x in b):
                    ids += [v.by_byte[bytes([x])] for x in b]
                else:
                    ids += tok.encode(ch, add_special_tokens=False)
        else:
            cut = draw(st.integers(0, len(seg)))
            ids += tok.encode(seg[:cut], add_special_tokens=False) + tok.encode(seg[cut:], add_special_tokens=False)
    return ids


@st.composite
def model_output(draw, v: Vocab) -> list[int]:
    """Sampled ids + how the turn ended (<|im_end|>, <|endoftext|>, or cut by max_tokens)."""
    if draw(st.booleans()):
        ids = draw(random_ids(v))
    else:
        ids = text_ids(v, draw, draw(sampled_text()))
    if draw(st.booleans()):  # a byte-level cut: the turn ends inside a multi-byte character
        ids += draw(st.lists(st.sampled_from(v.partial), min_size=1, max_size=2))
    ids += draw(st.sampled_from([[IM_END], [IM_END], [EOS], []]))
    if not ids:
        ids = [IM_END]
    assert not any(i in (EOS, IM_END) for i in ids[:-1])  # a real engine stops at a stop token
    return ids


# ----------------------------------------------------------------------------- in-process gateway


class ForcedEngine:
    """Engine protocol double: each call emits the next queued token ids verbatim (no model)."""

    model_name = "forced"
    max_context = 1 << 20
    weight_version = 1

    def __init__(self, stop_ids):
        self.stop_ids = set(stop_ids)
        self.queue: list[list[int]] = []

    async def generate(self, prompt_token_ids, sampling):
        ids = self.queue.pop(0)
        assert len(ids) <= sampling.max_tokens
        finish = "stop" if ids and ids[-1] in self.stop_ids else "length"
        return GenerationResult(list(ids), [-0.5] * len(ids), finish, 1, len(prompt_token_ids))

    async def update_weights(self, state_dict, version=None):
        return 1

    def health(self):
        return EngineHealth(True, "forced", 1, 0)

    async def close(self):
        pass


class InProcess:
    """A Gateway behind in-process ASGI transports, clients on one long-lived event loop: the
    official SDKs (which use ``httpx2``) and a plain ``httpx`` client reading SSE with
    ``aiter_lines`` (as hand-written harness clients do)."""

    def __init__(self, tok):
        self.renderer = ChatTemplateRenderer(tok)
        self.engine = ForcedEngine(self.renderer.stop_token_ids)
        # no RunStore: its serialisation is covered by the store tests; the wire is what matters here
        self.gw = Gateway(self.engine, self.renderer, SessionRegistry(), None, "m", default_max_tokens=16384)
        self.loop = asyncio.new_event_loop()
        self.sdk_http = httpx2.AsyncClient(
            transport=httpx2.ASGITransport(app=self.gw.app), base_url="http://gw", timeout=30
        )
        self.raw_http = httpx.AsyncClient(
            transport=httpx.ASGITransport(app=self.gw.app), base_url="http://gw", timeout=30
        )
        self.n = 0

    def run(self, coro):
        return self.loop.run_until_complete(coro)

    def session(self) -> str:
        self.n += 1
        return self.gw.open_session(f"rt-{self.n}")

    def openai(self, token: str) -> openai.AsyncOpenAI:
        return openai.AsyncOpenAI(base_url="http://gw/v1", api_key=token, http_client=self.sdk_http, max_retries=0)

    def anthropic(self, token: str) -> anthropic.AsyncAnthropic:
        return anthropic.AsyncAnthropic(base_url="http://gw", api_key=token, http_client=self.sdk_http, max_retries=0)

    async def sse_lines(self, path: str, token: str, body: dict) -> list[dict]:
        """POST with ``stream: true`` and parse the SSE body line by line like a minimal client
        (httpx ``aiter_lines`` splits on every str.splitlines() break, U+2028 included)."""
        events = []
        async with self.raw_http.stream(
            "POST", path, json={**body, "stream": True}, headers={"Authorization": f"Bearer {token}"}
        ) as r:
            assert r.status_code == 200, await r.aread()
            async for line in r.aiter_lines():
                if line.startswith("data: ") and line != "data: [DONE]":
                    events.append(json.loads(line[6:]))
                else:
                    assert line == "" or line.startswith("event: ") or line == "data: [DONE]", line
        return events

    async def post(self, path: str, token: str, body: dict) -> dict:
        """The follow-up request, sent as the JSON body an SDK would send (the SDK's own request
        building adds nothing the gateway reads, and skipping it halves this file's run time)."""
        r = await self.raw_http.post(path, json=body, headers={"Authorization": f"Bearer {token}"})
        assert r.status_code == 200, r.text
        return r.json()

    def close(self):
        self.run(self.sdk_http.aclose())
        self.run(self.raw_http.aclose())
        self.loop.close()


@pytest.fixture(scope="module")
def inproc(smol_tok):
    ip = InProcess(smol_tok)
    yield ip
    ip.close()


# how the first response is received: SDK non-streaming, SDK streaming, raw SSE lines
MODES = st.sampled_from(["json", "sdk_stream", "sse_lines"])


def check_extends(ip: InProcess, token: str, outs: list[list[int]]) -> None:
    """Every turn after the first extends the one before; each turn's prompt + sampled ids are the
    verbatim prefix of the next prompt; the Sample holds every sampled id, in place."""
    turns = ip.gw.session_turns(token)
    assert [t.failed for t in turns] == [False] * (len(outs) + 1), [t.error for t in turns]
    assert [t.output_token_ids for t in turns[: len(outs)]] == outs
    for prev, t in zip(turns, turns[1:]):
        assert t.alignment.kind == "extend", (t.turn_index, t.alignment.reason)
        held = prev.prompt_token_ids + prev.output_token_ids
        assert t.prompt_token_ids[: len(held)] == held and t.reused_prefix_len == len(held)
    [s] = build_samples(turns, token)
    assert [i for m, i in zip(s.loss_mask, s.token_ids) if m] == [i for t in turns for i in t.output_token_ids]
    for t, out in zip(turns, outs):
        n = len(t.prompt_token_ids)
        assert s.token_ids[n : n + len(out)] == out


def second_reply(ip: InProcess) -> list[int]:
    return ip.renderer.encode(SECOND_REPLY) + [IM_END]


# ----------------------------------------------------------------------------- chat completions


async def _chat_receive(ip: InProcess, c, token: str, mode: str, body: dict) -> tuple[str | None, list[dict]]:
    """-> (content, tool calls as ``{"id", "name", "arguments"}``) as a client assembles them."""
    if mode == "json":
        m = (await c.chat.completions.create(**body)).choices[0].message
        return m.content, [
            {"id": t.id, "name": t.function.name, "arguments": t.function.arguments} for t in m.tool_calls or []
        ]
    if mode == "sdk_stream":
        chunks = [ch async for ch in await c.chat.completions.create(stream=True, **body)]
        deltas = [ch.choices[0].delta for ch in chunks if ch.choices]
    else:
        deltas = [
            openai.types.chat.chat_completion_chunk.ChoiceDelta.model_validate(e["choices"][0]["delta"])
            for e in await ip.sse_lines("/v1/chat/completions", token, body)
            if e["choices"]
        ]
    content, calls = "", {}
    for d in deltas:  # concatenate content and per-index argument deltas, as clients do
        content += d.content or ""
        for tc in d.tool_calls or []:
            cur = calls.setdefault(tc.index, {"id": tc.id, "name": "", "arguments": ""})
            if tc.function is not None:
                cur["name"] += tc.function.name or ""
                cur["arguments"] += tc.function.arguments or ""
    calls_list = [calls[k] for k in sorted(calls)]
    return (content or None) if calls_list else content, calls_list


async def _chat(ip: InProcess, out_ids, mode: str, tools: bool) -> str:
    token = ip.session()
    c = ip.openai(token)
    ip.engine.queue = [out_ids, second_reply(ip)]
    kw = dict(model="m", tools=TOOLS_OPENAI) if tools else dict(model="m")
    msgs: list[dict] = [{"role": "system", "content": "You are an agent."}, {"role": "user", "content": "go"}]
    content, calls = await _chat_receive(ip, c, token, mode, dict(messages=msgs, **kw))
    p = ip.renderer.parse_output(out_ids)
    assert (content or "") == p.content  # the wire carries the content unchanged
    assert [json.loads(x["arguments"]) for x in calls] == [x.arguments for x in p.tool_calls]
    # the harness echoes the message as received: content + tool_calls (arguments string verbatim)
    echo: dict = {"role": "assistant", "content": content}
    if calls:
        echo["tool_calls"] = [
            {"id": x["id"], "type": "function", "function": {"name": x["name"], "arguments": x["arguments"]}}
            for x in calls
        ]
        new = [{"role": "tool", "tool_call_id": x["id"], "content": f"result {i}"} for i, x in enumerate(calls)]
    else:
        new = [{"role": "user", "content": "next"}]
    await ip.post("/v1/chat/completions", token, dict(messages=msgs + [echo] + new, **kw))
    return token


@SETTINGS
@given(data=st.data(), mode=MODES, tools=st.booleans())
def test_chat_echo_extends(inproc, vocab, data, mode, tools):
    out = data.draw(model_output(vocab))
    token = inproc.run(_chat(inproc, out, mode, tools))
    check_extends(inproc, token, [out])


# ----------------------------------------------------------------------------- anthropic messages


async def _anthropic_receive(ip: InProcess, c, token: str, mode: str, body: dict) -> list[dict]:
    """-> the response's content blocks as a client assembles them."""
    if mode == "json":
        return [b.model_dump(exclude_none=True) for b in (await c.messages.create(**body)).content]
    if mode == "sdk_stream":
        async with c.messages.stream(**body) as s:
            return [b.model_dump(exclude_none=True) for b in (await s.get_final_message()).content]
    blocks: list[dict] = []
    partial: dict[int, str] = {}
    for e in await ip.sse_lines("/v1/messages", token, body):
        if e["type"] == "content_block_start":
            blocks.append(dict(e["content_block"]))
        elif e["type"] == "content_block_delta":
            d = e["delta"]
            if d["type"] == "text_delta":
                blocks[e["index"]]["text"] += d["text"]
            else:
                partial[e["index"]] = partial.get(e["index"], "") + d["partial_json"]
        elif e["type"] == "content_block_stop" and blocks[e["index"]]["type"] == "tool_use":
            blocks[e["index"]]["input"] = json.loads(partial.get(e["index"]) or "{}")
    return blocks


async def _anthropic(ip: InProcess, out_ids, mode: str, tools: bool) -> str:
    token = ip.session()
    c = ip.anthropic(token)
    ip.engine.queue = [out_ids, second_reply(ip)]
    kw = dict(model="m", max_tokens=16384, system="You are an agent.", **({"tools": TOOLS_ANTHROPIC} if tools else {}))
    msgs: list[dict] = [{"role": "user", "content": "go"}]
    blocks = await _anthropic_receive(ip, c, token, mode, dict(messages=msgs, **kw))
    p = ip.renderer.parse_output(out_ids)
    assert "".join(b["text"] for b in blocks if b["type"] == "text") == p.content
    uses = [b for b in blocks if b["type"] == "tool_use"]
    assert [b["input"] for b in uses] == [x.arguments for x in p.tool_calls]
    # Claude Code stores the content blocks (parsed tool inputs) and sends them back
    if uses:
        new = [
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": b["id"], "content": f"result {i}"}
                    for i, b in enumerate(uses)
                ],
            }
        ]
    else:
        new = [{"role": "user", "content": "next"}]
    await ip.post("/v1/messages", token, dict(messages=msgs + [{"role": "assistant", "content": blocks}] + new, **kw))
    return token


@SETTINGS
@given(data=st.data(), mode=MODES, tools=st.booleans())
def test_anthropic_echo_extends(inproc, vocab, data, mode, tools):
    out = data.draw(model_output(vocab))
    token = inproc.run(_anthropic(inproc, out, mode, tools))
    check_extends(inproc, token, [out])


# ----------------------------------------------------------------------------- responses


async def _responses_receive(ip: InProcess, c, token: str, mode: str, body: dict) -> dict:
    """-> the final response object (as a dict) a client ends up with."""
    if mode == "json":
        return (await c.responses.create(**body)).model_dump(exclude_none=True)
    if mode == "sdk_stream":
        final = None
        async with c.responses.stream(**body) as s:
            async for e in s:  # get_final_response only knows response.completed, not .incomplete
                if e.type in ("response.completed", "response.incomplete"):
                    final = e.response
        assert final is not None
        return final.model_dump(exclude_none=True)
    evs = await ip.sse_lines("/v1/responses", token, body)
    text = "".join(e["delta"] for e in evs if e["type"] == "response.output_text.delta")
    final = evs[-1]["response"]
    assert text == "".join(p["text"] for o in final["output"] if o["type"] == "message" for p in o["content"])
    return final


def _new_items(output: list[dict]) -> list[dict]:
    calls = [o for o in output if o["type"] == "function_call"]
    if calls:
        return [
            {"type": "function_call_output", "call_id": o["call_id"], "output": f"result {i}"}
            for i, o in enumerate(calls)
        ]
    return [{"role": "user", "content": "next"}]


def _check_received(ip: InProcess, r: dict, out_ids: list[int]) -> None:
    p = ip.renderer.parse_output(out_ids)
    assert "".join(x["text"] for o in r["output"] if o["type"] == "message" for x in o["content"]) == p.content
    assert [json.loads(o["arguments"]) for o in r["output"] if o["type"] == "function_call"] == [
        x.arguments for x in p.tool_calls
    ]


async def _responses(ip: InProcess, out_a, out_b, mode_a: str, mode_b: str, tools: bool) -> str:
    """Turn 1 samples ``out_a``; turn 2 continues it by ``previous_response_id`` and samples
    ``out_b``; turn 3 (Codex-style) resends the whole item list with both outputs' items as
    received. Both follow-ups must extend."""
    token = ip.session()
    c = ip.openai(token)
    ip.engine.queue = [out_a, out_b, second_reply(ip)]
    kw = dict(model="m", instructions="You are an agent.", **({"tools": TOOLS_RESPONSES} if tools else {}))
    first = [{"role": "user", "content": "go"}]
    r1 = await _responses_receive(ip, c, token, mode_a, dict(input=first, **kw))
    _check_received(ip, r1, out_a)
    new1 = _new_items(r1["output"])
    r2 = await _responses_receive(ip, c, token, mode_b, dict(previous_response_id=r1["id"], input=new1, **kw))
    _check_received(ip, r2, out_b)
    items = first + r1["output"] + new1 + r2["output"] + _new_items(r2["output"])
    await ip.post("/v1/responses", token, dict(input=items, **kw))
    return token


@SETTINGS
@given(data=st.data(), mode_a=MODES, mode_b=MODES, tools=st.booleans())
def test_responses_echo_extends(inproc, vocab, data, mode_a, mode_b, tools):
    out_a, out_b = data.draw(model_output(vocab)), data.draw(model_output(vocab))
    token = inproc.run(_responses(inproc, out_a, out_b, mode_a, mode_b, tools))
    check_extends(inproc, token, [out_a, out_b])


# ----------------------------------------------------------------------------- characterisation


@settings(max_examples=N_EXAMPLES, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_text_roundtrip_characterisation(vocab, data):
    """Re-encoding the text a client received gives back the sampled *bytes* exactly when those
    bytes are valid UTF-8 and spell no special-token literal; never otherwise. (The ids are a
    different matter again: a model often samples a non-canonical split.) This is why the
    gateway never re-encodes an echoed assistant turn (renderer module doc, "Round trip")."""
    if data.draw(st.booleans()):
        ids = data.draw(random_ids(vocab))
    else:
        ids = text_ids(vocab, data.draw, data.draw(sampled_text()))
    ordinary = [i for i in ids if vocab.bytes[i] is not None]
    tok = vocab.tok
    raw = vocab.raw(ordinary)
    text = tok.decode(ordinary, skip_special_tokens=False)
    assert text == raw.decode("utf-8", errors="replace")  # lossy exactly where bytes are invalid
    again = tok.encode(text, add_special_tokens=False)
    if any(vocab.bytes[i] is None for i in again):
        reencoded = None  # the text spelled a special token: it re-encodes to that special id
    else:
        reencoded = vocab.raw(again)
    literal = any(s in text for s in vocab.special.values())
    assert (reencoded == raw) == (_valid_utf8(raw) and not literal)
    # with special ids sampled in between, decode(skip_special_tokens=True) (what the client sees)
    # drops them: the visible text is the ordinary tokens' text
    assert tok.decode(ids, skip_special_tokens=True) == text


def test_sse_escapes_what_line_splitters_break_on():
    # httpx's aiter_lines (str.splitlines) and JavaScript split on U+2028/U+2029/U+0085; json.dumps
    # (ensure_ascii=False) leaves them raw, so a data: line holding them would be cut in two
    from legorl.gateway.dialects.base import sse

    raw = sse({"text": "a\u2028b\u2029c\x85d\r\ne"}, "x")
    text = raw.decode("utf-8")
    assert text.splitlines() == ["event: x", 'data: {"text":"a\\u2028b\\u2029c\\u0085d\\r\\ne"}', ""]
    assert json.loads(text.splitlines()[1][6:]) == {"text": "a\u2028b\u2029c\x85d\r\ne"}
