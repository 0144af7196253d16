"""The gateway's side of the wire, for the native-harness tests: when each request came in, when its
response started and ended, the SSE event names it sent, and whether the last byte went out — so a
harness that hangs can be told apart from a response that never reached it.

``WireTrace`` is a pure ASGI middleware added to the gateway's FastAPI app before its first request
(``app.add_middleware(WireTrace, sink=trace)``); ``trace`` is a :class:`Wire` that collects one
:class:`Exchange` per HTTP request."""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from typing import Any

_EVENT = re.compile(rb"^event: (\S+)", re.M)
_DONE = b"data: [DONE]"
# The event that ends a stream, by dialect: what a client waits for before it goes on.
FINAL_EVENTS = ("response.completed", "response.incomplete", "response.failed", "message_stop", "[DONE]")


@dataclass
class Exchange:
    path: str
    received_at: float
    status: int | None = None
    started_at: float | None = None  # response head sent
    ended_at: float | None = None  # last body chunk handed to the server
    events: list[str] = field(default_factory=list)
    delivered: bool = False  # the body's last chunk (more_body False) went out
    disconnected_at: float | None = None  # the client went away before the end
    error: str | None = None

    def final_event(self) -> str | None:
        return next((e for e in reversed(self.events) if e in FINAL_EVENTS), None)

    def describe(self, t0: float) -> str:
        end = f"{self.ended_at - t0:.1f}s" if self.ended_at is not None else "never"
        how = "delivered" if self.delivered else "NOT delivered"
        final = self.final_event() or ("json" if not self.events else f"last event {self.events[-1]}")
        return f"{self.path} at {self.received_at - t0:.1f}s: {self.status} {how} ({final}) ended {end}"


@dataclass
class Wire:
    exchanges: list[Exchange] = field(default_factory=list)

    def model_calls(self) -> list[Exchange]:
        return [x for x in self.exchanges if x.path.rstrip("/").endswith(("responses", "completions", "messages"))]

    def all_delivered(self) -> bool:
        return all(x.delivered for x in self.model_calls())

    def last_end(self) -> float | None:
        return max((x.ended_at for x in self.model_calls() if x.ended_at is not None), default=None)

    def evidence(self, killed_at: float | None, t0: float) -> dict[str, Any]:
        """What the gateway saw of a run that did not finish: every model call, whether each response
        went out whole, and how long the harness stayed silent before it was killed."""
        last = self.last_end()
        idle = round(killed_at - last, 1) if killed_at is not None and last is not None else None
        return {
            "model_calls": len(self.model_calls()),
            "all_delivered": self.all_delivered(),
            "idle_before_kill_s": idle,
            "calls": [x.describe(t0) for x in self.model_calls()],
        }


class WireTrace:
    """ASGI middleware: records each HTTP exchange into ``sink`` (module doc)."""

    def __init__(self, app: Any, sink: Wire) -> None:
        self.app = app
        self.sink = sink

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        x = Exchange(path=scope.get("path", ""), received_at=time.time())
        self.sink.exchanges.append(x)

        async def traced_receive() -> dict:
            msg = await receive()
            if msg.get("type") == "http.disconnect" and not x.delivered:
                x.disconnected_at = time.time()
            return msg

        async def traced_send(msg: dict) -> None:
            if msg["type"] == "http.response.start":
                x.status, x.started_at = msg["status"], time.time()
            elif msg["type"] == "http.response.body":
                body = msg.get("body", b"")
                x.events += [e.decode() for e in _EVENT.findall(body)]
                if _DONE in body:
                    x.events.append("[DONE]")
            await send(msg)
            if msg["type"] == "http.response.body" and not msg.get("more_body", False):
                x.delivered, x.ended_at = True, time.time()

        try:
            await self.app(scope, traced_receive, traced_send)
        except BaseException as exc:
            x.error = repr(exc)
            raise
