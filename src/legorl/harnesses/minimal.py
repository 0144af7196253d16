"""Adapter for the first-party minimal harness (``legorl.harnesses.minimal_agent``)."""

from __future__ import annotations

from legorl.harnesses.base import Budget, HarnessEnding, HarnessInstall, HarnessResult
from legorl.harnesses.common import last_json_line, run_python_agent
from legorl.sandbox.base import ExecResult, Sandbox
from legorl.tasks.model import Task


class MinimalHarness:
    name = "minimal"
    dialect = "openai.chat"
    install = HarnessInstall()  # runs with the project's own interpreter (openai is a dependency)

    def launch(self, task: Task, sandbox: Sandbox, base_url: str, session_token: str, budget: Budget) -> ExecResult:
        return run_python_agent(
            sandbox,
            "legorl.harnesses.minimal_agent",
            [f"--max-turns={budget.max_turns}", f"--max-tokens={budget.max_tokens_per_turn}"],
            issue=task.problem_statement,
            budget=budget,
            base_url=base_url,
            session_token=session_token,
            max_output_bytes=200_000,
        )

    def collect(self, sandbox: Sandbox, res: ExecResult, budget: Budget) -> HarnessResult:
        summary = last_json_line(res.stdout)
        ending: HarnessEnding
        if res.timed_out:
            ending = "timeout"
        elif res.exit_code in (0, 1) and summary:
            ending = "finished" if summary.get("finish") == "tests_pass" else "budget"
        else:
            ending = "crashed"
        return HarnessResult(
            ending=ending, exit_code=res.exit_code, transcript=res.stdout, log_tail=res.stderr[-2000:], summary=summary
        )
