"""Token-exact alignment of a new request against the tokens a thread already holds (pure, no HTTP).

A thread (:class:`ThreadState`) holds one or more segments (:class:`HeldSegment`): the exact tokens
of the last turn, the messages they stand for, the tools, and the sampled ids of every assistant
turn. :func:`align` returns an :class:`Alignment` of kind **extend** (the request continues a
segment and its assistant turns come back unchanged), **realign** (the same, with turns
re-serialized by the harness), **fork** (a new segment, classified ``side``, ``compaction``,
``rebuild``, ``retry`` or ``tools_changed``) or **start** (a thread's first request). Invariant:
on extend and realign the held (sampled) token ids are the prompt's prefix verbatim; they are never
re-tokenized. :class:`ThreadState` is not thread-safe (the gateway serialises a thread's requests);
``align`` results are cached per state version.

Design (the rules of each kind, the bridge, fork classification): docs/gateway.md#alignment
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from legorl.gateway.renderer import (
    Message,
    Renderer,
    message_key,
    render_assistant_content,
    returned_unchanged,
    tools_key,
)
from legorl.trajectory.records import AlignmentEvent

MAX_SEGMENTS_KEPT = 16  # least recently used segments are forgotten for matching (their turns stay recorded)


@dataclass
class HeldSegment:
    """What one thread segment holds after its latest successful turn."""

    segment_index: int
    messages: list[Message]  # held messages (held copies of earlier turns) + the returned assistant message
    tools: list[dict[str, Any]] | None
    token_ids: list[int]  # prompt + output of the latest turn, verbatim
    bridge_text: str  # text closing the sampled assistant turn (docs/gateway.md#alignment)
    last_turn_index: int = -1
    # message index -> output token ids the policy sampled for that assistant message
    sampled: dict[int, list[int]] = field(default_factory=dict)
    segment_kind: str = "main"
    _sampled_text: dict[int, str] = field(default_factory=dict, repr=False)
    _held_text: str | None = field(default=None, repr=False)

    def sampled_text(self, renderer: Renderer, i: int) -> str:
        t = self._sampled_text.get(i)
        if t is None:
            t = self._sampled_text[i] = renderer.parse_output(self.sampled[i]).text
        return t

    def held_text(self, renderer: Renderer) -> str:
        if self._held_text is None:
            self._held_text = renderer.render_text(self.messages, self.tools, add_generation_prompt=False)
        return self._held_text


@dataclass
class Alignment:
    """The result of matching one request: the prompt to generate from and the event to record."""

    kind: Literal["start", "extend", "realign", "fork"]
    segment_index: int
    prompt_token_ids: list[int]
    reused_prefix_len: int  # prompt_token_ids[:reused_prefix_len] == held tokens (verbatim)
    reason: str = ""
    extends_turn_index: int | None = None
    segment_kind: str = "main"
    parent_thread_id: str | None = None
    parent_segment_index: int | None = None
    forked_from_turn: int | None = None
    realigned_messages: list[int] = field(default_factory=list)
    # held messages that replace the request's copy of the matched prefix (extend/realign)
    held_messages: list[Message] | None = None
    held_sampled: dict[int, list[int]] | None = None

    def event(self, turn_index: int) -> AlignmentEvent:
        return AlignmentEvent(
            turn_index=turn_index,
            kind=self.kind,
            reason=self.reason,
            segment_index=self.segment_index,
            segment_kind=self.segment_kind,
            parent_thread_id=self.parent_thread_id,
            parent_segment_index=self.parent_segment_index,
            forked_from_turn=self.forked_from_turn,
            realigned_messages=list(self.realigned_messages),
        )


@dataclass
class ThreadState:
    thread_id: str
    segments: list[HeldSegment] = field(default_factory=list)  # least recently used first
    next_segment: int = 0
    parent_thread_id: str | None = None
    active_segment: int | None = None  # the chain the thread's main agent is on (side segments never are)
    version: int = 0  # bumped on every commit
    # (version, messages, tools, renderer, alignment) of the last align()
    _cache: tuple[int, Sequence[Message], Sequence[dict[str, Any]] | None, Renderer, Alignment] | None = field(
        default=None, repr=False
    )

    def align(
        self, renderer: Renderer, messages: Sequence[Message], tools: Sequence[dict[str, Any]] | None
    ) -> Alignment:
        c = self._cache
        if c is not None and c[0] == self.version and c[1] is messages and c[2] is tools and c[3] is renderer:
            return c[4]
        a = align(self, renderer, messages, tools)
        self._cache = (self.version, messages, tools, renderer, a)
        return a

    def segment(self, index: int) -> HeldSegment | None:
        for s in self.segments:
            if s.segment_index == index:
                return s
        return None

    def commit(
        self,
        alignment: Alignment,
        messages: Sequence[Message],
        tools: Sequence[dict[str, Any]] | None,
        assistant: Message,
        output_token_ids: Sequence[int],
        bridge_text: str,
        turn_index: int,
    ) -> HeldSegment:
        """Record a successful turn: the segment now holds prompt + output."""
        msgs = list(messages)
        sampled: dict[int, list[int]] = {}
        if alignment.held_messages is not None:  # extend / realign: keep the held copies
            msgs = list(alignment.held_messages) + msgs[len(alignment.held_messages) :]
            sampled = dict(alignment.held_sampled or {})
        sampled[len(msgs)] = list(output_token_ids)
        seg = HeldSegment(
            segment_index=alignment.segment_index,
            messages=msgs + [assistant],
            tools=list(tools) if tools else None,
            token_ids=list(alignment.prompt_token_ids) + list(output_token_ids),
            bridge_text=bridge_text,
            last_turn_index=turn_index,
            sampled=sampled,
            segment_kind=alignment.segment_kind,
        )
        self.segments = [s for s in self.segments if s.segment_index != seg.segment_index] + [seg]
        if len(self.segments) > MAX_SEGMENTS_KEPT:
            self.segments = self.segments[-MAX_SEGMENTS_KEPT:]
        self.next_segment = max(self.next_segment, seg.segment_index + 1)
        if seg.segment_kind != "side":
            self.active_segment = seg.segment_index
        self.version += 1
        self._cache = None
        return seg


# --------------------------------------------------------------------------- message comparison


def _ws(s: str | None) -> str:
    return " ".join((s or "").split())


def _parsed(a: Any) -> Any:
    if isinstance(a, str):
        try:
            return json.loads(a)
        except ValueError:
            return a
    return a


def _args_equal(a: Any, b: Any) -> bool:
    # Arguments arrive as dicts (parsed by the gateway) or JSON strings (history sent by the client):
    # compare parsed values, so key order and JSON spelling do not matter either way.
    a, b = _parsed(a), _parsed(b)
    if isinstance(a, str) and isinstance(b, str):
        return "".join(a.split()) == "".join(b.split())
    return bool(a == b)


def _match_calls(held: list[dict[str, Any]], new: list[dict[str, Any]]) -> list[int] | None:
    """new[j] matches held[perm[j]] (by name + parsed arguments), or None."""
    if len(held) != len(new):
        return None
    used: set[int] = set()
    perm: list[int] = []
    for c in new:
        for k, h in enumerate(held):
            if k not in used and h["name"] == c["name"] and _args_equal(h["arguments"], c["arguments"]):
                used.add(k)
                perm.append(k)
                break
        else:
            return None
    return perm


def _dumps(a: Any) -> str:
    return json.dumps(a, ensure_ascii=False) if not isinstance(a, str) else a


def realign_diff(held: Message, new: Message, sampled_text: str | None) -> str | None:
    """Why ``new`` (an assistant message in a request) is a re-serialization of ``held`` (the turn
    the gateway returned, sampled as ``sampled_text``), or None when it is not the same turn."""
    if _ws(held.get("content")) != _ws(new.get("content")):
        return None
    hc, nc = list(held.get("tool_calls") or ()), list(new.get("tool_calls") or ())
    perm = _match_calls(hc, nc)
    if perm is None:
        return None
    what: list[str] = []
    if (held.get("content") or "") != (new.get("content") or ""):
        what.append("content whitespace")
    if perm != sorted(perm):
        what.append("tool call order")
    for j, k in enumerate(perm):
        ha, na = hc[k]["arguments"], nc[j]["arguments"]
        if _dumps(ha) != _dumps(na):
            if isinstance(ha, dict) and isinstance(na, dict) and list(ha) != list(na):
                what.append(f"tool call {j} {nc[j]['name']!r} arguments key order")
            else:
                what.append(f"tool call {j} {nc[j]['name']!r} arguments spelling")
    if not what and sampled_text is not None:
        rendered = render_assistant_content(new)
        if rendered.strip() == sampled_text.strip():
            what.append("surrounding whitespace")
        elif hc and any(f'"name": "{c["name"]}"' not in sampled_text for c in hc):
            what.append("tool-call JSON spelling (sampled compact/other spacing or key order)")
        else:
            what.append("text differs from the sampled text (JSON spacing/layout)")
    return ", ".join(what) or "re-serialized"


def _describe_mismatch(i: int, h: Message, n: Message) -> str:
    if h["role"] != n["role"]:
        return f"message {i} ({h['role']}) differs in role ({n['role']})"
    kh, kn = message_key(h), message_key(n)
    what = "tool calls" if kh[2] != kn[2] else "content"
    return f"message {i} ({h['role']}) differs in {what}"


def messages_extend(held: Sequence[Message], new: Sequence[Message]) -> tuple[bool, str]:
    """Do ``new`` messages start with ``held`` (normalised comparison)? -> (ok, reason if not)."""
    if len(new) <= len(held):
        return False, f"request has {len(new)} messages, thread holds {len(held)}"
    for i, (h, n) in enumerate(zip(held, new)):
        if message_key(h) != message_key(n):
            return False, _describe_mismatch(i, h, n)
    return True, ""


def compare_prefix(
    seg: HeldSegment, renderer: Renderer, new: Sequence[Message]
) -> tuple[bool, str, list[int], list[str]]:
    """Does ``new`` start with ``seg``'s held messages, allowing re-serialized assistant turns?

    -> (ok, reason if not, indices of realigned messages, what differed per realigned message)."""
    held = seg.messages
    if len(new) <= len(held):
        return False, f"request has {len(new)} messages, thread holds {len(held)}", [], []
    realigned: list[int] = []
    notes: list[str] = []
    for i, (h, n) in enumerate(zip(held, new)):
        if h["role"] != n["role"]:
            return False, _describe_mismatch(i, h, n), [], []
        if h["role"] != "assistant" or i not in seg.sampled:
            if message_key(h) != message_key(n):
                # An assistant turn this segment only holds as context (e.g. history carried into a
                # fork) may be re-serialized too: keep the held tokens, the turn is the same.
                diff = realign_diff(h, n, None) if h["role"] == "assistant" else None
                if diff is None:
                    return False, _describe_mismatch(i, h, n), [], []
                realigned.append(i)
                notes.append(f"msg {i} (assistant, context): {diff}")
            continue
        # a sampled assistant turn: exact when the request carries back what the gateway returned
        # for it (the text a client receives cannot be re-encoded to the sampled ids in general:
        # docs/gateway.md#renderer, "Round trip"), or renders it as the model emitted it
        if returned_unchanged(h, n):
            continue
        sampled_text = seg.sampled_text(renderer, i)
        if render_assistant_content(n) == sampled_text:
            continue
        diff = realign_diff(h, n, sampled_text)
        if diff is None:
            return (
                False,
                _describe_mismatch(i, h, n)
                if message_key(h) != message_key(n)
                else f"message {i} (assistant) differs in content",
                [],
                [],
            )
        realigned.append(i)
        notes.append(f"msg {i} (assistant): {diff}")
    return True, "", realigned, notes


def try_extend(
    seg: HeldSegment, renderer: Renderer, messages: Sequence[Message], tools: Sequence[dict[str, Any]] | None
) -> tuple[Alignment | None, str]:
    """Extend or realign ``seg`` with ``messages`` -> (alignment, "") or (None, why not)."""
    ok, why, realigned, notes = compare_prefix(seg, renderer, messages)
    if not ok:
        return None, why
    if tools_key(seg.tools) != tools_key(tools):
        return None, "tools changed"
    effective = list(seg.messages) + list(messages[len(seg.messages) :])
    held_text = seg.held_text(renderer)
    full_text = renderer.render_text(effective, tools, add_generation_prompt=True)
    if not full_text.startswith(held_text):
        return None, "rendered held conversation is not a text prefix of the new rendering"
    suffix = full_text[len(held_text) :]
    tail = renderer.encode(seg.bridge_text + suffix)
    prompt = list(seg.token_ids) + tail
    added = f"+{len(messages) - len(seg.messages)} messages, +{len(tail)} tokens"
    return (
        Alignment(
            kind="realign" if realigned else "extend",
            segment_index=seg.segment_index,
            prompt_token_ids=prompt,
            reused_prefix_len=len(seg.token_ids),
            reason=("; ".join(notes) + f" (held tokens kept; {added})") if realigned else added,
            extends_turn_index=seg.last_turn_index,
            segment_kind=seg.segment_kind,
            realigned_messages=realigned,
            held_messages=list(seg.messages),
            held_sampled=dict(seg.sampled),
        ),
        "",
    )


def _system(messages: Sequence[Message]) -> str | None:
    return messages[0].get("content") or "" if messages and messages[0]["role"] == "system" else None


def _common_prefix(held: Sequence[Message], new: Sequence[Message]) -> int:
    n = 0
    for h, m in zip(held, new):
        if message_key(h) != message_key(m) and not (
            h["role"] == m["role"] == "assistant" and realign_diff(h, m, None) is not None
        ):
            break
        n += 1
    return n


def classify_fork(
    state: ThreadState, messages: Sequence[Message], tools: Sequence[dict[str, Any]] | None
) -> tuple[str, HeldSegment | None, int]:
    """-> (segment_kind, parent segment, common message prefix with it)."""
    best: HeldSegment | None = None
    best_n = 0
    for seg in reversed(state.segments):
        n = _common_prefix(seg.messages, messages)
        if n > best_n:
            best, best_n = seg, n
    active = state.segment(state.active_segment) if state.active_segment is not None else None
    ref = active or (state.segments[-1] if state.segments else None)
    parent = best or ref
    if ref is None:
        return "main", None, 0
    same_system = _system(ref.messages) == _system(messages)
    same_tools = tools_key(ref.tools) == tools_key(tools)
    if (not tools and ref.tools) or not same_system:
        return "side", parent, best_n
    if not same_tools:
        return "tools_changed", parent, best_n
    if best is not None and best_n == len(messages):
        return "retry", parent, best_n
    if best_n <= (1 if _system(messages) is not None else 0) and len(messages) < len(ref.messages):
        return "compaction", ref, best_n
    if _drops_every_sampled_turn(ref.messages, messages, best_n):
        return "compaction", ref, best_n
    return "rebuild", parent, best_n


def _drops_every_sampled_turn(held: Sequence[Message], new: Sequence[Message], common: int) -> bool:
    """A compaction that keeps the opening messages: the request shares at most the held chain's
    messages before its first assistant turn and carries none of its assistant turns (Codex keeps
    the system and user messages, then a summary, and drops everything the model said)."""
    first = next((i for i, m in enumerate(held) if m["role"] == "assistant"), None)
    if first is None or common > first:
        return False
    return not any(m["role"] == "assistant" for m in new[common:])


def align(
    state: ThreadState, renderer: Renderer, messages: Sequence[Message], tools: Sequence[dict[str, Any]] | None
) -> Alignment:
    """Match a request against a thread's held segments (newest first); docs/gateway.md#alignment."""
    if not state.segments:
        prompt = renderer.render_prompt(messages, tools)
        return Alignment(
            kind="start",
            segment_index=state.next_segment,
            prompt_token_ids=prompt,
            reused_prefix_len=0,
            reason="first request of thread"
            + (f" (parent thread {state.parent_thread_id})" if state.parent_thread_id else ""),
            segment_kind="subagent" if state.parent_thread_id else "main",
            parent_thread_id=state.parent_thread_id,
        )
    reasons = []
    for seg in reversed(state.segments):
        got, why = try_extend(seg, renderer, messages, tools)
        if got is not None:
            return got
        reasons.append(f"seg {seg.segment_index}: {why}")
    prompt = renderer.render_prompt(messages, tools)
    kind, parent, common = classify_fork(state, messages, tools)
    return Alignment(
        kind="fork",
        segment_index=state.next_segment,
        prompt_token_ids=prompt,
        reused_prefix_len=0,
        reason=f"{kind} (common prefix {common} messages); " + "; ".join(reasons[:3]),
        segment_kind=kind,
        parent_thread_id=state.thread_id,
        parent_segment_index=parent.segment_index if parent else None,
        forked_from_turn=parent.last_turn_index if parent else None,
    )
