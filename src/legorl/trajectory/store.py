"""Durable run records: a SQLite index (WAL) + token arrays compacted to Parquet.

Layout of ``run_dir``::

    run.sqlite            index + write-ahead token arrays (SQLite WAL; ``run.sqlite-wal`` beside it)
    tokens/turns-NNNNN.parquet    token arrays of compacted turns
    tokens/samples-NNNNN.parquet  token arrays of compacted samples

Tables (all columns queryable with plain SQL; ``sqlite3 run.sqlite``):

* ``turns`` — one row per :class:`Turn`: ``session_id, thread_id, turn_index, segment_index,
  kind`` (start/extend/realign/fork), ``segment_kind, dialect, weight_version, prompt_tokens,
  output_tokens, reused_prefix_len, cached_prompt_tokens, finish_reason, failed, error,
  started_at, total_s`` and JSON text columns ``alignment, sampling, timings, request,
  response``. Token arrays: ``prompt_ids`` (int32 LE), ``output_ids`` (int32 LE),
  ``output_logprobs`` (float64 LE) as BLOBs until compaction moves them to
  ``tokens_file``/``tokens_row`` (the BLOBs are then NULL).
* ``rollouts`` — one row per :meth:`append_rollout` call (a rollout id appended twice keeps both
  rows; readers of one id take the last): ``rollout_id, session_id, task_id, harness, step,
  group_index, status, reward`` + ``body`` (the Rollout as JSON without its samples).
* ``samples`` — the rollout's :class:`Sample` rows (``token_ids`` int32, ``loss_mask`` uint8,
  ``rollout_logprobs`` float64 BLOBs, compacted like turns).

Durability: :meth:`append_turn` commits one transaction per turn before it returns (the gateway
answers only after that). Default ``fsync=False``: ``synchronous=NORMAL`` — the committed turn is
in the WAL file (OS page cache) and survives a crash or SIGKILL of the gateway/trainer process,
not an OS crash / power loss; p50 ≈ 0.1 ms. ``fsync=True``: ``synchronous=FULL`` — the WAL is
fsync'd on every commit (survives power loss) at the cost of one fsync per turn (0.3–4 ms on
this machine's disk, measured). Compaction (:meth:`compact`, run by :meth:`close` and automatically in a
background thread every ``compact_every`` uncompacted turns) writes a Parquet file, fsyncs it,
then swaps the rows over in one transaction — a crash at any point leaves every array readable.

All methods are thread-safe (one connection per thread, writes serialised by a lock) and several
processes may open the same run directory (SQLite locking, ``busy_timeout``). Old runs with a
``turns.jsonl`` / ``rollouts.jsonl`` are imported on first open.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import sqlite3
import sys
import threading
import time
from array import array
from collections import OrderedDict
from collections.abc import Iterable, Iterator
from contextlib import closing, contextmanager
from pathlib import Path
from typing import Any

from legorl.errors import AlignmentBuildError, RunDirError
from legorl.trajectory.records import AlignmentEvent, Rollout, Sample, Turn

log = logging.getLogger(__name__)

DB_NAME = "run.sqlite"
TOKENS_DIR = "tokens"
_LITTLE = sys.byteorder == "little"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS turns(
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  session_id TEXT NOT NULL, thread_id TEXT NOT NULL, turn_index INTEGER NOT NULL,
  segment_index INTEGER, kind TEXT, segment_kind TEXT, dialect TEXT, weight_version INTEGER,
  prompt_tokens INTEGER, output_tokens INTEGER, reused_prefix_len INTEGER, cached_prompt_tokens INTEGER,
  finish_reason TEXT, failed INTEGER, error TEXT, started_at REAL, total_s REAL, schema_version INTEGER,
  alignment TEXT, sampling TEXT, timings TEXT, request TEXT, response TEXT,
  prompt_ids BLOB, output_ids BLOB, output_logprobs BLOB, tokens_file TEXT, tokens_row INTEGER
);
CREATE INDEX IF NOT EXISTS turns_session ON turns(session_id, turn_index);
CREATE INDEX IF NOT EXISTS turns_pending ON turns(tokens_file) WHERE tokens_file IS NULL;
CREATE TABLE IF NOT EXISTS rollouts(
  id INTEGER PRIMARY KEY AUTOINCREMENT, rollout_id TEXT NOT NULL, session_id TEXT, task_id TEXT,
  harness TEXT, step INTEGER, group_index INTEGER, status TEXT, reward REAL, started_at REAL,
  duration_s REAL, body TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS rollouts_id ON rollouts(rollout_id);
CREATE TABLE IF NOT EXISTS samples(
  id INTEGER PRIMARY KEY AUTOINCREMENT, rollout_row INTEGER NOT NULL, rollout_id TEXT NOT NULL,
  session_id TEXT, thread_id TEXT, segment_index INTEGER, segment_kind TEXT, position INTEGER,
  num_tokens INTEGER, num_sampled INTEGER, reward REAL, advantage REAL, meta TEXT,
  token_ids BLOB, loss_mask BLOB, rollout_logprobs BLOB, tokens_file TEXT, tokens_row INTEGER
);
CREATE INDEX IF NOT EXISTS samples_rollout ON samples(rollout_row, position);
CREATE TABLE IF NOT EXISTS abandoned(session_id TEXT PRIMARY KEY, reason TEXT NOT NULL, at REAL NOT NULL);
"""
# Readers skip what a resumed run abandoned (see RunStore.abandon_unfinished) unless asked for it.
_LIVE = "session_id IS NULL OR session_id NOT IN (SELECT session_id FROM abandoned)"

# Token arrays per table: SQLite BLOB column, field (the Parquet column after compaction), array type code.
_TOKEN_COLUMNS = {
    "turns": (
        ("prompt_ids", "prompt_token_ids", "i"),
        ("output_ids", "output_token_ids", "i"),
        ("output_logprobs", "output_logprobs", "d"),
    ),
    "samples": (
        ("token_ids", "token_ids", "i"),
        ("loss_mask", "loss_mask", "B"),
        ("rollout_logprobs", "rollout_logprobs", "d"),
    ),
}

_TURN_INDEX_COLS = (
    "session_id, thread_id, turn_index, segment_index, kind, segment_kind, dialect, weight_version, prompt_tokens, "
    "output_tokens, reused_prefix_len, cached_prompt_tokens, finish_reason, failed, error, started_at, total_s"
)


def _i32(ids: Iterable[int]) -> bytes:
    a = array("i", ids)
    if not _LITTLE:
        a.byteswap()
    return a.tobytes()


def _f64(xs: Iterable[float]) -> bytes:
    a = array("d", xs)
    if not _LITTLE:
        a.byteswap()
    return a.tobytes()


def _from(code: str, b: bytes | None) -> list:
    a = array(code)
    if b:
        a.frombytes(b)
        if not _LITTLE and code != "B":
            a.byteswap()
    return a.tolist()


def _impossible(token_ids: Iterable[list[int]], loss_mask: list[int] | None = None) -> str | None:
    """What no recorded token array holds: a flipped byte in a BLOB or a Parquet page (neither is
    checksummed) that still parses. A token id past the vocabulary cannot be told here."""
    if any(ids and min(ids) < 0 for ids in token_ids):
        return "a negative token id"
    if loss_mask is not None and not set(loss_mask) <= {0, 1}:
        return "a loss_mask value other than 0 and 1"
    return None


def _dumps(obj: Any) -> str:
    out = json.dumps(obj, ensure_ascii=False, separators=(",", ":"), default=str)
    try:
        out.encode("utf-8")
    except UnicodeEncodeError:  # lone surrogates: SQLite stores UTF-8 only; \\u escapes load back the same str
        out = json.dumps(obj, ensure_ascii=True, separators=(",", ":"), default=str)
    return out


def _text(s: str | None) -> str | None:
    """A text column SQLite can store: lone surrogates written as ``\\udxxx`` escapes."""
    if s is None:
        return None
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:
        return s.encode("utf-8", "backslashreplace").decode("utf-8")
    return s


def _detail(exc: BaseException) -> str:
    """One line, bounded: the message goes on a CLI error line."""
    return f"{type(exc).__name__}: " + " ".join(str(exc).split())[:300]


@functools.cache
def _expected_columns() -> dict[str, frozenset[str]]:
    """Table → columns, read from :data:`_SCHEMA` itself (so the check cannot drift from the schema)."""
    m = sqlite3.connect(":memory:")
    try:
        m.executescript(_SCHEMA)
        tables = [
            r[0] for r in m.execute("SELECT name FROM sqlite_master WHERE type='table' AND name NOT LIKE 'sqlite_%'")
        ]
        return {t: frozenset(r[1] for r in m.execute(f"PRAGMA table_info({t})")) for t in tables}
    finally:
        m.close()


def _check_schema(c: sqlite3.Connection, db: Path) -> None:
    """A damaged schema page can still parse, as a table without the columns we need ("no such column"
    deep inside a later read): refuse it at open."""
    for table, cols in _expected_columns().items():
        have = {r[1] for r in c.execute(f"PRAGMA table_info({table})")}
        if not cols <= have:
            missing = ", ".join(sorted(cols - have))
            raise RunDirError(f"{db}: damaged schema: table {table} lacks column(s) {missing}")


class RunStore:
    def __init__(self, run_dir: str | os.PathLike[str], *, fsync: bool = False, compact_every: int | None = 20000):
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.fsync = fsync
        self.compact_every = compact_every
        self._local = threading.local()
        self._write_lock = threading.Lock()
        self._compact_lock = threading.Lock()
        self._compacting = False
        self._pending = 0
        self._cache: OrderedDict[str, dict[int, dict]] = OrderedDict()
        self._cache_lock = threading.Lock()
        self._closed = False
        c = self._conn()
        with self._opening("not a readable SQLite database"):
            with self._write_lock:
                c.executescript(_SCHEMA)
            _check_schema(c, self.db_path)
            self._pending = c.execute("SELECT count(*) FROM turns WHERE tokens_file IS NULL").fetchone()[0]
        self._import_legacy()

    # -- connections ---------------------------------------------------------------------------
    @property
    def db_path(self) -> Path:
        return self.run_dir / DB_NAME

    def _conn(self) -> sqlite3.Connection:
        c = getattr(self._local, "conn", None)
        if c is None:
            with self._opening("not a readable SQLite database"):
                c = sqlite3.connect(self.db_path, timeout=30.0, isolation_level=None)
                try:
                    c.execute("PRAGMA journal_mode=WAL")
                    c.execute(f"PRAGMA synchronous={'FULL' if self.fsync else 'NORMAL'}")
                    c.execute("PRAGMA busy_timeout=30000")
                except BaseException:
                    c.close()
                    raise
            self._local.conn = c
        return c

    @contextmanager
    def _opening(self, what: str) -> Iterator[None]:
        """The one checked open: whatever a damaged ``run.sqlite`` makes SQLite (or the decoding of its
        error text: a corrupt schema name gives ``UnicodeDecodeError``) raise while connecting, setting the
        pragmas or reading the schema becomes :class:`RunDirError` naming the file."""
        try:
            yield
        except RunDirError:
            raise
        except (sqlite3.Error, ValueError) as exc:
            raise RunDirError(f"{self.db_path}: {what} ({_detail(exc)})") from None

    def verify(self) -> None:
        """Check the whole store before writing to it again (a resumed run): SQLite's ``quick_check`` of
        every page of ``run.sqlite``, and every ``tokens/*.parquet`` file the index points at present with a
        readable footer. :class:`RunDirError` naming the first damaged file. Reads the whole database:
        seconds per GiB, so the cheap open (UI, status, export) does not do it."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        with self._opening("failed SQLite's integrity check"):
            problems = [r[0] for r in self._conn().execute("PRAGMA quick_check(5)")]
            files = [
                r[0]
                for r in self._conn().execute(
                    "SELECT DISTINCT tokens_file FROM turns WHERE tokens_file IS NOT NULL UNION "
                    "SELECT DISTINCT tokens_file FROM samples WHERE tokens_file IS NOT NULL"
                )
            ]
        if problems != ["ok"]:
            raise RunDirError(f"{self.db_path}: damaged: " + "; ".join(" ".join(str(p).split()) for p in problems))
        for tfile in sorted(files):
            path = self.run_dir / tfile
            if not path.is_file():
                raise RunDirError(f"{path}: missing: {self.db_path} keeps token arrays there")
            try:
                pq.read_metadata(path)
            except (OSError, pa.ArrowException, ValueError) as exc:  # ValueError: a column name not UTF-8
                raise RunDirError(f"{path}: unreadable Parquet token file ({_detail(exc)})") from None

    def _write(self, fn) -> Any:
        c = self._conn()
        with self._write_lock:
            c.execute("BEGIN IMMEDIATE")
            try:
                out = fn(c)
            except BaseException:
                c.execute("ROLLBACK")
                raise
            c.execute("COMMIT")
            return out

    # -- turns ---------------------------------------------------------------------------------
    def append_turn(self, turn: Turn) -> None:
        """Record one Turn durably (committed, and fsync'd when ``fsync``) before returning."""
        a = turn.alignment
        row = (
            _text(turn.session_id),
            _text(turn.thread_id),
            turn.turn_index,
            a.segment_index,
            a.kind,
            a.segment_kind,
            turn.dialect,
            turn.weight_version,
            len(turn.prompt_token_ids),
            len(turn.output_token_ids),
            turn.reused_prefix_len,
            turn.cached_prompt_tokens,
            turn.finish_reason,
            int(turn.failed),
            _text(turn.error),
            turn.started_at,
            turn.timings.get("total_s"),
            turn.schema_version,
            _dumps(a.model_dump(mode="json")),
            _dumps(turn.sampling),
            _dumps(turn.timings),
            _dumps(turn.request),
            _dumps(turn.response),
            _i32(turn.prompt_token_ids),
            _i32(turn.output_token_ids),
            _f64(turn.output_logprobs),
        )
        self._write(
            lambda c: c.execute(
                f"INSERT INTO turns({_TURN_INDEX_COLS}, schema_version, alignment, sampling, timings, request, response, "
                "prompt_ids, output_ids, output_logprobs) VALUES (" + ",".join("?" * 26) + ")",
                row,
            )
        )
        self._pending += 1
        if self.compact_every and self._pending >= self.compact_every and not self._compacting:
            self._compacting = True
            threading.Thread(target=self._background_compact, daemon=True, name="runstore-compact").start()

    def _turn_from_row(self, r: sqlite3.Row | tuple, tokens: dict | None) -> Turn:
        (
            sid,
            thread,
            ti,
            _seg,
            _k,
            _sk,
            dialect,
            wv,
            _pt,
            _ot,
            reused,
            cached,
            finish,
            failed,
            error,
            started,
            _tot,
            schema,
            alignment,
            sampling,
            timings,
            request,
            response,
            p_ids,
            o_ids,
            o_lps,
            tfile,
            trow,
            _id,
        ) = r
        if tfile is not None:
            tok = tokens if tokens is not None else self._tokens("turns", tfile, _id)
            prompt, out, lps = tok["prompt_token_ids"], tok["output_token_ids"], tok["output_logprobs"]
        else:
            prompt, out, lps = _from("i", p_ids), _from("i", o_ids), _from("d", o_lps)
        if (len(prompt), len(out)) != (_pt, _ot):  # a damaged token file or BLOB, or a row pointing at the wrong one
            raise RunDirError(
                f"{self.run_dir / tfile if tfile else self.db_path}: turns row {_id}: token arrays of "
                f"{len(prompt)} prompt / {len(out)} output tokens, the index says {_pt} / {_ot}"
            )
        bad = _impossible((prompt, out))
        if bad:
            raise RunDirError(f"{self.run_dir / tfile if tfile else self.db_path}: turns row {_id}: damaged: {bad}")
        return Turn.model_validate(
            {
                "schema_version": schema,
                "session_id": sid,
                "thread_id": thread,
                "turn_index": ti,
                "dialect": dialect,
                "prompt_token_ids": prompt,
                "output_token_ids": out,
                "output_logprobs": lps,
                "sampling": json.loads(sampling),
                "weight_version": wv,
                "finish_reason": finish,
                "alignment": json.loads(alignment),
                "reused_prefix_len": reused,
                "cached_prompt_tokens": cached,
                "started_at": started,
                "timings": json.loads(timings),
                "request": json.loads(request),
                "response": json.loads(response),
                "failed": bool(failed),
                "error": error,
            }
        )

    _TURN_SELECT = (
        f"SELECT {_TURN_INDEX_COLS}, schema_version, alignment, sampling, timings, request, response, "
        "prompt_ids, output_ids, output_logprobs, tokens_file, tokens_row, id FROM turns"
    )

    def iter_turns(self, session_id: str | None = None, *, include_abandoned: bool = False) -> Iterator[Turn]:
        """Turns in record order (of one session, abandoned or not: by turn_index)."""
        with self._reading("turns"):
            c = self._conn()
            if session_id is None:
                live = "" if include_abandoned else f" WHERE {_LIVE}"
                rows = c.execute(self._TURN_SELECT + live + " ORDER BY id").fetchall()
            else:
                rows = c.execute(
                    self._TURN_SELECT + " WHERE session_id=? ORDER BY turn_index, id", (session_id,)
                ).fetchall()
        for r in rows:
            with self._reading(f"turns row {r[-1]}"):
                turn = self._turn_from_row(r, None)
            yield turn

    def get_turn(self, session_id: str, turn_index: int) -> Turn | None:
        with self._reading(f"turn {turn_index} of session {session_id!r}"):
            r = (
                self._conn()
                .execute(
                    self._TURN_SELECT + " WHERE session_id=? AND turn_index=? ORDER BY id DESC LIMIT 1",
                    (session_id, turn_index),
                )
                .fetchone()
            )
            return None if r is None else self._turn_from_row(r, None)

    def turn_index(self, session_id: str | None = None) -> list[dict]:
        """Index columns of the turns (no token arrays, no request/response bodies)."""
        cols = [c.strip() for c in _TURN_INDEX_COLS.split(",")]
        q = f"SELECT {_TURN_INDEX_COLS} FROM turns" + (" WHERE session_id=?" if session_id else "") + " ORDER BY id"
        with self._reading("the turn index"):
            return [dict(zip(cols, r)) for r in self._conn().execute(q, (session_id,) if session_id else ())]

    def taken_session_ids(self) -> set[str]:
        """Every session id the store holds (turns, rollouts, abandoned): a new session must not reuse one."""
        q = "SELECT session_id FROM turns UNION SELECT session_id FROM rollouts UNION SELECT session_id FROM abandoned"
        with self._reading("the session ids"):
            return {r[0] for r in self._conn().execute(q) if r[0] is not None}

    def sessions(self, *, include_abandoned: bool = False) -> list[str]:
        live = "" if include_abandoned else f" WHERE {_LIVE}"
        with self._reading("the session ids"):
            ids = [
                r[0] for r in self._conn().execute(f"SELECT DISTINCT session_id FROM turns{live} ORDER BY session_id")
            ]
        bad = [i for i in ids if not isinstance(i, str)]  # NOT NULL TEXT when written: a damaged row or index
        if bad:
            raise RunDirError(f"{self.db_path}: damaged: a turns row whose session id is {bad[0]!r}")
        return ids

    # -- resume ----------------------------------------------------------------------------------
    def abandon_unfinished(self, after_step: int, reason: str) -> list[str]:
        """Mark what a killed run left behind past its checkpoint of ``after_step``: the rollouts of
        later steps and every session with turns but no rollout (cut mid-rollout). Readers skip them from
        then on (``include_abandoned`` shows them), so the resumed run's redo of those steps is the only
        copy: nothing is lost and nothing counted twice. Returns the session ids newly marked."""

        def tx(c: sqlite3.Connection) -> list[str]:
            later = c.execute("SELECT DISTINCT session_id FROM rollouts WHERE step > ?", (after_step,)).fetchall()
            orphans = c.execute(
                "SELECT DISTINCT session_id FROM turns WHERE session_id NOT IN "
                "(SELECT session_id FROM rollouts WHERE session_id IS NOT NULL)"
            ).fetchall()
            done = {r[0] for r in c.execute("SELECT session_id FROM abandoned")}
            ids = sorted({r[0] for r in (*later, *orphans) if r[0] is not None} - done)
            c.executemany(
                "INSERT OR IGNORE INTO abandoned(session_id, reason, at) VALUES (?,?,?)",
                [(sid, reason, time.time()) for sid in ids],
            )
            return ids

        with self._reading("the sessions to abandon"):
            return self._write(tx)

    def abandoned(self) -> dict[str, str]:
        """Abandoned session id → why."""
        with self._reading("the abandoned sessions"):
            return dict(self._conn().execute("SELECT session_id, reason FROM abandoned ORDER BY session_id"))

    @contextmanager
    def _reading(self, what: str) -> Iterator[None]:
        """Reading ``what`` from a truncated or corrupt run directory raises :class:`RunDirError` naming the
        database and the row (a missing or damaged Parquet file is named by :meth:`_tokens`)."""
        try:
            yield
        except RunDirError:
            raise
        except (sqlite3.DatabaseError, ValueError, KeyError, TypeError) as exc:  # ValueError: JSON, pydantic
            raise RunDirError(f"{self.db_path}: cannot read {what}: {_detail(exc)}") from None

    # -- rollouts / samples ----------------------------------------------------------------------
    def append_rollout(self, rollout: Rollout) -> None:
        body = rollout.model_dump_json(exclude={"samples"})

        def tx(c: sqlite3.Connection) -> None:
            cur = c.execute(
                "INSERT INTO rollouts(rollout_id, session_id, task_id, harness, step, group_index, status, reward, "
                "started_at, duration_s, body) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                (
                    rollout.rollout_id,
                    rollout.session_id,
                    rollout.task_id,
                    rollout.harness,
                    rollout.step,
                    rollout.group_index,
                    rollout.status,
                    rollout.reward,
                    rollout.started_at,
                    rollout.duration_s,
                    body,
                ),
            )
            rowid = cur.lastrowid
            c.executemany(
                "INSERT INTO samples(rollout_row, rollout_id, session_id, thread_id, segment_index, segment_kind, position, "
                "num_tokens, num_sampled, reward, advantage, meta, token_ids, loss_mask, rollout_logprobs) "
                "VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                [
                    (
                        rowid,
                        s.rollout_id,
                        s.session_id,
                        s.thread_id,
                        s.segment_index,
                        s.segment_kind,
                        i,
                        len(s.token_ids),
                        s.num_sampled,
                        s.reward,
                        s.advantage,
                        s.model_dump_json(exclude={"token_ids", "loss_mask", "rollout_logprobs"}),
                        _i32(s.token_ids),
                        bytes(s.loss_mask),
                        _f64(s.rollout_logprobs),
                    )
                    for i, s in enumerate(rollout.samples)
                ],
            )

        self._write(tx)

    def _samples_of(self, rollout_row: int) -> list[Sample]:
        rows = (
            self._conn()
            .execute(
                "SELECT meta, token_ids, loss_mask, rollout_logprobs, tokens_file, id, num_tokens FROM samples "
                "WHERE rollout_row=? ORDER BY position",
                (rollout_row,),
            )
            .fetchall()
        )
        out = []
        for meta, ids, mask, lps, tfile, sid, num_tokens in rows:
            d = json.loads(meta)
            if tfile is not None:
                tok = self._tokens("samples", tfile, sid)
                d.update(
                    token_ids=tok["token_ids"], loss_mask=tok["loss_mask"], rollout_logprobs=tok["rollout_logprobs"]
                )
            else:
                d.update(token_ids=_from("i", ids), loss_mask=list(mask or b""), rollout_logprobs=_from("d", lps))
            if len(d["token_ids"]) != num_tokens:
                raise RunDirError(
                    f"{self.run_dir / tfile if tfile else self.db_path}: samples row {sid}: "
                    f"{len(d['token_ids'])} token ids, the index says {num_tokens}"
                )
            bad = _impossible((d["token_ids"],), d["loss_mask"])
            if bad:
                raise RunDirError(
                    f"{self.run_dir / tfile if tfile else self.db_path}: samples row {sid}: damaged: {bad}"
                )
            out.append(Sample.model_validate(d))
        return out

    def iter_rollouts(self, *, include_abandoned: bool = False) -> Iterator[Rollout]:
        live = "" if include_abandoned else f" WHERE {_LIVE}"
        with self._reading("rollouts"):
            rows = self._conn().execute(f"SELECT id, body FROM rollouts{live} ORDER BY id").fetchall()
        for rowid, body in rows:
            with self._reading(f"rollouts row {rowid}"):
                r = Rollout.model_validate_json(body)
                r.samples = self._samples_of(rowid)
            yield r

    def get_rollout(self, rollout_id: str) -> Rollout | None:
        with self._reading(f"rollout {rollout_id!r}"):
            row = (
                self._conn()
                .execute("SELECT id, body FROM rollouts WHERE rollout_id=? ORDER BY id DESC LIMIT 1", (rollout_id,))
                .fetchone()
            )
            if row is None:
                return None
            r = Rollout.model_validate_json(row[1])
            r.samples = self._samples_of(row[0])
            return r

    def rollout_index(
        self,
        *,
        status: str | None = None,
        task_id: str | None = None,
        harness: str | None = None,
        step: int | None = None,
        flag: str | None = None,
        after_row: int = 0,
        limit: int = 100,
        offset: int = 0,
        newest_first: bool = True,
        include_abandoned: bool = False,
    ) -> list[dict[str, Any]]:
        """Index columns of the rollouts (the last row of each id; no samples, diff or logs), filtered:
        ``flag``: a flag kind in ``flag_details`` (``"*"``: any blocking flag); ``after_row``: only rows
        appended after that ``row`` value (live readers)."""
        where = ["r.id = (SELECT max(id) FROM rollouts WHERE rollout_id = r.rollout_id)", "r.id > ?"]
        if not include_abandoned:
            where.append("(r.session_id IS NULL OR r.session_id NOT IN (SELECT session_id FROM abandoned))")
        args: list[str | int] = [after_row]
        for col, val in (("status", status), ("task_id", task_id), ("harness", harness), ("step", step)):
            if val is not None:
                where.append(f"r.{col} = ?")
                args.append(val)
        if flag == "*":
            where.append("json_array_length(r.body, '$.flags') > 0")
        elif flag:
            where.append(
                "EXISTS (SELECT 1 FROM json_each(r.body, '$.flag_details') f WHERE json_extract(f.value, '$.kind') = ?)"
            )
            args.append(flag)
        q = (
            "SELECT r.id, r.rollout_id, r.session_id, r.task_id, r.harness, r.step, r.group_index, r.status, r.reward, "
            "r.started_at, r.duration_s, json_extract(r.body, '$.cause'), json_extract(r.body, '$.flags'), "
            "(SELECT group_concat(json_extract(f.value, '$.kind')) FROM json_each(r.body, '$.flag_details') f), "
            "json_extract(r.body, '$.grader.resolved') FROM rollouts r WHERE "
            + " AND ".join(where)
            + f" ORDER BY r.id {'DESC' if newest_first else 'ASC'} LIMIT ? OFFSET ?"
        )
        cols = (
            "row",
            "rollout_id",
            "session_id",
            "task_id",
            "harness",
            "step",
            "group_index",
            "status",
            "reward",
            "started_at",
            "duration_s",
            "cause",
            "flags",
            "flag_kinds",
            "resolved",
        )
        out = []
        with self._reading("the rollout index"):
            for r in self._conn().execute(q, (*args, limit, offset)):
                d = dict(zip(cols, r))
                d["flags"] = json.loads(d["flags"] or "[]")
                d["flag_kinds"] = sorted(set(d["flag_kinds"].split(","))) if d["flag_kinds"] else []
                d["resolved"] = bool(d["resolved"])
                out.append(d)
        return out

    def samples(self, rollout_id: str) -> list[Sample]:
        """The training samples of a rollout: the ones recorded with it, else built from its session's
        turns (``rollout_id`` is taken as the session id when no rollout record exists), with the
        rollout's reward."""
        r = self.get_rollout(rollout_id)
        if r is not None and r.samples:
            return r.samples
        session = (r.session_id or r.rollout_id) if r is not None else rollout_id
        out = self.samples_from_turns(session, rollout_id)
        if r is not None:
            for s in out:
                s.reward = r.reward
        return out

    def samples_from_turns(self, session_id: str, rollout_id: str) -> list[Sample]:
        """The samples built from a session's recorded turns (:func:`~legorl.trajectory.builder.build_samples`).
        Turns that contradict their own alignment events give :class:`RunDirError` naming the database: a
        flipped byte inside a token array still reads as valid SQLite, and this is where it shows."""
        from legorl.trajectory.builder import build_samples

        try:
            return build_samples(self.iter_turns(session_id), rollout_id)
        except AlignmentBuildError as exc:
            with self._reading(f"the token files of session {session_id!r}"):
                q = "SELECT DISTINCT tokens_file FROM turns WHERE session_id = ? AND tokens_file IS NOT NULL"
                tfiles = sorted(r[0] for r in self._conn().execute(q, (session_id,)))
            where = ", ".join([str(self.db_path), *(str(self.run_dir / f) for f in tfiles)])
            raise RunDirError(
                f"{where}: the recorded turns contradict their alignment events (a damaged file, or recorded "
                f"so by a bug): {_detail(exc)}"
            ) from None

    # -- compaction ------------------------------------------------------------------------------
    def _background_compact(self) -> None:
        try:
            self.compact()
        except Exception:
            log.exception("run store compaction failed")
        finally:
            self._compacting = False

    def compact(self) -> dict[str, int]:
        """Move token arrays of committed turns/samples from SQLite to new Parquet files."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        done = {"turns": 0, "samples": 0}
        with self._compact_lock:
            c = self._conn()
            tdir = self.run_dir / TOKENS_DIR
            tdir.mkdir(exist_ok=True)
            types = {"i": pa.int32(), "d": pa.float64(), "B": pa.uint8()}
            for table, cols in _TOKEN_COLUMNS.items():
                rows = c.execute(
                    f"SELECT id, {', '.join(col for col, *_ in cols)} FROM {table} WHERE tokens_file IS NULL "
                    "ORDER BY id"
                ).fetchall()
                if not rows:
                    continue
                n = 1 + sum(1 for _ in tdir.glob(f"{table}-*.parquet"))
                name = f"{TOKENS_DIR}/{table}-{n:05d}-{int(time.time() * 1000)}.parquet"
                arrays = {"id": pa.array([r[0] for r in rows], pa.int64())}
                for k, (_col, field, code) in enumerate(cols):
                    arrays[field] = pa.array([_from(code, r[k + 1]) for r in rows], pa.list_(types[code]))
                tmp = self.run_dir / (name + ".tmp")
                pq.write_table(pa.table(arrays), tmp, compression="zstd")
                fd = os.open(tmp, os.O_RDONLY)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
                os.replace(tmp, self.run_dir / name)
                dfd = os.open(tdir, os.O_RDONLY)
                try:
                    os.fsync(dfd)
                finally:
                    os.close(dfd)
                nulls = ", ".join(f"{col}=NULL" for col, *_ in cols)
                # _write runs the callback synchronously, so binding this iteration's values is exact
                self._write(
                    lambda c2, table=table, nulls=nulls, name=name, rows=rows: c2.executemany(
                        f"UPDATE {table} SET {nulls}, tokens_file=?, tokens_row=? WHERE id=?",
                        [(name, i, r[0]) for i, r in enumerate(rows)],
                    )
                )
                done[table] = len(rows)
            self._pending = max(0, self._pending - done["turns"])
        return done

    def _tokens(self, table: str, tfile: str, row_id: int) -> dict:
        with self._cache_lock:
            byid = self._cache.get(tfile)
            if byid is not None:
                self._cache.move_to_end(tfile)
        path = self.run_dir / tfile
        if byid is None:
            import pyarrow as pa
            import pyarrow.parquet as pq

            try:
                t = pq.read_table(path).to_pydict()
                ids = t.pop("id")
            except FileNotFoundError:
                raise RunDirError(
                    f"{path}: missing: {table} row {row_id} of {self.db_path} keeps its token arrays there"
                ) from None
            except (OSError, pa.ArrowException, KeyError, ValueError) as exc:  # ValueError: a column name not UTF-8
                detail = " ".join(str(exc).split())[:300]
                raise RunDirError(f"{path}: unreadable Parquet token file ({type(exc).__name__}: {detail})") from None
            lacking = sorted({field for _col, field, _code in _TOKEN_COLUMNS[table]} - t.keys())
            if lacking:  # a damaged column name still parses
                raise RunDirError(f"{path}: damaged Parquet token file: no column(s) {', '.join(lacking)}")
            byid = {i: {k: v[j] for k, v in t.items()} for j, i in enumerate(ids)}
            with self._cache_lock:
                self._cache[tfile] = byid
                while len(self._cache) > 4:
                    self._cache.popitem(last=False)
        if row_id not in byid:
            raise RunDirError(f"{path}: has no row id {row_id} ({table} row {row_id} of {self.db_path} points there)")
        return byid[row_id]

    # -- lifecycle --------------------------------------------------------------------------------
    def close(self, *, compact: bool = True) -> None:
        """Compact and close this thread's connection (other threads' connections close with them)."""
        if compact and not self._closed:
            self.compact()
        self._closed = True
        c = getattr(self._local, "conn", None)
        if c is not None:
            c.close()
            self._local.conn = None

    def __enter__(self) -> RunStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _import_legacy(self) -> None:
        tj, rj = self.run_dir / "turns.jsonl", self.run_dir / "rollouts.jsonl"
        if not (tj.exists() or rj.exists()):
            return
        c = self._conn()
        if c.execute("SELECT (SELECT count(*) FROM turns) + (SELECT count(*) FROM rollouts)").fetchone()[0]:
            return
        for path, fn in (
            (tj, lambda o: self.append_turn(Turn.model_validate(o))),
            (rj, lambda o: self.append_rollout(Rollout.model_validate(o))),
        ):
            if not path.exists():
                continue
            for line in path.read_text().splitlines():
                if line.strip():
                    try:
                        fn(json.loads(line))
                    except json.JSONDecodeError:
                        log.warning("%s: skipping torn line", path)
        log.info("imported legacy JSONL records from %s", self.run_dir)


def _check_file(db: Path) -> None:
    """What SQLite does not say itself: a file shorter than its 100-byte header it takes for a new, empty
    database (and the open would write one over the remains), and a file cut inside its last page
    reads as if the missing bytes were zeros. A database file is whole pages, always.

    The header is read through SQLite (a read-only connection), never with ``open()``: closing any other
    descriptor of the file drops every POSIX lock this process holds on it, so a live run's connections
    in this process (``legorl train --ui``) would look gone to other processes, and the next one to
    close would checkpoint and delete the write-ahead log the run is still appending to."""
    size = db.stat().st_size
    if size == 0:
        return  # the write-ahead log holds everything so far (the caller checked that it exists)
    if size < 100:
        raise RunDirError(f"{db}: not a readable SQLite database ({size} bytes, no SQLite header)")
    try:
        with closing(sqlite3.connect(f"{db.resolve().as_uri()}?mode=ro", uri=True)) as c:
            page = int(c.execute("PRAGMA page_size").fetchone()[0])
    except (sqlite3.Error, UnicodeDecodeError) as e:
        raise RunDirError(f"{db}: not a readable SQLite database ({size} bytes, no SQLite header: {e})") from e
    if size % page:
        raise RunDirError(f"{db}: truncated or damaged: {size} bytes is not a whole number of {page}-byte pages")


def open_run(run_dir: str | os.PathLike[str], *, verify: bool = False) -> RunStore:
    """Open an existing run directory for reading (and appending): the one checked open every reader goes
    through (export, ``legorl ui``, ``legorl status``, ``legorl train --resume``). A missing, empty,
    truncated or corrupt ``run.sqlite`` gives :class:`RunDirError` naming the file, never SQLite's own
    exception. ``verify``: also :meth:`RunStore.verify` (every page, every token file), for a run about
    to be written again."""
    p = Path(run_dir)
    db = p / DB_NAME
    if not db.exists() and not (p / "turns.jsonl").exists():
        what = "does not exist" if not p.exists() else "is not a directory" if not p.is_dir() else f"has no {DB_NAME}"
        raise RunDirError(f"{p} is not a LEGO-RL run directory: it {what}")
    if db.exists() and db.stat().st_size == 0 and not db.with_name(DB_NAME + "-wal").exists():
        raise RunDirError(f"{db}: empty file (0 bytes): the run recorded nothing, or the file was truncated")
    if db.exists():
        _check_file(db)
    store = RunStore(p, fsync=False)
    if verify:
        try:
            store.verify()
        except BaseException:
            store.close(compact=False)
            raise
    return store


__all__ = ["RunStore", "open_run", "AlignmentEvent"]
