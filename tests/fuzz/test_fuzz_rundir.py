"""Fuzzing run directories: a truncated or corrupt ``run.sqlite``, a missing or truncated
``tokens/*.parquet`` file. Reading one raises :class:`RunDirError` naming the file; ``legorl export``
leaves its output directory exactly as it was (no half-written export); the CLI says it on one line."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from legorl.cli import app
from legorl.errors import RunDirError
from legorl.store import RunStore, export_run, open_run
from legorl.trajectory.builder import build_samples
from legorl.trajectory.records import AlignmentEvent, Rollout, Turn

FUZZ = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def _turns(session: str, n: int) -> list[Turn]:
    out, toks = [], [1, 2, 3]
    for i in range(n):
        t = Turn(
            session_id=session,
            thread_id="main",
            turn_index=i,
            dialect="openai.chat",
            prompt_token_ids=list(toks),
            output_token_ids=[10 + i, 11 + i],
            output_logprobs=[-0.5, -0.25],
            sampling={},
            weight_version=0,
            finish_reason="stop",
            alignment=AlignmentEvent(turn_index=i, kind="start" if i == 0 else "extend"),
            request={"messages": [{"role": "user", "content": "x" * 50}]},
            response={"id": i},
            timings={},
        )
        out.append(t)
        toks = toks + t.output_token_ids + [5]
    return out


@pytest.fixture(scope="module")
def pristine(tmp_path_factory) -> Path:
    """A real run directory: compacted turns and samples in tokens/*.parquet, more turns still in SQLite."""
    run = tmp_path_factory.mktemp("pristine") / "run"
    st_ = RunStore(run)
    for t in _turns("a", 3):
        st_.append_turn(t)
    st_.append_rollout(
        Rollout(
            rollout_id="a",
            session_id="a",
            task_id="t",
            harness="h",
            sandbox="bwrap",
            reward=1.0,
            samples=build_samples(_turns("a", 3), "a"),
        )
    )
    st_.compact()
    for t in _turns("b", 2):  # left in SQLite BLOBs
        st_.append_turn(t)
    st_.close(compact=False)
    assert list((run / "tokens").glob("*.parquet")) and not (run / "run.sqlite-wal").exists()
    return run


def _snapshot(d: Path) -> dict[str, str]:
    return {
        str(p.relative_to(d)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(d.rglob("*")) if p.is_file()
    }


damage = st.one_of(
    st.tuples(st.just("truncate_db"), st.floats(0, 1)),
    st.tuples(st.just("scribble_db"), st.floats(0, 1), st.binary(min_size=1, max_size=64)),
    st.tuples(st.just("delete_parquet"), st.integers(0, 3)),
    st.tuples(st.just("truncate_parquet"), st.integers(0, 3), st.floats(0, 1)),
    st.tuples(st.just("scribble_parquet"), st.integers(0, 3), st.floats(0, 1), st.binary(min_size=1, max_size=32)),
    st.tuples(st.just("delete_db")),
)


def _damage(run: Path, how: tuple) -> None:
    db = run / "run.sqlite"
    parquets = sorted((run / "tokens").glob("*.parquet"))
    kind = how[0]
    if kind == "truncate_db":
        db.write_bytes(db.read_bytes()[: int(how[1] * db.stat().st_size)])
    elif kind == "scribble_db":
        data = bytearray(db.read_bytes())
        at = int(how[1] * (len(data) - 1))
        data[at : at + len(how[2])] = how[2]
        db.write_bytes(bytes(data))
    elif kind == "delete_db":
        db.unlink()
    else:
        p = parquets[how[1] % len(parquets)]
        if kind == "delete_parquet":
            p.unlink()
        elif kind == "truncate_parquet":
            p.write_bytes(p.read_bytes()[: int(how[2] * p.stat().st_size)])
        else:
            data = bytearray(p.read_bytes())
            at = int(how[2] * (len(data) - 1))
            data[at : at + len(how[3])] = how[3]
            p.write_bytes(bytes(data))


@FUZZ
@given(damage, st.sampled_from(["parquet", "jsonl"]))
def test_damaged_run_dir_export(pristine, tmp_path_factory, how, fmt):
    work = tmp_path_factory.mktemp("w")
    run, out = work / "run", work / "out"
    shutil.copytree(pristine, run)
    export_run(run, out, format=fmt)  # an earlier, good export: a failed one must leave it untouched
    before = _snapshot(out)
    _damage(run, how)
    try:
        res = export_run(run, out, format=fmt)
    except RunDirError as exc:
        msg = str(exc)
        assert str(run) in msg and "\n" not in msg, msg
        assert _snapshot(out) == before, "a failed export changed its output directory"
    else:  # the damage hit bytes nobody reads (free pages, padding): the export is whole
        assert res["num_turns"] + res["num_samples"] > 0
        assert sorted(p.name for p in out.iterdir()) == sorted(before)


@pytest.mark.parametrize(
    "how",
    [
        ("delete_parquet", 0),
        ("truncate_db", 0.5),
        ("truncate_db", 0.0),
        ("scribble_db", 0.0, b"garbage" * 8),
        ("delete_db",),
    ],
)
def test_each_kind_of_damage_is_named(pristine, tmp_path, how):
    run = tmp_path / "run"
    shutil.copytree(pristine, run)
    _damage(run, how)
    with pytest.raises(RunDirError) as info:
        store = open_run(run)
        list(store.iter_turns())
        list(store.iter_rollouts())
    msg = str(info.value)
    if how[0] == "delete_parquet":
        assert ".parquet: missing" in msg and "tokens/" in msg
    else:
        assert "run.sqlite" in msg or "run directory" in msg, msg


def test_export_cli_says_it_on_one_line(pristine, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(pristine, run)
    for p in (run / "tokens").glob("*.parquet"):
        p.unlink()
    res = CliRunner().invoke(app, ["export", str(run), "--out", str(tmp_path / "out")])
    assert res.exit_code == 2 and res.stdout == ""
    [line] = res.stderr.splitlines()
    assert line.startswith("error: ") and ".parquet: missing" in line
    assert not (tmp_path / "out").exists()  # nothing half-written, not even the directory
