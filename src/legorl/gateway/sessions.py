"""Sessions: one per rollout, addressed by a secret token the harness sends as its API key.

:class:`SessionRegistry` opens a session per rollout (``open(rollout_id, budget) -> token``,
:func:`new_token`: ``legorl-`` + 48 hex digits) and resolves a request's token
(``Authorization: Bearer`` or ``x-api-key``) to its :class:`Session`, which routes the request to a
thread (:data:`THREAD_HEADERS`, else by content) and a segment (:mod:`legorl.gateway.alignment`).
Invariants: routing never crosses sessions; requests of one thread are served one at a time
(``asyncio.Lock``); ``session_id`` (the rollout id, ``~N`` when reused) is unique across the registry
and the run store and is never the token; the :class:`SessionBudget` (turns, tokens, concurrency)
holds for every call made with the token, whoever makes it, and a refusal is a
:class:`BudgetRefusal` (403 final or 429 transient); failed calls' bodies are kept bounded per
session. :meth:`Session.report` gives the :class:`SessionReport` (budget use, client identities,
Flags).

Design (thread headers, budget rules, refusals, bounded bodies): docs/gateway.md#sessions
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import secrets
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from legorl.errors import GatewayError
from legorl.gateway.alignment import ThreadState
from legorl.gateway.renderer import Message, Renderer
from legorl.trajectory.records import Flag, Turn

THREAD_HEADERS: tuple[str, ...] = ("x-legorl-thread", "x-claude-code-agent-id", "x-session-id")
PARENT_HEADER = "x-parent-session-id"
EXPLICIT_THREAD_HEADER = "x-legorl-thread"
DEFAULT_THREAD = "main"
ROUTABLE = ("extend", "realign")

TOKEN_PREFIX = "legorl-"
TOKEN_HEX_BYTES = 24  # 192 random bits


def new_token() -> str:
    """A fresh session token: ``legorl-`` + 48 lowercase hex digits. Only letters, digits and
    hyphens, starting with a letter: never taken for a command-line option (``secrets.token_urlsafe``
    starts with ``-`` once in 64 draws), never needs shell or URL quoting; the prefix makes a leaked
    token easy to find in logs."""
    return TOKEN_PREFIX + secrets.token_hex(TOKEN_HEX_BYTES)


# --------------------------------------------------------------------------- budgets

DEFAULT_MAX_CONCURRENT = 8
REFUSALS_RECORDED = 256  # refused or rejected calls recorded as Turns per session; later ones only counted
FAILED_BODY_CAP = 64 * 1024  # bytes of one failed call's request body kept in its Turn
FAILED_BODY_BUDGET = 1024 * 1024  # bytes of failed calls' bodies kept per session, all together
# Request headers that identify the client program (the SDK's own headers; retry counters and
# timeouts, which change between calls of one client, are left out).
CLIENT_HEADERS = ("user-agent", "x-stainless-lang", "x-stainless-package-version", "x-stainless-runtime", "x-app")
REFUSAL_TERMINAL = ("turns", "tokens")  # reasons that do not come back: the budget is spent


def default_turn_slack(max_turns: int) -> int:
    """Calls served beyond ``max_turns`` for an honest harness's side calls: ``max(2, ceil(max_turns/4))``."""
    return max(2, -(-int(max_turns) // 4))


@dataclass(frozen=True)
class SessionBudget:
    """What one session may spend (None: unlimited). Semantics: docs/gateway.md#sessions."""

    max_turns: int | None = None  # the harness's agent steps (model calls) ...
    turn_slack: int = 0  # ... plus this many more calls of any kind (side calls)
    max_tokens_per_turn: int | None = None  # clip of every call's max_tokens
    max_total_tokens: int | None = None  # generated tokens over the whole session
    max_concurrent: int | None = None  # generation calls in flight at once; more are refused (429)
    declared_concurrency: int | None = None  # what the harness uses; more is served but flagged

    def __post_init__(self) -> None:
        for name in ("max_turns", "max_tokens_per_turn", "max_total_tokens", "max_concurrent", "declared_concurrency"):
            v = getattr(self, name)
            if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < 1):
                raise ValueError(f"SessionBudget.{name} must be a positive int or None, not {v!r}")
        if not isinstance(self.turn_slack, int) or self.turn_slack < 0:
            raise ValueError(f"SessionBudget.turn_slack must be an int >= 0, not {self.turn_slack!r}")

    @property
    def max_calls(self) -> int | None:
        """Generation calls served in all: ``max_turns + turn_slack``."""
        return None if self.max_turns is None else self.max_turns + self.turn_slack

    @property
    def unlimited(self) -> bool:
        return all(
            getattr(self, n) is None for n in ("max_turns", "max_tokens_per_turn", "max_total_tokens", "max_concurrent")
        )

    @classmethod
    def from_budget(cls, budget: Any, *, declared_concurrency: int | None = None) -> SessionBudget:
        """From a rollout's :class:`~legorl.harnesses.base.Budget` (read by attribute: ``max_turns``,
        ``max_tokens_per_turn``, and when present ``turn_slack`` (None: :func:`default_turn_slack`),
        ``max_total_tokens``, ``max_concurrent_requests``)."""
        turns = int(budget.max_turns)
        slack = getattr(budget, "turn_slack", None)
        return cls(
            max_turns=turns,
            turn_slack=default_turn_slack(turns) if slack is None else int(slack),
            max_tokens_per_turn=getattr(budget, "max_tokens_per_turn", None),
            max_total_tokens=getattr(budget, "max_total_tokens", None),
            max_concurrent=getattr(budget, "max_concurrent_requests", DEFAULT_MAX_CONCURRENT),
            declared_concurrency=declared_concurrency,
        )


class BudgetRefusal(GatewayError):
    """A call the session's budget does not allow. ``reason``: ``turns`` | ``tokens`` (terminal:
    403 ``budget_exhausted``) or ``concurrency`` | ``tokens_in_flight`` (transient: 429
    ``concurrency_limit_exceeded``, retry after a second). ``headers`` go out with the response."""

    def __init__(self, reason: str, message: str):
        self.reason = reason
        self.terminal = reason in REFUSAL_TERMINAL
        if self.terminal:
            super().__init__(403, message, type="budget_exhausted", code="budget_exhausted")
            self.headers = {"x-should-retry": "false"}
        else:
            super().__init__(429, message, type="rate_limit_error", code="concurrency_limit_exceeded")
            self.headers = {"retry-after": "1", "x-should-retry": "true"}


@dataclass
class Ticket:
    """One admitted call: its turn index and its token cap (None: no budget cap)."""

    turn_index: int
    max_tokens: int | None
    reserved: int = 0
    settled: bool = False


@dataclass
class SessionReport:
    """What the gateway saw of a session's budget and clients (:meth:`Session.report`)."""

    session_id: str
    budget: dict[str, Any]
    calls_admitted: int  # generation calls served (or being served), refunds deducted
    calls_refused: dict[str, int]  # reason -> count
    first_refused_turn: int | None  # turn index of the first refusal over a spent budget
    tokens_generated: int
    peak_in_flight: int
    over_declared_concurrency: int  # calls admitted while more than declared_concurrency were in flight
    client: dict[str, str] | None  # the identity headers of the session's first request
    other_clients: list[dict[str, Any]]  # [{"headers": {...}, "requests": n}, ...]
    refusals_unrecorded: int = 0  # refused/rejected calls beyond REFUSALS_RECORDED (counted, not recorded)
    calls_rejected: int = 0  # requests refused for their body (never reached the engine)
    failed_body_bytes: int = 0  # request bytes of the failed calls (rejected, refused, failed), as received
    failed_body_bytes_kept: int = 0  # what their Turns keep of them (<= FAILED_BODY_BUDGET)

    @property
    def exhausted(self) -> bool:
        """The turn or token budget was spent and at least one call was refused for it."""
        return any(self.calls_refused.get(r, 0) for r in REFUSAL_TERMINAL)

    def beyond_its_harness(self) -> str | None:
        """What of the session's traffic its harness would not have made (None: nothing): calls over
        the declared concurrency or refused for concurrency, or calls from another client. Any
        program in the sandbox holds the token, so an engine failure in such a session may be that
        traffic's doing (legorl.loop.rollout)."""
        seen = []
        if self.over_declared_concurrency:
            seen.append(
                f"{self.over_declared_concurrency} calls over the harness's {self.budget.get('declared_concurrency')} at once"
            )
        refused = self.calls_refused.get("concurrency", 0) + self.calls_refused.get("tokens_in_flight", 0)
        if refused:
            seen.append(f"{refused} calls refused for concurrency (up to {self.peak_in_flight} in flight)")
        if self.other_clients:
            seen.append(f"{sum(c['requests'] for c in self.other_clients)} calls from another client")
        return "; ".join(seen) or None

    def describe(self) -> str:
        """One line for ``Rollout.cause``."""
        b = self.budget
        parts = []
        if self.calls_refused.get("turns"):
            parts.append(
                f"{self.calls_admitted} of {b.get('max_turns')}+{b.get('turn_slack')} model calls used, "
                f"{self.calls_refused['turns']} more refused"
            )
        if self.calls_refused.get("tokens"):
            parts.append(
                f"{self.tokens_generated} of {b.get('max_total_tokens')} tokens generated, "
                f"{self.calls_refused['tokens']} more calls refused"
            )
        return "gateway budget exhausted: " + "; ".join(parts) if parts else ""

    def flags(self) -> list[Flag]:
        """Grading flags (severity ``info``: the budget is enforced, so nothing extra was trained on)."""
        out: list[Flag] = []
        if self.exhausted:
            out.append(
                Flag(
                    kind="gateway_budget_exhausted",
                    severity="info",
                    stage="during",
                    evidence={
                        "source": "gateway",
                        "turn": self.first_refused_turn,
                        "detail": self.describe(),
                        "refused": sum(self.calls_refused.get(r, 0) for r in REFUSAL_TERMINAL),
                        "budget": self.budget,
                    },
                )
            )
        conc_refused = self.calls_refused.get("concurrency", 0) + self.calls_refused.get("tokens_in_flight", 0)
        if self.over_declared_concurrency or conc_refused:
            out.append(
                Flag(
                    kind="gateway_concurrency",
                    severity="info",
                    stage="during",
                    evidence={
                        "source": "gateway",
                        "peak_in_flight": self.peak_in_flight,
                        "declared": self.budget.get("declared_concurrency"),
                        "limit": self.budget.get("max_concurrent"),
                        "over_declared": self.over_declared_concurrency,
                        "refused": conc_refused,
                        "detail": f"up to {self.peak_in_flight} calls in flight at once",
                    },
                )
            )
        if self.other_clients:
            n = sum(c["requests"] for c in self.other_clients)
            out.append(
                Flag(
                    kind="gateway_foreign_client",
                    severity="info",
                    stage="during",
                    evidence={
                        "source": "gateway",
                        "requests": n,
                        "client": self.client,
                        "other_clients": self.other_clients[:8],
                        "detail": f"{n} request(s) from a client other than the session's first "
                        f"({(self.client or {}).get('user-agent', '?')!r})",
                    },
                )
            )
        return out


def client_identity(headers: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    """The identifying headers of a request (:data:`CLIENT_HEADERS`), as a hashable tuple."""
    return tuple((h, str(headers.get(h) or "")[:200]) for h in CLIENT_HEADERS)


@dataclass
class Thread:
    state: ThreadState
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    explicit: bool = False  # named by x-legorl-thread: never re-routed by content
    last_used: int = 0

    @property
    def thread_id(self) -> str:
        return self.state.thread_id


@dataclass
class Session:
    session_id: str
    rollout_id: str
    token: str
    threads: dict[str, Thread] = field(default_factory=dict)
    turns: list[Turn] = field(default_factory=list)  # in completion order
    next_turn_index: int = 0
    closed: bool = False
    budget: SessionBudget = field(default_factory=SessionBudget)
    # sampling seed of the whole session (None: the request's own, else random); each call samples
    # with call_seed(turn_index), so a rollout samples the same tokens however the run is scheduled
    seed: int | None = None
    # budget ledger (under _lock)
    calls_admitted: int = 0
    tokens_generated: int = 0
    tokens_reserved: int = 0
    in_flight: int = 0
    peak_in_flight: int = 0
    over_declared: int = 0
    calls_refused: dict[str, int] = field(default_factory=dict)
    first_refused_turn: int | None = None
    refusals_recorded: int = 0
    refusals_unrecorded: int = 0
    calls_rejected: int = 0
    failed_body_bytes: int = 0
    failed_body_bytes_kept: int = 0
    # client identity: the first request's, and how many requests came from each other one
    client: tuple[tuple[str, str], ...] | None = None
    other_clients: dict[tuple[tuple[str, str], ...], int] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    _use_clock: int = 0

    def call_seed(self, turn_index: int) -> int | None:
        """The sampling seed of call ``turn_index`` (None: the session has no seed)."""
        if self.seed is None:
            return None
        digest = hashlib.sha256(f"{self.seed}:{turn_index}".encode()).digest()
        return int.from_bytes(digest[:8], "big") >> 1  # 63 bits, as engines take them

    def thread(self, thread_id: str, *, parent: str | None = None, explicit: bool = False) -> Thread:
        """The thread ``thread_id`` (created on first use, with its parent link)."""
        with self._lock:
            th = self.threads.get(thread_id)
            if th is None:
                if parent == thread_id:
                    parent = None
                th = self.threads[thread_id] = Thread(
                    ThreadState(thread_id, parent_thread_id=parent), explicit=explicit
                )
            elif parent and th.state.parent_thread_id is None and not th.state.segments and parent != thread_id:
                th.state.parent_thread_id = parent
            th.explicit = th.explicit or explicit
            return th

    def note_headers(self, headers: Mapping[str, str]) -> str:
        """Register the thread a request's headers name (and its parent link) and the request's
        client identity; returns the thread id."""
        tid, parent, explicit = thread_info_from_headers(headers)
        self.thread(tid, parent=parent, explicit=explicit)
        self.note_client(headers)
        return tid

    def note_client(self, headers: Mapping[str, str]) -> None:
        ident = client_identity(headers)
        with self._lock:
            if self.client is None:
                self.client = ident
            elif ident != self.client:
                self.other_clients[ident] = self.other_clients.get(ident, 0) + 1

    # -- budget --------------------------------------------------------------------------------
    def admit(self, turn_index: int) -> Ticket:
        """Admit one generation call or raise :class:`BudgetRefusal` (counted in ``calls_refused``).
        Every admitted call must be :meth:`settle` d exactly once."""
        b = self.budget
        with self._lock:
            reason: str | None = None
            message = ""
            left = (
                None
                if b.max_total_tokens is None
                else b.max_total_tokens - self.tokens_generated - self.tokens_reserved
            )
            if b.max_calls is not None and self.calls_admitted >= b.max_calls:
                reason, message = (
                    "turns",
                    (
                        f"LEGO-RL session budget exhausted: all {b.max_calls} model calls of this rollout are used "
                        f"(max_turns={b.max_turns} + {b.turn_slack} for side calls); no further calls are served."
                    ),
                )
            elif left is not None and left <= 0 and self.tokens_reserved == 0:
                reason, message = (
                    "tokens",
                    (
                        f"LEGO-RL session budget exhausted: {self.tokens_generated} of the rollout's "
                        f"{b.max_total_tokens} tokens are generated; no further calls are served."
                    ),
                )
            elif b.max_concurrent is not None and self.in_flight >= b.max_concurrent:
                reason, message = (
                    "concurrency",
                    (
                        f"LEGO-RL session concurrency limit: {self.in_flight} calls of this session are in flight "
                        f"(limit {b.max_concurrent}); retry when one has finished."
                    ),
                )
            elif left is not None and left <= 0:
                reason, message = (
                    "tokens_in_flight",
                    (
                        "LEGO-RL session budget: the rest of this rollout's token budget is reserved by calls "
                        "in flight; retry when they have finished."
                    ),
                )
            if reason is not None:
                self.calls_refused[reason] = self.calls_refused.get(reason, 0) + 1
                if reason in REFUSAL_TERMINAL and self.first_refused_turn is None:
                    self.first_refused_turn = turn_index
                raise BudgetRefusal(reason, message)
            cap = b.max_tokens_per_turn
            reserved = 0
            if left is not None:
                cap = reserved = left if cap is None else min(cap, left)
            ticket = Ticket(turn_index, cap, reserved=reserved)
            self.calls_admitted += 1
            self.tokens_reserved += ticket.reserved
            self.in_flight += 1
            self.peak_in_flight = max(self.peak_in_flight, self.in_flight)
            if b.declared_concurrency is not None and self.in_flight > b.declared_concurrency:
                self.over_declared += 1
            return ticket

    def settle(self, ticket: Ticket, generated: int = 0, *, refund: bool = False) -> None:
        """End an admitted call: ``generated`` tokens spent; ``refund`` gives its turn back (it
        failed without output). Idempotent."""
        with self._lock:
            if ticket.settled:
                return
            ticket.settled = True
            self.in_flight -= 1
            self.tokens_reserved -= ticket.reserved
            self.tokens_generated += max(0, int(generated))
            if refund:
                self.calls_admitted -= 1

    def take_refusal_slot(self) -> bool:
        """Whether a refused call should be recorded as a Turn (the first REFUSALS_RECORDED are)."""
        with self._lock:
            if self.refusals_recorded < REFUSALS_RECORDED:
                self.refusals_recorded += 1
                return True
            self.refusals_unrecorded += 1
            return False

    def keep_failed_body(self, request: dict[str, Any] | None, raw: bytes | None) -> dict[str, Any]:
        """What a failed call's Turn keeps of its request: ``request`` whole when its body (``raw``, the
        bytes as received; None: ``request`` serialised) is at most :data:`FAILED_BODY_CAP` bytes and
        the session's :data:`FAILED_BODY_BUDGET` has room (``{"raw": <text>}`` for a body that is not a
        JSON object), else ``{"truncated": true, "size_bytes": <as received>, "kept_bytes": k,
        "body_prefix": <its first k bytes as text>}``."""
        if raw is None:
            if request is None:
                return {}
            raw = json.dumps(request, ensure_ascii=False, default=str).encode("utf-8", "surrogatepass")
        size = len(raw)
        with self._lock:
            room = max(0, FAILED_BODY_BUDGET - self.failed_body_bytes_kept)
            whole = size <= min(FAILED_BODY_CAP, room)
            kept = size if whole else min(FAILED_BODY_CAP, room)
            self.failed_body_bytes += size
            self.failed_body_bytes_kept += kept
        if whole:  # a body that is not a JSON object: the text the client sent
            return request if request is not None else {"raw": raw.decode("utf-8", "replace")}
        prefix = raw[:kept].decode("utf-8", "replace")  # a cut multi-byte character becomes U+FFFD
        return {"truncated": True, "size_bytes": size, "kept_bytes": kept, "body_prefix": prefix}

    def note_rejected(self) -> None:
        with self._lock:
            self.calls_rejected += 1

    def report(self) -> SessionReport:
        with self._lock:
            return SessionReport(
                session_id=self.session_id,
                budget=asdict(self.budget),
                calls_admitted=self.calls_admitted,
                calls_refused=dict(self.calls_refused),
                first_refused_turn=self.first_refused_turn,
                tokens_generated=self.tokens_generated,
                peak_in_flight=self.peak_in_flight,
                over_declared_concurrency=self.over_declared,
                client=dict(self.client) if self.client is not None else None,
                other_clients=[{"headers": dict(k), "requests": n} for k, n in self.other_clients.items()],
                refusals_unrecorded=self.refusals_unrecorded,
                calls_rejected=self.calls_rejected,
                failed_body_bytes=self.failed_body_bytes,
                failed_body_bytes_kept=self.failed_body_bytes_kept,
            )

    def route(
        self, thread_id: str, messages: Sequence[Message], tools: Sequence[dict[str, Any]] | None, renderer: Renderer
    ) -> Thread:
        """The thread a request goes to: ``thread_id`` unless the request would fork there and
        extends/realigns another live thread of this session (docs/gateway.md#sessions). Takes no lock:
        the result of aligning against the chosen thread is cached in its state and reused by the
        gateway if the thread did not change meanwhile."""
        th = self.thread(thread_id)
        try:
            a = th.state.align(renderer, messages, tools)
        except Exception:  # the gateway aligns again and records the error
            return self._touch(th)
        if a.kind != "fork" or th.explicit:
            return self._touch(th)
        with self._lock:
            others = sorted(
                (t for t in self.threads.values() if t is not th and t.state.segments), key=lambda t: -t.last_used
            )
        for other in others:
            try:
                b = other.state.align(renderer, messages, tools)
            except Exception:
                continue
            if b.kind in ROUTABLE:
                return self._touch(other)
        return self._touch(th)

    def _touch(self, th: Thread) -> Thread:
        with self._lock:
            self._use_clock += 1
            th.last_used = self._use_clock
        return th

    def allocate_turn_index(self) -> int:
        with self._lock:
            i = self.next_turn_index
            self.next_turn_index += 1
            return i

    def add_turn(self, turn: Turn) -> None:
        with self._lock:
            self.turns.append(turn)

    def turns_sorted(self) -> list[Turn]:
        with self._lock:
            return sorted(self.turns, key=lambda t: t.turn_index)


def token_from_headers(headers: Mapping[str, str]) -> str | None:
    auth = headers.get("authorization")
    if auth:
        scheme, _, value = auth.strip().partition(" ")
        if scheme.lower() == "bearer" and value.strip():
            return value.strip()
    key = headers.get("x-api-key")
    return key.strip() if key and key.strip() else None


def thread_info_from_headers(headers: Mapping[str, str]) -> tuple[str, str | None, bool]:
    """-> (thread id, parent thread id or None, named explicitly by x-legorl-thread)."""
    for h in THREAD_HEADERS:
        v = headers.get(h)
        if v and v.strip():
            tid = v.strip()
            if h == "x-claude-code-agent-id":
                return tid, DEFAULT_THREAD, False
            if h == "x-session-id":
                p = headers.get(PARENT_HEADER)
                return tid, (p.strip() if p and p.strip() else None), False
            return tid, None, True
    return DEFAULT_THREAD, None, False


def thread_from_headers(headers: Mapping[str, str]) -> str:
    return thread_info_from_headers(headers)[0]


class SessionRegistry:
    """Thread-safe token -> Session map."""

    def __init__(self) -> None:
        self._by_token: dict[str, Session] = {}
        self._used_ids: dict[str, int] = {}
        self._issued: set[str] = set()  # every session id handed out or reserved, closed ones included
        self._lock = threading.Lock()

    def reserve(self, session_ids: Iterable[str]) -> None:
        """Session ids this registry must never hand out (those a run store already holds)."""
        with self._lock:
            self._issued.update(session_ids)

    def open(
        self,
        rollout_id: str,
        *,
        token: str | None = None,
        budget: SessionBudget | None = None,
        seed: int | None = None,
    ) -> str:
        """Open a session for ``rollout_id``; returns its token (:func:`new_token`; pass ``token``
        to choose it, e.g. a fixed dev token for the CLI). ``budget``: what the session may spend
        (None: unlimited). ``seed``: every call's sampling seed derives from it (:meth:`Session.call_seed`)."""
        if not isinstance(rollout_id, str) or not rollout_id:
            raise ValueError("rollout_id must be a non-empty string")
        if budget is not None and not isinstance(budget, SessionBudget):
            raise TypeError(
                f"budget must be a SessionBudget (SessionBudget.from_budget(...)), not {type(budget).__name__}"
            )
        with self._lock:
            tok = token or new_token()
            if tok in self._by_token:
                raise ValueError("token already in use")
            n = self._used_ids.get(rollout_id, 0)
            sid = rollout_id if n == 0 else f"{rollout_id}~{n}"
            while sid in self._issued:  # "r~1" may be a rollout id of its own, or in the store already
                n += 1
                sid = f"{rollout_id}~{n}"
            self._used_ids[rollout_id] = n + 1
            self._issued.add(sid)
            self._by_token[tok] = Session(
                session_id=sid, rollout_id=rollout_id, token=tok, budget=budget or SessionBudget(), seed=seed
            )
            return tok

    def close(self, token: str) -> Session | None:
        with self._lock:
            s = self._by_token.pop(token, None)
        if s is not None:
            s.closed = True
        return s

    def get(self, token: str | None) -> Session | None:
        if not token:
            return None
        with self._lock:
            return self._by_token.get(token)

    def session_id(self, token: str) -> str:
        """The session id (recorded in Turns, store key) of an open session's token."""
        s = self.get(token)
        if s is None:
            raise KeyError("unknown or closed session token")
        return s.session_id

    def lookup(self, headers: Mapping[str, str]) -> Session | None:
        """The session a request belongs to (Bearer token or x-api-key), or None. Registers the
        thread the headers name (with its parent link) in that session."""
        s = self.get(token_from_headers(headers))
        if s is not None:
            s.note_headers(headers)
        return s

    def __len__(self) -> int:
        with self._lock:
            return len(self._by_token)
