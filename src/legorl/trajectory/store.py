"""Durable run records: JSON lines for now (a later issue moves to SQLite + Parquet behind this API).

``run_dir/turns.jsonl``    one :class:`Turn` per line, appended + flushed + fsync'd before the
                          gateway answers the call it records.
``run_dir/rollouts.jsonl`` one :class:`Rollout` per line.

All methods are thread-safe (one lock per file). Readers skip a torn last line (crash mid-write).
"""

from __future__ import annotations

import json
import logging
import os
import threading
from pathlib import Path
from typing import Iterator

from legorl.trajectory.records import Rollout, Turn

log = logging.getLogger(__name__)


class RunStore:
    TURNS = "turns.jsonl"
    ROLLOUTS = "rollouts.jsonl"

    def __init__(self, run_dir: str | os.PathLike[str], *, fsync: bool = True):
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.fsync = fsync
        self._locks = {self.TURNS: threading.Lock(), self.ROLLOUTS: threading.Lock()}

    @property
    def turns_path(self) -> Path:
        return self.run_dir / self.TURNS

    @property
    def rollouts_path(self) -> Path:
        return self.run_dir / self.ROLLOUTS

    def _append(self, name: str, line: str) -> None:
        data = (line + "\n").encode("utf-8")
        with self._locks[name]:
            fd = os.open(self.run_dir / name, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                view = memoryview(data)
                while view:
                    n = os.write(fd, view)
                    view = view[n:]
                if self.fsync:
                    os.fsync(fd)
            finally:
                os.close(fd)

    def append_turn(self, turn: Turn) -> None:
        self._append(self.TURNS, turn.model_dump_json())

    def append_rollout(self, rollout: Rollout) -> None:
        self._append(self.ROLLOUTS, rollout.model_dump_json())

    def _iter(self, name: str) -> Iterator[dict]:
        path = self.run_dir / name
        if not path.exists():
            return
        with self._locks[name]:
            lines = path.read_bytes().split(b"\n")
        for i, raw in enumerate(lines):
            if not raw.strip():
                continue
            try:
                yield json.loads(raw)
            except json.JSONDecodeError:
                if i == len(lines) - 1:  # torn last line: the writer died mid-append
                    log.warning("%s: skipping torn last line", path)
                    continue
                raise

    def iter_turns(self, session_id: str | None = None) -> Iterator[Turn]:
        for obj in self._iter(self.TURNS):
            if session_id is None or obj.get("session_id") == session_id:
                yield Turn.model_validate(obj)

    def iter_rollouts(self) -> Iterator[Rollout]:
        for obj in self._iter(self.ROLLOUTS):
            yield Rollout.model_validate(obj)
