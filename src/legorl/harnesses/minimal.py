"""Adapter for the first-party minimal harness (``legorl.harnesses.minimal_agent``)."""

from __future__ import annotations

import json
import sys

from legorl.harnesses.base import Budget, HarnessInstall, HarnessResult
from legorl.sandbox.base import ExecResult, Sandbox
from legorl.tasks.model import Task

ISSUE_PATH = "/tmp/ISSUE.md"  # outside the repo so it never shows up in the diff


class MinimalHarness:
    name = "minimal"
    dialect = "openai.chat"
    install = HarnessInstall()  # runs with the project's own interpreter (openai is a dependency)

    def launch(self, task: Task, sandbox: Sandbox, base_url: str, session_token: str, budget: Budget) -> ExecResult:
        cmd = [
            sys.executable, "-m", "legorl.harnesses.minimal_agent",
            "--base-url", base_url, "--api-key", session_token, "--issue-file", ISSUE_PATH,
            "--root", "/workspace", "--max-turns", str(budget.max_turns),
            "--max-tokens", str(budget.max_tokens_per_turn), "--temperature", str(budget.temperature),
        ]
        # The issue travels on stdin into /tmp of the sandbox (a private tmpfs).
        script = f"cat > {ISSUE_PATH} && exec \"$@\""
        return sandbox.exec(["bash", "-c", script, "minimal", *cmd], timeout=budget.wall_clock_s,
                            stdin=task.problem_statement)

    def collect(self, sandbox: Sandbox, res: ExecResult, budget: Budget) -> HarnessResult:
        summary: dict = {}
        for line in reversed(res.stdout.strip().splitlines()):
            try:
                summary = json.loads(line)
                break
            except json.JSONDecodeError:
                continue
        if res.timed_out:
            ending = "timeout"
        elif res.exit_code in (0, 1) and summary:
            ending = "finished" if summary.get("finish") == "tests_pass" else "budget"
        else:
            ending = "crashed"
        return HarnessResult(ending=ending, exit_code=res.exit_code, transcript=res.stdout,
                             log_tail=res.stderr[-2000:], summary=summary)
