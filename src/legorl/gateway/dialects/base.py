"""What every dialect adapter shares: the parsed core call, the :class:`Dialect` interface, strict
JSON body parsing, wire-model helpers, SSE framing and per-token text pieces for streaming.

A dialect is built with only what it needs — the :class:`~legorl.gateway.renderer.Renderer` (token
pieces for streaming, token counts, logprob strings), the model name it reports, and whether it
validates conversations strictly (:doc:`docs/gateway-validation.md`) — and implements ``parse``
(wire body -> :class:`CoreCall`, raising :class:`GatewayError` naming the bad field),
``make_response`` (:class:`~legorl.gateway.completion.Completion` -> the non-streaming wire body,
also stored in the Turn), ``stream`` (the same content as SSE events, derived from the stored body
so ids agree) and ``error_body`` / ``error_status`` (its error shape). Request handling (auth, body,
generation, disconnects, recording) is the app's (:mod:`legorl.gateway.app`).

Streaming: a dialect's :class:`StreamWriter` writes one response's SSE events in three parts — the
head (before any token), text deltas as the visible text grows (:mod:`legorl.gateway.streaming`
decides how much text is safe to send while the model is still sampling), and the finish, written
from the stored response: the rest of the text, the tool calls, the stop reason and usage (or an
in-stream error in the dialect's shape). When nothing streamed live (an engine that cannot stream),
the finish writes the whole text, one chunk per token (:func:`text_pieces`). Ids and timestamps a
stream shows before the response exists are reserved on the :class:`CoreCall`
(:meth:`CoreCall.reserve`), so the head and the stored response agree.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, ValidationError

# GatewayError and ClientDisconnected are defined in the error tree; re-exported here where they were
from legorl.errors import ClientDisconnected, GatewayError

if TYPE_CHECKING:  # pragma: no cover
    from starlette.requests import Request

    from legorl.gateway.completion import Completion, StreamStart
    from legorl.gateway.renderer import Message, Renderer

__all__ = [
    "ClientDisconnected",
    "CoreCall",
    "Dialect",
    "GatewayError",
    "Loose",
    "StreamWriter",
    "join_content",
    "lone_surrogate",
    "openai_validation_error",
    "parse_json_object",
    "split_json_pieces",
    "sse",
    "text_pieces",
    "validation_param",
]

log = logging.getLogger(__name__)

INVALID_JSON = "invalid_json"  # GatewayError.code of a body that is not a strict JSON object


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
    return param, str(err.get("type", "")), str(err.get("msg", ""))


def openai_validation_error(exc: ValidationError) -> GatewayError:
    param, kind, msg = validation_param(exc)
    if kind == "missing":
        text = f"Missing required parameter: '{param}'."
    else:
        text = f"Invalid value for '{param}': {msg}."
    return GatewayError(
        400, text, param=param or None, code="missing_required_parameter" if kind == "missing" else "invalid_value"
    )


# --------------------------------------------------------------------------- strict JSON

# A JSON escape (valid JSON: every backslash starts one); group 1 holds the 4 hex digits of \uXXXX.
_ESCAPE = re.compile(r"\\(?:u([0-9a-fA-F]{4})|.)")
_MAYBE_SURROGATE = re.compile(r"\\u[dD][89a-fA-F]")


def lone_surrogate(text: str) -> tuple[int, str] | None:
    """The first unpaired UTF-16 surrogate escape in valid JSON ``text``: (char offset, detail) or
    None. Python's ``json`` accepts ``"\\ud800"``; RFC 8259 parsers (serde_json behind Anthropic's
    API, OpenAI's) refuse it, and the text could never be encoded as UTF-8 (tokenizer, store)."""
    if not _MAYBE_SURROGATE.search(text):
        return None
    pending: re.Match[str] | None = None  # a high surrogate waiting for its low half
    for m in _ESCAPE.finditer(text):
        cp = int(m.group(1), 16) if m.group(1) else None
        if pending is not None:
            if m.start() == pending.end() and cp is not None and 0xDC00 <= cp <= 0xDFFF:
                pending = None
                continue
            return pending.start(), "no low surrogate in string"
        if cp is not None and 0xD800 <= cp <= 0xDBFF:
            pending = m
        elif cp is not None and 0xDC00 <= cp <= 0xDFFF:
            return m.start(), "lone low surrogate in string"
    return (pending.start(), "no low surrogate in string") if pending is not None else None


def _where(text: str, pos: int) -> str:
    line = text.count("\n", 0, pos) + 1
    col = pos - (text.rfind("\n", 0, pos) + 1) + 1
    return f"line {line} column {col} (char {pos})"


def parse_json_object(raw: bytes) -> dict[str, Any]:
    """The request body as a JSON object, parsed as strictly as the real APIs: UTF-8 only (Python's
    ``json`` would take UTF-16/32 and encoded surrogates), no lone surrogate escapes, no raw control
    characters in strings. Raises :class:`GatewayError` (400, ``code`` :data:`INVALID_JSON`,
    ``message`` the parser's detail, which each dialect words in its own way)."""
    try:
        text = raw.decode("utf-8")
        body = json.loads(text)
    except UnicodeDecodeError as exc:
        raise GatewayError(400, f"invalid UTF-8 at byte {exc.start}", code=INVALID_JSON) from None
    except (json.JSONDecodeError, RecursionError) as exc:
        raise GatewayError(
            400, str(exc) if isinstance(exc, json.JSONDecodeError) else "nested too deep", code=INVALID_JSON
        ) from None
    bad = lone_surrogate(text)
    if bad is not None:
        raise GatewayError(400, f"{bad[1]}: {_where(text, bad[0])}", code=INVALID_JSON)
    if not isinstance(body, dict):
        raise GatewayError(400, "the request body must be a JSON object", code=INVALID_JSON)
    return body


def join_content(
    content: Any, part_text: Callable[[int, Any], str | None], *, sep: str, not_a_list: GatewayError
) -> str:
    """Message content as the wire APIs send it — a string, None, or a list of parts — as one string.
    ``part_text(i, part)`` gives a part's text, None to drop it, or raises the dialect's error."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise not_a_list
    texts = [t for i, part in enumerate(content) if (t := part_text(i, part)) is not None]
    return sep.join(texts)


@dataclass
class CoreCall:
    """A wire request reduced to what :meth:`Gateway.complete` needs (+ dialect extras)."""

    messages: list[Message]
    tools: list[dict[str, Any]] | None = None
    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    seed: int | None = None
    stop: list[str] = field(default_factory=list)
    stream: bool = False
    include_usage: bool = False
    extra: dict[str, Any] = field(default_factory=dict)
    reserved: dict[str, Any] = field(default_factory=dict)

    def reserve(self, key: str, make: Callable[[], Any]) -> Any:
        """The value of ``key`` for this call, made on first use: an id or timestamp that a stream
        shows before the response exists and the response then carries."""
        if key not in self.reserved:
            self.reserved[key] = make()
        return self.reserved[key]


class Dialect:
    """One wire API. See the module doc for what a dialect implements."""

    name = "base"
    context_param = "messages"

    def __init__(self, renderer: Renderer, model_name: str, *, strict: bool = True) -> None:
        self.renderer = renderer
        self.model_name = model_name
        self.strict = strict  # refuse conversations the real API refuses (False: lenient, documented)

    # -- errors ------------------------------------------------------------------------------
    def error_status(self, err: GatewayError) -> int:
        return err.status

    def error_body(self, err: GatewayError) -> dict[str, Any]:
        if err.code == INVALID_JSON:  # OpenAI's wording
            return GatewayError(
                400, f"We could not parse the JSON body of your request: {err.message}", code=None
            ).body()
        return err.body()

    def error_response(self, err: GatewayError) -> JSONResponse:
        status = self.error_status(err)
        headers = {"WWW-Authenticate": "Bearer"} if status == 401 else {}
        headers.update(getattr(err, "headers", None) or {})  # e.g. a budget refusal's retry-after / x-should-retry
        return JSONResponse(self.error_body(err), status_code=status, headers=headers or None)

    def credentials(self, request: Request) -> Mapping[str, str]:
        """The headers the session lookup reads (``Authorization: Bearer`` or ``x-api-key``, thread
        headers): a dialect whose clients send the key elsewhere maps it there."""
        return request.headers

    def unauthorized(self) -> GatewayError:
        return GatewayError(
            401,
            "Incorrect API key provided (unknown or closed LEGO-RL session token).",
            type="invalid_request_error",
            code="invalid_api_key",
        )

    # -- to implement ------------------------------------------------------------------------
    def parse(self, body: dict[str, Any], session_id: str) -> CoreCall:
        raise NotImplementedError

    def make_response(self, call: CoreCall, completion: Completion) -> dict[str, Any]:
        raise NotImplementedError

    def stream_writer(self, call: CoreCall, start: StreamStart) -> StreamWriter:
        raise NotImplementedError

    async def stream(self, call: CoreCall, completion: Completion) -> AsyncIterator[bytes]:
        """A finished completion as SSE events (nothing streamed live)."""
        from legorl.gateway.completion import StreamStart

        writer = self.stream_writer(call, StreamStart.of(completion))
        for event in writer.head() + writer.finish(completion):
            yield event


class StreamWriter:
    """The SSE events of one streamed response (see the module doc). A dialect implements
    :meth:`head`, :meth:`_text_events`, :meth:`_finish_events` and :meth:`error`."""

    def __init__(self, dialect: Dialect, call: CoreCall, start: StreamStart) -> None:
        self.renderer = dialect.renderer
        self.model_name = dialect.model_name
        self.call = call
        self.start = start
        self.sent_text = ""  # visible text already streamed

    def head(self) -> list[bytes]:
        """The events before any output."""
        raise NotImplementedError

    def text(self, delta: str) -> list[bytes]:
        """Events for ``delta``, more visible text (a prefix of the final content, in order)."""
        if not delta:
            return []
        self.sent_text += delta
        return self._text_events(delta)

    def finish(self, completion: Completion) -> list[bytes]:
        """The rest of the response, from the stored wire response in ``completion.turn.response``."""
        content = completion.parsed.content
        if content.startswith(self.sent_text):
            rest = content[len(self.sent_text) :]
        else:  # not expected (streamed text is held back until it is final): never send text twice
            log.error("streamed text %r is not a prefix of the final content %r", self.sent_text[:80], content[:80])
            rest = ""
        return self._finish_events(completion.turn.response, rest)

    def error(self, err: GatewayError) -> list[bytes]:
        """The dialect's in-stream error event(s), for a failure after the head went out."""
        raise NotImplementedError

    def _text_events(self, delta: str) -> list[bytes]:
        raise NotImplementedError

    def _finish_events(self, resp: dict[str, Any], rest: str) -> list[bytes]:
        """``rest``: the content not streamed yet (the whole content when nothing streamed live)."""
        raise NotImplementedError


# --------------------------------------------------------------------------- streaming helpers


# Characters json.dumps(ensure_ascii=False) leaves raw that some line splitters treat as line
# breaks (Python's str.splitlines, JavaScript line terminators): a client splitting the SSE text
# there would cut a data: line in two. Written as JSON escapes the payload means the same.
_LINE_BREAKS_IN_JSON = str.maketrans({"\u2028": "\\u2028", "\u2029": "\\u2029", "\x85": "\\u0085"})


def sse(data: Any, event: str | None = None) -> bytes:
    payload = (
        data
        if isinstance(data, str)
        else json.dumps(data, ensure_ascii=False, separators=(",", ":")).translate(_LINE_BREAKS_IN_JSON)
    )
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {payload}\n\n".encode()


def text_pieces(renderer: Renderer, text: str) -> list[str]:
    """Split ``text`` into one piece per token (incremental detokenisation; a token that ends
    inside a multi-byte character is merged into the next piece). ``"".join(pieces) == text``
    always (falls back to one piece when the tokenizer does not decode concatenatively)."""
    if not text:
        return []
    ids = renderer.encode(text)
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


def split_json_pieces(renderer: Renderer, s: str) -> Sequence[str]:
    return text_pieces(renderer, s) or ([s] if s else [])
