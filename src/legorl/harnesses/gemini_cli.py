"""Adapter for the Gemini CLI (npm ``@google/gemini-cli``, pinned), run unmodified in headless mode.

The package declares Node >= 20 (the hosts' Node), so its layer is the CLI alone; its bundle has no
dependencies (the optional native ones, ``node-pty`` and ``keytar``, are not built: the shell tool
then runs commands through ``child_process``, and the token is never stored in a keychain).

Command (inside the sandbox, cwd ``/workspace``)::

    gemini --approval-mode=yolo --output-format=stream-json --skip-trust --model=M --prompt=TASK

(the issue is attached to ``--prompt=``, so a text starting with ``-`` is never read as an option).
Endpoint: ``GOOGLE_GEMINI_BASE_URL`` = the gateway's root URL (the SDK appends ``/v1beta/models/...``
itself) and ``GEMINI_API_KEY`` = the session token (environment only; sent as ``x-goog-api-key``). It calls ``:streamGenerateContent?alt=sse`` for the
agent's turns and ``:generateContent`` for its side calls (the compression summary and its check);
it names no thread, so the gateway places side calls by their content.

The user settings (``~/.gemini/settings.json`` in the generated home) switch off usage statistics,
telemetry, auto-update and its notification, the IDE integration, folder trust, checkpointing and
the interactive (pty) shell, and set ``model.maxSessionTurns`` = ``Budget.max_turns``. Their auth
type is ``gemini-api-key``: the CLI would infer ``gateway`` from the base URL, but its headless
auth check refuses that name, and with ``gemini-api-key`` the base URL is still where it sends.

Compression: the CLI sizes its context from its own model table, in which an unknown model
(``legorl``) has 1,048,576 tokens, and compresses once the last prompt passed
``model.compressionThreshold`` times that: ``context_window`` (the window the policy really has) and
``compact_fraction`` become that threshold. It summarises only history that ends with a text
answer or before a later plain user message; in headless mode (one user message: the issue) that
happens when its next-speaker check (off by default: ``model.skipNextSpeakerCheck``) answers
"model" after a text answer and it goes on with "Please continue.".
``GEMINI_CLI_NO_RELAUNCH`` keeps it from re-spawning itself in a child Node process (whose parent
ignores SIGTERM). ``system_prompt`` replaces its base system prompt (``GEMINI_SYSTEM_MD``), ``tools``
restricts the built-in tools (``tools.core``).

``collect`` reads the stream-json transcript (one JSON object per line: ``init``, ``message``,
``tool_use``, ``tool_result``, ``error``, and a final ``result`` with ``status`` ``success`` or
``error``): ``finished`` on a successful result; ``budget`` when it stopped at its session-turn
limit (exit code 53, ``FatalTurnLimitedError``); ``timeout``; else ``crashed``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

from legorl.harnesses.base import Budget, HarnessEnding, HarnessInstall, HarnessResult
from legorl.harnesses.common import (
    HARNESS_HOME,
    ISSUE_PLACEHOLDER,
    deep_merge,
    json_lines,
    run_program,
    stream_result,
)
from legorl.sandbox.base import ExecResult, Sandbox
from legorl.tasks.model import Task

GEMINI_CLI_VERSION = "0.61.0"
# The context the CLI assumes for a model its table does not know (tokenLimits.js, DEFAULT_TOKEN_LIMIT).
ASSUMED_TOKEN_LIMIT = 1_048_576
EXIT_TURN_LIMIT = 53  # FatalTurnLimitedError: model.maxSessionTurns reached
SETTINGS_JSON = ".gemini/settings.json"  # user settings, relative to the generated home
SYSTEM_MD = ".gemini/legorl-system.md"  # the base system prompt that replaces the CLI's (GEMINI_SYSTEM_MD)

QUIET_ENV = {
    "GEMINI_CLI_NO_RELAUNCH": "true",
    "GEMINI_TELEMETRY_ENABLED": "false",
    "NO_COLOR": "1",
}


def gateway_root(url: str) -> str:
    """The gateway's root URL (the Gemini SDK adds ``/v1beta/models/...`` itself)."""
    url = url.rstrip("/")
    return url[: -len("/v1")] if url.endswith("/v1") else url


class GeminiCliHarness:
    name = "gemini-cli"
    dialect = "gemini.generate_content"
    install = HarnessInstall(kind="npm", packages=(f"@google/gemini-cli@{GEMINI_CLI_VERSION}",))

    def __init__(
        self,
        *,
        model: str = "legorl",
        context_window: int | None = None,
        compact_fraction: float = 0.5,
        tools: Sequence[str] | None = None,
        system_prompt: str | None = None,
        install_root: str | None = None,
        extra_env: Mapping[str, str] | None = None,
        extra_settings: Mapping[str, object] | None = None,
        extra_args: Sequence[str] = (),
    ) -> None:
        """``context_window``: the policy's real window; with it the CLI compresses once the prompt
        passes ``compact_fraction`` of it (None: the CLI's own rule, half of 1,048,576 tokens).
        ``tools``: register only these built-in tools (``tools.core``; None: its default set).
        ``system_prompt``: replaces the CLI's base system prompt."""
        if not 0 < compact_fraction < 1:
            raise ValueError(f"compact_fraction must be between 0 and 1, got {compact_fraction}")
        self.model = model
        self.context_window = context_window
        self.compact_fraction = compact_fraction
        self.tools = tuple(tools) if tools is not None else None
        self.system_prompt = system_prompt
        self.install_root = install_root or self.install.mount
        self.extra_env = dict(extra_env or {})
        self.extra_settings = dict(extra_settings or {})
        self.extra_args = tuple(extra_args)

    @property
    def bin_dir(self) -> str:
        return f"{self.install_root}/node_modules/.bin"

    def compression_threshold(self) -> float | None:
        """``model.compressionThreshold``: the fraction of the CLI's assumed window at which it
        compresses, so that it does so at ``compact_fraction`` of ``context_window``."""
        if self.context_window is None:
            return None
        return self.compact_fraction * self.context_window / ASSUMED_TOKEN_LIMIT

    def settings(self, budget: Budget) -> dict:
        model: dict = {"name": self.model, "maxSessionTurns": budget.max_turns}
        threshold = self.compression_threshold()
        if threshold is not None:
            model["compressionThreshold"] = threshold
        settings: dict = {
            "general": {
                "enableAutoUpdate": False,
                "enableAutoUpdateNotification": False,
                "checkpointing": {"enabled": False},
            },
            "privacy": {"usageStatisticsEnabled": False},
            "telemetry": {"enabled": False},
            "ide": {"enabled": False},
            "security": {"auth": {"selectedType": "gemini-api-key"}, "folderTrust": {"enabled": False}},
            "advanced": {"autoConfigureMemory": False},
            "tools": {"shell": {"enableInteractiveShell": False}},
            "model": model,
        }
        if self.tools is not None:
            settings["tools"]["core"] = list(self.tools)
        return deep_merge(settings, self.extra_settings)

    def command(self) -> list[str]:
        """argv; the issue (:data:`ISSUE_PLACEHOLDER`) is attached to ``--prompt=``."""
        return [
            f"{self.bin_dir}/gemini",
            "--approval-mode=yolo",
            "--output-format=stream-json",
            "--skip-trust",
            f"--model={self.model}",
            *self.extra_args,
            f"--prompt={ISSUE_PLACEHOLDER}",
        ]

    def environment(self, gateway_url: str, session_token: str) -> dict[str, str]:
        env = {
            **QUIET_ENV,
            "GOOGLE_GEMINI_BASE_URL": gateway_root(gateway_url),
            "GEMINI_API_KEY": session_token,
            "GEMINI_MODEL": self.model,
            "PATH": f"{self.bin_dir}:/usr/local/bin:/usr/bin:/bin",
        }
        if self.system_prompt is not None:
            env["GEMINI_SYSTEM_MD"] = f"{HARNESS_HOME}/{SYSTEM_MD}"
        env.update(self.extra_env)
        return env

    def home_files(self, budget: Budget) -> dict[str, str]:
        files = {SETTINGS_JSON: json.dumps(self.settings(budget), indent=2)}
        if self.system_prompt is not None:
            files[SYSTEM_MD] = self.system_prompt
        return files

    def launch(self, task: Task, sandbox: Sandbox, gateway_url: str, session_token: str, budget: Budget) -> ExecResult:
        return run_program(
            sandbox,
            self.command(),
            issue=task.problem_statement,
            budget=budget,
            env=self.environment(gateway_url, session_token),
            home_files=self.home_files(budget),
            max_output_bytes=5_000_000,
        )

    side_requests = True  # compression summaries are tool-less calls besides the agent loop

    def scripted_replies(self, shell_command: str) -> list[str]:
        """Model replies (gateway text format) that run ``shell_command`` with the shell tool, then stop."""
        from legorl.harnesses.scripted import tool_call

        return [
            tool_call("run_shell_command", {"command": shell_command, "description": "apply the fix"}),
            "The fix is in place.",
        ]

    def collect(self, sandbox: Sandbox, res: ExecResult, budget: Budget) -> HarnessResult:
        events = json_lines(res.stdout)
        result = next((e for e in reversed(events) if e.get("type") == "result"), None)
        summary: dict = {}
        if result is not None:
            summary = {k: result.get(k) for k in ("status", "error", "stats") if k in result}
        summary["events"] = len(events)
        summary["tool_uses"] = [e.get("tool_name") for e in events if e.get("type") == "tool_use"]
        summary["errors"] = [str(e.get("message"))[:500] for e in events if e.get("type") == "error"]
        ending: HarnessEnding
        if res.timed_out:
            ending = "timeout"
        elif res.exit_code == EXIT_TURN_LIMIT:
            ending = "budget"
            summary["cause"] = f"the Gemini CLI stopped at its session-turn limit (exit code {res.exit_code})"
        elif res.exit_code == 0 and result is not None and result.get("status") == "success":
            ending = "finished"
        else:
            ending = "crashed"
        return stream_result(res, ending, summary)
