"""OpenAI Responses (``POST /v1/responses``), streaming and not.

Request: ``input`` (a string = one user message, or a list of items: ``message`` items — also
without ``type`` when they have a ``role`` — with string content or ``input_text`` /
``output_text`` parts, ``function_call`` items (merged into the preceding assistant message, else
an empty one), ``function_call_output`` items (-> ``tool`` messages), ``reasoning`` items
(dropped)), ``instructions`` (-> the system message, first), function ``tools``
(``{"type": "function", "name", "description", "parameters"}``; other tool types ignored),
``max_output_tokens``, ``temperature``, ``top_p``, ``stream``, ``previous_response_id``.

``previous_response_id``: the gateway keeps, per session, the conversation of each response it
produced (input messages without instructions + the output) for the last
:data:`KEEP_RESPONSES` responses; a request naming one continues from it (the instructions of
the earlier request are not carried over, as in OpenAI's API). Unknown ids -> 400
``previous_response_not_found``; a session's conversations are dropped when it closes
(:meth:`OpenAIResponses.forget_session`), so its ids are unknown from then on.

Stream events (``event:`` + ``data:`` lines, each with ``sequence_number``): ``response.created``,
``response.in_progress``, per output item ``response.output_item.added``, for a message
``response.content_part.added``, ``response.output_text.delta`` (as the text is sampled),
``response.output_text.done``, ``response.content_part.done``, for a function call
``response.function_call_arguments.delta`` / ``.done``, then ``response.output_item.done``;
finally ``response.completed`` (or ``response.incomplete`` when cut by ``max_output_tokens``). A
failure after ``response.created``: an ``error`` event, then ``response.failed``.

Errors: OpenAI's ``{"error": {"message", "type", "param", "code"}}``.
"""

from __future__ import annotations

import collections
import threading
import time
import uuid
from typing import TYPE_CHECKING, Any

from pydantic import Field, ValidationError, field_validator

from legorl.errors import InvalidRequestError
from legorl.gateway.completion import legorl_info
from legorl.gateway.dialects.base import (
    CoreCall,
    Dialect,
    GatewayError,
    Loose,
    StreamWriter,
    join_content,
    openai_validation_error,
    split_json_pieces,
    sse,
    text_pieces,
)
from legorl.gateway.renderer import Message, Renderer, normalize_tools, tool_call_message

if TYPE_CHECKING:  # pragma: no cover
    from legorl.gateway.completion import Completion, StreamStart

DIALECT = "openai.responses"
KEEP_RESPONSES = 256


class ResponsesRequest(Loose):
    input: str | list[dict[str, Any]]
    model: str | None = None
    instructions: str | None = None
    max_output_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0, le=2)
    top_p: float | None = Field(default=None, gt=0, le=1)
    stream: bool | None = False
    tools: list[dict[str, Any]] | None = None
    tool_choice: Any = None
    previous_response_id: str | None = None
    seed: int | None = None  # not OpenAI's; handy for tests
    metadata: dict[str, Any] | None = None

    @field_validator("metadata")
    @classmethod
    def _metadata(cls, v: dict[str, Any] | None) -> dict[str, Any] | None:
        """OpenAI's rule (the response echoes it, and the SDK's type holds it to it): at most 16
        string-to-string pairs, keys up to 64 characters, values up to 512."""
        if v is None:
            return v
        if len(v) > 16:
            raise ValueError(f"too many properties: expected an object with at most 16 properties, but got {len(v)}")
        for k, val in v.items():
            if len(k) > 64:
                raise ValueError(f"key {k[:20]!r}... is longer than 64 characters")
            if not isinstance(val, str):
                raise ValueError(f"metadata.{k}: expected a string, but got {type(val).__name__}")
            if len(val) > 512:
                raise ValueError(f"metadata.{k}: string longer than 512 characters")
        return v


def _parts_text(content: Any, where: str) -> str:
    def part(i: int, p: Any) -> str | None:
        if isinstance(p, str):
            return p
        if isinstance(p, dict) and p.get("type") in ("input_text", "output_text", "text", "refusal"):
            return str(p.get("text", p.get("refusal", "")))
        if isinstance(p, dict) and p.get("type") in ("input_image", "input_file"):
            return f"[{p['type'][6:]} omitted]"
        kind = p.get("type") if isinstance(p, dict) else type(p).__name__
        raise GatewayError(
            400, f"Invalid value for '{where}[{i}].type': {kind!r} is not supported.", param=f"{where}[{i}].type"
        )

    return join_content(
        content,
        part,
        sep="",
        not_a_list=GatewayError(
            400, f"Invalid value for '{where}': expected a string or a list of content parts.", param=where
        ),
    )


def _missing(where: str, field: str) -> GatewayError:
    return GatewayError(
        400,
        f"Missing required parameter: '{where}.{field}'.",
        param=f"{where}.{field}",
        code="missing_required_parameter",
    )


def open_calls_of(history: list[Message]) -> list[str]:
    """Call ids of the tool calls in ``history`` that no tool message answers (in order)."""
    calls = [c["id"] for m in history for c in m.get("tool_calls") or ()]
    answered = {m.get("tool_call_id") for m in history if m["role"] == "tool"}
    return [c for c in calls if c not in answered]


def items_to_messages(
    items: str | list[dict[str, Any]], *, strict: bool = True, open_calls: list[str] | None = None
) -> list[Message]:
    """Input items -> normalised messages. ``strict``: refuse a ``function_call_output`` whose call is
    not among the calls before it (``open_calls``: unanswered calls of the previous response) and a
    message that follows a ``function_call`` still without its output, as the real API does."""
    if isinstance(items, str):
        return [{"role": "user", "content": items}]
    pending = list(open_calls or [])
    known = set(pending)
    out: list[Message] = []
    for i, it in enumerate(items):
        where = f"input[{i}]"
        kind = it.get("type") or ("message" if "role" in it else None)
        if kind == "message":
            role = it.get("role")
            if role in ("system", "developer"):
                role = "system"
            if role not in ("system", "user", "assistant"):
                raise GatewayError(400, f"Invalid value for '{where}.role': {role!r}.", param=f"{where}.role")
            if strict and pending:
                raise GatewayError(400, f"No tool output found for function call {pending[0]}.", param="input")
            out.append({"role": role, "content": _parts_text(it.get("content"), f"{where}.content")})
        elif kind == "function_call":
            for f in ("name", "call_id"):
                if not isinstance(it.get(f), str):
                    raise _missing(where, f)
            call = tool_call_message(it["call_id"], it["name"], it.get("arguments"))
            pending.append(it["call_id"])
            known.add(it["call_id"])
            if out and out[-1]["role"] == "assistant":
                out[-1].setdefault("tool_calls", []).append(call)
            else:
                out.append({"role": "assistant", "content": "", "tool_calls": [call]})
        elif kind == "function_call_output":
            call_id = it.get("call_id")
            if not isinstance(call_id, str):
                raise _missing(where, "call_id")
            if strict and call_id not in known:
                raise GatewayError(
                    400, f"No tool call found for function call output with call_id {call_id}.", param="input"
                )
            if call_id in pending:
                pending.remove(call_id)
            out.append(
                {"role": "tool", "tool_call_id": call_id, "content": _parts_text(it.get("output"), f"{where}.output")}
            )
        elif kind == "reasoning":
            continue
        else:
            raise GatewayError(
                400, f"Invalid value for '{where}.type': {kind!r} is not supported.", param=f"{where}.type"
            )
    return out


class OpenAIResponses(Dialect):
    name = DIALECT
    context_param = "input"

    def __init__(self, renderer: Renderer, model_name: str, *, strict: bool = True) -> None:
        super().__init__(renderer, model_name, strict=strict)
        self._convs: dict[str, collections.OrderedDict[str, list[Message]]] = {}
        self._lock = threading.Lock()

    # conversations kept for previous_response_id
    def _get(self, session_id: str, rid: str) -> list[Message] | None:
        with self._lock:
            kept = self._convs.get(session_id)
            conv = kept.get(rid) if kept is not None else None
            return list(conv) if conv is not None else None

    def _put(self, session_id: str, rid: str, messages: list[Message]) -> None:
        with self._lock:
            d = self._convs.setdefault(session_id, collections.OrderedDict())
            d[rid] = messages
            while len(d) > KEEP_RESPONSES:
                d.popitem(last=False)

    def forget_session(self, session_id: str) -> None:
        """Drop a closed session's conversations: its response ids are unknown from then on (and its
        messages no longer held in memory)."""
        with self._lock:
            self._convs.pop(session_id, None)

    def parse(self, body: dict[str, Any], session_id: str) -> CoreCall:
        try:
            req = ResponsesRequest.model_validate(body)
        except ValidationError as exc:
            raise openai_validation_error(exc) from None
        history: list[Message] = []
        if req.previous_response_id:
            prev = self._get(session_id, req.previous_response_id)
            if prev is None:
                raise GatewayError(
                    400,
                    f"Previous response with id '{req.previous_response_id}' not found.",
                    param="previous_response_id",
                    code="previous_response_not_found",
                )
            history = prev
        conv = history + items_to_messages(req.input, strict=self.strict, open_calls=open_calls_of(history))
        messages = ([{"role": "system", "content": req.instructions}] if req.instructions else []) + conv
        if not messages:
            raise GatewayError(400, "Invalid value for 'input': no messages.", param="input")
        fn_tools = [t for t in (req.tools or []) if t.get("type", "function") == "function"]
        try:
            tools = normalize_tools(fn_tools or None)
        except InvalidRequestError as exc:
            raise GatewayError(400, str(exc), param="tools") from None
        return CoreCall(
            messages=messages,
            tools=tools,
            max_tokens=req.max_output_tokens,
            temperature=req.temperature,
            top_p=req.top_p,
            seed=req.seed,
            stream=bool(req.stream),
            extra={"session_id": session_id, "conversation": conv, "request": req},
        )

    def make_response(self, call: CoreCall, completion: Completion) -> dict[str, Any]:
        parsed = completion.parsed
        output: list[dict[str, Any]] = []
        if parsed.content or not parsed.tool_calls:
            output.append(
                {
                    "type": "message",
                    "id": message_item_id(call),
                    "status": "completed",
                    "role": "assistant",
                    "content": [{"type": "output_text", "text": parsed.content, "annotations": [], "logprobs": []}],
                }
            )
        for c in parsed.tool_calls:
            output.append(
                {
                    "type": "function_call",
                    "id": "fc_" + uuid.uuid4().hex,
                    "call_id": c.id,
                    "name": c.name,
                    "arguments": c.arguments_json(),
                    "status": "completed",
                }
            )
        incomplete = completion.finish_reason == "length"
        n_out = len(completion.output_token_ids)
        resp = self.response_shell(call)
        resp.update(
            status="incomplete" if incomplete else "completed",
            incomplete_details={"reason": "max_output_tokens"} if incomplete else None,
            output=output,
            usage={
                "input_tokens": completion.prompt_tokens,
                # the SDK (openai 3.x) requires cache_write_tokens; the gateway writes no prompt cache it bills
                "input_tokens_details": {"cached_tokens": completion.cached_prompt_tokens, "cache_write_tokens": 0},
                "output_tokens": n_out,
                "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": completion.prompt_tokens + n_out,
            },
            x_legorl=legorl_info(completion),
        )
        assistant = parsed.message()
        self._put(call.extra["session_id"], resp["id"], list(call.extra["conversation"]) + [assistant])
        return resp

    def response_shell(self, call: CoreCall) -> dict[str, Any]:
        """The response object as it stands before any output (what ``response.created`` shows)."""
        req: ResponsesRequest = call.extra["request"]
        return {
            "id": str(call.reserve("id", lambda: "resp_" + uuid.uuid4().hex)),
            "object": "response",
            "created_at": int(call.reserve("created", lambda: int(time.time()))),
            "status": "in_progress",
            "error": None,
            "incomplete_details": None,
            "instructions": req.instructions,
            "max_output_tokens": req.max_output_tokens,
            "model": self.model_name,
            "output": [],
            "parallel_tool_calls": True,
            "previous_response_id": req.previous_response_id,
            "reasoning": {"effort": None, "summary": None},
            "store": True,
            "temperature": req.temperature if req.temperature is not None else 1.0,
            "text": {"format": {"type": "text"}},
            "tool_choice": req.tool_choice if isinstance(req.tool_choice, (str, dict)) else "auto",
            "tools": req.tools or [],
            "top_p": req.top_p if req.top_p is not None else 1.0,
            "truncation": "disabled",
            "usage": None,
            "metadata": req.metadata or {},
        }

    def stream_writer(self, call: CoreCall, start: StreamStart) -> StreamWriter:
        return _ResponsesStream(self, call, start)


def message_item_id(call: CoreCall) -> str:
    return str(call.reserve("message_item", lambda: "msg_" + uuid.uuid4().hex))


class _ResponsesStream(StreamWriter):
    """Responses events, numbered: ``response.created`` / ``in_progress``; the message item opened
    by its first text delta (output index 0, as in the response); function-call items; then
    ``response.completed`` or ``response.incomplete``. A failure after the head is an ``error`` event
    followed by ``response.failed``, as OpenAI's stream carries it."""

    def __init__(self, dialect: OpenAIResponses, call: CoreCall, start: StreamStart) -> None:
        super().__init__(dialect, call, start)
        self.dialect = dialect
        self.seq = 0
        self.message_open = False

    def ev(self, kind: str, **data: Any) -> bytes:
        out = sse({"type": kind, "sequence_number": self.seq, **data}, kind)
        self.seq += 1
        return out

    def head(self) -> list[bytes]:
        pending = self.dialect.response_shell(self.call)
        return [self.ev("response.created", response=pending), self.ev("response.in_progress", response=pending)]

    def _open_message(self) -> list[bytes]:
        if self.message_open:
            return []
        self.message_open = True
        mid = message_item_id(self.call)
        item = {"type": "message", "id": mid, "status": "in_progress", "role": "assistant", "content": []}
        part0 = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
        return [
            self.ev("response.output_item.added", output_index=0, item=item),
            self.ev("response.content_part.added", item_id=mid, output_index=0, content_index=0, part=part0),
        ]

    def _text_delta(self, oi: int, delta: str) -> bytes:
        mid = message_item_id(self.call)
        return self.ev(
            "response.output_text.delta", item_id=mid, output_index=oi, content_index=0, delta=delta, logprobs=[]
        )

    def _text_events(self, delta: str) -> list[bytes]:
        return [*self._open_message(), self._text_delta(0, delta)]

    def _finish_events(self, resp: dict[str, Any], rest: str) -> list[bytes]:
        out: list[bytes] = []
        for oi, item in enumerate(resp["output"]):
            if item["type"] == "message":
                text = item["content"][0]["text"]
                out += self._open_message()
                out += [self._text_delta(oi, piece) for piece in text_pieces(self.renderer, rest)]
                where = {"item_id": item["id"], "output_index": oi, "content_index": 0}
                out.append(self.ev("response.output_text.done", **where, text=text, logprobs=[]))
                out.append(self.ev("response.content_part.done", **where, part=item["content"][0]))
            else:
                added = {**item, "status": "in_progress", "arguments": ""}
                out.append(self.ev("response.output_item.added", output_index=oi, item=added))
                for piece in split_json_pieces(self.renderer, item["arguments"]):
                    out.append(
                        self.ev(
                            "response.function_call_arguments.delta", item_id=item["id"], output_index=oi, delta=piece
                        )
                    )
                out.append(
                    self.ev(
                        "response.function_call_arguments.done",
                        item_id=item["id"],
                        output_index=oi,
                        name=item["name"],
                        arguments=item["arguments"],
                    )
                )
            out.append(self.ev("response.output_item.done", output_index=oi, item=item))
        final = "response.incomplete" if resp["status"] == "incomplete" else "response.completed"
        out.append(self.ev(final, response=resp))
        return out

    def error(self, err: GatewayError) -> list[bytes]:
        body = err.body()["error"]
        failed = {
            **self.dialect.response_shell(self.call),
            "status": "failed",
            "error": {"code": body.get("code") or "server_error", "message": body["message"]},
        }
        return [
            self.ev("error", code=body.get("code"), message=body["message"], param=body.get("param")),
            self.ev("response.failed", response=failed),
        ]
