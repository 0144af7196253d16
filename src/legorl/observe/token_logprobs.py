"""The trainer's per-token logprobs of each recorded sample, beside the run store.

The run store keeps what the engine sampled (``Sample.rollout_logprobs``); the trainer's recompute
(π_old, :meth:`legorl.training.trainer.Trainer.logprobs`) is what the UI's token heat map compares
it with. It lives in its own SQLite file, ``trainer_logprobs.sqlite`` in the run directory, so the
store's schema and write path stay untouched: one row per (rollout id, sample position), the
float32 array little-endian, plus the step and the trainer's weight version when it was computed.
A sample recomputed again (a later step) replaces its row.
"""

from __future__ import annotations

import sqlite3
import sys
import threading
from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

FILE_NAME = "trainer_logprobs.sqlite"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS trainer_logprobs(
  rollout_id TEXT NOT NULL, position INTEGER NOT NULL, step INTEGER, weight_version INTEGER,
  logprobs BLOB NOT NULL, PRIMARY KEY (rollout_id, position)
);
"""


@dataclass(frozen=True)
class SampleLogprobs:
    """The trainer's logprobs of one sample (same length as its token ids; position 0 is 0.0)."""

    rollout_id: str
    position: int
    step: int | None
    weight_version: int | None
    logprobs: list[float]


def _pack(xs: Sequence[float]) -> bytes:
    a = array("f", xs)
    if sys.byteorder != "little":
        a.byteswap()
    return a.tobytes()


def _unpack(b: bytes) -> list[float]:
    a = array("f")
    a.frombytes(b)
    if sys.byteorder != "little":
        a.byteswap()
    return a.tolist()


class TrainerLogprobs:
    """Writer and reader of ``trainer_logprobs.sqlite`` (thread-safe; several processes may open it)."""

    def __init__(self, run_dir: str | Path) -> None:
        self.path = Path(run_dir) / FILE_NAME
        self._local = threading.local()
        self._lock = threading.Lock()

    def _conn(self, create: bool = True) -> sqlite3.Connection | None:
        c = getattr(self._local, "conn", None)
        if c is None:
            if not create and not self.path.exists():
                return None
            c = sqlite3.connect(self.path, timeout=30.0, isolation_level=None, check_same_thread=False)
            c.execute("PRAGMA journal_mode=WAL")
            c.execute("PRAGMA busy_timeout=30000")
            c.executescript(_SCHEMA)
            self._local.conn = c
        return c

    def record(
        self,
        rollout_id: str,
        position: int,
        logprobs: Sequence[float],
        *,
        step: int | None = None,
        weight_version: int | None = None,
    ) -> None:
        c = self._conn()
        assert c is not None
        with self._lock:
            c.execute(
                "INSERT OR REPLACE INTO trainer_logprobs VALUES (?,?,?,?,?)",
                (rollout_id, position, step, weight_version, _pack(logprobs)),
            )

    def of_rollout(self, rollout_id: str) -> dict[int, SampleLogprobs]:
        """Sample position → the trainer's logprobs (empty when none were recorded)."""
        c = self._conn(create=False)
        if c is None:
            return {}
        rows = c.execute(
            "SELECT position, step, weight_version, logprobs FROM trainer_logprobs WHERE rollout_id=?", (rollout_id,)
        ).fetchall()
        return {p: SampleLogprobs(rollout_id, p, s, w, _unpack(b)) for p, s, w, b in rows}

    def close(self) -> None:
        c = getattr(self._local, "conn", None)
        if c is not None:
            c.close()
            self._local.conn = None


__all__ = ["FILE_NAME", "SampleLogprobs", "TrainerLogprobs"]
