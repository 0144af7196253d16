"""A harness program that crashes by itself (its runtime faults) is told apart from one that exits
with an error or is killed from outside: the cause names the signal."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from legorl.harnesses.base import Budget
from legorl.harnesses.claude_code import ClaudeCodeHarness
from legorl.harnesses.common import classify, fault_cause, fault_signal
from legorl.harnesses.opencode import BUDGET_EVENT, WATCHDOG, OpenCodeHarness
from legorl.sandbox.base import ExecResult

BUDGET = Budget(max_turns=3, max_tokens_per_turn=64, wall_clock_s=30)


def exec_result(argv: list[str]) -> ExecResult:
    """``argv`` run under a shell, as the sandboxes run every launch script (a signal's death is
    the shell's exit code ``128 + n``)."""
    p = subprocess.run(["bash", "-c", '"$@"; exit $?', "launch", *argv], capture_output=True, text=True, timeout=30)
    return ExecResult(exit_code=p.returncode, stdout=p.stdout, stderr=p.stderr, duration_s=0.0)


def crash_under_watchdog(sig: str) -> ExecResult:
    """OpenCode's launch shell around a program that raises ``sig`` on itself after one event."""
    program = f'echo \'{{"type":"step_start"}}\'; kill -{sig} $$'
    return exec_result(["bash", "-c", WATCHDOG.replace("MAX_STEPS", "4"), "opencode", "bash", "-c", program])


@pytest.mark.parametrize("sig", ["ILL", "SEGV", "ABRT", "BUS"])
def test_a_runtime_crash_seen_through_the_launch_shell_names_its_signal(sig):
    res = crash_under_watchdog(sig)
    assert fault_signal(res) == f"SIG{sig}"
    ending, cause = classify(res)
    assert ending == "crashed" and cause == f"the harness program crashed (SIG{sig}, exit code {res.exit_code})"
    result = OpenCodeHarness().collect(None, res, BUDGET)  # type: ignore[arg-type]
    assert result.ending == "crashed" and result.summary["cause"] == fault_cause(res)
    assert result.summary["events"] == 1 and result.summary["steps"] == 0


def test_claude_code_without_a_result_line_names_the_fault():
    res = exec_result(["bash", "-c", 'echo \'{"type":"system","subtype":"init"}\'; kill -SEGV $$'])
    result = ClaudeCodeHarness().collect(None, res, BUDGET)  # type: ignore[arg-type]
    assert result.ending == "crashed" and "SIGSEGV" in result.summary["cause"]


@pytest.mark.parametrize(
    ("argv", "cause"),
    [
        (["bash", "-c", "exit 3"], "exit code 3"),  # the program's own error exit
        (["bash", "-c", "kill -TERM $$"], "exit code 143"),  # stopped from outside: not a fault
        (["bash", "-c", "kill -KILL $$"], "exit code 137"),  # the OOM killer or a watchdog
    ],
)
def test_other_failures_are_not_called_runtime_crashes(argv, cause):
    res = exec_result(argv)
    assert fault_signal(res) is None and fault_cause(res) is None
    assert classify(res) == ("crashed", cause)


def test_a_previous_runs_stream_does_not_stop_the_next_run_under_the_watchdog(tmp_path):
    # the stream file was emptied by the background job's redirection, which the watchdog's first count
    # could outrun: a previous run's steps left in a reused sandbox stopped the next run at once
    # (3 runs in 40 by hand; these 60 tries failed on that code in 2 of 6 runs of the test, 2 cores loaded)
    watchdog = WATCHDOG.replace("/tmp/.legorl-opencode.out", str(tmp_path / "out")).replace("MAX_STEPS", "2")
    program = """echo '{"type":"step_start"}'; sleep 0.05; echo '{"type":"step_finish"}'"""
    outputs = []
    for _ in range(60):
        Path(tmp_path / "out").write_text('{"type":"step_finish"}\n' * 3)
        outputs.append(exec_result(["bash", "-c", watchdog, "opencode", "bash", "-c", program]).stdout)
    assert [BUDGET_EVENT in out for out in outputs] == [False] * 60
