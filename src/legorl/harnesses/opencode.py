"""Adapter for OpenCode (npm ``opencode-ai``, pinned), run unmodified in headless mode.

Command (inside the sandbox, cwd ``/workspace``)::

    opencode run --format json --title=T -- TASK

(``--title`` spares the separate title-generation call; the issue follows ``--`` so that a text
starting with ``-`` is never read as an option.) The whole configuration travels in
``OPENCODE_CONFIG_CONTENT``: one provider ``legorl`` pointing at the gateway —
``@ai-sdk/openai-compatible`` (Chat Completions; name ``opencode``) or ``@ai-sdk/openai``
(Responses API; name ``opencode-responses``) — with ``options.baseURL`` = the gateway's ``/v1``
URL and ``options.apiKey`` = the session token; one model ``legorl/legorl`` whose ``limit``
(``context``, ``output``) is configurable, because OpenCode compacts automatically once the
streamed ``usage`` reaches the context limit minus the output reserve; permissions that let the
agent edit and run commands without asking; optionally a reduced tool set (``tools``). Both
provider packages are bundled inside the OpenCode binary of the pinned version (no npm install at
run time); ``npm_config_registry=http://127.0.0.1:9/`` makes sure that a missing one fails fast
instead of reaching a registry. The quiet variables switch off auto-update, the models.dev fetch,
sharing, LSP downloads, default plugins, project config files (the repository is the agent's, not
ours) and reading ``~/.claude``. ``HOME`` and the XDG directories are a generated private home
(:func:`legorl.harnesses.common.home_env`): nothing of the user's own configuration.

``collect`` reads the JSON event stream (one object per line: ``step_start``, ``text``,
``tool_use``, ``step_finish``, ``error``) and classifies the ending: ``finished`` when the last step
finished with reason ``stop`` and no error event, ``budget`` when the step budget ran out —
``agent.build.steps`` = ``Budget.max_turns`` makes OpenCode ask for a text-only answer at the last
step, but a model that keeps calling tools keeps it going, so a watchdog in the launch script kills
it once ``max_turns + 1`` steps finished (and appends a ``legorl_step_budget`` event) — ``timeout``,
else ``crashed``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

from legorl.harnesses.base import Budget, HarnessEnding, HarnessInstall, HarnessResult
from legorl.harnesses.common import ISSUE_PLACEHOLDER, fault_cause, json_lines, run_program
from legorl.sandbox.base import ExecResult, Sandbox
from legorl.tasks.model import Task

OPENCODE_VERSION = "1.18.33"
PROVIDER_ID = "legorl"
MODEL_ID = "legorl"

QUIET_ENV = {
    "OPENCODE_DISABLE_AUTOUPDATE": "1",
    "OPENCODE_DISABLE_MODELS_FETCH": "1",
    "OPENCODE_DISABLE_SHARE": "1",
    "OPENCODE_DISABLE_LSP_DOWNLOAD": "1",
    "OPENCODE_DISABLE_DEFAULT_PLUGINS": "1",
    "OPENCODE_DISABLE_PROJECT_CONFIG": "1",
    "OPENCODE_DISABLE_CLAUDE_CODE": "1",
    "OPENCODE_DISABLE_EXTERNAL_SKILLS": "1",
    "OPENCODE_DISABLE_TERMINAL_TITLE": "1",
    "npm_config_registry": "http://127.0.0.1:9/",
    "NO_COLOR": "1",
}

# OpenCode runs a background `npm install @opencode-ai/plugin` in every writable config directory
# whose package-lock.json does not list it yet: the generated home marks it installed.
_LOCK = '{"lockfileVersion": 3, "packages": {"": {"dependencies": {"@opencode-ai/plugin": "*"}}}}'
HOME_FILES = {f"{d}/package-lock.json": _LOCK for d in (".config/opencode", ".opencode")}
PRELUDE = 'mkdir -p "$XDG_CONFIG_HOME/opencode/node_modules" "$HOME/.opencode/node_modules"'

BUDGET_EVENT = "legorl_step_budget"
WATCHDOG = (
    # the file is emptied before the start, not by the background job's redirection, which the first
    # count could outrun and read a previous run's steps (as Codex's watchdog did: harnesses/codex.py)
    'o=/tmp/.legorl-opencode.out; : > "$o"; "$@" >> "$o" & pid=$!; '
    "while kill -0 $pid 2>/dev/null; do "
    '  if [ "$(grep -c \'"type":"step_finish"\' "$o")" -ge MAX_STEPS ]; then '
    "    kill -TERM $pid; sleep 2; kill -KILL $pid 2>/dev/null; "
    f'    echo \'{{"type":"{BUDGET_EVENT}","max_steps":MAX_STEPS}}\' >> "$o"; break; '
    "  fi; sleep 0.2; "
    'done; wait $pid; rc=$?; cat "$o"; exit $rc'
)

PROVIDERS = {"opencode": "@ai-sdk/openai-compatible", "opencode-responses": "@ai-sdk/openai"}
DIALECTS = {"opencode": "openai.chat", "opencode-responses": "openai.responses"}


class OpenCodeHarness:
    install = HarnessInstall(kind="npm", packages=(f"opencode-ai@{OPENCODE_VERSION}",))

    def __init__(
        self,
        name: str = "opencode",
        *,
        context_limit: int = 262144,
        output_limit: int | None = None,
        tools: Sequence[str] | None = None,
        title: str = "legorl",
        install_root: str | None = None,
        extra_env: Mapping[str, str] | None = None,
        extra_config: Mapping[str, object] | None = None,
    ) -> None:
        """``name``: ``opencode`` (Chat Completions) or ``opencode-responses`` (Responses API).
        ``context_limit`` / ``output_limit`` (default: ``Budget.max_tokens_per_turn``): the model's
        limits as OpenCode sees them — compaction triggers near ``context_limit - output_limit``.
        ``tools``: enable only these tools (None: OpenCode's default set)."""
        if name not in PROVIDERS:
            raise ValueError(f"unknown OpenCode variant {name!r} (have: {', '.join(PROVIDERS)})")
        self.name = name
        self.dialect = DIALECTS[name]
        self.provider_npm = PROVIDERS[name]
        self.context_limit = context_limit
        self.output_limit = output_limit
        self.tools = tuple(tools) if tools is not None else None
        self.title = title
        self.install_root = install_root or self.install.mount
        self.extra_env = dict(extra_env or {})
        self.extra_config = dict(extra_config or {})

    @property
    def binary(self) -> str:
        return f"{self.install_root}/node_modules/.bin/opencode"

    def config(self, gateway_url: str, session_token: str, budget: Budget) -> dict:
        base = gateway_url.rstrip("/")
        if not base.endswith("/v1"):
            base += "/v1"
        model = {
            "name": MODEL_ID,
            "tool_call": True,
            "temperature": True,
            "limit": {"context": self.context_limit, "output": self.output_limit or budget.max_tokens_per_turn},
        }
        cfg: dict = {
            "$schema": "https://opencode.ai/config.json",
            "provider": {
                PROVIDER_ID: {
                    "npm": self.provider_npm,
                    "name": "LEGO-RL gateway",
                    "options": {"baseURL": base, "apiKey": session_token},
                    "models": {MODEL_ID: model},
                }
            },
            "model": f"{PROVIDER_ID}/{MODEL_ID}",
            "small_model": f"{PROVIDER_ID}/{MODEL_ID}",
            "enabled_providers": [PROVIDER_ID],
            "autoupdate": False,
            "share": "disabled",
            "snapshot": False,
            "permission": {"edit": "allow", "bash": "allow", "webfetch": "deny", "external_directory": "deny"},
            "agent": {"build": {"steps": budget.max_turns}},
        }
        if self.tools is not None:
            all_tools = (
                "bash",
                "read",
                "write",
                "edit",
                "glob",
                "grep",
                "list",
                "patch",
                "todowrite",
                "todoread",
                "webfetch",
                "task",
                "skill",
                "question",
                "multiedit",
                "apply_patch",
                "lsp",
                "websearch",
                "codesearch",
                "invalid",
            )
            cfg["tools"] = {t: (t in self.tools) for t in sorted(set(all_tools) | set(self.tools))}
        cfg.update(self.extra_config)
        return cfg

    def command(self) -> list[str]:
        """argv; the issue (:data:`ISSUE_PLACEHOLDER`) is the one operand, after ``--``."""
        return [self.binary, "run", "--format", "json", f"--title={self.title}", "--", ISSUE_PLACEHOLDER]

    def environment(self, gateway_url: str, session_token: str, budget: Budget) -> dict[str, str]:
        env = {
            **QUIET_ENV,
            "OPENCODE_CONFIG_CONTENT": json.dumps(self.config(gateway_url, session_token, budget)),
            "PATH": f"{self.install_root}/node_modules/.bin:/usr/local/bin:/usr/bin:/bin",
        }
        env.update(self.extra_env)
        return env

    def launch(self, task: Task, sandbox: Sandbox, gateway_url: str, session_token: str, budget: Budget) -> ExecResult:
        # ``agent.build.steps`` only asks the model for a text-only answer at the last step; a model
        # that keeps calling tools keeps OpenCode going, so the watchdog stops it after one more step.
        watchdog = WATCHDOG.replace("MAX_STEPS", str(budget.max_turns + 1))
        return run_program(
            sandbox,
            ["bash", "-c", watchdog, "opencode", *self.command()],
            issue=task.problem_statement,
            budget=budget,
            env=self.environment(gateway_url, session_token, budget),
            pre=PRELUDE,
            home_files=HOME_FILES,
            max_output_bytes=5_000_000,
        )

    side_requests = True  # makes tool-less side calls (titles, summaries) besides the agent loop

    def scripted_replies(self, shell_command: str) -> list[str]:
        """Model replies (gateway text format) that run ``shell_command`` with the bash tool, then stop."""
        from legorl.harnesses.scripted import tool_call

        return [tool_call("bash", {"command": shell_command, "description": "apply the fix"}), "The fix is in place."]

    def collect(self, sandbox: Sandbox, res: ExecResult, budget: Budget) -> HarnessResult:
        events = json_lines(res.stdout)
        steps = [e for e in events if e.get("type") == "step_finish"]
        errors = [e for e in events if e.get("type") == "error"]
        tool_uses = [(e.get("part") or {}).get("tool") for e in events if e.get("type") == "tool_use"]
        last_reason = (steps[-1].get("part") or {}).get("reason") if steps else None
        summary = {
            "events": len(events),
            "steps": len(steps),
            "tool_uses": tool_uses,
            "last_reason": last_reason,
            "errors": [json.dumps(e.get("error"))[:500] for e in errors],
            "text": "".join((e.get("part") or {}).get("text") or "" for e in events if e.get("type") == "text")[-2000:],
        }
        stopped = any(e.get("type") == BUDGET_EVENT for e in events)
        summary["stopped_by_step_budget"] = stopped
        ending: HarnessEnding
        if res.timed_out:
            ending = "timeout"
        elif stopped:
            ending = "budget"
        elif errors or res.exit_code != 0 or not steps:
            ending = "crashed"
            fault = fault_cause(res)
            if fault is not None:
                summary["cause"] = fault
        elif last_reason == "stop":
            ending = "finished"
        elif last_reason == "length" or len(steps) >= budget.max_turns:
            ending = "budget"  # the step budget, or the per-call token budget cut the answer and OpenCode stopped
        else:
            ending = "crashed"
        return HarnessResult(
            ending=ending, exit_code=res.exit_code, transcript=res.stdout, log_tail=res.stderr[-2000:], summary=summary
        )
