"""Adapter for the first-party minimal harness (``legorl.harnesses.minimal_agent``)."""

from __future__ import annotations

from legorl.harnesses.base import Budget, HarnessInstall, HarnessResult
from legorl.harnesses.common import python_agent_result, run_python_agent
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
        return python_agent_result(res, lambda s: "finished" if s.get("finish") == "tests_pass" else "budget")
