"""Anthropic Messages (``POST /v1/messages``, also ``?beta=true``; ``POST /v1/messages/count_tokens``).

Request: ``model``, ``max_tokens`` and ``messages`` are required (as in Anthropic's API);
``system`` is a string or a list of text blocks (joined with ``"\\n\\n"``); ``role: "system"``
entries inside ``messages`` (Claude Code sends them) are folded into the system prompt in order
when they come before any user/assistant message, else kept in place as user text (a system
prompt that changed mid-session would break every held prefix);
content is a string or blocks: ``text``, ``tool_use`` (-> assistant tool call, ``input`` as the
arguments), ``tool_result`` (-> a ``tool`` message; content string or text blocks; images become
``[image omitted]``), ``thinking`` / ``redacted_thinking`` (dropped), ``image`` / ``document``
(``[image omitted]`` / ``[document omitted]``). ``tools`` use ``input_schema``; server tools
(a ``type`` other than ``custom`` and no ``input_schema``) are ignored. ``stop_sequences`` become
stop strings; ``temperature``, ``top_p`` as given, ``top_k`` ignored (sampling uses top_k off).
Accepted and ignored: ``thinking``, ``context_management``, ``output_config``, ``cache_control``
on any block, ``metadata``, ``tool_choice``, ``service_tier`` and anything else.

Response: ``{"id": "msg_<unique>", "type": "message", "role": "assistant", "content": [text block,
tool_use blocks...], "stop_reason": end_turn | tool_use | max_tokens | stop_sequence,
"stop_sequence", "usage": {"input_tokens", "output_tokens", "cache_read_input_tokens",
"cache_creation_input_tokens"}}`` with ``input_tokens + cache_read_input_tokens`` = the prompt
tokens the engine saw and ``output_tokens`` = the sampled tokens (stop token included).

Stream: every event is an ``event:`` line plus a ``data:`` line — ``message_start``,
``content_block_start`` / ``content_block_delta`` (``text_delta`` per token, ``input_json_delta``
per token of the arguments JSON) / ``content_block_stop``, ``message_delta`` (stop_reason, usage),
``message_stop``. Text deltas go out as the text is sampled (:mod:`legorl.gateway.streaming`); a
failure after ``message_start`` is an ``error`` event with the error body, and the stream ends.

Errors: ``{"type": "error", "error": {"type", "message"}}`` — 400 ``invalid_request_error``
(context overflow: ``"prompt is too long: N tokens > M maximum"``, which makes Claude Code
compact), 401 ``authentication_error``, 404 ``not_found_error``, 529 ``overloaded_error`` for
engine failures, overload and timeouts (Claude Code retries those), 500 ``api_error`` otherwise.
"""

from __future__ import annotations

import json
import re
import uuid
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field, ValidationError

from legorl.errors import InvalidRequestError
from legorl.gateway.completion import legorl_info
from legorl.gateway.dialects.base import (
    INVALID_JSON,
    CoreCall,
    Dialect,
    GatewayError,
    Loose,
    StreamWriter,
    join_content,
    split_json_pieces,
    sse,
    text_pieces,
    validation_param,
)
from legorl.gateway.renderer import Message, normalize_tools

if TYPE_CHECKING:  # pragma: no cover
    from legorl.gateway.completion import Completion, StreamStart

DIALECT = "anthropic.messages"


class AnthropicMessage(Loose):
    role: Literal["user", "assistant", "system"]
    content: str | list[dict[str, Any]]


class AnthropicTool(Loose):
    name: str
    description: str | None = None
    input_schema: dict[str, Any] | None = None
    type: str | None = None


class CountTokensRequest(Loose):
    model: str
    messages: list[AnthropicMessage] = Field(min_length=1)
    system: str | list[dict[str, Any]] | None = None
    tools: list[AnthropicTool] | None = None


class MessagesRequest(CountTokensRequest):
    max_tokens: int = Field(ge=1)
    stop_sequences: list[str] | None = None
    temperature: float | None = Field(default=None, ge=0, le=2)
    top_p: float | None = Field(default=None, gt=0, le=1)
    top_k: int | None = None
    stream: bool | None = False
    seed: int | None = None  # not Anthropic's; handy for tests


def _anthropic_validation_error(exc: ValidationError) -> GatewayError:
    param, kind, msg = validation_param(exc)
    param = re.sub(r"\[(\d+)\]", r".\1", param)  # Anthropic spells paths messages.0.content
    text = f"{param}: Field required" if kind == "missing" else f"{param}: {msg}"
    return GatewayError(
        400, text, param=param or None, code="missing_required_parameter" if kind == "missing" else "invalid_value"
    )


def _refuse(param: str, message: str) -> GatewayError:
    return GatewayError(400, message, param=param)


def _unanswered(user_index: str, call_ids: list[str]) -> GatewayError:
    """The real API's refusal of ``tool_use`` blocks the next message does not answer."""
    where = f"messages.{int(user_index) - 1}"
    return _refuse(
        where,
        f"{where}: `tool_use` ids were found without `tool_result` blocks immediately after: "
        f"{', '.join(call_ids)}. Each `tool_use` block must have a corresponding `tool_result` "
        "block in the next message.",
    )


def _placeholder(block: dict[str, Any]) -> str | None:
    kind = block.get("type")
    if kind in ("image", "document"):
        return f"[{kind} omitted]"
    return None


def _check_text(text: str, where: str, strict: bool) -> None:
    """The real API refuses empty and whitespace-only text blocks."""
    if not strict:
        return
    if not text:
        raise _refuse(where, "messages: text content blocks must be non-empty")
    if not text.strip():
        raise _refuse(where, "messages: text content blocks must contain non-whitespace text")


def blocks_text(content: Any, where: str, *, strict: bool = True) -> str:
    """A string or text blocks -> one string (``thinking`` dropped, images as placeholders)."""

    def block(i: int, b: Any) -> str | None:
        if isinstance(b, str):
            return b
        if not isinstance(b, dict):
            raise _refuse(f"{where}.{i}", f"{where}.{i}: content blocks must be objects")
        kind = b.get("type")
        if kind == "text":
            if not isinstance(b.get("text"), str):
                raise _refuse(f"{where}.{i}.text", f"{where}.{i}.text: Field required")
            _check_text(b["text"], f"{where}.{i}.text", strict)
            return str(b["text"])
        if kind in ("thinking", "redacted_thinking"):
            return None
        placeholder = _placeholder(b)
        if placeholder is not None:
            return placeholder
        raise _refuse(f"{where}.{i}.type", f"{where}.{i}: unsupported content block type {kind!r} here")

    return join_content(
        content, block, sep="\n", not_a_list=_refuse(where, f"{where}: expected a string or a list of content blocks")
    )


def system_text(system: Any) -> str:
    if system is None:
        return ""
    if isinstance(system, str):
        return system
    parts = []
    for i, b in enumerate(system):
        if not isinstance(b, dict) or b.get("type", "text") != "text" or not isinstance(b.get("text"), str):
            raise _refuse(f"system.{i}", f"system.{i}: system blocks must be text blocks")
        parts.append(b["text"])
    return "\n\n".join(parts)


def _assistant_message(content: list[dict[str, Any]], where: str, strict: bool) -> tuple[Message, list[str]]:
    """Assistant blocks -> the normalised message and the ids of its ``tool_use`` blocks."""
    texts: list[str] = []
    calls: list[dict[str, Any]] = []
    for j, b in enumerate(content):
        kind = b.get("type")
        if kind == "text":
            text = b.get("text")
            if not isinstance(text, str):
                raise _refuse(f"{where}.{j}.text", f"{where}.{j}.text: Field required")
            # An empty text block is accepted here, unlike the real API: it is how the gateway answers an
            # empty generation, and a harness must be able to send back what it received.
            texts.append(text)
        elif kind == "tool_use":
            for f in ("id", "name") if strict else ("name",):
                if not isinstance(b.get(f), str):
                    raise _refuse(f"{where}.{j}.{f}", f"{where}.{j}.{f}: Field required")
            inp = b.get("input", {})
            if not isinstance(inp, dict):
                raise _refuse(f"{where}.{j}.input", f"{where}.{j}.input: Input should be a valid dictionary")
            calls.append({"id": str(b.get("id") or ""), "name": b["name"], "arguments": inp})
        elif kind in ("thinking", "redacted_thinking", "server_tool_use", "web_search_tool_result"):
            continue
        else:
            raise _refuse(f"{where}.{j}.type", f"{where}.{j}: unsupported assistant content block type {kind!r}")
    msg: Message = {"role": "assistant", "content": "\n".join(t for t in texts if t)}
    if calls:
        msg["tool_calls"] = calls
    return msg, [c["id"] for c in calls]


def _user_messages(content: list[dict[str, Any]], where: str, strict: bool, open_calls: list[str]) -> list[Message]:
    """User blocks -> tool messages (``tool_result``) and user messages (text, in order). ``open_calls``:
    the ``tool_use`` ids of the previous message, each of which must be answered here (strict)."""
    out: list[Message] = []
    texts: list[str] = []
    answered: set[str] = set()
    for j, b in enumerate(content):
        kind = b.get("type")
        if kind == "tool_result":
            call_id = b.get("tool_use_id")
            if strict and not isinstance(call_id, str):
                raise _refuse(f"{where}.{j}.tool_use_id", f"{where}.{j}.tool_use_id: Field required")
            if strict and call_id not in open_calls:
                raise _refuse(
                    f"{where}.{j}",
                    (
                        f"{where}.{j}: unexpected `tool_use_id` found in `tool_result` blocks: {call_id}. Each "
                        "`tool_result` block must have a corresponding `tool_use` block in the previous message."
                    ),
                )
            answered.add(str(call_id))
            if texts:
                out.append({"role": "user", "content": "\n".join(texts)})
                texts = []
            text = blocks_text(b.get("content"), f"{where}.{j}.content", strict=strict)
            if b.get("is_error") and not text.startswith("Error"):
                text = "Error: " + text
            out.append({"role": "tool", "tool_call_id": str(call_id or ""), "content": text})
        elif kind == "text":
            block_text = b.get("text")
            if not isinstance(block_text, str):
                raise _refuse(f"{where}.{j}.text", f"{where}.{j}.text: Field required")
            _check_text(block_text, f"{where}.{j}.text", strict)
            texts.append(block_text)
        elif kind in ("thinking", "redacted_thinking"):
            continue
        elif (placeholder := _placeholder(b)) is not None:
            texts.append(placeholder)
        else:
            raise _refuse(f"{where}.{j}.type", f"{where}.{j}: unsupported user content block type {kind!r}")
    missing = [c for c in open_calls if c not in answered]
    if strict and missing:
        raise _unanswered(where.split(".")[1], missing)
    if texts or not content:
        out.append({"role": "user", "content": "\n".join(texts)})
    return out


def to_messages(req: CountTokensRequest, *, strict: bool = True) -> tuple[list[Message], list[dict[str, Any]] | None]:
    """Anthropic request -> normalised messages + tools (see the renderer's message shape). ``strict``:
    refuse what the real API refuses (docs/gateway-validation.md)."""
    system_parts = [system_text(req.system)] if req.system else []
    out: list[Message] = []
    open_calls: list[str] = []  # tool_use ids of the previous (non-system) message
    last = len(req.messages) - 1
    for i, m in enumerate(req.messages):
        where = f"messages.{i}.content"
        if m.role == "system":
            if not out:  # before the conversation: part of the system prompt
                system_parts.append(blocks_text(m.content, where, strict=strict))
            else:  # mid-conversation (Claude Code's attachments, e.g. after compaction): in place, as
                # user text, so that the system prompt and the held prefix stay stable
                out.append({"role": "user", "content": blocks_text(m.content, where, strict=strict)})
            continue
        if strict and not m.content and not (i == last and m.role == "assistant"):
            raise _refuse(
                f"messages.{i}",
                f"messages.{i}: all messages must have non-empty content except for the "
                "optional final assistant message",
            )
        if m.role == "assistant":
            if strict and open_calls:
                raise _unanswered(str(i), open_calls)
            if isinstance(m.content, str):
                msg, open_calls = {"role": "assistant", "content": m.content}, []
            else:
                msg, open_calls = _assistant_message(m.content, where, strict)
            if strict and i == last and msg["content"] != msg["content"].rstrip() and not open_calls:
                raise _refuse(f"messages.{i}", "final assistant content cannot end with trailing whitespace")
            out.append(msg)
            continue
        if isinstance(m.content, str):
            if strict and open_calls:
                raise _unanswered(str(i), open_calls)
            out.append({"role": "user", "content": m.content})
        else:
            out.extend(_user_messages(m.content, where, strict, open_calls))
        open_calls = []
    system = "\n\n".join(p for p in system_parts if p)
    if system:
        out.insert(0, {"role": "system", "content": system})
    if not out:
        raise _refuse("messages", "messages: at least one non-system message is required")
    fn_tools = [
        t.model_dump(exclude_none=True)
        for t in (req.tools or [])
        if t.input_schema is not None or t.type in (None, "custom")
    ]
    try:
        tools = normalize_tools(fn_tools or None)
    except InvalidRequestError as exc:
        raise _refuse("tools", str(exc)) from None
    return out, tools


_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    405: "invalid_request_error",
    413: "request_too_large",
    429: "rate_limit_error",
}


class AnthropicMessages(Dialect):
    name = DIALECT

    def error_status(self, err: GatewayError) -> int:
        if err.code in ("engine_overloaded", "engine_error", "engine_timeout"):
            return 529
        return err.status

    def error_body(self, err: GatewayError) -> dict[str, Any]:
        status = self.error_status(err)
        if status == 529:
            etype = "overloaded_error"
        else:
            etype = _ERROR_TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")
        message = err.message
        if err.code == "context_length_exceeded":
            message = f"prompt is too long: {message}"
        elif err.code == INVALID_JSON:
            message = f"The request body is not valid JSON: {message}"
        return {"type": "error", "error": {"type": etype, "message": message}}

    def unauthorized(self) -> GatewayError:
        return GatewayError(401, "invalid x-api-key (unknown or closed LEGO-RL session token)", code="invalid_api_key")

    def parse(self, body: dict[str, Any], session_id: str) -> CoreCall:
        try:
            req = MessagesRequest.model_validate(body)
        except ValidationError as exc:
            raise _anthropic_validation_error(exc) from None
        messages, tools = to_messages(req, strict=self.strict)
        return CoreCall(
            messages=messages,
            tools=tools,
            max_tokens=req.max_tokens,
            temperature=req.temperature,
            top_p=req.top_p,
            seed=req.seed,
            stop=list(req.stop_sequences or []),
            stream=bool(req.stream),
        )

    def make_response(self, call: CoreCall, completion: Completion) -> dict[str, Any]:
        parsed = completion.parsed
        content: list[dict[str, Any]] = []
        if parsed.content or not parsed.tool_calls:
            content.append({"type": "text", "text": parsed.content})
        for c in parsed.tool_calls:
            content.append(
                {"type": "tool_use", "id": "toolu_" + uuid.uuid4().hex[:24], "name": c.name, "input": c.arguments}
            )
        if completion.finish_reason == "tool_calls":
            stop_reason = "tool_use"
        elif completion.finish_reason == "length":
            stop_reason = "max_tokens"
        elif completion.stop_sequence is not None:
            stop_reason = "stop_sequence"
        else:
            stop_reason = "end_turn"
        cached = min(completion.cached_prompt_tokens, completion.prompt_tokens)
        return {
            "id": message_id(call),
            "type": "message",
            "role": "assistant",
            "model": self.model_name,
            "content": content,
            "stop_reason": stop_reason,
            "stop_sequence": completion.stop_sequence,
            "usage": {
                "input_tokens": completion.prompt_tokens - cached,
                "cache_creation_input_tokens": 0,
                "cache_read_input_tokens": cached,
                "output_tokens": len(completion.output_token_ids),
            },
            "x_legorl": legorl_info(completion),
        }

    def stream_writer(self, call: CoreCall, start: StreamStart) -> StreamWriter:
        return _MessagesStream(self, call, start)

    def count_tokens(self, body: dict[str, Any]) -> dict[str, Any]:
        """``POST /v1/messages/count_tokens``: the prompt tokens the request would cost."""
        try:
            req = CountTokensRequest.model_validate(body)
        except ValidationError as exc:
            raise _anthropic_validation_error(exc) from None
        messages, tools = to_messages(req, strict=self.strict)
        try:
            n = len(self.renderer.render_prompt(messages, tools))
        except InvalidRequestError as exc:
            raise _refuse("messages", str(exc)) from None
        return {"input_tokens": n}


class _MessagesStream(StreamWriter):
    """Messages events: ``message_start``; the text block opened by its first delta (index 0, as in
    the response); tool_use blocks; ``message_delta`` and ``message_stop``; an error is an ``error``
    event with the error body, as Anthropic's stream carries it (an overload is ``overloaded_error``,
    which Claude Code retries)."""

    def __init__(self, dialect: AnthropicMessages, call: CoreCall, start: StreamStart) -> None:
        super().__init__(dialect, call, start)
        self.dialect = dialect
        self.text_open = False

    def head(self) -> list[bytes]:
        message: dict[str, Any] = {
            "id": message_id(self.call),
            "type": "message",
            "role": "assistant",
            "model": self.model_name,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {
                "input_tokens": self.start.prompt_tokens,
                "cache_creation_input_tokens": 0,
                "cache_read_input_tokens": 0,
                "output_tokens": 1,
            },
        }
        return [sse({"type": "message_start", "message": message}, "message_start")]

    def _open_text(self) -> list[bytes]:
        if self.text_open:
            return []
        self.text_open = True
        start = {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}
        return [sse(start, "content_block_start")]

    def _delta(self, idx: int, delta: dict[str, Any]) -> bytes:
        return sse({"type": "content_block_delta", "index": idx, "delta": delta}, "content_block_delta")

    def _text_events(self, delta: str) -> list[bytes]:
        return [*self._open_text(), self._delta(0, {"type": "text_delta", "text": delta})]

    def _finish_events(self, resp: dict[str, Any], rest: str) -> list[bytes]:
        out: list[bytes] = []
        for idx, block in enumerate(resp["content"]):
            if block["type"] == "text":
                out += self._open_text()
                out += [self._delta(idx, {"type": "text_delta", "text": p}) for p in text_pieces(self.renderer, rest)]
            else:
                tool = {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}
                out.append(
                    sse({"type": "content_block_start", "index": idx, "content_block": tool}, "content_block_start")
                )
                for piece in split_json_pieces(self.renderer, json.dumps(block["input"], ensure_ascii=False)):
                    out.append(self._delta(idx, {"type": "input_json_delta", "partial_json": piece}))
            out.append(sse({"type": "content_block_stop", "index": idx}, "content_block_stop"))
        stop = {"stop_reason": resp["stop_reason"], "stop_sequence": resp["stop_sequence"]}
        out.append(sse({"type": "message_delta", "delta": stop, "usage": resp["usage"]}, "message_delta"))
        out.append(sse({"type": "message_stop"}, "message_stop"))
        return out

    def error(self, err: GatewayError) -> list[bytes]:
        return [sse(self.dialect.error_body(err), "error")]


def message_id(call: CoreCall) -> str:
    return str(call.reserve("id", lambda: "msg_" + uuid.uuid4().hex))
