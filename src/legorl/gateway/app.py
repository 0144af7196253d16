"""The gateway: an LLM proxy that owns tokenization and records every call as a Turn.

Layers:

* dialect adapters (:mod:`legorl.gateway.dialects`: OpenAI Chat Completions, Anthropic Messages,
  OpenAI Responses; each streaming and not) — parse + validate the wire request into normalised
  messages/tools/sampling, format the wire response / SSE events and errors in their shape;
* :meth:`Gateway.complete` (dialect independent) — session/thread routing, token-exact
  alignment (:mod:`legorl.trajectory.alignment`), generation on the :class:`Engine`, output
  parsing (:class:`Renderer`), Turn recording (store write is fsync'd before the response leaves).

Library use by the training loop::

    gw = Gateway(engine, ChatTemplateRenderer(tok), SessionRegistry(), RunStore(run_dir), "smollm2-135m")
    token = gw.open_session(rollout_id, budget=SessionBudget.from_budget(budget))  # harness: api_key=token
    ...harness runs...
    turns = gw.session_turns(token)            # ordered by turn_index
    report = gw.session_report(token)          # budget spent/refused, client identities, Flags
    samples = build_samples(turns, rollout_id)
    gw.close_session(token)

Budgets (:class:`~legorl.gateway.sessions.SessionBudget`; semantics in :mod:`legorl.gateway.sessions`)
are checked in :meth:`Gateway.complete` before anything else: a refused call costs no alignment and
no generation, is answered 403 ``budget_exhausted`` (turns/tokens spent, final) or 429
``concurrency_limit_exceeded`` (transient) in the dialect's error shape, and is recorded as a failed
Turn with ``finish_reason="refused"`` (never a training sample).

Routes: ``POST /v1/chat/completions`` (and ``/chat/completions``), ``POST /v1/messages`` (also
``?beta=true``), ``POST /v1/messages/count_tokens``, ``POST /v1/responses`` (and ``/responses``),
``GET /v1/models``, ``GET|HEAD /``, ``GET /health``.

Errors (each dialect renders them in its shape; OpenAI: ``{"error": {"message", "type", "param",
"code"}}``): 400 ``invalid_request_error`` (bad JSON, missing/wrong fields — ``param`` names the
field — or ``code: context_length_exceeded``), 401 ``invalid_api_key``, 500 ``server_error``,
503 when the engine is overloaded/shutting down, 504 when generation ran past
``generate_timeout_s`` (Anthropic: 529 ``overloaded_error`` for all three), 403
``budget_exhausted`` (the session's turn/token budget is spent; ``x-should-retry: false``;
Anthropic: ``permission_error``), 429 ``concurrency_limit_exceeded`` (too many calls of the session
in flight; ``retry-after: 1``; Anthropic: ``rate_limit_error``). A client that
disconnects while its request is generating cancels the generation; the Turn is recorded with
``failed=True, error="client_disconnected", finish_reason="cancelled"``. Unknown request fields
are accepted and ignored.

Sampling mapping: ``max_completion_tokens`` > ``max_tokens`` > ``default_max_tokens``, clipped
to the sampling policy's and the session budget's per-call cap and to the context left after the
prompt; ``temperature``, ``top_p``, ``seed`` as given (``top_k`` off); ``stop`` strings are applied after generation by cutting the output at the first token
whose text completes a stop string (the sampled tokens up to and including it are kept and
recorded, the returned content ends before the stop string, finish_reason ``stop``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from dataclasses import dataclass
from typing import Any, Sequence

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from legorl.engines.base import Engine, GenerationResult, SamplingParams
from legorl.errors import ContextLengthError, EngineError, EngineOverloadedError, InvalidRequestError
from legorl.gateway.dialects.anthropic_messages import AnthropicMessages
from legorl.gateway.dialects.base import CLIENT_DISCONNECTED, GatewayError, engine_error, handle
from legorl.gateway.dialects.base import openai_validation_error as _validation_error  # noqa: F401 (compat)
from legorl.gateway.dialects.openai_chat import DIALECT as DIALECT_OPENAI_CHAT
from legorl.gateway.dialects.openai_chat import ChatCompletionRequest, OpenAIChat  # noqa: F401 (compat)
from legorl.gateway.dialects.openai_responses import OpenAIResponses
from legorl.gateway.renderer import Message, ParsedOutput, Renderer
from legorl.gateway.sessions import BudgetRefusal, Session, SessionBudget, SessionRegistry, SessionReport
from legorl.trajectory.alignment import Alignment
from legorl.trajectory.records import AlignmentEvent, Turn
from legorl.trajectory.store import RunStore

log = logging.getLogger(__name__)

_engine_error = engine_error  # compat


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
    stop_sequence: str | None = None  # the stop string that cut the output, if any


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


@dataclass(frozen=True)
class SamplingPolicy:
    """Training mode: the sampling the trainer assumes, whatever the harness asks for.

    Harnesses send their own temperatures (or none); the trainer recomputes logprobs at one fixed
    temperature with top-p/top-k off, so in training the gateway samples at exactly that. The
    harness's requested values stay visible in ``Turn.request``."""

    temperature: float = 1.0
    top_p: float = 1.0
    max_tokens: int | None = None  # cap per call (a harness may ask for more than the budget)


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
        generate_timeout_s: float | None = None,
        sampling_policy: SamplingPolicy | None = None,
    ):
        self.engine = engine
        self.renderer = renderer
        self.sessions = sessions if sessions is not None else SessionRegistry()
        self.store = store
        self.model_name = model_name or engine.model_name
        self.default_max_tokens = default_max_tokens
        self.generate_timeout_s = generate_timeout_s
        self.sampling_policy = sampling_policy
        self.openai_chat = OpenAIChat()
        self.anthropic = AnthropicMessages()
        self.responses = OpenAIResponses()
        self.created = int(time.time())
        self.app = self._build_app()

    # -- library API used by the training loop -----------------------------------------------
    def open_session(self, rollout_id: str, *, token: str | None = None, budget: SessionBudget | None = None) -> str:
        """Open a session; returns its token. ``budget``: what it may spend, enforced on every call
        (None: unlimited)."""
        return self.sessions.open(rollout_id, token=token, budget=budget)

    def session_report(self, token: str) -> SessionReport:
        """Budget use, refusals and client identities of an open session (see :class:`SessionReport`)."""
        return self.session(token).report()

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
    def _sampling(self, prompt_len: int, max_tokens: int | None, temperature: float | None, top_p: float | None, seed: int | None,
                  cap: int | None = None) -> SamplingParams:
        """``cap``: the session budget's clip for this call (>= 1)."""
        room = self.engine.max_context - prompt_len
        if room < 1:
            raise ContextLengthError(
                f"This model's maximum context length is {self.engine.max_context} tokens. "
                f"However, your messages resulted in {prompt_len} tokens."
            )
        if max_tokens is None:
            max_tokens = self.default_max_tokens
        policy = self.sampling_policy
        if policy is not None:
            temperature, top_p = policy.temperature, policy.top_p
            if policy.max_tokens is not None:
                max_tokens = min(int(max_tokens), policy.max_tokens)
        if cap is not None:
            max_tokens = min(int(max_tokens), int(cap))
        return SamplingParams(
            max_tokens=max(1, min(int(max_tokens), room)),
            temperature=1.0 if temperature is None else float(temperature),
            top_p=1.0 if top_p is None else float(top_p),
            seed=seed,
            stop_token_ids=self.renderer.stop_token_ids,
        )

    async def _record(self, session: Session, turn: Turn) -> None:
        if self.store is not None:
            if getattr(self.store, "fsync", True):
                await asyncio.to_thread(self.store.append_turn, turn)
            else:  # a WAL commit without fsync (~0.1 ms) is cheaper than a thread hand-off
                self.store.append_turn(turn)
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
        context_param: str = "messages",
    ) -> Completion:
        """Check the session's budget, align, generate, parse and record one call.
        ``make_response(completion) -> dict`` builds the wire response, which is stored in the Turn
        before this returns. Raises GatewayError (:class:`BudgetRefusal` when the budget says no)."""
        t0 = time.perf_counter()
        turn_index = session.allocate_turn_index()
        try:
            ticket = session.admit(turn_index)
        except BudgetRefusal as refusal:
            await self._record_refusal(session, thread_id, turn_index, dialect, raw_request, refusal)
            raise
        generated, refund = 0, True  # a call that fails without output gives its turn back
        try:
            route = getattr(session, "route", None)  # content-based routing (sub-agents without headers)
            thread = route(thread_id, messages, tools, self.renderer) if route is not None else session.thread(thread_id)
            thread_id = getattr(thread, "thread_id", thread_id)
            try:
                await thread.lock.acquire()
            except asyncio.CancelledError:  # client left while an earlier request of its thread ran
                await self._record_failure(session, thread_id, turn_index, dialect, None, None, raw_request, {}, CLIENT_DISCONNECTED, None)
                raise
            try:
                completion = await self._complete_locked(
                    session, thread, thread_id, turn_index, t0, messages, tools, dialect=dialect, max_tokens=max_tokens,
                    temperature=temperature, top_p=top_p, seed=seed, stop=stop, raw_request=raw_request,
                    make_response=make_response, context_param=context_param, cap=ticket.max_tokens,
                )
            except asyncio.CancelledError:  # the client left during generation: the engine worked
                refund = False
                raise
            finally:
                thread.lock.release()
            generated, refund = len(completion.output_token_ids), False
            return completion
        finally:
            session.settle(ticket, generated, refund=refund)

    async def _record_refusal(self, session: Session, thread_id: str, turn_index: int, dialect: str, raw_request: Any,
                              refusal: BudgetRefusal) -> None:
        """A call the budget refused: a failed Turn (``finish_reason="refused"``), no alignment, no
        tokens — kept as evidence, never a training sample. Past REFUSALS_RECORDED per session only
        counted (:attr:`SessionReport.refusals_unrecorded`)."""
        if not session.take_refusal_slot():
            return
        turn = Turn(
            session_id=session.session_id, thread_id=thread_id, turn_index=turn_index, dialect=dialect,
            prompt_token_ids=[], output_token_ids=[], output_logprobs=[], sampling={}, weight_version=self.engine.weight_version,
            finish_reason="refused",
            alignment=AlignmentEvent(turn_index=turn_index, kind="fork", reason=f"refused by the session budget: {refusal.reason}", segment_index=-1),
            request=raw_request if isinstance(raw_request, dict) else {}, response=refusal.body(), failed=True,
            error=f"{refusal.code}: {refusal.message}",
        )
        try:
            await asyncio.shield(self._record(session, turn))
        except Exception:  # noqa: BLE001
            log.exception("could not record refused turn")

    async def _complete_locked(self, session, thread, thread_id, turn_index, t0, messages, tools, *, dialect, max_tokens,
                               temperature, top_p, seed, stop, raw_request, make_response, context_param,
                               cap: int | None = None) -> Completion:
        if True:
            alignment: Alignment | None = None
            sampling: SamplingParams | None = None
            timings: dict[str, float] = {}
            stop_sequence: str | None = None
            try:
                alignment = thread.state.align(self.renderer, messages, tools)
                timings["align_s"] = time.perf_counter() - t0
                sampling = self._sampling(len(alignment.prompt_token_ids), max_tokens, temperature, top_p, seed, cap)
                t1 = time.perf_counter()
                gen = self.engine.generate(alignment.prompt_token_ids, sampling)
                if self.generate_timeout_s is not None:
                    gen = asyncio.wait_for(gen, self.generate_timeout_s)
                result: GenerationResult = await gen
                timings["generate_s"] = time.perf_counter() - t1
                if result.finish_reason in ("error", "cancelled"):
                    raise EngineError(f"generation ended with finish_reason={result.finish_reason!r}")
                out_ids, out_lps = list(result.token_ids), list(result.logprobs)
                finish = result.finish_reason
                cut = apply_stop_strings(self.renderer, out_ids, stop) if stop else None
                if cut is not None:
                    out_ids, out_lps, finish = out_ids[:cut], out_lps[:cut], "stop"
                    cut_text = self.renderer.decode(out_ids)
                    hits = [(cut_text.find(s_), s_) for s_ in stop if s_ and s_ in cut_text]
                    stop_sequence = min(hits)[1] if hits else None
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
                timings["cancelled_after_s"] = time.perf_counter() - t0
                await self._record_failure(session, thread_id, turn_index, dialect, alignment, sampling, raw_request, timings, CLIENT_DISCONNECTED, None)
                raise
            except (EngineError, Exception) as exc:  # noqa: BLE001 - every failure is recorded
                gerr = engine_error(exc, context_param)
                if not isinstance(exc, (InvalidRequestError, EngineOverloadedError, GatewayError, asyncio.TimeoutError, TimeoutError)):
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
                stop_sequence=stop_sequence,
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
            weight_version=self.engine.weight_version, finish_reason="cancelled" if error == CLIENT_DISCONNECTED else "error", alignment=event,
            reused_prefix_len=alignment.reused_prefix_len if alignment else 0, timings=timings,
            request=raw_request or {}, response=gerr.body() if gerr else {}, failed=True, error=error,
        )
        try:
            await asyncio.shield(self._record(session, turn))
        except Exception:  # noqa: BLE001
            log.exception("could not record failed turn")

    def legorl_info(self, completion: Completion) -> dict:
        """The ``x_legorl`` block every dialect's response carries (clients ignore it)."""
        turn = completion.turn
        return {
            "session_id": turn.session_id,
            "thread_id": turn.thread_id,
            "turn_index": turn.turn_index,
            "alignment": turn.alignment.kind,
            "segment_index": turn.alignment.segment_index,
            "weight_version": turn.weight_version,
            "unparsed_tool_calls": completion.parsed.unparsed_tool_calls,
        }

    # -- dialect routes ----------------------------------------------------------------------
    async def chat_completions(self, request: Request) -> Response:
        return await handle(self, self.openai_chat, request)

    async def messages(self, request: Request) -> Response:
        return await handle(self, self.anthropic, request)

    async def count_tokens(self, request: Request) -> Response:
        return await self.anthropic.count_tokens(self, request)

    async def create_response(self, request: Request) -> Response:
        return await handle(self, self.responses, request)

    def _build_app(self) -> FastAPI:
        app = FastAPI(title="LEGO-RL gateway", docs_url=None, redoc_url=None, openapi_url=None)

        def dialect_for(request: Request):
            return self.anthropic if request.url.path.startswith(("/v1/messages", "/messages")) else self.openai_chat

        @app.exception_handler(StarletteHTTPException)
        async def _http_exc(request: Request, exc: StarletteHTTPException) -> Response:
            code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code)
            return dialect_for(request).error_response(GatewayError(exc.status_code, str(exc.detail), code=code))

        @app.exception_handler(Exception)
        async def _any_exc(request: Request, exc: Exception) -> Response:
            log.exception("unhandled gateway error")
            return dialect_for(request).error_response(GatewayError(500, f"internal gateway error: {type(exc).__name__}", type="server_error"))

        app.add_api_route("/v1/chat/completions", self.chat_completions, methods=["POST"])
        app.add_api_route("/chat/completions", self.chat_completions, methods=["POST"], include_in_schema=False)
        app.add_api_route("/v1/messages", self.messages, methods=["POST"])
        app.add_api_route("/v1/messages/count_tokens", self.count_tokens, methods=["POST"])
        app.add_api_route("/v1/responses", self.create_response, methods=["POST"])
        app.add_api_route("/responses", self.create_response, methods=["POST"], include_in_schema=False)

        def model_card() -> dict:  # OpenAI and Anthropic model-list fields together
            return {"id": self.model_name, "object": "model", "created": self.created, "owned_by": "legorl",
                    "type": "model", "display_name": self.model_name,
                    "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.created))}

        @app.get("/v1/models")
        async def models() -> dict:
            return {"object": "list", "data": [model_card()], "has_more": False, "first_id": self.model_name, "last_id": self.model_name}

        @app.get("/v1/models/{model_id:path}")
        async def model(model_id: str) -> Response:
            return JSONResponse(model_card())

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
