"""What every dialect adapter shares: the error type, the parsed core call, the request handler
(auth -> JSON -> dialect parse -> :meth:`Gateway.complete` watched for client disconnects ->
JSON or SSE response), SSE framing and per-token text pieces for streaming.

A dialect implements :class:`Dialect`: ``parse`` (wire body -> :class:`CoreCall`, raising
:class:`GatewayError` naming the bad field), ``make_response`` (:class:`~legorl.gateway.app.Completion`
-> the non-streaming wire body, also stored in the Turn), ``stream`` (the same content as SSE
events, derived from the stored body so ids agree) and ``error_body`` / ``error_status`` (its error
shape).

Generation happens once (the Engine protocol is not incremental); the finished output is then
streamed as one chunk per token of the visible text (:func:`text_pieces`). While the engine works
the handler watches the ASGI receive channel: a client that disconnects cancels the generation
(the awaiting task is cancelled, the engine drops the request) and the Turn is recorded with
``failed=True, error="client_disconnected", finish_reason="cancelled"``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, AsyncIterator, Sequence

from fastapi import Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import BaseModel, ConfigDict, ValidationError

from legorl.errors import (  # noqa: F401 - GatewayError, ClientDisconnected: defined in the error tree, re-exported
    ClientDisconnected, ContextLengthError, EngineOverloadedError, GatewayError, InvalidRequestError)

if TYPE_CHECKING:  # pragma: no cover
    from legorl.gateway.app import Completion, Gateway
    from legorl.gateway.renderer import Message, Renderer
    from legorl.gateway.sessions import Session

log = logging.getLogger(__name__)

CLIENT_DISCONNECTED = "client_disconnected"


def engine_error(exc: BaseException, context_param: str = "messages") -> GatewayError:
    if isinstance(exc, GatewayError):
        return exc
    if isinstance(exc, ContextLengthError):
        return GatewayError(400, str(exc), param=context_param, code="context_length_exceeded")
    if isinstance(exc, InvalidRequestError):
        return GatewayError(400, str(exc))
    if isinstance(exc, EngineOverloadedError):
        return GatewayError(503, f"engine unavailable: {exc}", type="server_error", code="engine_overloaded")
    if isinstance(exc, (asyncio.TimeoutError, TimeoutError)):
        return GatewayError(504, "engine timed out", type="server_error", code="engine_timeout")
    return GatewayError(500, f"engine failure: {type(exc).__name__}: {exc}", type="server_error", code="engine_error")


class Loose(BaseModel):
    """Wire models accept (and ignore) unknown fields: harnesses send many."""

    model_config = ConfigDict(extra="allow")


_UNION_LABELS = ("str", "int", "float", "bool", "dict", "list", "function-after", "literal")


def validation_param(exc: ValidationError) -> tuple[str, str, str]:
    """-> (param path like ``messages[0].content``, error kind, pydantic message) of the first error."""
    err = exc.errors()[0]
    loc = err.get("loc") or ()
    parts = [str(p) for p in loc if not (isinstance(p, str) and ("[" in p or p in _UNION_LABELS))]
    param = ""
    for p in parts:
        param += f"[{p}]" if p.isdigit() else (("." if param else "") + p)
    return param, err.get("type", ""), str(err.get("msg", ""))


def openai_validation_error(exc: ValidationError) -> GatewayError:
    param, kind, msg = validation_param(exc)
    if kind == "missing":
        text = f"Missing required parameter: '{param}'."
    else:
        text = f"Invalid value for '{param}': {msg}."
    return GatewayError(400, text, param=param or None, code="missing_required_parameter" if kind == "missing" else "invalid_value")


def parse_json_object(raw: bytes) -> dict:
    try:
        body = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise GatewayError(400, f"We could not parse the JSON body of your request: {exc}") from None
    if not isinstance(body, dict):
        raise GatewayError(400, "The request body must be a JSON object.")
    return body


@dataclass
class CoreCall:
    """A wire request reduced to what :meth:`Gateway.complete` needs (+ dialect extras)."""

    messages: list["Message"]
    tools: list[dict] | None = None
    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    seed: int | None = None
    stop: list[str] = field(default_factory=list)
    stream: bool = False
    include_usage: bool = False
    extra: dict[str, Any] = field(default_factory=dict)


class Dialect:
    name = "base"
    context_param = "messages"

    # -- errors ------------------------------------------------------------------------------
    def error_status(self, err: GatewayError) -> int:
        return err.status

    def error_body(self, err: GatewayError) -> dict:
        return err.body()

    def error_response(self, err: GatewayError) -> JSONResponse:
        status = self.error_status(err)
        headers = {"WWW-Authenticate": "Bearer"} if status == 401 else {}
        headers.update(getattr(err, "headers", None) or {})  # e.g. a budget refusal's retry-after / x-should-retry
        return JSONResponse(self.error_body(err), status_code=status, headers=headers or None)

    def unauthorized(self) -> GatewayError:
        return GatewayError(401, "Incorrect API key provided (unknown or closed LEGO-RL session token).", type="invalid_request_error", code="invalid_api_key")

    # -- to implement ------------------------------------------------------------------------
    def parse(self, gw: "Gateway", session: "Session", body: dict, request: Request) -> CoreCall:
        raise NotImplementedError

    def make_response(self, gw: "Gateway", call: CoreCall, completion: "Completion") -> dict:
        raise NotImplementedError

    def stream(self, gw: "Gateway", call: CoreCall, completion: "Completion") -> AsyncIterator[bytes]:
        raise NotImplementedError


# --------------------------------------------------------------------------- handler


async def run_until_disconnect(request: Request, coro) -> Any:
    """Await ``coro`` as a task; if the client disconnects first, cancel it and raise
    :class:`ClientDisconnected` (after the task has finished unwinding)."""
    task = asyncio.ensure_future(coro)

    async def watch() -> None:
        while True:
            msg = await request.receive()
            if msg.get("type") == "http.disconnect":
                return
            await asyncio.sleep(0)  # more body after the body? ignore, keep waiting

    watcher = asyncio.ensure_future(watch())
    try:
        await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:  # the server itself cancelled us
        task.cancel()
        watcher.cancel()
        raise
    if task.done():
        watcher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watcher
        return task.result()
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError, Exception):
        await task
    raise ClientDisconnected()


async def handle(gw: "Gateway", dialect: Dialect, request: Request) -> Response:
    from legorl.gateway.sessions import thread_from_headers

    session = gw.sessions.lookup(request.headers)
    if session is None:
        return dialect.error_response(dialect.unauthorized())
    thread_id = thread_from_headers(request.headers)
    raw = await request.body()
    body: Any = None
    try:
        body = parse_json_object(raw)
        call = dialect.parse(gw, session, body, request)
    except GatewayError as err:
        await gw.record_rejected(session, thread_id, dialect.name, body if body is not None else raw[:2000].decode("utf-8", "replace"), err)
        return dialect.error_response(err)

    try:
        completion = await run_until_disconnect(
            request,
            gw.complete(
                session, thread_id, call.messages, call.tools, dialect=dialect.name,
                max_tokens=call.max_tokens, temperature=call.temperature, top_p=call.top_p, seed=call.seed,
                stop=call.stop, raw_request=body, make_response=lambda c: dialect.make_response(gw, call, c),
                context_param=dialect.context_param,
            ),
        )
    except GatewayError as err:
        return dialect.error_response(err)
    except ClientDisconnected:
        return Response(status_code=499)  # nobody is listening any more
    if call.stream:
        return StreamingResponse(
            dialect.stream(gw, call, completion),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )
    return JSONResponse(completion.turn.response)


# --------------------------------------------------------------------------- streaming helpers


# Characters json.dumps(ensure_ascii=False) leaves raw that some line splitters treat as line
# breaks (Python's str.splitlines, JavaScript line terminators): a client splitting the SSE text
# there would cut a data: line in two. Written as JSON escapes the payload means the same.
_LINE_BREAKS_IN_JSON = str.maketrans({"\u2028": "\\u2028", "\u2029": "\\u2029", "\x85": "\\u0085"})


def sse(data: Any, event: str | None = None) -> bytes:
    payload = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False, separators=(",", ":")).translate(_LINE_BREAKS_IN_JSON)
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {payload}\n\n".encode("utf-8")


def text_pieces(renderer: "Renderer", text: str) -> list[str]:
    """Split ``text`` into one piece per token (incremental detokenisation; a token that ends
    inside a multi-byte character is merged into the next piece). ``"".join(pieces) == text``
    always (falls back to one piece when the tokenizer does not decode concatenatively)."""
    if not text:
        return []
    try:
        ids = renderer.encode(text)
    except Exception:  # noqa: BLE001
        return [text]
    pieces: list[str] = []
    ck = 0  # ids[:ck] decode to "".join(pieces)
    for i in range(len(ids)):
        new = renderer.decode(ids[ck : i + 1])
        if new.endswith("\ufffd") and i + 1 < len(ids):
            continue
        if new:
            pieces.append(new)
        ck = i + 1
    return pieces if "".join(pieces) == text else [text]


def split_json_pieces(renderer: "Renderer", s: str) -> Sequence[str]:
    return text_pieces(renderer, s) or ([s] if s else [])
