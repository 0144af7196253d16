"""The gateway: an LLM proxy that owns tokenization and records every call as a Turn.

Layers (a later issue adds Anthropic Messages / Responses / streaming as more dialect adapters):

* dialect adapter (here: OpenAI Chat Completions, non-streaming) — parse + validate the wire
  request into normalised messages/tools/sampling, and format the wire response;
* :meth:`Gateway.complete` (dialect independent) — session/thread routing, token-exact
  alignment (:mod:`legorl.trajectory.alignment`), generation on the :class:`Engine`, output
  parsing (:class:`Renderer`), Turn recording (store write is fsync'd before the response leaves).

Library use by the training loop::

    gw = Gateway(engine, ChatTemplateRenderer(tok), SessionRegistry(), RunStore(run_dir), "smollm2-135m")
    token = gw.open_session(rollout_id)        # harness: base_url=<server>/v1, api_key=token
    ...harness runs...
    turns = gw.session_turns(token)            # ordered by turn_index
    samples = build_samples(turns, rollout_id)
    gw.close_session(token)

Errors use OpenAI's shape ``{"error": {"message", "type", "param", "code"}}``: 400
``invalid_request_error`` (bad JSON, missing/wrong fields — ``param`` names the field — or
``code: context_length_exceeded``), 401 ``invalid_api_key``, 500 ``server_error``, 503 when the
engine is overloaded/shutting down. Unknown request fields are accepted and ignored.

Sampling mapping: ``max_completion_tokens`` > ``max_tokens`` > ``default_max_tokens``, clipped
to the context left after the prompt; ``temperature``, ``top_p``, ``seed`` as given (``top_k``
off); ``stop`` strings are applied after generation by cutting the output at the first token
whose text completes a stop string (the sampled tokens up to and including it are kept and
recorded, the returned content ends before the stop string, finish_reason ``stop``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import time
import uuid
from dataclasses import dataclass
from typing import Any, Literal, Sequence

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from starlette.exceptions import HTTPException as StarletteHTTPException

from legorl.engines.base import Engine, GenerationResult, SamplingParams
from legorl.errors import ContextLengthError, EngineError, EngineOverloadedError, InvalidRequestError
from legorl.gateway.renderer import Message, ParsedOutput, Renderer, normalize_messages, normalize_tools
from legorl.gateway.sessions import Session, SessionRegistry, thread_from_headers
from legorl.trajectory.alignment import Alignment
from legorl.trajectory.records import AlignmentEvent, Turn
from legorl.trajectory.store import RunStore

log = logging.getLogger(__name__)

DIALECT_OPENAI_CHAT = "openai.chat"


# --------------------------------------------------------------------------- errors


class GatewayError(Exception):
    """An error answered to the client in OpenAI's shape."""

    def __init__(self, status: int, message: str, *, type: str = "invalid_request_error", param: str | None = None, code: str | None = None):
        super().__init__(message)
        self.status, self.message, self.type, self.param, self.code = status, message, type, param, code

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}

    def response(self) -> JSONResponse:
        headers = {"WWW-Authenticate": "Bearer"} if self.status == 401 else None
        return JSONResponse(self.body(), status_code=self.status, headers=headers)


def _engine_error(exc: BaseException) -> GatewayError:
    if isinstance(exc, ContextLengthError):
        return GatewayError(400, str(exc), param="messages", code="context_length_exceeded")
    if isinstance(exc, InvalidRequestError):
        return GatewayError(400, str(exc))
    if isinstance(exc, EngineOverloadedError):
        return GatewayError(503, f"engine unavailable: {exc}", type="server_error", code="engine_overloaded")
    return GatewayError(500, f"engine failure: {type(exc).__name__}: {exc}", type="server_error", code="engine_error")


# --------------------------------------------------------------------------- OpenAI chat request


class _Loose(BaseModel):
    model_config = ConfigDict(extra="allow")


class ChatFunctionCall(_Loose):
    name: str
    arguments: str | dict[str, Any] | None = None


class ChatToolCall(_Loose):
    id: str | None = None
    type: str = "function"
    function: ChatFunctionCall


class ChatMessage(_Loose):
    role: Literal["system", "developer", "user", "assistant", "tool", "function"]
    content: str | list[dict[str, Any] | str] | None = None
    name: str | None = None
    tool_calls: list[ChatToolCall] | None = None
    tool_call_id: str | None = None


class ChatFunctionDef(_Loose):
    name: str
    description: str | None = None
    parameters: dict[str, Any] | None = None


class ChatTool(_Loose):
    type: str = "function"
    function: ChatFunctionDef


class ChatCompletionRequest(_Loose):
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


def _validation_error(exc: ValidationError) -> GatewayError:
    err = exc.errors()[0]
    loc = err.get("loc") or ()
    # drop pydantic's union-branch labels ("str", "list[...]") from the location
    parts = [str(p) for p in loc if not (isinstance(p, str) and ("[" in p or p in ("str", "int", "float", "bool", "dict", "list", "function-after")))]
    param = ""
    for p in parts:
        param += f"[{p}]" if p.isdigit() else (("." if param else "") + p)
    kind = err.get("type", "")
    if kind == "missing":
        msg = f"Missing required parameter: '{param}'."
    else:
        msg = f"Invalid value for '{param}': {err.get('msg')}."
    return GatewayError(400, msg, param=param or None, code="missing_required_parameter" if kind == "missing" else "invalid_value")


# --------------------------------------------------------------------------- core


@dataclass
class Completion:
    """Dialect-independent result of one call."""

    turn: Turn
    parsed: ParsedOutput
    finish_reason: str  # stop | length | tool_calls
    output_token_ids: list[int]
    output_logprobs: list[float]
    prompt_tokens: int
    cached_prompt_tokens: int


def apply_stop_strings(renderer: Renderer, token_ids: list[int], stops: Sequence[str]) -> int | None:
    """Smallest k such that decode(token_ids[:k]) contains a stop string, or None."""
    stops = [s for s in stops if s]
    if not stops or not token_ids:
        return None
    if not any(s in renderer.decode(token_ids) for s in stops):
        return None
    lo, hi = 1, len(token_ids)
    while lo < hi:
        mid = (lo + hi) // 2
        if any(s in renderer.decode(token_ids[:mid]) for s in stops):
            hi = mid
        else:
            lo = mid + 1
    return lo


class Gateway:
    """LLM proxy in front of one engine. ``.app`` is the FastAPI application."""

    def __init__(
        self,
        engine: Engine,
        renderer: Renderer,
        sessions: SessionRegistry | None = None,
        store: RunStore | None = None,
        model_name: str | None = None,
        *,
        default_max_tokens: int = 1024,
    ):
        self.engine = engine
        self.renderer = renderer
        self.sessions = sessions if sessions is not None else SessionRegistry()
        self.store = store
        self.model_name = model_name or engine.model_name
        self.default_max_tokens = default_max_tokens
        self.created = int(time.time())
        self.app = self._build_app()

    # -- library API used by the training loop -----------------------------------------------
    def open_session(self, rollout_id: str, *, token: str | None = None) -> str:
        return self.sessions.open(rollout_id, token=token)

    def session(self, token: str) -> Session:
        s = self.sessions.get(token)
        if s is None:
            raise KeyError("unknown or closed session token")
        return s

    def session_turns(self, token: str) -> list[Turn]:
        """All Turns of an open session (failed ones included), ordered by turn_index."""
        return self.session(token).turns_sorted()

    def close_session(self, token: str) -> list[Turn]:
        """Close a session (its token stops working); returns its Turns."""
        s = self.sessions.close(token)
        return s.turns_sorted() if s is not None else []

    # -- dialect-independent core ------------------------------------------------------------
    def _sampling(self, prompt_len: int, max_tokens: int | None, temperature: float | None, top_p: float | None, seed: int | None) -> SamplingParams:
        room = self.engine.max_context - prompt_len
        if room < 1:
            raise ContextLengthError(
                f"This model's maximum context length is {self.engine.max_context} tokens. "
                f"However, your messages resulted in {prompt_len} tokens."
            )
        if max_tokens is None:
            max_tokens = self.default_max_tokens
        return SamplingParams(
            max_tokens=max(1, min(int(max_tokens), room)),
            temperature=1.0 if temperature is None else float(temperature),
            top_p=1.0 if top_p is None else float(top_p),
            seed=seed,
            stop_token_ids=self.renderer.stop_token_ids,
        )

    async def _record(self, session: Session, turn: Turn) -> None:
        if self.store is not None:
            await asyncio.to_thread(self.store.append_turn, turn)
        session.add_turn(turn)

    async def record_rejected(self, session: Session, thread_id: str, dialect: str, request: Any, err: GatewayError) -> None:
        """A request of a known session that never reached the engine (bad body)."""
        ti = session.allocate_turn_index()
        turn = Turn(
            session_id=session.session_id, thread_id=thread_id, turn_index=ti, dialect=dialect,
            prompt_token_ids=[], output_token_ids=[], output_logprobs=[], sampling={}, weight_version=self.engine.weight_version,
            finish_reason="error", alignment=AlignmentEvent(turn_index=ti, kind="fork", reason="rejected before alignment", segment_index=-1),
            request=request if isinstance(request, dict) else {"raw": str(request)[:2000]}, response=err.body(), failed=True, error=err.message,
        )
        await self._record(session, turn)

    async def complete(
        self,
        session: Session,
        thread_id: str,
        messages: list[Message],
        tools: list[dict] | None,
        *,
        dialect: str,
        max_tokens: int | None = None,
        temperature: float | None = None,
        top_p: float | None = None,
        seed: int | None = None,
        stop: Sequence[str] = (),
        raw_request: dict | None = None,
        make_response=None,
    ) -> Completion:
        """Align, generate, parse and record one call. ``make_response(completion) -> dict`` builds
        the wire response, which is stored in the Turn before this returns. Raises GatewayError."""
        t0 = time.perf_counter()
        turn_index = session.allocate_turn_index()
        thread = session.thread(thread_id)
        async with thread.lock:
            alignment: Alignment | None = None
            sampling: SamplingParams | None = None
            timings: dict[str, float] = {}
            try:
                alignment = thread.state.align(self.renderer, messages, tools)
                timings["align_s"] = time.perf_counter() - t0
                sampling = self._sampling(len(alignment.prompt_token_ids), max_tokens, temperature, top_p, seed)
                t1 = time.perf_counter()
                result: GenerationResult = await self.engine.generate(alignment.prompt_token_ids, sampling)
                timings["generate_s"] = time.perf_counter() - t1
                if result.finish_reason in ("error", "cancelled"):
                    raise EngineError(f"generation ended with finish_reason={result.finish_reason!r}")
                out_ids, out_lps = list(result.token_ids), list(result.logprobs)
                finish = result.finish_reason
                cut = apply_stop_strings(self.renderer, out_ids, stop) if stop else None
                if cut is not None:
                    out_ids, out_lps, finish = out_ids[:cut], out_lps[:cut], "stop"
                parsed = self.renderer.parse_output(out_ids)
                if cut is not None:
                    idx = [parsed.content.find(s) for s in stop if s and s in parsed.content]
                    if idx:
                        parsed.content = parsed.content[: min(idx)].rstrip()
                        parsed.tool_calls = []  # calls after a stop string are not returned
                if parsed.tool_calls:
                    finish = "tool_calls"
                timings.update({f"engine_{k}": v for k, v in (result.timings or {}).items()})
            except asyncio.CancelledError:
                await self._record_failure(session, thread_id, turn_index, dialect, alignment, sampling, raw_request, timings, "cancelled", None)
                raise
            except (EngineError, Exception) as exc:  # noqa: BLE001 - every failure is recorded
                gerr = exc if isinstance(exc, GatewayError) else _engine_error(exc)
                if not isinstance(exc, (InvalidRequestError, EngineOverloadedError)):
                    log.exception("engine failure on session %s turn %d", session.session_id, turn_index)
                await self._record_failure(session, thread_id, turn_index, dialect, alignment, sampling, raw_request, timings, gerr.message, gerr)
                raise gerr from exc

            assistant = parsed.message()
            thread.state.commit(
                alignment, messages, tools, assistant, out_ids, self.renderer.bridge_text(out_ids), turn_index
            )
            timings["total_s"] = time.perf_counter() - t0
            turn = Turn(
                session_id=session.session_id,
                thread_id=thread_id,
                turn_index=turn_index,
                dialect=dialect,
                prompt_token_ids=alignment.prompt_token_ids,
                output_token_ids=out_ids,
                output_logprobs=out_lps,
                sampling={**dataclasses.asdict(sampling), "stop": list(stop)},
                weight_version=result.weight_version,
                finish_reason=finish,
                alignment=alignment.event(turn_index),
                reused_prefix_len=alignment.reused_prefix_len,
                cached_prompt_tokens=result.cached_prompt_tokens,
                timings=timings,
                request=raw_request or {},
            )
            completion = Completion(
                turn=turn, parsed=parsed, finish_reason=finish, output_token_ids=out_ids, output_logprobs=out_lps,
                prompt_tokens=len(alignment.prompt_token_ids), cached_prompt_tokens=result.cached_prompt_tokens,
            )
            if make_response is not None:
                turn.response = make_response(completion)
            await self._record(session, turn)
            return completion

    async def _record_failure(self, session, thread_id, turn_index, dialect, alignment, sampling, raw_request, timings, error, gerr) -> None:
        event = (
            alignment.event(turn_index)
            if alignment is not None
            else AlignmentEvent(turn_index=turn_index, kind="fork", reason="failed before alignment", segment_index=-1)
        )
        turn = Turn(
            session_id=session.session_id, thread_id=thread_id, turn_index=turn_index, dialect=dialect,
            prompt_token_ids=alignment.prompt_token_ids if alignment else [],
            output_token_ids=[], output_logprobs=[],
            sampling=dataclasses.asdict(sampling) if sampling else {},
            weight_version=self.engine.weight_version, finish_reason="error", alignment=event,
            reused_prefix_len=alignment.reused_prefix_len if alignment else 0, timings=timings,
            request=raw_request or {}, response=gerr.body() if gerr else {}, failed=True, error=error,
        )
        try:
            await asyncio.shield(self._record(session, turn))
        except Exception:  # noqa: BLE001
            log.exception("could not record failed turn")

    # -- OpenAI chat dialect ---------------------------------------------------------------
    def _openai_response(self, completion: Completion, want_logprobs: bool) -> dict:
        parsed = completion.parsed
        message: dict[str, Any] = {"role": "assistant", "content": parsed.content if (parsed.content or not parsed.tool_calls) else None}
        if parsed.tool_calls:
            message["tool_calls"] = [
                {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments_json()}}
                for c in parsed.tool_calls
            ]
        choice: dict[str, Any] = {"index": 0, "message": message, "finish_reason": completion.finish_reason, "logprobs": None}
        if want_logprobs:
            choice["logprobs"] = {
                "content": [
                    {"token": self.renderer.decode([t]), "logprob": lp, "bytes": list(self.renderer.decode([t]).encode("utf-8")), "top_logprobs": []}
                    for t, lp in zip(completion.output_token_ids, completion.output_logprobs)
                ]
            }
        turn = completion.turn
        return {
            "id": "chatcmpl-" + uuid.uuid4().hex,
            "object": "chat.completion",
            "created": int(time.time()),
            "model": self.model_name,
            "choices": [choice],
            "usage": {
                "prompt_tokens": completion.prompt_tokens,
                "completion_tokens": len(completion.output_token_ids),
                "total_tokens": completion.prompt_tokens + len(completion.output_token_ids),
                "prompt_tokens_details": {"cached_tokens": completion.cached_prompt_tokens},
            },
            "system_fingerprint": f"legorl-w{turn.weight_version}",
            "x_legorl": {
                "session_id": turn.session_id,
                "thread_id": turn.thread_id,
                "turn_index": turn.turn_index,
                "alignment": turn.alignment.kind,
                "segment_index": turn.alignment.segment_index,
                "weight_version": turn.weight_version,
                "unparsed_tool_calls": parsed.unparsed_tool_calls,
            },
        }

    async def chat_completions(self, request: Request) -> Response:
        session = self.sessions.lookup(request.headers)
        if session is None:
            return GatewayError(401, "Incorrect API key provided (unknown or closed LEGO-RL session token).", code="invalid_api_key").response()
        thread_id = thread_from_headers(request.headers)
        raw = await request.body()
        body: Any = None
        try:
            try:
                body = json.loads(raw)
            except (json.JSONDecodeError, UnicodeDecodeError) as exc:
                raise GatewayError(400, f"We could not parse the JSON body of your request: {exc}") from None
            if not isinstance(body, dict):
                raise GatewayError(400, "The request body must be a JSON object.")
            try:
                req = ChatCompletionRequest.model_validate(body)
            except ValidationError as exc:
                raise _validation_error(exc) from None
            if req.stream:
                raise GatewayError(400, "streaming not supported yet", param="stream", code="unsupported_value")
            if req.n not in (None, 1):
                raise GatewayError(400, "only n=1 is supported", param="n", code="unsupported_value")
            try:
                messages = normalize_messages([m.model_dump(exclude_none=True) for m in req.messages])
                tools = normalize_tools([t.model_dump(exclude_none=True) for t in req.tools] if req.tools else None)
            except InvalidRequestError as exc:
                raise GatewayError(400, str(exc), param="messages") from None
        except GatewayError as err:
            await self.record_rejected(session, thread_id, DIALECT_OPENAI_CHAT, body if body is not None else raw[:2000].decode("utf-8", "replace"), err)
            return err.response()

        stop = [req.stop] if isinstance(req.stop, str) else list(req.stop or [])
        try:
            completion = await self.complete(
                session, thread_id, messages, tools, dialect=DIALECT_OPENAI_CHAT,
                max_tokens=req.max_completion_tokens or req.max_tokens, temperature=req.temperature,
                top_p=req.top_p, seed=req.seed, stop=stop, raw_request=body,
                make_response=lambda c: self._openai_response(c, bool(req.logprobs)),
            )
        except GatewayError as err:
            return err.response()
        return JSONResponse(completion.turn.response)

    def _build_app(self) -> FastAPI:
        app = FastAPI(title="LEGO-RL gateway", docs_url=None, redoc_url=None, openapi_url=None)

        @app.exception_handler(StarletteHTTPException)
        async def _http_exc(_request: Request, exc: StarletteHTTPException) -> Response:
            code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code)
            return GatewayError(exc.status_code, str(exc.detail), code=code).response()

        @app.exception_handler(Exception)
        async def _any_exc(_request: Request, exc: Exception) -> Response:
            log.exception("unhandled gateway error")
            return GatewayError(500, f"internal gateway error: {type(exc).__name__}", type="server_error").response()

        app.add_api_route("/v1/chat/completions", self.chat_completions, methods=["POST"])
        app.add_api_route("/chat/completions", self.chat_completions, methods=["POST"], include_in_schema=False)

        @app.get("/v1/models")
        async def models() -> dict:
            return {"object": "list", "data": [{"id": self.model_name, "object": "model", "created": self.created, "owned_by": "legorl"}]}

        @app.get("/v1/models/{model_id:path}")
        async def model(model_id: str) -> Response:
            return JSONResponse({"id": self.model_name, "object": "model", "created": self.created, "owned_by": "legorl"})

        @app.head("/")
        async def head_root() -> Response:
            return Response(status_code=200)

        @app.get("/")
        async def root() -> dict:
            return {"ok": True, "service": "legorl-gateway", "model": self.model_name}

        @app.get("/health")
        async def health() -> Response:
            h = self.engine.health()
            return JSONResponse(
                {"ok": h.ok, "model": h.model, "weight_version": h.weight_version, "active_requests": h.active_requests,
                 "detail": h.detail, "sessions": len(self.sessions)},
                status_code=200 if h.ok else 503,
            )

        return app
