"""Token-exact alignment of a new request against the tokens a thread already holds (pure, no HTTP).

A thread holds one or more *segments*. Each segment keeps the exact token sequence of its last
turn (prompt + sampled output), the normalised message list it stands for (request messages +
the assistant reply the gateway returned) and the tools it was rendered with.

For a new request (normalised messages + tools), :func:`align` tries, newest segment first:

* **extend** — the request's messages start with the segment's held messages (compared with
  :func:`legorl.gateway.renderer.message_key`: role, content, tool calls by name + parsed
  arguments) and the tools are equal. The held messages replace the request's copy of that prefix
  (so re-spelled JSON or trimmed whitespace never changes the rendering), the full conversation
  is rendered to text, the rendered held conversation must be a text prefix of it, and only the
  remaining text is tokenized::

      prompt = held_tokens + encode(bridge + suffix_text)

  where ``bridge`` closes the sampled assistant turn (ChatML: ``"\\n"`` after a sampled
  ``<|im_end|>``, ``"<|im_end|>\\n"`` after a turn cut by ``max_tokens``). Held tokens are reused
  verbatim: what the policy sampled is never re-tokenized.
* **realign** — (next issue) same conversation, but the last assistant turn re-serialized
  differently (e.g. tool-call JSON respelled). :func:`_try_realign` is the hook; it returns None.
* **fork** — anything else: render from scratch, new segment (``segment_index`` = next free one).
  The first request of a thread is a **start** (segment 0).

:class:`ThreadState` is the mutable per-thread holder the gateway keeps (it is not thread-safe:
the gateway serialises requests of one thread).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Sequence

from legorl.gateway.renderer import Message, Renderer, message_key, tools_key
from legorl.trajectory.records import AlignmentEvent

MAX_SEGMENTS_KEPT = 8  # older segments are forgotten for matching (their turns stay recorded)


@dataclass
class HeldSegment:
    """What one thread segment holds after its latest successful turn."""

    segment_index: int
    messages: list[Message]  # request messages + the returned assistant message
    tools: list[dict] | None
    token_ids: list[int]  # prompt + output of the latest turn, verbatim
    bridge_text: str  # text closing the sampled assistant turn (see module doc)
    last_turn_index: int = -1


@dataclass
class Alignment:
    """The result of matching one request: the prompt to generate from and the event to record."""

    kind: Literal["start", "extend", "realign", "fork"]
    segment_index: int
    prompt_token_ids: list[int]
    reused_prefix_len: int  # prompt_token_ids[:reused_prefix_len] == held tokens (verbatim)
    reason: str = ""
    extends_turn_index: int | None = None

    def event(self, turn_index: int) -> AlignmentEvent:
        return AlignmentEvent(turn_index=turn_index, kind=self.kind, reason=self.reason, segment_index=self.segment_index)


@dataclass
class ThreadState:
    thread_id: str
    segments: list[HeldSegment] = field(default_factory=list)  # newest last
    next_segment: int = 0

    def align(self, renderer: Renderer, messages: Sequence[Message], tools: Sequence[dict] | None) -> Alignment:
        return align(self, renderer, messages, tools)

    def commit(
        self,
        alignment: Alignment,
        messages: Sequence[Message],
        tools: Sequence[dict] | None,
        assistant: Message,
        output_token_ids: Sequence[int],
        bridge_text: str,
        turn_index: int,
    ) -> HeldSegment:
        """Record a successful turn: the segment now holds prompt + output."""
        seg = HeldSegment(
            segment_index=alignment.segment_index,
            messages=list(messages) + [assistant],
            tools=list(tools) if tools else None,
            token_ids=list(alignment.prompt_token_ids) + list(output_token_ids),
            bridge_text=bridge_text,
            last_turn_index=turn_index,
        )
        self.segments = [s for s in self.segments if s.segment_index != seg.segment_index] + [seg]
        if len(self.segments) > MAX_SEGMENTS_KEPT:
            self.segments = self.segments[-MAX_SEGMENTS_KEPT:]
        self.next_segment = max(self.next_segment, seg.segment_index + 1)
        return seg


def messages_extend(held: Sequence[Message], new: Sequence[Message]) -> tuple[bool, str]:
    """Do ``new`` messages start with ``held`` (normalised comparison)? -> (ok, reason if not)."""
    if len(new) <= len(held):
        return False, f"request has {len(new)} messages, thread holds {len(held)}"
    for i, (h, n) in enumerate(zip(held, new)):
        if message_key(h) != message_key(n):
            what = "role" if h["role"] != n["role"] else ("tool calls" if message_key(h)[2] != message_key(n)[2] else "content")
            return False, f"message {i} ({h['role']}) differs in {what}"
    return True, ""


def try_extend(
    seg: HeldSegment, renderer: Renderer, messages: Sequence[Message], tools: Sequence[dict] | None
) -> tuple[Alignment | None, str]:
    ok, why = messages_extend(seg.messages, messages)
    if not ok:
        return None, why
    if tools_key(seg.tools) != tools_key(tools):
        return None, "tools changed"
    effective = list(seg.messages) + list(messages[len(seg.messages) :])
    held_text = renderer.render_text(seg.messages, seg.tools, add_generation_prompt=False)
    full_text = renderer.render_text(effective, tools, add_generation_prompt=True)
    if not full_text.startswith(held_text):
        return None, "rendered held conversation is not a text prefix of the new rendering"
    suffix = full_text[len(held_text) :]
    tail = renderer.encode(seg.bridge_text + suffix)
    prompt = list(seg.token_ids) + tail
    return (
        Alignment(
            kind="extend",
            segment_index=seg.segment_index,
            prompt_token_ids=prompt,
            reused_prefix_len=len(seg.token_ids),
            reason=f"+{len(messages) - len(seg.messages)} messages, +{len(tail)} tokens",
            extends_turn_index=seg.last_turn_index,
        ),
        "",
    )


def _try_realign(
    seg: HeldSegment, renderer: Renderer, messages: Sequence[Message], tools: Sequence[dict] | None
) -> Alignment | None:
    """Hook for the next issue: the request matches except for a re-serialized last assistant turn."""
    return None


def align(state: ThreadState, renderer: Renderer, messages: Sequence[Message], tools: Sequence[dict] | None) -> Alignment:
    """Match a request against a thread's held segments (newest first); see the module doc."""
    if not state.segments:
        prompt = renderer.render_prompt(messages, tools)
        return Alignment(kind="start", segment_index=state.next_segment, prompt_token_ids=prompt, reused_prefix_len=0, reason="first request of thread")
    reasons = []
    for seg in reversed(state.segments):
        got, why = try_extend(seg, renderer, messages, tools)
        if got is not None:
            return got
        realigned = _try_realign(seg, renderer, messages, tools)
        if realigned is not None:
            return realigned
        reasons.append(f"seg {seg.segment_index}: {why}")
    prompt = renderer.render_prompt(messages, tools)
    return Alignment(
        kind="fork",
        segment_index=state.next_segment,
        prompt_token_ids=prompt,
        reused_prefix_len=0,
        reason="; ".join(reasons[:3]),
    )
