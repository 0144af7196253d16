"""Sessions: one per rollout, addressed by a secret token the harness sends as its API key.

``open(rollout_id) -> token`` (``secrets.token_urlsafe``); the harness sends it as
``Authorization: Bearer <token>`` (OpenAI SDKs, Claude Code's ``ANTHROPIC_AUTH_TOKEN``) or
``x-api-key: <token>`` (Anthropic SDK). Inside a session, requests are routed to *threads*
(main agent, sub-agents, side calls); today the thread id comes from the first of
:data:`THREAD_HEADERS` present, else ``"main"``.

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
from typing import Mapping

from legorl.trajectory.alignment import ThreadState
from legorl.trajectory.records import Turn

THREAD_HEADERS: tuple[str, ...] = ("x-legorl-thread", "x-session-id")
DEFAULT_THREAD = "main"


@dataclass
class Thread:
    state: ThreadState
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


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

    def thread(self, thread_id: str) -> Thread:
        with self._lock:
            th = self.threads.get(thread_id)
            if th is None:
                th = self.threads[thread_id] = Thread(ThreadState(thread_id))
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


def thread_from_headers(headers: Mapping[str, str]) -> str:
    for h in THREAD_HEADERS:
        v = headers.get(h)
        if v and v.strip():
            return v.strip()
    return DEFAULT_THREAD


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
        """The session a request belongs to (Bearer token or x-api-key), or None."""
        return self.get(token_from_headers(headers))

    def __len__(self) -> int:
        with self._lock:
            return len(self._by_token)
