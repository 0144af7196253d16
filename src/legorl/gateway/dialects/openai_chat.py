"""OpenAI Chat Completions (``POST /v1/chat/completions``), streaming and not.

Request: ``messages`` (system/developer/user/assistant/tool; content string or text parts;
assistant ``tool_calls``), ``tools`` (function tools), ``max_completion_tokens`` > ``max_tokens``,
``temperature``, ``top_p``, ``seed``, ``stop`` (≤ 4), ``n`` (1 only), ``stream``,
``stream_options.include_usage``, ``logprobs``. Anything else (OpenHands' ``reasoning_effort``,
``prompt_cache_key``, ``tool_choice``, ...) is accepted and ignored.

Stream (``text/event-stream``, ``data:`` lines only): a first chunk ``delta: {role, content: ""}``,
one ``delta.content`` chunk per token of the content, per tool call a chunk with
``tool_calls[{index, id, type, function{name, arguments: ""}}]`` followed by argument chunks
``tool_calls[{index, function{arguments}}]``, a final chunk ``delta: {}`` with ``finish_reason``,
a usage chunk with ``choices: []`` when ``include_usage`` was asked, then ``data: [DONE]``. All
chunks of one response share its ``chatcmpl-`` id (unique per response).

Errors: ``{"error": {"message", "type", "param", "code"}}``.
"""

from __future__ import annotations

import time
import uuid
from typing import TYPE_CHECKING, Any, AsyncIterator, Literal

from pydantic import Field, ValidationError, field_validator

from legorl.errors import InvalidRequestError
from legorl.gateway.dialects.base import CoreCall, Dialect, GatewayError, Loose, openai_validation_error, split_json_pieces, sse, text_pieces
from legorl.gateway.renderer import normalize_messages, normalize_tools

if TYPE_CHECKING:  # pragma: no cover
    from legorl.gateway.app import Completion, Gateway

DIALECT = "openai.chat"


class ChatFunctionCall(Loose):
    name: str
    arguments: str | dict[str, Any] | None = None


class ChatToolCall(Loose):
    id: str | None = None
    type: str = "function"
    function: ChatFunctionCall


class ChatMessage(Loose):
    role: Literal["system", "developer", "user", "assistant", "tool", "function"]
    content: str | list[dict[str, Any] | str] | None = None
    name: str | None = None
    tool_calls: list[ChatToolCall] | None = None
    tool_call_id: str | None = None


class ChatFunctionDef(Loose):
    name: str
    description: str | None = None
    parameters: dict[str, Any] | None = None


class ChatTool(Loose):
    type: str = "function"
    function: ChatFunctionDef


class StreamOptions(Loose):
    include_usage: bool | None = None


class ChatCompletionRequest(Loose):
    """OpenAI Chat Completions request. Unknown fields are accepted (and ignored)."""

    messages: list[ChatMessage] = Field(min_length=1)
    model: str | None = None
    max_tokens: int | None = Field(default=None, ge=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0, le=2)
    top_p: float | None = Field(default=None, gt=0, le=1)
    seed: int | None = None
    stop: str | list[str] | None = None
    n: int | None = Field(default=None, ge=1)
    stream: bool | None = False
    stream_options: StreamOptions | None = None
    tools: list[ChatTool] | None = None
    tool_choice: Any = None
    logprobs: bool | None = None
    top_logprobs: int | None = None

    @field_validator("stop")
    @classmethod
    def _stop_list(cls, v: Any) -> Any:
        if isinstance(v, list) and len(v) > 4:
            raise ValueError("at most 4 stop sequences")
        return v


class OpenAIChat(Dialect):
    name = DIALECT

    def parse(self, gw, session, body, request) -> CoreCall:
        try:
            req = ChatCompletionRequest.model_validate(body)
        except ValidationError as exc:
            raise openai_validation_error(exc) from None
        if req.n not in (None, 1):
            raise GatewayError(400, "only n=1 is supported", param="n", code="unsupported_value")
        try:
            messages = normalize_messages([m.model_dump(exclude_none=True) for m in req.messages])
            tools = normalize_tools([t.model_dump(exclude_none=True) for t in req.tools] if req.tools else None)
        except InvalidRequestError as exc:
            raise GatewayError(400, str(exc), param="messages") from None
        stop = [req.stop] if isinstance(req.stop, str) else list(req.stop or [])
        return CoreCall(
            messages=messages, tools=tools, max_tokens=req.max_completion_tokens or req.max_tokens,
            temperature=req.temperature, top_p=req.top_p, seed=req.seed, stop=stop, stream=bool(req.stream),
            include_usage=bool(req.stream_options and req.stream_options.include_usage),
            extra={"logprobs": bool(req.logprobs)},
        )

    def make_response(self, gw: "Gateway", call: CoreCall, completion: "Completion") -> dict:
        parsed = completion.parsed
        message: dict[str, Any] = {"role": "assistant", "content": parsed.content if (parsed.content or not parsed.tool_calls) else None}
        if parsed.tool_calls:
            message["tool_calls"] = [
                {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments_json()}}
                for c in parsed.tool_calls
            ]
        choice: dict[str, Any] = {"index": 0, "message": message, "finish_reason": completion.finish_reason, "logprobs": None}
        if call.extra.get("logprobs"):
            dec = gw.renderer.decode
            choice["logprobs"] = {
                "content": [
                    {"token": dec([t]), "logprob": lp, "bytes": list(dec([t]).encode("utf-8")), "top_logprobs": []}
                    for t, lp in zip(completion.output_token_ids, completion.output_logprobs)
                ]
            }
        turn = completion.turn
        return {
            "id": "chatcmpl-" + uuid.uuid4().hex,
            "object": "chat.completion",
            "created": int(time.time()),
            "model": gw.model_name,
            "choices": [choice],
            "usage": {
                "prompt_tokens": completion.prompt_tokens,
                "completion_tokens": len(completion.output_token_ids),
                "total_tokens": completion.prompt_tokens + len(completion.output_token_ids),
                "prompt_tokens_details": {"cached_tokens": completion.cached_prompt_tokens},
            },
            "system_fingerprint": f"legorl-w{turn.weight_version}",
            "x_legorl": gw.legorl_info(completion),
        }

    async def stream(self, gw: "Gateway", call: CoreCall, completion: "Completion") -> AsyncIterator[bytes]:
        resp = completion.turn.response
        msg = resp["choices"][0]["message"]
        base = {"id": resp["id"], "object": "chat.completion.chunk", "created": resp["created"], "model": resp["model"],
                "system_fingerprint": resp["system_fingerprint"]}
        usage_null = {"usage": None} if call.include_usage else {}

        def chunk(delta: dict, finish: str | None = None) -> bytes:
            return sse({**base, "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}], **usage_null})

        yield chunk({"role": "assistant", "content": ""})
        for piece in text_pieces(gw.renderer, msg.get("content") or ""):
            yield chunk({"content": piece})
        for i, tc in enumerate(msg.get("tool_calls") or []):
            fn = tc["function"]
            yield chunk({"tool_calls": [{"index": i, "id": tc["id"], "type": "function", "function": {"name": fn["name"], "arguments": ""}}]})
            for piece in split_json_pieces(gw.renderer, fn["arguments"]):
                yield chunk({"tool_calls": [{"index": i, "function": {"arguments": piece}}]})
        yield chunk({}, resp["choices"][0]["finish_reason"])
        if call.include_usage:
            yield sse({**base, "choices": [], "usage": resp["usage"]})
        yield sse("[DONE]")
