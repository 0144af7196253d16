"""The generic harness: any program, told the gateway's base URL through one environment variable.

``CommandHarness(command="my-agent --task-file {issue_file} --steps {max_turns}", base_url_var="OPENAI_BASE_URL")``
runs ``command`` (a template; every field is shell-quoted) with ``bash -c`` in ``/workspace``. Fields:
``{base_url}`` (``.../v1``, or the bare origin with ``base_url_style="origin"``), ``{token_file}`` (a
0600 file holding the session token; the token itself never goes on a command line — it is also in
``$<api_key_var>``), ``{issue_file}`` (the problem statement, outside the repo), ``{max_turns}``, ``{max_tokens}``,
``{temperature}``, ``{model}``, ``{python}`` (this project's interpreter), ``{mount}`` (the harness layer
mount point), ``{transcript}`` (``transcript_path``). The default program is
:mod:`legorl.harnesses.tiny_tool_agent` (stdlib, native tool calls, one ``bash`` tool).
"""

from __future__ import annotations

import shlex
import sys
from collections.abc import Mapping

from legorl.harnesses.base import Budget, HarnessInstall, HarnessResult
from legorl.harnesses.common import (
    ISSUE_PATH,
    TOKEN_ENV,
    TOKEN_FILE,
    result,
    run_program,
    split_transcript,
)
from legorl.sandbox.base import ExecResult, Sandbox
from legorl.tasks.model import Task

DEFAULT_COMMAND = (
    "{python} -m legorl.harnesses.tiny_tool_agent --issue-file {issue_file} "
    "--max-turns {max_turns} --max-tokens {max_tokens} --model {model}"
)


class CommandHarness:
    name = "command"

    def __init__(
        self,
        command: str = DEFAULT_COMMAND,
        base_url_var: str = "OPENAI_BASE_URL",
        api_key_var: str | None = "OPENAI_API_KEY",
        env: Mapping[str, str] | None = None,
        dialect: str = "openai.chat",
        install: HarnessInstall | None = None,
        transcript_path: str | None = None,
        base_url_style: str = "v1",
        model: str = "policy",
        name: str = "command",
    ):
        if base_url_style not in ("v1", "origin"):
            raise ValueError("base_url_style must be 'v1' or 'origin'")
        if "{token}" in command:
            raise ValueError(
                "the command template may not contain {token}: a secret on a command line is visible "
                "to every process and may be parsed as an option; read it from "
                f"${api_key_var or 'OPENAI_API_KEY'} or from the file {{token_file}}"
            )
        self.command = command
        self.base_url_var = base_url_var
        self.api_key_var = api_key_var
        self.env = dict(env or {})
        self.dialect = dialect
        self.install = install or HarnessInstall()
        self.transcript_path = transcript_path
        self.base_url_style = base_url_style
        self.model = model
        self.name = name

    def _base_url(self, gateway_url: str) -> str:
        url = gateway_url.rstrip("/")
        if self.base_url_style == "origin" and url.endswith("/v1"):
            url = url[: -len("/v1")]
        return url

    def launch(self, task: Task, sandbox: Sandbox, gateway_url: str, session_token: str, budget: Budget) -> ExecResult:
        base_url = self._base_url(gateway_url)
        fields = {
            "base_url": base_url,
            "token_file": TOKEN_FILE,
            "issue_file": ISSUE_PATH,
            "max_turns": budget.max_turns,
            "max_tokens": budget.max_tokens_per_turn,
            "temperature": budget.temperature,
            "model": self.model,
            "python": sys.executable,
            "mount": self.install.mount,
            "transcript": self.transcript_path or "",
        }
        cmdline = self.command.format(**{k: shlex.quote(str(v)) for k, v in fields.items()})
        env = {**self.env, self.base_url_var: base_url}
        if self.api_key_var:
            env[self.api_key_var] = session_token
        uses_file = "{token_file}" in self.command
        if uses_file:
            env[TOKEN_ENV] = session_token  # moved into {token_file} by the launch script, then unset
        return run_program(
            sandbox,
            ["bash", "-c", cmdline],
            issue=task.problem_statement,
            budget=budget,
            env=env,
            transcript_path=self.transcript_path,
            token_file=uses_file,
        )

    def collect(self, sandbox: Sandbox, res: ExecResult, budget: Budget) -> HarnessResult:
        out, transcript = split_transcript(res.stdout)
        return result(res, transcript or out)

    def scripted_replies(self, shell_command: str) -> list[str]:
        """Model replies (gateway text format) that run ``shell_command`` then stop (default program)."""
        from legorl.harnesses.scripted import tool_call

        return [tool_call("bash", {"command": shell_command}), "The fix is in place."]
