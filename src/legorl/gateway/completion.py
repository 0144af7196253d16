"""The dialect-independent result of one gateway call, handed from :class:`~legorl.gateway.app.Gateway`
to the dialect that formats it (a leaf module: dialects import it, never the app)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from legorl.gateway.renderer import ParsedOutput
from legorl.trajectory.records import Turn


@dataclass
class Completion:
    """One finished call: the recorded Turn (its ``response`` is filled in by the dialect), the parsed
    assistant output and the counts every wire format reports."""

    turn: Turn
    parsed: ParsedOutput
    finish_reason: str  # stop | length | tool_calls
    output_token_ids: list[int]
    output_logprobs: list[float]
    prompt_tokens: int
    cached_prompt_tokens: int
    stop_sequence: str | None = None  # the stop string that cut the output, if any


def legorl_info(completion: Completion) -> dict[str, Any]:
    """The ``x_legorl`` block every dialect's response carries (clients ignore it)."""
    turn = completion.turn
    return {
        "session_id": turn.session_id,
        "thread_id": turn.thread_id,
        "turn_index": turn.turn_index,
        "alignment": turn.alignment.kind,
        "segment_index": turn.alignment.segment_index,
        "weight_version": turn.weight_version,
        "unparsed_tool_calls": completion.parsed.unparsed_tool_calls,
    }


@dataclass(frozen=True)
class StreamStart:
    """What a streamed response says before its first token: known once the prompt is aligned."""

    prompt_tokens: int
    weight_version: int

    @classmethod
    def of(cls, completion: Completion) -> StreamStart:
        """The start of a stream written after the whole completion is known."""
        return cls(completion.prompt_tokens, completion.turn.weight_version)
