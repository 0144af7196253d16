"""Harness classes from outside the project's registry, named by import path in a run config
(``rollout.harness: "external_harness:StdlibToolHarness"``; this directory is on ``sys.path`` in
the tests): one that works, and broken ones whose errors the config must name."""

from __future__ import annotations

import sys

from legorl.harnesses.base import Budget, HarnessInstall, HarnessResult
from legorl.harnesses.common import ISSUE_PATH, TOKEN_ENV, TOKEN_FILE, python_agent_result, run_program
from legorl.sandbox.base import ExecResult, Sandbox
from legorl.tasks.model import Task


class StdlibToolHarness:
    """Runs the stdlib tool-calling client this project ships (``legorl.harnesses.tiny_tool_agent``:
    one ``bash`` tool, OpenAI chat) with this interpreter, its own way: the token through the
    generated home's token file, read back by the launch line."""

    dialect = "openai.chat"
    install = HarnessInstall()  # nothing to install: the interpreter is visible in the sandbox

    def __init__(self, name: str = "stdlib-tool", model: str = "policy") -> None:
        self.name = name
        self.model = model

    def launch(self, task: Task, sandbox: Sandbox, gateway_url: str, session_token: str, budget: Budget) -> ExecResult:
        argv = [
            "bash",
            "-c",
            'OPENAI_API_KEY="$(cat "$1")" exec "$2" -m legorl.harnesses.tiny_tool_agent --issue-file "$3" '
            '--max-turns "$4" --max-tokens "$5" --model "$6"',
            "agent",
            TOKEN_FILE,
            sys.executable,
            ISSUE_PATH,
            str(budget.max_turns),
            str(budget.max_tokens_per_turn),
            self.model,
        ]
        return run_program(
            sandbox,
            argv,
            issue=task.problem_statement,
            budget=budget,
            env={"OPENAI_BASE_URL": gateway_url, TOKEN_ENV: session_token},
            token_file=True,
        )

    def collect(self, sandbox: Sandbox, result: ExecResult, budget: Budget) -> HarnessResult:
        return python_agent_result(result, lambda s: "finished" if s.get("finish") == "done" else "budget")

    def scripted_replies(self, shell_command: str) -> list[str]:
        from legorl.harnesses.scripted import tool_call

        return [tool_call("bash", {"command": shell_command}), "Done."]


class NoCollect:
    name = "no-collect"
    dialect = "openai.chat"
    install = HarnessInstall()

    def launch(self, task, sandbox, gateway_url, session_token, budget):
        raise NotImplementedError


class WrongLaunch(StdlibToolHarness):
    def launch(self, task):  # type: ignore[override]
        raise NotImplementedError


class NoDialect(StdlibToolHarness):
    def __init__(self, name: str = "no-dialect") -> None:
        super().__init__(name)
        self.dialect = None  # type: ignore[assignment]


def not_a_class() -> None:
    """A function where a class belongs."""
