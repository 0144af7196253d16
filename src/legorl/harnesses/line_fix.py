"""Adapter for the first-party one-line-fix harness (``legorl.harnesses.line_agent``): one short
answer per rollout, for the learning benchmark and fast demos."""

from __future__ import annotations

from typing import Any

from legorl.harnesses.base import Budget, HarnessInstall, HarnessResult
from legorl.harnesses.common import python_agent_result, run_python_agent
from legorl.sandbox.base import ExecResult, Sandbox
from legorl.tasks.model import Task


class LineFixHarness:
    name = "line-fix"
    dialect = "openai.chat"
    install = HarnessInstall()  # runs with the project's own interpreter (openai is a dependency)

    def launch(self, task: Task, sandbox: Sandbox, base_url: str, session_token: str, budget: Budget) -> ExecResult:
        return run_python_agent(
            sandbox,
            "legorl.harnesses.line_agent",
            [f"--max-tokens={budget.max_tokens_per_turn}"],
            issue=task.problem_statement,
            budget=budget,
            base_url=base_url,
            session_token=session_token,
            max_output_bytes=50_000,
        )

    def collect(self, sandbox: Sandbox, res: ExecResult, budget: Budget) -> HarnessResult:
        # one answer is the whole budget: a wrong or unusable one is graded, not cut short
        return python_agent_result(res, lambda s: "finished")

    @staticmethod
    def gold_replies(task: Any, wrong: bool = False) -> list[str]:
        """The scripted "model" answer: the gold patch's added line (``wrong``: the removed, buggy one)."""
        sign = "-" if wrong else "+"
        lines = [
            ln[1:]
            for ln in task.patch.splitlines()
            if ln.startswith(sign) and not ln.startswith(("+++", "---")) and ln[1:].strip()
        ]
        if len(lines) != 1:
            raise ValueError(f"{task.instance_id}: the gold patch is not a one-line fix ({len(lines)} {sign} lines)")
        return [f"```python\n{lines[0].strip()}\n```"]
