"""Adapter for the Codex CLI (npm ``@openai/codex``, pinned), run unmodified in ``codex exec`` mode.

The npm package is a small Node launcher (``bin/codex.js``, Node >= 16; on Node 20 it spawns the
binary as a child and forwards signals) plus a static musl binary of the Rust program in the
optional dependency ``@openai/codex-linux-x64`` (~420 MB unpacked), so the cached npm layer holds
everything; nothing is fetched at run time.

Command (inside the sandbox, cwd ``/workspace``)::

    codex exec --json --skip-git-repo-check --dangerously-bypass-approvals-and-sandbox \\
        --color=never -- TASK

(the issue follows ``--``, so a text starting with ``-`` is never read as an option). Approvals
and Codex's own sandbox are off: the rollout's sandbox is ours (no network but the gateway).

Configuration: ``~/.codex/config.toml`` in the generated private home
(:data:`legorl.harnesses.common.HARNESS_HOME`), written by the launch script: one model provider
``legorl`` with ``base_url`` = the gateway's ``/v1`` URL, ``wire_api = "responses"`` and
``env_key`` = :data:`TOKEN_ENV`, the variable that carries the session token (never the file,
never a command line); retries off (the gateway's refusals are final); ``model_context_window``
and, optionally, ``model_auto_compact_token_limit`` (Codex compacts once the usage the gateway
reports passes it: a separate summary request without tools, then the history is replaced by the
opening system and user messages plus the summary — a linked ``compaction`` segment). Everything
that would reach another host is off: analytics, feedback, the update check, web search, plugins
and apps (their startup sync clones from github.com), and the bundled skills (their instructions
point at image generation and online docs; ``skills=True`` keeps them). Sub-agents are off too:
Codex offers them as a ``namespace`` tool, which the gateway does not render (function tools only),
so the policy could never call them. The tools the policy sees (from the wire, 0.171.0 with an
unknown model's fallback metadata): ``exec_command`` (``{"cmd": "..."}``: a shell command),
``write_stdin``, ``request_user_input``, ``view_image``; there is no ``apply_patch`` tool for a
model Codex does not know.

Budgets: Codex has no step limit, so a watchdog in the launch script counts the tool items it
finished (``item.completed`` of a command, file change, MCP or web-search call; one per model call
that called a tool) and stops it after ``Budget.max_turns`` of them, appending a
:data:`BUDGET_EVENT` line; the per-call token budget is the gateway's clip (Codex sends no
``max_output_tokens``) and a cut answer ends the run (``Incomplete response returned, reason:
max_output_tokens``): ``budget``. A gateway Codex cannot connect to, it retries for ever
("Reconnecting... waiting for network"): the watchdog stops it after :data:`UNREACHABLE_TRIES`
such events (:data:`UNREACHABLE_EVENT`; ``crashed``: out of the gradient before the first answer,
graded after it, as any crash the agent could fake) instead of letting it
run into the wall clock.

``collect`` reads the ``--json`` event stream (``thread.started``, ``turn.started``,
``item.started`` / ``item.completed`` with ``agent_message``, ``command_execution``, ``error``
(warnings) ..., then ``turn.completed`` or ``turn.failed``) and classifies the ending:
``finished`` (``turn.completed``, exit 0), ``budget`` (the watchdog, or a cut answer), ``timeout``,
else ``crashed`` with the error Codex reported (a gateway it could not reach, a config it refused)
as the cause: the harness's failure, not the policy's.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from legorl.harnesses.base import Budget, HarnessEnding, HarnessInstall, HarnessResult
from legorl.harnesses.common import ISSUE_PLACEHOLDER, fault_cause, json_lines, run_program
from legorl.sandbox.base import ExecResult, Sandbox
from legorl.tasks.model import Task

CODEX_VERSION = "0.171.0"
PROVIDER_ID = "legorl"
TOKEN_ENV = "LEGORL_GATEWAY_TOKEN"  # Codex reads the provider's key from the variable env_key names
CONFIG_PATH = ".codex/config.toml"  # in the generated home ($CODEX_HOME defaults to ~/.codex)
SHELL_TOOL = "exec_command"
# item types of the --json stream that are a tool the model called (one step each)
TOOL_ITEMS = ("command_execution", "file_change", "mcp_tool_call", "web_search")
BUDGET_EVENT = "legorl_step_budget"
CUT_ANSWER = "reason: max_output_tokens"  # Codex's error when the gateway cut a reply at its token clip
# Codex retries a gateway it cannot connect to for ever ("Reconnecting... waiting for network", about
# every 20 s): after this many the watchdog stops it, a crash of the environment rather than a timeout
UNREACHABLE = "waiting for network"
UNREACHABLE_TRIES = 3
UNREACHABLE_EVENT = "legorl_gateway_unreachable"

_TOOL_ITEM_RE = '"type":"item[.]completed","item":[{]"id":"[^"]*","type":"(' + "|".join(TOOL_ITEMS) + ')"'
# Runs "$@" with its stdout in a file; stops it once MAX_STEPS tool items completed (Codex has no
# step limit of its own) or it keeps failing to reach the gateway, then prints the stream. stdin is
# closed: `codex exec` reads a piped stdin to the end and appends it to the prompt.
WATCHDOG = "\n".join(
    [
        "out=/tmp/.legorl-codex.jsonl",
        # TERM (the Node launcher passes it on to the binary), up to 2 s to go, KILL; then the event line
        'stop() { kill -TERM "$child"; for _ in 1 2 3 4 5 6 7 8 9 10; do kill -0 "$child" 2>/dev/null || break; '
        'sleep 0.2; done; kill -KILL "$child" 2>/dev/null; printf \'%s\\n\' "$1" >>"$out"; }',
        # emptied here, not by the background job's redirection: the loop's first count would race
        # that and could read a previous run's stream in a reused sandbox (stopped at once)
        ': >"$out"',
        '"$@" </dev/null >>"$out" &',
        "child=$!",
        'while kill -0 "$child" 2>/dev/null; do',
        f'  if [ "$(grep -cE \'{_TOOL_ITEM_RE}\' "$out")" -ge MAX_STEPS ]; then',
        f'    stop \'{{"type":"{BUDGET_EVENT}","max_steps":MAX_STEPS}}\'; break',
        "  fi",
        f'  if [ "$(grep -c \'{UNREACHABLE}\' "$out")" -ge {UNREACHABLE_TRIES} ]; then',
        f'    stop \'{{"type":"{UNREACHABLE_EVENT}"}}\'; break',
        "  fi",
        "  sleep 0.2",
        "done",
        'wait "$child"; status=$?',
        'cat "$out"; exit "$status"',
    ]
)


def toml_document(table: Mapping[str, Any]) -> str:
    """``table`` as TOML: scalars (str, bool, int, float) and lists of them first, then sub-tables
    as ``[dotted.name]`` sections. Strings are written as JSON strings, which TOML reads back the same."""
    lines: list[str] = []
    _toml_table(table, (), lines)
    return "\n".join(lines).lstrip("\n") + "\n"


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float | str):
        return json.dumps(value)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    raise TypeError(f"no TOML form for {type(value).__name__} {value!r}")


def _toml_key(key: str) -> str:
    return key if key.replace("_", "").replace("-", "").isalnum() else json.dumps(key)


def _toml_table(table: Mapping[str, Any], path: tuple[str, ...], lines: list[str]) -> None:
    scalars = {k: v for k, v in table.items() if not isinstance(v, Mapping)}
    if path and (scalars or not table):
        lines += ["", "[" + ".".join(_toml_key(p) for p in path) + "]"]
    lines += [f"{_toml_key(k)} = {_toml_value(v)}" for k, v in scalars.items()]
    for k, v in table.items():
        if isinstance(v, Mapping):
            _toml_table(v, (*path, k), lines)


def _merge(base: dict[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in extra.items():
        out[k] = _merge(out[k], v) if isinstance(v, Mapping) and isinstance(out.get(k), dict) else v
    return out


def gateway_v1(url: str) -> str:
    base = url.rstrip("/")
    return base if base.endswith("/v1") else base + "/v1"


class CodexHarness:
    name = "codex"
    dialect = "openai.responses"
    install = HarnessInstall(kind="npm", packages=(f"@openai/codex@{CODEX_VERSION}",))
    side_requests = True  # compaction summaries: a request without tools besides the agent loop

    def __init__(
        self,
        *,
        model: str = "legorl",
        context_window: int = 262144,
        auto_compact_tokens: int | None = None,
        skills: bool = False,
        install_root: str | None = None,
        extra_env: Mapping[str, str] | None = None,
        extra_config: Mapping[str, Any] | None = None,
    ) -> None:
        """``context_window``: the model's context as Codex sees it (``model_context_window``).
        ``auto_compact_tokens``: compact once a call's usage passes this (None: Codex's default, from
        the window). ``skills``: keep Codex's bundled skills and their instructions. ``extra_config``:
        merged into ``config.toml`` last (nested tables as dicts)."""
        self.model = model
        self.context_window = context_window
        self.auto_compact_tokens = auto_compact_tokens
        self.skills = skills
        self.install_root = install_root or self.install.mount
        self.extra_env = dict(extra_env or {})
        self.extra_config = dict(extra_config or {})

    @property
    def binary(self) -> str:
        return f"{self.install_root}/node_modules/.bin/codex"

    def config(self, gateway_url: str) -> dict[str, Any]:
        """The ``config.toml`` table (no secret in it: the token is in :data:`TOKEN_ENV`)."""
        cfg: dict[str, Any] = {
            "model": self.model,
            "model_provider": PROVIDER_ID,
            "model_context_window": self.context_window,
            "approval_policy": "never",
            "sandbox_mode": "danger-full-access",
            "web_search": "disabled",
            "check_for_update_on_startup": False,
            # its permissions block would tell the model about Codex's sandbox (off) and claim network access
            "include_permissions_instructions": False,
            "include_apps_instructions": False,
            "model_providers": {
                PROVIDER_ID: {
                    "name": "LEGO-RL gateway",
                    "base_url": gateway_v1(gateway_url),
                    "env_key": TOKEN_ENV,
                    "wire_api": "responses",
                    "request_max_retries": 0,
                    "stream_max_retries": 0,
                }
            },
            "analytics": {"enabled": False},
            "feedback": {"enabled": False},
            "history": {"persistence": "none"},
            "features": {"plugins": False, "apps": False, "goals": False},
            "agents": {"enabled": False},
        }
        if self.auto_compact_tokens is not None:
            cfg["model_auto_compact_token_limit"] = self.auto_compact_tokens
        if not self.skills:
            cfg["skills"] = {"include_instructions": False, "bundled": {"enabled": False}}
        return _merge(cfg, self.extra_config)

    def command(self) -> list[str]:
        """argv; the issue (:data:`ISSUE_PLACEHOLDER`) is the one operand, after ``--``."""
        return [
            self.binary,
            "exec",
            "--json",
            "--skip-git-repo-check",
            "--dangerously-bypass-approvals-and-sandbox",
            "--color=never",
            "--",
            ISSUE_PLACEHOLDER,
        ]

    def environment(self, session_token: str) -> dict[str, str]:
        env = {
            TOKEN_ENV: session_token,
            "PATH": f"{self.install_root}/node_modules/.bin:/usr/local/bin:/usr/bin:/bin",
        }
        env.update(self.extra_env)
        return env

    def launch(self, task: Task, sandbox: Sandbox, gateway_url: str, session_token: str, budget: Budget) -> ExecResult:
        watchdog = WATCHDOG.replace("MAX_STEPS", str(budget.max_turns))
        return run_program(
            sandbox,
            ["bash", "-c", watchdog, "codex", *self.command()],
            issue=task.problem_statement,
            budget=budget,
            env=self.environment(session_token),
            home_files={CONFIG_PATH: toml_document(self.config(gateway_url))},
            max_output_bytes=5_000_000,
        )

    def scripted_replies(self, shell_command: str) -> list[str]:
        """Model replies (gateway text format) that run ``shell_command`` with ``exec_command``, then stop."""
        from legorl.harnesses.scripted import tool_call

        return [tool_call(SHELL_TOOL, {"cmd": shell_command}), "The fix is in place."]

    def collect(self, sandbox: Sandbox, res: ExecResult, budget: Budget) -> HarnessResult:
        events = json_lines(res.stdout)
        items = [e.get("item") or {} for e in events if e.get("type") == "item.completed"]
        failed = [e for e in events if e.get("type") == "turn.failed"]
        errors = [str((e.get("error") or {}).get("message", "")) for e in failed]
        errors += [str(e.get("message", "")) for e in events if e.get("type") == "error"]
        completed = next((e for e in reversed(events) if e.get("type") == "turn.completed"), None)
        summary: dict[str, Any] = {
            "events": len(events),
            "steps": sum(1 for it in items if it.get("type") in TOOL_ITEMS),
            "commands": [it.get("command") for it in items if it.get("type") == "command_execution"],
            "warnings": [str(it.get("message", ""))[:300] for it in items if it.get("type") == "error"],
            "errors": [m[:500] for m in dict.fromkeys(errors)],
            "text": "".join(str(it.get("text", "")) for it in items if it.get("type") == "agent_message")[-2000:],
            "usage": (completed or {}).get("usage"),
            "stopped_by_step_budget": any(e.get("type") == BUDGET_EVENT for e in events),
        }
        ending: HarnessEnding
        if res.timed_out:
            ending = "timeout"
        elif summary["stopped_by_step_budget"]:
            ending = "budget"
        elif completed is not None and not failed and res.exit_code == 0:
            ending = "finished"
        elif failed and all(CUT_ANSWER in m for m in errors):
            ending = "budget"  # the gateway cut an answer at the per-call token budget: the policy's outcome
        elif any(e.get("type") == UNREACHABLE_EVENT for e in events):
            ending = "crashed"
            summary["cause"] = f"Codex could not connect to the gateway ({UNREACHABLE_TRIES} tries); stopped"
        else:
            ending = "crashed"
            cause = fault_cause(res) or (summary["errors"][-1] if summary["errors"] else None)
            summary["cause"] = cause or f"exit code {res.exit_code} without a finished turn"
        return HarnessResult(
            ending=ending, exit_code=res.exit_code, transcript=res.stdout, log_tail=res.stderr[-3000:], summary=summary
        )
