"""Sessions: one per rollout, addressed by a secret token the harness sends as its API key.

``open(rollout_id) -> token`` (``secrets.token_urlsafe``); the harness sends it as
``Authorization: Bearer <token>`` (OpenAI SDKs, Claude Code's ``ANTHROPIC_AUTH_TOKEN``) or
``x-api-key: <token>`` (Anthropic SDK). Inside a session, requests are routed to *threads*
(main agent, sub-agents) and, inside a thread, to *segments* (main chain, compaction, side calls):

* headers the harnesses already send name the thread — the first present of
  :data:`THREAD_HEADERS`: ``x-legorl-thread`` (explicit, never re-routed),
  ``x-claude-code-agent-id`` (Claude Code sub-agent; parent thread ``main``), ``x-session-id``
  (OpenCode session; ``x-parent-session-id`` names its parent thread). Else ``"main"``.
  :meth:`SessionRegistry.lookup` registers the thread and its parent link when it resolves a
  request's session, so every dialect gets the link without extra plumbing.
* content: :meth:`Session.route` aligns the request against the header's thread; when that would
  fork (and the thread was not named explicitly), a request that extends/realigns another live
  thread of the same session goes to that thread instead (e.g. a sub-agent whose harness sends no
  header). Anything else stays on the header's thread, where :mod:`legorl.trajectory.alignment`
  makes it a new segment (side request, compaction, rebuild, retry) without breaking the chain.

A session only ever sees its own threads: routing never crosses sessions.

Each thread owns a :class:`~legorl.trajectory.alignment.ThreadState` (the exact token sequence
held so far + the messages it stands for) and an ``asyncio.Lock``: requests of one thread are
served one at a time so that every request is aligned against the thread's latest tokens.

``session_id`` (recorded in every Turn; never the token) is the rollout id, suffixed ``~N`` when
that rollout id was opened before.
"""

from __future__ import annotations

import asyncio
import secrets
import threading
from dataclasses import dataclass, field
from typing import Mapping, Sequence

from legorl.gateway.renderer import Message, Renderer
from legorl.trajectory.alignment import ThreadState
from legorl.trajectory.records import Turn

THREAD_HEADERS: tuple[str, ...] = ("x-legorl-thread", "x-claude-code-agent-id", "x-session-id")
PARENT_HEADER = "x-parent-session-id"
EXPLICIT_THREAD_HEADER = "x-legorl-thread"
DEFAULT_THREAD = "main"
ROUTABLE = ("extend", "realign")


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
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    _use_clock: int = 0

    def thread(self, thread_id: str, *, parent: str | None = None, explicit: bool = False) -> Thread:
        """The thread ``thread_id`` (created on first use, with its parent link)."""
        with self._lock:
            th = self.threads.get(thread_id)
            if th is None:
                if parent == thread_id:
                    parent = None
                th = self.threads[thread_id] = Thread(ThreadState(thread_id, parent_thread_id=parent), explicit=explicit)
            elif parent and th.state.parent_thread_id is None and not th.state.segments and parent != thread_id:
                th.state.parent_thread_id = parent
            th.explicit = th.explicit or explicit
            return th

    def note_headers(self, headers: Mapping[str, str]) -> str:
        """Register the thread a request's headers name (and its parent link); returns its id."""
        tid, parent, explicit = thread_info_from_headers(headers)
        self.thread(tid, parent=parent, explicit=explicit)
        return tid

    def route(self, thread_id: str, messages: Sequence[Message], tools: Sequence[dict] | None, renderer: Renderer) -> Thread:
        """The thread a request goes to: ``thread_id`` unless the request would fork there and
        extends/realigns another live thread of this session (see the module doc). Takes no lock:
        the result of aligning against the chosen thread is cached in its state and reused by the
        gateway if the thread did not change meanwhile."""
        th = self.thread(thread_id)
        try:
            a = th.state.align(renderer, messages, tools)
        except Exception:  # noqa: BLE001 - the gateway aligns again and records the error
            return self._touch(th)
        if a.kind != "fork" or th.explicit:
            return self._touch(th)
        with self._lock:
            others = sorted((t for t in self.threads.values() if t is not th and t.state.segments), key=lambda t: -t.last_used)
        for other in others:
            try:
                b = other.state.align(renderer, messages, tools)
            except Exception:  # noqa: BLE001
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
        self._lock = threading.Lock()

    def open(self, rollout_id: str, *, token: str | None = None) -> str:
        """Open a session for ``rollout_id``; returns its token (pass ``token`` to choose it, e.g.
        a fixed dev token for the CLI)."""
        if not isinstance(rollout_id, str) or not rollout_id:
            raise ValueError("rollout_id must be a non-empty string")
        with self._lock:
            tok = token or secrets.token_urlsafe(32)
            if tok in self._by_token:
                raise ValueError("token already in use")
            n = self._used_ids.get(rollout_id, 0)
            self._used_ids[rollout_id] = n + 1
            sid = rollout_id if n == 0 else f"{rollout_id}~{n}"
            self._by_token[tok] = Session(session_id=sid, rollout_id=rollout_id, token=tok)
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
