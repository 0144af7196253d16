"""Export a run directory's training data for other trainers: samples and turns as Parquet or JSONL.

``export_run(run_dir, out, format="parquet")`` writes into the directory ``out``:

* ``samples.parquet`` / ``samples.jsonl`` — one row per :class:`~legorl.trajectory.records.Sample`:
  ``rollout_id, session_id, thread_id, segment_index, segment_kind, token_ids (list<int32>),
  loss_mask (list<uint8>), rollout_logprobs (list<float64>), reward, advantage, num_sampled,
  turn_indices, alignment_kinds, parent_thread_id, parent_segment_index, forked_from_turn, task_id,
  status``. Rollouts recorded with :meth:`RunStore.append_rollout` give their samples (with the
  rollout's reward when the sample has none); sessions without a rollout record (a bare
  ``legorl gateway`` run) are built from their turns with ``rollout_id = session_id`` and no reward.
* ``turns.parquet`` / ``turns.jsonl`` — one row per recorded Turn: ``session_id, thread_id,
  turn_index, segment_index, kind, segment_kind, dialect, weight_version, prompt_token_ids,
  output_token_ids, output_logprobs, finish_reason, failed, error, reused_prefix_len, started_at``.

CLI: ``legorl export RUN_DIR --format parquet|jsonl --out PATH``. A run directory that cannot be read
raises :class:`~legorl.errors.RunDirError` naming the file; ``out`` is then left untouched.
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

from legorl.errors import ConfigError
from legorl.trajectory.store import RunStore, open_run


def iter_sample_rows(store: RunStore) -> Iterator[dict[str, Any]]:
    seen_sessions: set[str] = set()
    latest: dict[str, Any] = {}
    for r in store.iter_rollouts():  # last record of a rollout id wins
        latest[r.rollout_id] = r
    for r in latest.values():
        seen_sessions.add(r.session_id or r.rollout_id)
        samples = r.samples or store.samples_from_turns(r.session_id or r.rollout_id, r.rollout_id)
        for s in samples:
            yield _sample_row(s, r.reward if s.reward is None else s.reward, r.task_id, r.status, r.session_id)
    for sid in store.sessions():
        if sid in seen_sessions:
            continue
        for s in store.samples_from_turns(sid, sid):
            yield _sample_row(s, None, None, None, sid)


def _sample_row(s, reward, task_id, status, session_id) -> dict[str, Any]:
    return {
        "rollout_id": s.rollout_id,
        "session_id": s.session_id or session_id,
        "thread_id": s.thread_id,
        "segment_index": s.segment_index,
        "segment_kind": s.segment_kind,
        "token_ids": s.token_ids,
        "loss_mask": s.loss_mask,
        "rollout_logprobs": s.rollout_logprobs,
        "reward": reward,
        "advantage": s.advantage,
        "num_sampled": s.num_sampled,
        "turn_indices": s.turn_indices,
        "alignment_kinds": [e.kind for e in s.alignment_events],
        "parent_thread_id": s.parent_thread_id,
        "parent_segment_index": s.parent_segment_index,
        "forked_from_turn": s.forked_from_turn,
        "task_id": task_id,
        "status": status,
    }


def iter_turn_rows(store: RunStore) -> Iterator[dict[str, Any]]:
    for t in store.iter_turns():
        yield {
            "session_id": t.session_id,
            "thread_id": t.thread_id,
            "turn_index": t.turn_index,
            "segment_index": t.alignment.segment_index,
            "kind": t.alignment.kind,
            "segment_kind": t.alignment.segment_kind,
            "dialect": t.dialect,
            "weight_version": t.weight_version,
            "prompt_token_ids": t.prompt_token_ids,
            "output_token_ids": t.output_token_ids,
            "output_logprobs": t.output_logprobs,
            "finish_reason": t.finish_reason,
            "failed": t.failed,
            "error": t.error,
            "reused_prefix_len": t.reused_prefix_len,
            "started_at": t.started_at,
        }


def _schemas():
    import pyarrow as pa

    i32, f64 = pa.list_(pa.int32()), pa.list_(pa.float64())
    samples = pa.schema(
        [
            ("rollout_id", pa.string()),
            ("session_id", pa.string()),
            ("thread_id", pa.string()),
            ("segment_index", pa.int32()),
            ("segment_kind", pa.string()),
            ("token_ids", i32),
            ("loss_mask", pa.list_(pa.uint8())),
            ("rollout_logprobs", f64),
            ("reward", pa.float64()),
            ("advantage", pa.float64()),
            ("num_sampled", pa.int32()),
            ("turn_indices", i32),
            ("alignment_kinds", pa.list_(pa.string())),
            ("parent_thread_id", pa.string()),
            ("parent_segment_index", pa.int32()),
            ("forked_from_turn", pa.int32()),
            ("task_id", pa.string()),
            ("status", pa.string()),
        ]
    )
    turns = pa.schema(
        [
            ("session_id", pa.string()),
            ("thread_id", pa.string()),
            ("turn_index", pa.int32()),
            ("segment_index", pa.int32()),
            ("kind", pa.string()),
            ("segment_kind", pa.string()),
            ("dialect", pa.string()),
            ("weight_version", pa.int64()),
            ("prompt_token_ids", i32),
            ("output_token_ids", i32),
            ("output_logprobs", f64),
            ("finish_reason", pa.string()),
            ("failed", pa.bool_()),
            ("error", pa.string()),
            ("reused_prefix_len", pa.int32()),
            ("started_at", pa.float64()),
        ]
    )
    return samples, turns


def _write_parquet(path: Path, rows: Iterator[dict], schema, batch: int = 512) -> int:
    import pyarrow as pa
    import pyarrow.parquet as pq

    n = 0
    with pq.ParquetWriter(path, schema, compression="zstd") as w:
        buf: list[dict] = []
        for row in rows:
            buf.append(row)
            if len(buf) >= batch:
                w.write_table(pa.Table.from_pylist(buf, schema=schema))
                n += len(buf)
                buf = []
        if buf:
            w.write_table(pa.Table.from_pylist(buf, schema=schema))
            n += len(buf)
    return n


def _write_jsonl(path: Path, rows: Iterator[dict]) -> int:
    n = 0
    with open(path, "w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
            n += 1
    return n


def export_run(
    run_dir: str | os.PathLike[str], out: str | os.PathLike[str], format: Literal["parquet", "jsonl"] = "parquet"
) -> dict[str, Any]:
    """Write ``samples.<format>`` and ``turns.<format>`` into directory ``out``; returns paths and row counts.

    All or nothing: both files are written under temporary names and renamed into place only once both
    are complete, so a failure (a truncated ``run.sqlite``, a missing ``tokens/*.parquet`` file: a
    :class:`RunDirError` naming it) leaves ``out`` as it was — no half-written export, no stale mix of
    an old ``samples`` with a new ``turns``."""
    if format not in ("parquet", "jsonl"):
        raise ConfigError(f"export format must be 'parquet' or 'jsonl', got {format!r}")
    store = open_run(run_dir)
    outdir = Path(out)
    if outdir.exists() and not outdir.is_dir():
        raise ConfigError(f"export output {outdir} exists and is not a directory")
    created = not outdir.exists()
    sp, tp = outdir / f"samples.{format}", outdir / f"turns.{format}"
    tag = f".tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    sp_tmp, tp_tmp = sp.with_name(sp.name + tag), tp.with_name(tp.name + tag)
    try:
        outdir.mkdir(parents=True, exist_ok=True)
        if format == "parquet":
            s_schema, t_schema = _schemas()
            ns = _write_parquet(sp_tmp, iter_sample_rows(store), s_schema)
            nt = _write_parquet(tp_tmp, iter_turn_rows(store), t_schema)
        else:
            ns = _write_jsonl(sp_tmp, iter_sample_rows(store))
            nt = _write_jsonl(tp_tmp, iter_turn_rows(store))
        os.replace(sp_tmp, sp)
        os.replace(tp_tmp, tp)
    except BaseException:
        for tmp in (sp_tmp, tp_tmp):
            tmp.unlink(missing_ok=True)
        if created:
            shutil.rmtree(outdir, ignore_errors=True)
        raise
    finally:
        store.close(compact=False)
    return {"samples": str(sp), "turns": str(tp), "num_samples": ns, "num_turns": nt, "format": format}
