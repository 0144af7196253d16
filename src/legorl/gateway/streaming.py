"""True streaming: tokens go from the engine to the harness while they are sampled.

The engine hands each call's new token ids to a :class:`TokenFeed` (``Engine.generate(...,
on_tokens=feed.push)``); the request handler reads the feed and turns the ids into visible text with
:class:`LiveText`, which the dialect's :class:`~legorl.gateway.dialects.base.StreamWriter` sends.
The recorded Turn and the stored response are built from the finished generation exactly as for a
call that does not stream, so streaming changes when the client sees the text, never what is
trained on.

Text is sent only when it is final, i.e. when the finished response's content will start with it
whatever the model samples next. So :class:`LiveText` holds back:

* everything from a tool-call marker on (the block becomes a tool call, or stays text: only the end
  says which), and from a stop string on (the content ends before it);
* an unfinished tail that could still become such a marker or stop string;
* whitespace at either end (the content is stripped), and a tail that decodes to an incomplete
  character (``\\ufffd``).

What was held back goes out when the call finishes, before the tool calls.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from typing import Any

from legorl.gateway.completion import StreamStart
from legorl.gateway.renderer import TOOL_CALL_OPEN, Renderer

__all__ = ["LiveText", "TokenFeed"]


class TokenFeed:
    """The token ids of one call's generation as they arrive (a sink for ``Engine.generate``), and
    what the stream's head needs once the prompt is aligned."""

    def __init__(self) -> None:
        self._queue: asyncio.Queue[list[int]] = asyncio.Queue()
        self._first = asyncio.Event()
        self.start: StreamStart | None = None
        self.received = 0

    def push(self, token_ids: list[int]) -> None:
        self.received += len(token_ids)
        self._queue.put_nowait(list(token_ids))
        self._first.set()

    async def started(self, work: asyncio.Future[Any]) -> bool:
        """Wait for the first tokens or for ``work`` to end; True when tokens came while it runs."""
        first = asyncio.ensure_future(self._first.wait())
        try:
            await asyncio.wait([first, work], return_when=asyncio.FIRST_COMPLETED)
        finally:
            first.cancel()
        return not work.done()

    async def next(self, work: asyncio.Future[Any]) -> list[int] | None:
        """Every token id pushed since the last call (waiting for at least one), or None once
        ``work`` — the call producing them — is done and nothing is left."""
        if self._queue.empty():
            if work.done():
                return None
            getter = asyncio.ensure_future(self._queue.get())
            try:
                await asyncio.wait([getter, work], return_when=asyncio.FIRST_COMPLETED)
            finally:
                if not getter.done():
                    getter.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await getter
            ids = getter.result() if getter.done() and not getter.cancelled() else []
        else:
            ids = []
        while not self._queue.empty():
            ids += self._queue.get_nowait()
        return ids if ids or not work.done() else None


class LiveText:
    """The visible text of a generation in progress, released only where it is final (module doc)."""

    def __init__(self, renderer: Renderer, stops: Sequence[str] = ()) -> None:
        self.renderer = renderer
        self.markers = tuple(m for m in (TOOL_CALL_OPEN, *stops) if m)
        self.token_ids: list[int] = []
        self.sent = ""
        self.closed = False  # a marker or stop string appeared: nothing more streams live

    def feed(self, token_ids: Sequence[int]) -> str:
        """Add sampled ids; returns the text newly safe to send (often empty)."""
        self.token_ids += token_ids
        if self.closed or not token_ids:
            return ""
        text = self.renderer.parse_output(self.token_ids).text  # as the final parse decodes it
        safe = self.safe_prefix(text)
        if len(safe) <= len(self.sent) or not safe.startswith(self.sent):
            return ""
        delta, self.sent = safe[len(self.sent) :], safe
        return delta

    def safe_prefix(self, text: str) -> str:
        """The part of ``text`` the final content will start with."""
        cut = len(text)
        for marker in self.markers:
            at = text.find(marker)
            if at >= 0:
                cut, self.closed = min(cut, at), True
            else:  # the longest tail that could still grow into the marker
                for k in range(min(len(marker) - 1, len(text)), 0, -1):
                    if text.endswith(marker[:k]):
                        cut = min(cut, len(text) - k)
                        break
        head = text[:cut]
        if head.endswith("\ufffd"):  # a character whose bytes are not all sampled yet
            head = head.rstrip("\ufffd")
        return head.strip()
