"""Shared launch/collect plumbing for the native harness adapters.

Every ``Sandbox.exec`` runs in a fresh container with a private ``/tmp``, so a harness's issue file
and transcript live only during its one exec: :func:`launch_script` writes the issue from stdin to
``/tmp/ISSUE.md``, runs the program, then prints the transcript file after a marker line so that
:func:`split_transcript` can take it back out of stdout.
"""

from __future__ import annotations

import json
import shlex
from typing import Mapping

from legorl.harnesses.base import Budget, HarnessResult
from legorl.sandbox.base import WORKSPACE, ExecResult, Sandbox

ISSUE_PATH = "/tmp/ISSUE.md"  # outside the repo so it never shows up in the diff
TRANSCRIPT_MARKER = "<<<LEGORL-TRANSCRIPT-7f3a>>>"
ISSUE_PLACEHOLDER = "{ISSUE}"  # an argv element replaced by the issue text itself
ISSUE_ARG = f'"$(cat {ISSUE_PATH})"' 
MAX_OUTPUT = 4_000_000

# Variables every harness gets: no proxies, no telemetry, no update checks, no pagers or editors.
QUIET_ENV = {
    "NO_PROXY": "*", "no_proxy": "*", "DO_NOT_TRACK": "1", "PAGER": "cat", "GIT_PAGER": "cat",
    "TERM": "dumb", "NO_COLOR": "1", "PYTHONUNBUFFERED": "1", "PIP_NO_INDEX": "1",
    "npm_config_offline": "true", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
}


def launch_script(argv: list[str], transcript_path: str | None = None, pre: str = "") -> str:
    """A bash script: issue from stdin → ISSUE_PATH, ``pre`` (setup lines), run ``argv``, dump transcript."""
    cmd = " ".join(ISSUE_ARG if a == ISSUE_PLACEHOLDER else shlex.quote(a) for a in argv)
    lines = [f"cat > {ISSUE_PATH}", pre, cmd, "rc=$?"]
    if transcript_path:
        q = shlex.quote(transcript_path)
        lines.append(f"echo '{TRANSCRIPT_MARKER}'; [ -f {q} ] && cat {q}")
    lines.append("exit $rc")
    return "\n".join(line for line in lines if line)


def run_program(sandbox: Sandbox, argv: list[str], *, issue: str, budget: Budget, env: Mapping[str, str],
                transcript_path: str | None = None, pre: str = "", cwd: str = WORKSPACE) -> ExecResult:
    return sandbox.exec(["bash", "-c", launch_script(argv, transcript_path, pre)], timeout=budget.wall_clock_s,
                        env={**QUIET_ENV, **env}, cwd=cwd, stdin=issue, max_output_bytes=MAX_OUTPUT)


def split_transcript(stdout: str) -> tuple[str, str]:
    """(program stdout, transcript file content or '')."""
    head, sep, tail = stdout.partition(TRANSCRIPT_MARKER + "\n")
    if not sep:
        head, sep, tail = stdout.partition(TRANSCRIPT_MARKER)
    return head, tail if sep else ""


def classify(res: ExecResult, finished: bool | None = None) -> tuple[str, str]:
    """(ending, cause). ``finished``: the adapter's own reading of the transcript (None: exit code 0)."""
    if res.timed_out:
        return "timeout", res.cause or "wall-clock budget"
    if res.killed_by_signal:
        return "crashed", res.cause or f"killed by signal {res.killed_by_signal}"
    if res.exit_code != 0 and finished is not True:
        return "crashed", res.cause or f"exit code {res.exit_code}"
    if finished is None or finished:
        return "finished", ""
    return "budget", "step budget ended before the agent finished"


def result(res: ExecResult, transcript: str, finished: bool | None = None, summary: dict | None = None) -> HarnessResult:
    ending, cause = classify(res, finished)
    summary = dict(summary or {})
    if cause:
        summary.setdefault("cause", cause)
    return HarnessResult(ending=ending, exit_code=res.exit_code, transcript=transcript,
                         log_tail=(res.stderr[-3000:] or res.stdout[-3000:]), summary=summary)


def last_json_line(text: str) -> dict:
    for line in reversed(text.strip().splitlines()):
        try:
            obj = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(obj, dict):
            return obj
    return {}
