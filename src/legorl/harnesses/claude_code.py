"""Adapter for Claude Code (npm ``@anthropic-ai/claude-code``, pinned), run unmodified in headless mode.

Command (inside the sandbox, cwd ``/workspace``)::

    claude -p --output-format stream-json --verbose --dangerously-skip-permissions \\
        --max-turns N --tools Bash,Read,Edit,Write --model <model> -- TASK

(the issue follows ``--``, so an issue text that starts with ``-`` is never read as an option).

Environment: ``ANTHROPIC_BASE_URL`` = the gateway *without* ``/v1`` (Claude Code appends
``/v1/messages?beta=true`` itself), ``ANTHROPIC_AUTH_TOKEN`` = the session token (sent as Bearer),
``IS_SANDBOX=1`` (it refuses ``--dangerously-skip-permissions`` as root otherwise), a generated private
``HOME`` (:data:`legorl.harnesses.common.HARNESS_HOME`, writable: it keeps its session files in
``~/.claude``; nothing of the user's own ``~/.claude``) and the variables that keep it from calling
any other host (telemetry, error reporting, auto-update, feature flags). Besides the gateway it only
sends a ``HEAD /`` probe to the base URL. Budgets: ``--max-turns`` = ``Budget.max_turns``,
``CLAUDE_CODE_MAX_OUTPUT_TOKENS`` = ``Budget.max_tokens_per_turn``; ``context_window`` sets
``CLAUDE_CODE_AUTO_COMPACT_WINDOW`` and ``autocompact_pct`` ``CLAUDE_AUTOCOMPACT_PCT_OVERRIDE`` so
that a small window triggers its automatic compaction (a separate summary call; the next request
starts "This session is being continued...").

``collect`` reads the stream-json transcript (one JSON object per line: ``system``/``init``,
``assistant``, ``user``, ..., and a final ``result`` whose ``subtype`` is ``success``,
``error_max_turns`` or ``error_during_execution``) and classifies the ending.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from legorl.harnesses.base import Budget, HarnessEnding, HarnessInstall, HarnessResult
from legorl.harnesses.common import ISSUE_PLACEHOLDER, fault_cause, json_lines, run_program
from legorl.sandbox.base import ExecResult, Sandbox
from legorl.tasks.model import Task

CLAUDE_CODE_VERSION = "2.1.197"
DEFAULT_TOOLS = ("Bash", "Read", "Edit", "Write")

QUIET_ENV = {
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",  # telemetry, error reporting, auto-update, flags
    "CLAUDE_CODE_ATTRIBUTION_HEADER": "0",
    "DISABLE_AUTOUPDATER": "1",
    "DISABLE_TELEMETRY": "1",
    "DISABLE_ERROR_REPORTING": "1",
    "DISABLE_BUG_COMMAND": "1",
    "CLAUDE_CODE_DISABLE_TERMINAL_TITLE": "1",
    "CLAUDE_CODE_MAX_RETRIES": "0",
    "NO_COLOR": "1",
}


def strip_v1(url: str) -> str:
    url = url.rstrip("/")
    return url[: -len("/v1")] if url.endswith("/v1") else url


class ClaudeCodeHarness:
    name = "claude-code"
    dialect = "anthropic.messages"
    install = HarnessInstall(kind="npm", packages=(f"@anthropic-ai/claude-code@{CLAUDE_CODE_VERSION}",))

    def __init__(
        self,
        *,
        tools: Sequence[str] | None = DEFAULT_TOOLS,
        model: str = "legorl",
        context_window: int | None = None,
        autocompact_pct: float | None = None,
        install_root: str | None = None,
        extra_env: Mapping[str, str] | None = None,
        extra_args: Sequence[str] = (),
    ) -> None:
        """``tools``: the built-in tools offered (``--tools``; None = its default set of ~24).
        ``context_window`` / ``autocompact_pct``: compaction thresholds (see the module doc).
        ``install_root``: where the npm layer is (default ``install.mount``)."""
        self.tools = tuple(tools) if tools is not None else None
        self.model = model
        self.context_window = context_window
        self.autocompact_pct = autocompact_pct
        self.install_root = install_root or self.install.mount
        self.extra_env = dict(extra_env or {})
        self.extra_args = tuple(extra_args)

    @property
    def binary(self) -> str:
        return f"{self.install_root}/node_modules/.bin/claude"

    def command(self, budget: Budget) -> list[str]:
        """argv; the issue (:data:`ISSUE_PLACEHOLDER`) is the one operand, after ``--``."""
        cmd = [
            self.binary,
            "-p",
            "--output-format",
            "stream-json",
            "--verbose",
            "--dangerously-skip-permissions",
            f"--max-turns={budget.max_turns}",
            f"--model={self.model}",
        ]
        if self.tools is not None:
            cmd += [f"--tools={','.join(self.tools)}"]
        return cmd + list(self.extra_args) + ["--", ISSUE_PLACEHOLDER]

    def environment(self, gateway_url: str, session_token: str, budget: Budget) -> dict[str, str]:
        env = {
            **QUIET_ENV,
            "ANTHROPIC_BASE_URL": strip_v1(gateway_url),
            "ANTHROPIC_AUTH_TOKEN": session_token,
            "ANTHROPIC_MODEL": self.model,
            "ANTHROPIC_SMALL_FAST_MODEL": self.model,
            "ANTHROPIC_DEFAULT_HAIKU_MODEL": self.model,
            "ANTHROPIC_DEFAULT_SONNET_MODEL": self.model,
            "ANTHROPIC_DEFAULT_OPUS_MODEL": self.model,
            "IS_SANDBOX": "1",
            "CLAUDE_CODE_MAX_OUTPUT_TOKENS": str(budget.max_tokens_per_turn),
            "PATH": f"{self.install_root}/node_modules/.bin:/usr/local/bin:/usr/bin:/bin",
        }
        if self.context_window is not None:
            env["CLAUDE_CODE_AUTO_COMPACT_WINDOW"] = str(self.context_window)
        if self.autocompact_pct is not None:
            env["CLAUDE_AUTOCOMPACT_PCT_OVERRIDE"] = str(self.autocompact_pct)
        env.update(self.extra_env)
        return env

    def launch(self, task: Task, sandbox: Sandbox, gateway_url: str, session_token: str, budget: Budget) -> ExecResult:
        return run_program(
            sandbox,
            self.command(budget),
            issue=task.problem_statement,
            budget=budget,
            env=self.environment(gateway_url, session_token, budget),
            max_output_bytes=5_000_000,
        )

    side_requests = True  # makes tool-less side calls (titles, summaries) besides the agent loop

    def scripted_replies(self, shell_command: str) -> list[str]:
        """Model replies (gateway text format) that run ``shell_command`` with the Bash tool, then stop."""
        from legorl.harnesses.scripted import tool_call

        return [tool_call("Bash", {"command": shell_command, "description": "apply the fix"}), "The fix is in place."]

    def collect(self, sandbox: Sandbox, res: ExecResult, budget: Budget) -> HarnessResult:
        events = json_lines(res.stdout)
        result = next((e for e in reversed(events) if e.get("type") == "result"), None)
        summary: dict = {}
        if result is not None:
            summary = {
                k: result.get(k)
                for k in ("subtype", "is_error", "num_turns", "stop_reason", "duration_ms", "result", "usage")
                if k in result
            }
        summary["events"] = len(events)
        summary["compactions"] = sum(
            1 for e in events if e.get("type") == "system" and e.get("subtype") == "compact_boundary"
        )
        summary["tool_uses"] = [
            c.get("name")
            for e in events
            if e.get("type") == "assistant"
            for c in (e.get("message") or {}).get("content") or []
            if isinstance(c, dict) and c.get("type") == "tool_use"
        ]
        ending: HarnessEnding
        if res.timed_out:
            ending = "timeout"
        elif result is None:
            ending = "crashed"
            fault = fault_cause(res)
            if fault is not None:
                summary["cause"] = fault
        elif result.get("subtype") == "error_max_turns":
            ending = "budget"
        elif result.get("subtype") == "success" and not result.get("is_error"):
            ending = "finished"
        else:
            ending = "crashed"
        return HarnessResult(
            ending=ending, exit_code=res.exit_code, transcript=res.stdout, log_tail=res.stderr[-2000:], summary=summary
        )
