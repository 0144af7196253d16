"""Pause, resume and stop a training run from outside it: ``RUN_DIR/control.json``.

Written by a person (``legorl control RUN_DIR pause|resume|stop``) or by a monitor whose action is
pause or stop (:mod:`legorl.observe.monitors`); read by the loop between steps. A file rather than a
socket, so that it works for a run on any machine that shares the run directory, survives the
process, and shows in ``legorl status`` and the UI why a run waits or ended.
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ValidationError

CONTROL_NAME = "control.json"
RunState = Literal["running", "paused", "stop"]


class RunControl(BaseModel):
    state: RunState = "running"
    reason: str = ""
    by: str = ""  # "user", "monitor:<name>", "train"
    at: float = 0.0


def read_control(run_dir: str | Path) -> RunControl:
    path = Path(run_dir) / CONTROL_NAME
    try:
        return RunControl.model_validate_json(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return RunControl()
    except (OSError, ValidationError, ValueError):
        return RunControl()  # a torn or foreign file never stops a run by accident


def write_control(run_dir: str | Path, state: RunState, reason: str = "", by: str = "user") -> RunControl:
    """Set the run's requested state (atomically: the loop never reads half a file)."""
    ctl = RunControl(state=state, reason=reason, by=by, at=time.time())
    path = Path(run_dir) / CONTROL_NAME
    tmp = path.with_name(f".{CONTROL_NAME}.tmp-{os.getpid()}")
    tmp.write_text(ctl.model_dump_json(), encoding="utf-8")
    os.replace(tmp, path)
    return ctl


async def wait_while_paused(run_dir: str | Path, poll_s: float = 1.0, on_pause=None) -> RunControl:
    """Return the run's control once it is not ``paused`` (at once when it never was); ``on_pause``
    is called once with the control when waiting starts."""
    ctl = read_control(run_dir)
    if ctl.state == "paused" and on_pause is not None:
        on_pause(ctl)
    while ctl.state == "paused":
        await asyncio.sleep(poll_s)
        ctl = read_control(run_dir)
    return ctl
