"""RunStore: SQLite index + Parquet token arrays; durability, concurrency, export."""

from __future__ import annotations

import functools
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time

import pyarrow.parquet as pq
import pytest

from legorl.errors import RunDirError
from legorl.store import RunStore, export_run, open_run
from legorl.trajectory.builder import build_samples
from legorl.trajectory.records import AlignmentEvent, Rollout, Turn


def turn(i, session="s", thread="main", kind=None, prompt=None, out=None, seg=0):
    prompt = prompt if prompt is not None else [1, 2, 3]
    out = out if out is not None else [10 + i, 11 + i]
    return Turn(
        session_id=session,
        thread_id=thread,
        turn_index=i,
        dialect="openai.chat",
        prompt_token_ids=prompt,
        output_token_ids=out,
        output_logprobs=[-0.25 * (k + 1) for k in range(len(out))],
        sampling={"temperature": 1.0},
        weight_version=2,
        finish_reason="stop",
        alignment=AlignmentEvent(turn_index=i, kind=kind or ("start" if i == 0 else "extend"), segment_index=seg),
        request={"messages": [{"role": "user", "content": "héllo"}]},
        response={"id": f"x{i}"},
        timings={"total_s": 0.01},
    )


def chain(session="s", n=3):
    ts, toks = [], [1, 2, 3]
    for i in range(n):
        t = turn(i, session, prompt=list(toks))
        ts.append(t)
        toks = toks + t.output_token_ids + [5]
    return ts


def test_round_trip_and_compaction(tmp_path):
    st = RunStore(tmp_path)
    ts = chain()
    for t in ts:
        st.append_turn(t)
    assert list(st.iter_turns("s")) == ts
    assert st.get_turn("s", 1) == ts[1] and st.get_turn("s", 9) is None
    r = Rollout(
        rollout_id="s",
        session_id="s",
        task_id="t",
        harness="h",
        sandbox="bwrap",
        reward=1.0,
        samples=build_samples(ts, "s"),
    )
    st.append_rollout(r)
    assert st.compact() == {"turns": 3, "samples": 1}
    assert list((tmp_path / "tokens").glob("*.parquet"))
    # arrays now come from Parquet; records are unchanged
    assert list(st.iter_turns()) == ts
    [back] = list(st.iter_rollouts())
    assert back == r
    assert st.samples("s") == r.samples
    assert st.turn_index("s")[2]["kind"] == "extend"
    st.close()


def test_samples_built_from_turns_when_rollout_has_none(tmp_path):
    st = RunStore(tmp_path)
    for t in chain("sess"):
        st.append_turn(t)
    st.append_rollout(Rollout(rollout_id="r", session_id="sess", task_id="t", harness="h", sandbox="x", reward=0.5))
    [s] = st.samples("r")
    assert s.reward == 0.5 and s.num_sampled == 6 and s.session_id == "sess"


def test_durable_across_reopen_and_sigkill(tmp_path):
    code = (
        f"import sys, time; sys.path.insert(0, {os.path.dirname(__file__)!r})\n"
        "from test_store import turn\nfrom legorl.trajectory.store import RunStore\n"
        f"st = RunStore({str(tmp_path)!r})\n"
        "for i in range(5): st.append_turn(turn(i))\n"
        "print('written', flush=True); time.sleep(60)\n"
    )
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "written"
        os.kill(p.pid, signal.SIGKILL)  # no close(), no compaction: only the committed WAL
    finally:
        p.wait(10)
    st = open_run(tmp_path)
    assert [t.turn_index for t in st.iter_turns("s")] == [0, 1, 2, 3, 4]


def test_concurrent_writers_from_threads(tmp_path):
    st = RunStore(tmp_path, compact_every=50)  # background compaction runs while writers write
    errors = []

    def writer(k):
        try:
            for i in range(40):
                st.append_turn(turn(i, session=f"s{k}", out=[k, i]))
        except Exception as exc:
            errors.append(exc)

    ths = [threading.Thread(target=writer, args=(k,)) for k in range(8)]
    for t in ths:
        t.start()
    for t in ths:
        t.join()
    assert not errors
    for k in range(8):
        got = list(st.iter_turns(f"s{k}"))
        assert [t.turn_index for t in got] == list(range(40))
        assert all(t.output_token_ids == [k, t.turn_index] for t in got)
    st.close()
    assert len(list(open_run(tmp_path).iter_turns())) == 320


def test_append_turn_p50_under_2ms(tmp_path):
    st = RunStore(tmp_path)
    big = turn(0, prompt=list(range(4000)), out=list(range(200)))
    ds = []
    for i in range(200):
        t = big.model_copy(update={"turn_index": i})
        t0 = time.perf_counter()
        st.append_turn(t)
        ds.append(time.perf_counter() - t0)
    ds.sort()
    assert ds[len(ds) // 2] < 2e-3, ds[len(ds) // 2]


@pytest.mark.parametrize("fmt", ["parquet", "jsonl"])
def test_export(tmp_path, fmt):
    st = RunStore(tmp_path / "run")
    for t in chain("a"):
        st.append_turn(t)
    for t in chain("b", 2):
        st.append_turn(t)
    st.append_rollout(
        Rollout(
            rollout_id="a",
            session_id="a",
            task_id="t",
            harness="h",
            sandbox="x",
            reward=1.0,
            samples=build_samples(chain("a"), "a"),
        )
    )
    st.close()
    res = export_run(tmp_path / "run", tmp_path / "out", format=fmt)
    assert (res["num_samples"], res["num_turns"]) == (2, 5)
    if fmt == "parquet":
        samples = pq.read_table(res["samples"]).to_pylist()
        turns = pq.read_table(res["turns"]).to_pylist()
    else:
        samples = [json.loads(l) for l in open(res["samples"])]
        turns = [json.loads(l) for l in open(res["turns"])]
    by = {s["rollout_id"]: s for s in samples}
    assert by["a"]["reward"] == 1.0 and by["b"]["reward"] is None
    assert sum(by["a"]["loss_mask"]) == 6 and len(by["a"]["token_ids"]) == len(by["a"]["rollout_logprobs"])
    assert (by["a"]["thread_id"], by["a"]["segment_index"]) == ("main", 0)
    assert [t["turn_index"] for t in turns if t["session_id"] == "b"] == [0, 1]


def test_legacy_jsonl_is_imported(tmp_path):
    ts = chain()
    (tmp_path / "turns.jsonl").write_text("".join(t.model_dump_json() + "\n" for t in ts) + '{"torn')
    assert list(open_run(tmp_path).iter_turns()) == ts


def test_resume_abandons_what_the_killed_run_left_past_its_checkpoint(tmp_path):
    st = RunStore(tmp_path / "run")
    for sid, step in (("s0a", 0), ("s0b", 0), ("s1a", 1)):  # step 1's rollout was appended, no checkpoint yet
        for t in chain(sid, 2):
            st.append_turn(t)
        st.append_rollout(
            Rollout(rollout_id=f"r-{sid}", session_id=sid, task_id="t", harness="h", sandbox="x", step=step)
        )
    for t in chain("s1b", 1):  # killed mid-rollout: turns, no rollout
        st.append_turn(t)

    assert st.abandon_unfinished(0, "resumed from the checkpoint of step 0") == ["s1a", "s1b"]
    assert st.abandon_unfinished(0, "again") == []  # idempotent: the first reason stays
    assert st.abandoned() == {s: "resumed from the checkpoint of step 0" for s in ("s1a", "s1b")}
    assert [r.session_id for r in st.iter_rollouts()] == ["s0a", "s0b"]
    assert [r["session_id"] for r in st.rollout_index(newest_first=False)] == ["s0a", "s0b"]
    assert {t.session_id for t in st.iter_turns()} == {"s0a", "s0b"} and st.sessions() == ["s0a", "s0b"]
    # still on disk, for whoever asks
    assert [r.session_id for r in st.iter_rollouts(include_abandoned=True)] == ["s0a", "s0b", "s1a"]
    assert len(st.rollout_index(include_abandoned=True)) == 3
    assert st.sessions(include_abandoned=True) == ["s0a", "s0b", "s1a", "s1b"]
    assert len(list(st.iter_turns("s1b"))) == 1  # one session asked for by id is returned as is

    # the resumed run redoes step 1 under new sessions: the only copy of step 1
    st.append_rollout(Rollout(rollout_id="r-s1c", session_id="s1c", task_id="t", harness="h", sandbox="x", step=1))
    assert [(r.session_id, r.step) for r in st.iter_rollouts()] == [("s0a", 0), ("s0b", 0), ("s1c", 1)]
    st.close()
    res = export_run(tmp_path / "run", tmp_path / "out", format="jsonl")
    assert res["num_turns"] == 4  # s0a and s0b: two turns each


# -- a damaged store: every kind of damage is RunDirError naming the file ------------------------------


def _chain_from(session: str, first: int, n: int) -> list[Turn]:
    """A chain of turns whose token ids start at ``first`` (distinct per session, so a test finds one
    session's arrays in the file by their bytes)."""
    ts, toks = [], [first, first + 1, first + 2]
    for i in range(n):
        t = turn(i, session, prompt=list(toks), out=[first + 10 + i, first + 20 + i])
        ts.append(t)
        toks = toks + t.output_token_ids + [first + 5]
    return ts


@pytest.fixture(scope="module")
def pristine_run(tmp_path_factory):
    """Session ``a``: turns and a rollout compacted into tokens/*.parquet; session ``b``: two turns whose
    arrays are still BLOBs in run.sqlite (no rollout: readers build its samples from the turns)."""
    run = tmp_path_factory.mktemp("pristine") / "run"
    st = RunStore(run)
    for t in _chain_from("a", 100, 3):
        st.append_turn(t)
    st.append_rollout(
        Rollout(rollout_id="a", session_id="a", task_id="t", harness="h", sandbox="x", reward=1.0,
                samples=build_samples(_chain_from("a", 100, 3), "a"))
    )  # fmt: skip
    st.compact()
    for t in _chain_from("b", 7000, 2):
        st.append_turn(t)
    st.close(compact=False)
    return run


def _read_everything(run, out) -> None:
    """What export, the UI, status and resume read between them: every row, every array, every sample."""
    store = open_run(run, verify=True)
    try:
        list(store.iter_turns())
        store.turn_index()
        store.rollout_index()
        for r in store.iter_rollouts():
            store.samples(r.rollout_id)
        for sid in store.sessions():
            store.samples(sid)
        store.abandon_unfinished(0, "resumed")
    finally:
        store.close(compact=False)
    export_run(run, out)


def _damaged(pristine_run, tmp_path, edit) -> tuple:
    run = tmp_path / "run"
    shutil.copytree(pristine_run, run)
    db = run / "run.sqlite"
    data = bytearray(db.read_bytes())
    edit(data)
    db.write_bytes(bytes(data))
    return run, db


def _named(run, out, file) -> str:
    with pytest.raises(RunDirError) as info:
        _read_everything(run, out)
    msg = str(info.value)
    assert str(file) in msg and "\n" not in msg, msg
    return msg


def _flip(at, byte):
    def edit(data: bytearray) -> None:
        data[at if isinstance(at, int) else int(at * (len(data) - 1))] = byte

    return edit


@pytest.mark.parametrize("byte", [0x80, 0xFF, 0x00])
@pytest.mark.parametrize("at", [0, 5, 17, 0.07, 0.25, 0.5, 0.75, 1.0])
def test_a_flipped_byte_reads_whole_or_names_the_database(pristine_run, tmp_path, at, byte):
    """Bytes at fixed offsets (the header's magic and page size, the CI case's 7 %, page interiors, the
    last byte): the store reads whole (a byte nobody reads) or says which file, never another error."""
    run, db = _damaged(pristine_run, tmp_path, _flip(at, byte))
    try:
        _read_everything(run, tmp_path / "out")
    except RunDirError as exc:
        assert str(db) in str(exc) and "\n" not in str(exc), str(exc)


def test_a_flipped_byte_in_the_header_or_the_schema_is_named(pristine_run, tmp_path):
    run, db = _damaged(pristine_run, tmp_path, _flip(0, 0x80))  # the magic string
    assert "not a readable SQLite database" in _named(run, tmp_path / "out", db)

    def schema_byte(data: bytearray) -> None:  # the CI case, wherever the page layout puts the text
        data[data.index(b"CREATE TABLE rollouts") + 9] = 0x80

    run, db = _damaged(pristine_run, tmp_path / "schema", schema_byte)
    _named(run, tmp_path / "out", db)


def test_a_flipped_byte_in_a_token_array_is_named(pristine_run, tmp_path):
    """A token BLOB has no checksum: its bytes still parse. A negative id, or a prompt that no longer
    extends the turn before it, is what shows the damage."""
    from array import array

    prompt = array("i", _chain_from("b", 7000, 2)[1].prompt_token_ids).tobytes()  # little-endian machine

    def sign_bit(data: bytearray) -> None:
        data[data.index(prompt) + 3] = 0x80  # the first id's top byte: negative

    run, db = _damaged(pristine_run, tmp_path, sign_bit)
    assert "damaged: a negative token id" in _named(run, tmp_path / "out", db)

    def other_id(data: bytearray) -> None:
        data[data.index(prompt)] ^= 0x01  # 7000 -> 7001: still an id, no longer the previous turn's

    run, db = _damaged(pristine_run, tmp_path / "id", other_id)
    assert "contradict their alignment events" in _named(run, tmp_path / "out", db)


TRUNCATIONS = {  # bytes kept, as a function of the file's size -> what the error says
    "empty": (lambda n: 0, "empty file (0 bytes)"),
    "1 byte": (lambda n: 1, "no SQLite header"),  # SQLite takes it for a new database and would write one
    "99 bytes": (lambda n: 99, "no SQLite header"),
    "100 bytes": (lambda n: 100, "not a whole number of 4096-byte pages"),
    "first page": (lambda n: 4096, "not a readable SQLite database"),  # whole pages, the schema's gone
    "half": (lambda n: n // 2, ""),
    "all but 1 byte": (lambda n: n - 1, "not a whole number of 4096-byte pages"),  # read as a zero
}


@pytest.mark.parametrize("how", sorted(TRUNCATIONS))
def test_a_truncated_database_is_named(pristine_run, tmp_path, how):
    keep, says = TRUNCATIONS[how]

    def truncate(data: bytearray) -> None:
        del data[keep(len(data)) :]

    run, db = _damaged(pristine_run, tmp_path, truncate)
    size = db.stat().st_size
    assert says in _named(run, tmp_path / "out", db)
    assert db.stat().st_size == size  # the open wrote nothing over what is left


def test_a_missing_or_garbage_database_is_named(pristine_run, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(pristine_run, run)
    (run / "run.sqlite").unlink()
    assert "is not a LEGO-RL run directory: it has no run.sqlite" in _named(run, tmp_path / "out", run)
    (run / "run.sqlite").write_bytes(os.urandom(8192))
    assert "not a readable SQLite database" in _named(run, tmp_path / "out", run / "run.sqlite")


def test_a_damaged_column_name_in_a_token_file_is_named(pristine_run, tmp_path):
    """A flipped byte in a Parquet footer's column name: not UTF-8 (UnicodeDecodeError from pyarrow),
    or another name (the column is missing)."""
    for byte in (0xFF, ord("x")):
        run = tmp_path / f"run-{byte}"
        shutil.copytree(pristine_run, run)
        [samples] = (run / "tokens").glob("samples-*.parquet")
        data = samples.read_bytes()
        samples.write_bytes(data.replace(b"token_ids", b"to" + bytes([byte]) + b"en_ids"))
        _named(run, tmp_path / "out", samples)
        store = open_run(run)  # without verify: the reader that meets the file names it
        with pytest.raises(RunDirError, match=str(samples)):
            store.samples("a")


def test_readers_in_the_writers_process_leave_its_write_ahead_log_alone(tmp_path):
    """`legorl train --ui` opens the run's store to read it in the process that writes it. The check of
    the file that every reader does must not drop the writer's POSIX locks (a plain open() and close()
    of the file would): another process that opened and closed the store then took itself for the last
    one, checkpointed and deleted the write-ahead log, and every rollout written after was lost."""
    run = tmp_path / "run"
    writer = RunStore(run)
    rollout = functools.partial(Rollout, task_id="t", harness="h", sandbox="x")
    writer.append_rollout(rollout(rollout_id="r0", session_id="s0"))
    open_run(run).close(compact=False)  # a reader in this process (the UI)
    count = [
        sys.executable,
        "-c",
        f"import sqlite3; print(sqlite3.connect({str(run / 'run.sqlite')!r}).execute('SELECT count(*) FROM rollouts').fetchone()[0])",
    ]
    assert subprocess.run(count, capture_output=True, text=True, check=True).stdout.strip() == "1"  # `legorl status`
    for i in range(1, 4):
        writer.append_rollout(rollout(rollout_id=f"r{i}", session_id=f"s{i}"))
    assert subprocess.run(count, capture_output=True, text=True, check=True).stdout.strip() == "4"
    writer.close()
    assert len(open_run(run).rollout_index(limit=-1)) == 4
