"""Run control between steps: the file, the wait, the `legorl control` command and what `legorl status`
says of a paused or stopped run."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
import time

import pytest

from legorl.config import RunConfig
from legorl.observe.control import CONTROL_NAME, read_control, wait_while_paused, write_control
from legorl.observe.status import format_summary, run_summary
from legorl.trajectory.store import RunStore


def test_no_file_or_a_torn_one_means_running(tmp_path):
    assert read_control(tmp_path).state == "running"
    (tmp_path / CONTROL_NAME).write_text('{"state": "pau')
    assert read_control(tmp_path).state == "running"
    write_control(tmp_path, "stop", "enough", by="user")
    ctl = read_control(tmp_path)
    assert (ctl.state, ctl.reason, ctl.by) == ("stop", "enough", "user") and ctl.at > 0
    assert [p.name for p in tmp_path.iterdir()] == [CONTROL_NAME]  # no temporary left behind


def test_wait_returns_at_once_unless_paused_then_when_resumed(tmp_path):
    assert asyncio.run(wait_while_paused(tmp_path, poll_s=0.01)).state == "running"
    write_control(tmp_path, "paused", "look at it", by="monitor:env_failures")
    seen = []
    timer = threading.Timer(0.3, write_control, args=(tmp_path, "stop"))
    timer.start()
    t0 = time.monotonic()
    ctl = asyncio.run(wait_while_paused(tmp_path, poll_s=0.02, on_pause=seen.append))
    assert ctl.state == "stop" and time.monotonic() - t0 >= 0.25
    assert [c.reason for c in seen] == ["look at it"]


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "legorl.cli", *args], capture_output=True, text=True, timeout=120)


def test_control_command_and_status_of_a_paused_then_stopped_run(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text(RunConfig.load(None, run_dir=str(run), steps=5).model_dump_json())
    RunStore(run).close()  # an empty run store: a run that has not finished a step

    out = _cli("control", str(run), "pause", "--reason", "reading its rollouts")
    assert out.returncode == 0 and out.stdout.strip() == f"{run}: running -> paused", out.stderr
    s = run_summary(run)
    assert s.state == "paused" and s.state_reason == "reading its rollouts (by user)"
    assert "state      paused" in format_summary(s) and "reading its rollouts" in format_summary(s)

    assert _cli("control", str(run), "resume").stdout.strip() == f"{run}: paused -> running"
    assert read_control(run).state == "running"
    assert _cli("control", str(run), "stop").returncode == 0
    assert run_summary(run).state == "stopped"


@pytest.mark.parametrize(
    ("args", "says"), [(("pause!",), "must be one of pause, resume, stop"), ((), "Missing argument")]
)
def test_control_command_refuses_bad_input(tmp_path, args, says):
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text("{}")
    out = _cli("control", str(run), *args)
    assert out.returncode == 2 and says in " ".join((out.stdout + out.stderr).replace("│", " ").split())
    assert not (run / CONTROL_NAME).exists()
    out = _cli("control", str(tmp_path / "nothing"), "pause")
    assert out.returncode == 2 and "not a LEGO-RL run directory" in out.stderr
