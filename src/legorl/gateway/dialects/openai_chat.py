"""OpenAI Chat Completions (``POST /v1/chat/completions``), streaming and not.

Request: ``messages`` (system/developer/user/assistant/tool; content string or text parts;
assistant ``tool_calls``), ``tools`` (function tools), ``max_completion_tokens`` > ``max_tokens``,
``temperature``, ``top_p``, ``seed``, ``stop`` (≤ 4), ``n`` (1 only), ``stream``,
``stream_options.include_usage``, ``logprobs``. Anything else (OpenHands' ``reasoning_effort``,
``prompt_cache_key``, ``tool_choice``, ...) is accepted and ignored.

Stream (``text/event-stream``, ``data:`` lines only): a first chunk ``delta: {role, content: ""}``,
``delta.content`` chunks as the content is sampled (see :mod:`legorl.gateway.streaming`; one per
token when the whole output is streamed after generation), per tool call a chunk with
``tool_calls[{index, id, type, function{name, arguments: ""}}]`` followed by argument chunks
``tool_calls[{index, function{arguments}}]``, a final chunk ``delta: {}`` with ``finish_reason``,
a usage chunk with ``choices: []`` when ``include_usage`` was asked, then ``data: [DONE]``. All
chunks of one response share its ``chatcmpl-`` id (unique per response). A failure after the first
chunk is a ``data:`` line holding the error body (OpenAI's in-stream error), and the stream ends.

Errors: ``{"error": {"message", "type", "param", "code"}}``.
"""

from __future__ import annotations

import time
import uuid
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field, ValidationError, field_validator

from legorl.errors import InvalidRequestError
from legorl.gateway.completion import legorl_info
from legorl.gateway.dialects.base import (
    CoreCall,
    Dialect,
    GatewayError,
    Loose,
    StreamWriter,
    openai_validation_error,
    split_json_pieces,
    sse,
    text_pieces,
)
from legorl.gateway.renderer import normalize_messages, normalize_tools

if TYPE_CHECKING:  # pragma: no cover
    from legorl.gateway.completion import Completion, StreamStart

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


def check_conversation(messages: list[ChatMessage]) -> None:
    """Refuse what the Chat Completions API refuses (docs/gateway-validation.md): null or empty-array
    content of system/user/tool messages, a tool message without ``tool_call_id`` or that answers no
    call of the assistant message before it, and an assistant message's tool calls left unanswered
    when another message follows."""
    open_calls: list[str] = []  # ids of the last assistant message's calls not yet answered
    answering = False  # inside the run of tool messages after an assistant message with tool_calls
    for i, m in enumerate(messages):
        if m.role in ("system", "developer", "user", "tool") and m.content is None:
            raise GatewayError(
                400,
                "Invalid value for 'content': expected a string, got null.",
                param=f"messages[{i}].content",
                code="invalid_value",
            )
        if isinstance(m.content, list) and not m.content:
            raise GatewayError(
                400,
                f"Invalid 'messages[{i}].content': empty array. Expected an array with minimum "
                "length 1, but got an empty array instead.",
                param=f"messages[{i}].content",
                code="empty_array",
            )
        if m.role == "tool":
            if m.tool_call_id is None:
                raise GatewayError(
                    400,
                    "Missing parameter 'tool_call_id': messages with role 'tool' must have a 'tool_call_id'.",
                    param=f"messages[{i}].tool_call_id",
                    code="missing_required_parameter",
                )
            if not answering or m.tool_call_id not in open_calls:
                raise GatewayError(
                    400,
                    "Invalid parameter: messages with role 'tool' must be a response to a "
                    "preceeding message with 'tool_calls'.",
                    param=f"messages[{i}].role",
                )
            open_calls.remove(m.tool_call_id)
            continue
        if open_calls:
            raise GatewayError(
                400,
                "An assistant message with 'tool_calls' must be followed by tool messages "
                "responding to each 'tool_call_id'. The following tool_call_ids did not have "
                f"response messages: {', '.join(open_calls)}",
                param=f"messages[{i}].role",
            )
        answering = m.role == "assistant" and bool(m.tool_calls)
        open_calls = [c.id or "" for c in m.tool_calls or []] if answering else []


class OpenAIChat(Dialect):
    name = DIALECT

    def parse(self, body: dict[str, Any], session_id: str) -> CoreCall:
        try:
            req = ChatCompletionRequest.model_validate(body)
        except ValidationError as exc:
            raise openai_validation_error(exc) from None
        if req.n not in (None, 1):
            raise GatewayError(400, "only n=1 is supported", param="n", code="unsupported_value")
        if self.strict:
            check_conversation(req.messages)
        try:
            messages = normalize_messages([m.model_dump(exclude_none=True) for m in req.messages])
            tools = normalize_tools([t.model_dump(exclude_none=True) for t in req.tools] if req.tools else None)
        except InvalidRequestError as exc:
            raise GatewayError(400, str(exc), param="messages") from None
        stop = [req.stop] if isinstance(req.stop, str) else list(req.stop or [])
        return CoreCall(
            messages=messages,
            tools=tools,
            max_tokens=req.max_completion_tokens or req.max_tokens,
            temperature=req.temperature,
            top_p=req.top_p,
            seed=req.seed,
            stop=stop,
            stream=bool(req.stream),
            include_usage=bool(req.stream_options and req.stream_options.include_usage),
            extra={"logprobs": bool(req.logprobs)},
        )

    def make_response(self, call: CoreCall, completion: Completion) -> dict[str, Any]:
        parsed = completion.parsed
        message: dict[str, Any] = {
            "role": "assistant",
            "content": parsed.content if (parsed.content or not parsed.tool_calls) else None,
        }
        if parsed.tool_calls:
            message["tool_calls"] = [
                {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments_json()}}
                for c in parsed.tool_calls
            ]
        choice: dict[str, Any] = {
            "index": 0,
            "message": message,
            "finish_reason": completion.finish_reason,
            "logprobs": None,
        }
        if call.extra.get("logprobs"):
            dec = self.renderer.decode
            choice["logprobs"] = {
                "content": [
                    {"token": dec([t]), "logprob": lp, "bytes": list(dec([t]).encode("utf-8")), "top_logprobs": []}
                    for t, lp in zip(completion.output_token_ids, completion.output_logprobs)
                ]
            }
        turn = completion.turn
        return {
            "id": response_id(call),
            "object": "chat.completion",
            "created": created(call),
            "model": self.model_name,
            "choices": [choice],
            "usage": {
                "prompt_tokens": completion.prompt_tokens,
                "completion_tokens": len(completion.output_token_ids),
                "total_tokens": completion.prompt_tokens + len(completion.output_token_ids),
                "prompt_tokens_details": {"cached_tokens": completion.cached_prompt_tokens},
            },
            "system_fingerprint": f"legorl-w{turn.weight_version}",
            "x_legorl": legorl_info(completion),
        }

    def stream_writer(self, call: CoreCall, start: StreamStart) -> StreamWriter:
        return _ChatStream(self, call, start)


class _ChatStream(StreamWriter):
    """``chat.completion.chunk`` events: a role chunk, content deltas, tool calls, a finish chunk,
    the usage chunk (``stream_options.include_usage``), ``[DONE]``; an error is a ``data:`` line
    with the error body, as OpenAI's stream carries it."""

    def __init__(self, dialect: OpenAIChat, call: CoreCall, start: StreamStart) -> None:
        super().__init__(dialect, call, start)
        self.base = {
            "id": response_id(call),
            "object": "chat.completion.chunk",
            "created": created(call),
            "model": self.model_name,
            "system_fingerprint": f"legorl-w{start.weight_version}",
        }
        self.usage_null = {"usage": None} if call.include_usage else {}

    def chunk(self, delta: dict[str, Any], finish: str | None = None) -> bytes:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        return sse({**self.base, "choices": [choice], **self.usage_null})

    def head(self) -> list[bytes]:
        return [self.chunk({"role": "assistant", "content": ""})]

    def _text_events(self, delta: str) -> list[bytes]:
        return [self.chunk({"content": delta})]

    def _finish_events(self, resp: dict[str, Any], rest: str) -> list[bytes]:
        out = [self.chunk({"content": piece}) for piece in text_pieces(self.renderer, rest)]
        for i, tc in enumerate(resp["choices"][0]["message"].get("tool_calls") or []):
            fn = tc["function"]
            head = {"index": i, "id": tc["id"], "type": "function", "function": {"name": fn["name"], "arguments": ""}}
            out.append(self.chunk({"tool_calls": [head]}))
            for piece in split_json_pieces(self.renderer, fn["arguments"]):
                out.append(self.chunk({"tool_calls": [{"index": i, "function": {"arguments": piece}}]}))
        out.append(self.chunk({}, resp["choices"][0]["finish_reason"]))
        if self.call.include_usage:
            out.append(sse({**self.base, "choices": [], "usage": resp["usage"]}))
        out.append(sse("[DONE]"))
        return out

    def error(self, err: GatewayError) -> list[bytes]:
        return [sse(err.body())]


def response_id(call: CoreCall) -> str:
    return str(call.reserve("id", lambda: "chatcmpl-" + uuid.uuid4().hex))


def created(call: CoreCall) -> int:
    return int(call.reserve("created", lambda: int(time.time())))
