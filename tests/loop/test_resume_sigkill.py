"""SIGKILL a real `legorl train` (embedded SmolLM2, gateway, bubblewrap, minimal harness) during
rollouts, during the trainer's step and during a checkpoint write; `legorl train --resume` after each.
At the end every step is in the run exactly once — its metrics row, its rollouts, their turns — and
what the killed processes left past their checkpoint is marked abandoned, not counted twice.

(That a resume gives the same next step as an uninterrupted run — loss and weights — is proved on
the trainer in ``tests/training/test_checkpoint.py``; here the policy samples, so rollouts differ.)
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from legorl.config import RunConfig
from legorl.observe.metrics import read_metrics
from legorl.trajectory.store import DB_NAME, open_run

pytestmark = [pytest.mark.slow, pytest.mark.sandbox]

STEPS, GROUP = 2, 2


def _start(*args: str, log: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "legorl.cli", "train", *args],
        stdout=log.open("a"),
        stderr=subprocess.STDOUT,
        start_new_session=True,  # its own process group: the test ends its sandboxes too
    )


def _kill(p: subprocess.Popen) -> None:
    os.kill(p.pid, signal.SIGKILL)  # the trainer dies as the OOM killer would end it: no handler runs
    p.wait(timeout=60)
    try:
        os.killpg(p.pid, signal.SIGKILL)  # what it started (harness, sandboxes)
    except ProcessLookupError:
        pass


def _wait(p: subprocess.Popen, what: str, cond, log: Path, timeout: float = 600) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if p.poll() is not None:
            pytest.fail(f"train ended (rc {p.returncode}) before {what}:\n{log.read_text()[-3000:]}")
        if time.monotonic() > deadline:
            _kill(p)
            pytest.fail(f"timed out waiting for {what}:\n{log.read_text()[-3000:]}")
        time.sleep(0.02)


def _count(run: Path, sql: str) -> int:
    import sqlite3

    if not (run / DB_NAME).exists():
        return 0
    with sqlite3.connect(f"file:{run / DB_NAME}?mode=ro", uri=True, timeout=30) as c:
        return int(c.execute(sql).fetchone()[0])


def _latest(run: Path) -> str:
    p = run / "checkpoints" / "latest"
    return p.read_text().strip() if p.exists() else ""


def test_sigkill_anywhere_then_resume_loses_and_duplicates_nothing(tmp_path):
    run = tmp_path / "run"
    log = tmp_path / "train.log"
    cfg = tmp_path / "cfg.json"
    cfg.write_text(
        RunConfig.load(
            None,
            run_dir=str(run),
            steps=STEPS,
            tasks_per_step=1,
            group_size=GROUP,
            task_ids=["legorl__trivial-001", "legorl__trivial-002"],
            **{"rollout.max_turns": 1, "rollout.max_tokens_per_turn": 24, "checkpoint.every": 1},
        ).model_dump_json()
    )

    # 1. killed during step 1's rollouts (after the checkpoint of step 0; turns recorded, no rollout yet)
    p = _start("--config", str(cfg), "--no-validate", log=log)
    _wait(p, "the checkpoint of step 0", lambda: _latest(run) == "step-000000", log)
    turns = _count(run, "SELECT count(*) FROM turns")
    _wait(p, "a turn of step 1", lambda: _count(run, "SELECT count(*) FROM turns") > turns, log)
    _kill(p)
    assert _count(run, "SELECT count(*) FROM rollouts WHERE step = 1") == 0, "the kill was meant to land mid-rollouts"

    # 2. killed during the trainer's step 1 (its rollouts are on disk, its metrics row is not; with this
    #    budget no group has reward variance, so the trainer recomputes logprobs without an AdamW update)
    p = _start("--resume", str(run), log=log)
    _wait(p, "step 1's rollouts", lambda: _count(run, "SELECT count(*) FROM rollouts WHERE step = 1") == GROUP, log)
    _kill(p)
    assert [r["step"] for r in read_metrics(run)] == [0], "the kill was meant to land before step 1's metrics"

    # 3. killed while writing the checkpoint of step 1
    p = _start("--resume", str(run), log=log)
    ckpts = run / "checkpoints"
    _wait(p, "a checkpoint write of step 1", lambda: any(ckpts.glob(".tmp-step-000001-*")), log)
    _kill(p)
    assert _latest(run) == "step-000000", "the kill was meant to land before the checkpoint was complete"

    # 4. resumed to the end
    p = _start("--resume", str(run), log=log)
    assert p.wait(timeout=900) == 0, log.read_text()[-3000:]

    rows = read_metrics(run)
    assert [r["step"] for r in rows] == list(range(STEPS)), "every step's metrics exactly once"
    store = open_run(run)
    live = list(store.iter_rollouts())
    assert sorted(r.step for r in live) == sorted([s for s in range(STEPS) for _ in range(GROUP)])
    assert len({r.rollout_id for r in live}) == len(live) and len({r.session_id for r in live}) == len(live)
    for r in live:
        assert r.status in ("ok", "timeout"), (r.status, r.cause)
        assert r.samples and list(store.iter_turns(r.session_id)), r.rollout_id
    assert [r["rollout/count"] for r in rows] == [GROUP] * STEPS
    # what the killed runs left past their checkpoints: kept on disk, marked, skipped by readers
    abandoned = store.abandoned()
    killed_rollouts = [r for r in store.iter_rollouts(include_abandoned=True) if r.session_id in abandoned]
    assert len(killed_rollouts) >= GROUP and all(r.step >= 1 for r in killed_rollouts)  # kills 2 and 3
    orphan_sessions = set(abandoned) - {r.session_id for r in killed_rollouts}
    assert orphan_sessions, "kill 1 left turns without a rollout"
    assert {t.session_id for t in store.iter_turns()} == {r.session_id for r in live}
    assert all(v.startswith("resumed from the checkpoint of step") for v in abandoned.values())
    store.close()
    assert _latest(run) == f"step-{STEPS - 1:06d}" and not list(ckpts.glob(".tmp-*"))
    assert sorted(m.name for m in run.glob("manifest-resume-*.json")) == [
        "manifest-resume-000001-2.json",
        "manifest-resume-000001-3.json",
        "manifest-resume-000001.json",
    ]
    assert json.loads((run / "config.json").read_text())["steps"] == STEPS
