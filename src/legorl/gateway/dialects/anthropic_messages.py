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
``message_stop``.

Errors: ``{"type": "error", "error": {"type", "message"}}`` — 400 ``invalid_request_error``
(context overflow: ``"prompt is too long: N tokens > M maximum"``, which makes Claude Code
compact), 401 ``authentication_error``, 404 ``not_found_error``, 529 ``overloaded_error`` for
engine failures, overload and timeouts (Claude Code retries those), 500 ``api_error`` otherwise.
"""

from __future__ import annotations

import json
import re
import uuid
from typing import TYPE_CHECKING, Any, AsyncIterator, Literal

from fastapi import Request
from fastapi.responses import JSONResponse, Response
from pydantic import Field, ValidationError

from legorl.errors import InvalidRequestError
from legorl.gateway.dialects.base import CoreCall, Dialect, GatewayError, Loose, parse_json_object, split_json_pieces, sse, text_pieces, validation_param
from legorl.gateway.renderer import normalize_tools

if TYPE_CHECKING:  # pragma: no cover
    from legorl.gateway.app import Completion, Gateway

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
    return GatewayError(400, text, param=param or None, code="missing_required_parameter" if kind == "missing" else "invalid_value")


def _placeholder(block: dict) -> str | None:
    kind = block.get("type")
    if kind in ("image", "document"):
        return f"[{kind} omitted]"
    return None


def blocks_text(content: Any, where: str) -> str:
    """A string or text blocks -> one string (``thinking`` dropped, images as placeholders)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise GatewayError(400, f"{where}: expected a string or a list of content blocks", param=where)
    out = []
    for i, b in enumerate(content):
        if isinstance(b, str):
            out.append(b)
            continue
        if not isinstance(b, dict):
            raise GatewayError(400, f"{where}.{i}: content blocks must be objects", param=f"{where}.{i}")
        kind = b.get("type")
        if kind == "text":
            if not isinstance(b.get("text"), str):
                raise GatewayError(400, f"{where}.{i}.text: Field required", param=f"{where}.{i}.text")
            out.append(b["text"])
        elif kind in ("thinking", "redacted_thinking"):
            continue
        elif _placeholder(b) is not None:
            out.append(_placeholder(b))
        else:
            raise GatewayError(400, f"{where}.{i}: unsupported content block type {kind!r} here", param=f"{where}.{i}.type")
    return "\n".join(out) if len(out) > 1 else "".join(out)


def system_text(system: Any) -> str:
    if system is None:
        return ""
    if isinstance(system, str):
        return system
    parts = []
    for i, b in enumerate(system):
        if not isinstance(b, dict) or b.get("type", "text") != "text" or not isinstance(b.get("text"), str):
            raise GatewayError(400, f"system.{i}: system blocks must be text blocks", param=f"system.{i}")
        parts.append(b["text"])
    return "\n\n".join(parts)


def to_messages(req: CountTokensRequest) -> tuple[list[dict], list[dict] | None]:
    """Anthropic request -> normalised messages + tools (see the renderer's message shape)."""
    system_parts = [system_text(req.system)] if req.system else []
    out: list[dict] = []
    for i, m in enumerate(req.messages):
        where = f"messages.{i}.content"
        if m.role == "system":
            if not out:  # before the conversation: part of the system prompt
                system_parts.append(blocks_text(m.content, where))
            else:  # mid-conversation (Claude Code's attachments, e.g. after compaction): in place, as
                # user text, so that the system prompt and the held prefix stay stable
                out.append({"role": "user", "content": blocks_text(m.content, where)})
            continue
        if isinstance(m.content, str):
            out.append({"role": m.role, "content": m.content})
            continue
        if m.role == "assistant":
            texts: list[str] = []
            calls: list[dict] = []
            for j, b in enumerate(m.content):
                kind = b.get("type") if isinstance(b, dict) else None
                if kind == "text":
                    texts.append(str(b.get("text", "")))
                elif kind == "tool_use":
                    if not isinstance(b.get("name"), str):
                        raise GatewayError(400, f"{where}.{j}.name: Field required", param=f"{where}.{j}.name")
                    inp = b.get("input", {})
                    if not isinstance(inp, dict):
                        raise GatewayError(400, f"{where}.{j}.input: Input should be a valid dictionary", param=f"{where}.{j}.input")
                    calls.append({"id": str(b.get("id") or ""), "name": b["name"], "arguments": inp})
                elif kind in ("thinking", "redacted_thinking"):
                    continue
                elif kind in ("server_tool_use", "web_search_tool_result"):
                    continue
                else:
                    raise GatewayError(400, f"{where}.{j}: unsupported assistant content block type {kind!r}", param=f"{where}.{j}.type")
            msg: dict = {"role": "assistant", "content": "\n".join(t for t in texts if t)}
            if calls:
                msg["tool_calls"] = calls
            out.append(msg)
            continue
        # user blocks: tool results become tool messages, text (in order) user messages
        texts = []
        for j, b in enumerate(m.content):
            kind = b.get("type") if isinstance(b, dict) else None
            if kind == "tool_result":
                if texts:
                    out.append({"role": "user", "content": "\n".join(texts)})
                    texts = []
                content = blocks_text(b.get("content"), f"{where}.{j}.content")
                if b.get("is_error") and not content.startswith("Error"):
                    content = "Error: " + content
                out.append({"role": "tool", "tool_call_id": str(b.get("tool_use_id") or ""), "content": content})
            elif kind == "text":
                texts.append(str(b.get("text", "")))
            elif kind in ("thinking", "redacted_thinking"):
                continue
            elif isinstance(b, dict) and _placeholder(b) is not None:
                texts.append(_placeholder(b))
            else:
                raise GatewayError(400, f"{where}.{j}: unsupported user content block type {kind!r}", param=f"{where}.{j}.type")
        if texts or not m.content:
            out.append({"role": "user", "content": "\n".join(texts)})
    system = "\n\n".join(p for p in system_parts if p)
    if system:
        out.insert(0, {"role": "system", "content": system})
    if not out:
        raise GatewayError(400, "messages: at least one non-system message is required", param="messages")
    fn_tools = [t.model_dump(exclude_none=True) for t in (req.tools or []) if t.input_schema is not None or t.type in (None, "custom")]
    try:
        tools = normalize_tools(fn_tools or None)
    except InvalidRequestError as exc:
        raise GatewayError(400, str(exc), param="tools") from None
    return out, tools


_ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error", 404: "not_found_error",
                405: "invalid_request_error", 413: "request_too_large", 429: "rate_limit_error"}


class AnthropicMessages(Dialect):
    name = DIALECT

    def error_status(self, err: GatewayError) -> int:
        if err.code in ("engine_overloaded", "engine_error", "engine_timeout"):
            return 529
        return err.status

    def error_body(self, err: GatewayError) -> dict:
        status = self.error_status(err)
        if status == 529:
            etype = "overloaded_error"
        else:
            etype = _ERROR_TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")
        message = err.message
        if err.code == "context_length_exceeded":
            message = f"prompt is too long: {message}"
        return {"type": "error", "error": {"type": etype, "message": message}}

    def unauthorized(self) -> GatewayError:
        return GatewayError(401, "invalid x-api-key (unknown or closed LEGO-RL session token)", code="invalid_api_key")

    def parse(self, gw, session, body, request) -> CoreCall:
        try:
            req = MessagesRequest.model_validate(body)
        except ValidationError as exc:
            raise _anthropic_validation_error(exc) from None
        messages, tools = to_messages(req)
        return CoreCall(
            messages=messages, tools=tools, max_tokens=req.max_tokens, temperature=req.temperature, top_p=req.top_p,
            seed=req.seed, stop=list(req.stop_sequences or []), stream=bool(req.stream),
        )

    def make_response(self, gw: "Gateway", call: CoreCall, completion: "Completion") -> dict:
        parsed = completion.parsed
        content: list[dict] = []
        if parsed.content or not parsed.tool_calls:
            content.append({"type": "text", "text": parsed.content})
        for c in parsed.tool_calls:
            content.append({"type": "tool_use", "id": "toolu_" + uuid.uuid4().hex[:24], "name": c.name, "input": c.arguments})
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
            "id": "msg_" + uuid.uuid4().hex,
            "type": "message",
            "role": "assistant",
            "model": gw.model_name,
            "content": content,
            "stop_reason": stop_reason,
            "stop_sequence": completion.stop_sequence,
            "usage": {
                "input_tokens": completion.prompt_tokens - cached,
                "cache_creation_input_tokens": 0,
                "cache_read_input_tokens": cached,
                "output_tokens": len(completion.output_token_ids),
            },
            "x_legorl": gw.legorl_info(completion),
        }

    async def stream(self, gw: "Gateway", call: CoreCall, completion: "Completion") -> AsyncIterator[bytes]:
        resp = completion.turn.response
        usage = resp["usage"]
        start = {k: v for k, v in resp.items() if k != "x_legorl"}
        start.update(content=[], stop_reason=None, stop_sequence=None, usage={**usage, "output_tokens": 1})
        yield sse({"type": "message_start", "message": start}, "message_start")
        for idx, block in enumerate(resp["content"]):
            if block["type"] == "text":
                yield sse({"type": "content_block_start", "index": idx, "content_block": {"type": "text", "text": ""}}, "content_block_start")
                for piece in text_pieces(gw.renderer, block["text"]):
                    yield sse({"type": "content_block_delta", "index": idx, "delta": {"type": "text_delta", "text": piece}}, "content_block_delta")
            else:
                yield sse({"type": "content_block_start", "index": idx, "content_block": {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}}, "content_block_start")
                for piece in split_json_pieces(gw.renderer, json.dumps(block["input"], ensure_ascii=False)):
                    yield sse({"type": "content_block_delta", "index": idx, "delta": {"type": "input_json_delta", "partial_json": piece}}, "content_block_delta")
            yield sse({"type": "content_block_stop", "index": idx}, "content_block_stop")
        yield sse({"type": "message_delta", "delta": {"stop_reason": resp["stop_reason"], "stop_sequence": resp["stop_sequence"]}, "usage": usage}, "message_delta")
        yield sse({"type": "message_stop"}, "message_stop")

    # -- count_tokens ------------------------------------------------------------------------
    async def count_tokens(self, gw: "Gateway", request: Request) -> Response:
        if gw.sessions.lookup(request.headers) is None:
            return self.error_response(self.unauthorized())
        try:
            body = parse_json_object(await request.body())
            try:
                req = CountTokensRequest.model_validate(body)
            except ValidationError as exc:
                raise _anthropic_validation_error(exc) from None
            messages, tools = to_messages(req)
            try:
                n = len(gw.renderer.render_prompt(messages, tools))
            except InvalidRequestError as exc:
                raise GatewayError(400, str(exc), param="messages") from None
        except GatewayError as err:
            return self.error_response(err)
        return JSONResponse({"input_tokens": n})
