"""Adapter for aider (PyPI ``aider-chat``, pinned; Python 3.10-3.12) run unmodified from a venv layer.

Command (inside the sandbox, cwd ``/workspace``; ``-I`` so that a repository module never shadows
one of aider's)::

    <mount>/venv/bin/python -I -m aider --model=openai/M --edit-format=whole \\
        --message-file=/tmp/ISSUE.md --yes-always --no-auto-commits ...

One ``--message`` is one aider turn: the model answers with edits in the edit format (``whole``:
each changed file in full after its path; ``diff``: SEARCH/REPLACE blocks), aider applies them,
and when it has something to say back (a file the model named was added to the chat, an edit
did not apply) it asks again, at most ``1 + 3`` reflections; then it exits. ``--yes-always``
answers aider's own questions (add the files the model names, edit a file not yet in the chat);
shell commands the model suggests are never run (they need an explicit yes, and
``--no-suggest-shell-commands``), URLs in the issue are never fetched (``--no-detect-urls``).

Endpoint: LiteLLM's ``openai/`` provider, ``OPENAI_API_BASE`` = the gateway's ``/v1`` and
``OPENAI_API_KEY`` = the session token, both from the environment; the launch script copies them
into an env file passed as ``--env-file``, which aider loads last, so a ``.env`` in the repository
cannot point it elsewhere. Every other setting is a command-line option, which wins over any
``.aider.conf.yml`` the repository holds. The model's settings (``--model-settings-file``: edit
format, temperature = ``Budget.temperature``, ``max_tokens`` = ``Budget.max_tokens_per_turn``)
and metadata (``--model-metadata-file``: the context window, zero cost) live in the generated
home, so aider never fetches a model list. No git commits (``--no-auto-commits
--no-dirty-commits``: the workspace diff is taken by the sandbox against its base commit), no
``.gitignore`` edit, history files in ``/tmp``; no analytics, update check, release notes,
linting or tests. ``map_tokens`` > 0 turns aider's repository map on; its tags cache
(``.aider.tags.cache.v4/`` at the repository root) is then kept out of the diff by
``.git/info/exclude``.

Budgets: ``max_tokens`` per call as above; aider has no turn option (one message, at most three
reflections), so ``Budget.max_turns`` is the gateway's limit alone. ``collect``: ``timeout``;
``crashed`` for a non-zero exit or a fault signal; ``budget`` when aider stopped at its reflection
limit; else ``finished``. The chat history file (``/tmp/aider.chat.history.md``) is the transcript.
"""

from __future__ import annotations

import difflib
import json
import shlex
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from legorl.harnesses.base import Budget, HarnessInstall, HarnessResult
from legorl.harnesses.common import HARNESS_HOME, ISSUE_PATH, result, run_program, split_transcript
from legorl.sandbox.base import ExecResult, Sandbox
from legorl.tasks.model import Task

VERSION = "0.86.2"
EDIT_FORMATS = ("whole", "diff")
CHAT_HISTORY = "/tmp/aider.chat.history.md"
ENV_FILE = f"{HARNESS_HOME}/.aider.legorl.env"
SETTINGS_FILE = ".aider.model.settings.yml"  # relative to the generated home
METADATA_FILE = ".aider.model.metadata.json"
REFLECTION_LIMIT = "reflections allowed, stopping"  # aider's warning when it gives up on a turn

QUIET_ENV = {
    "AIDER_ANALYTICS": "false",
    "AIDER_CHECK_UPDATE": "false",
    "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    "LITELLM_TELEMETRY": "False",
    "LITELLM_LOG": "ERROR",
    "TOKENIZERS_PARALLELISM": "false",
}


class AiderHarness:
    name = "aider"
    dialect = "openai.chat"

    def __init__(
        self,
        *,
        edit_format: str = "whole",
        model: str = "policy",
        context_window: int = 8192,
        map_tokens: int = 0,
        version: str = VERSION,
        python: str = "python3.12",
        extra_args: Sequence[str] = (),
    ) -> None:
        """``edit_format``: ``whole`` (whole files; what a small model manages) or ``diff``
        (SEARCH/REPLACE blocks). ``context_window``: the model's input limit as aider sees it (it
        refuses a prompt over it). ``map_tokens``: the repository map's size (0: no map)."""
        if edit_format not in EDIT_FORMATS:
            raise ValueError(f"aider edit_format must be one of {', '.join(EDIT_FORMATS)}, got {edit_format!r}")
        self.edit_format = edit_format
        self.model = model
        self.context_window = context_window
        self.map_tokens = map_tokens
        self.install = HarnessInstall(kind="pip-venv", packages=(f"aider-chat=={version}",), python=python)
        self.extra_args = tuple(extra_args)

    @property
    def litellm_model(self) -> str:
        return f"openai/{self.model}"

    def model_settings(self, budget: Budget) -> list[dict[str, Any]]:
        return [
            {
                "name": self.litellm_model,
                "edit_format": self.edit_format,
                "weak_model_name": self.litellm_model,
                "editor_model_name": self.litellm_model,
                "use_repo_map": self.map_tokens > 0,
                "use_temperature": float(budget.temperature),
                "extra_params": {"max_tokens": budget.max_tokens_per_turn},
            }
        ]

    def model_metadata(self, budget: Budget) -> dict[str, dict[str, Any]]:
        return {
            self.litellm_model: {
                "max_input_tokens": self.context_window,
                "max_output_tokens": budget.max_tokens_per_turn,
                "max_tokens": budget.max_tokens_per_turn,
                "input_cost_per_token": 0.0,
                "output_cost_per_token": 0.0,
                "litellm_provider": "openai",
                "mode": "chat",
            }
        }

    def home_files(self, budget: Budget) -> dict[str, str]:
        # JSON is YAML: the settings file needs no YAML writer
        return {
            SETTINGS_FILE: json.dumps(self.model_settings(budget), indent=2),
            METADATA_FILE: json.dumps(self.model_metadata(budget), indent=2),
        }

    def argv(self) -> list[str]:
        # every value attached to its option; the issue comes from a file, the token from the env file
        return [
            f"{self.install.mount}/venv/bin/python",
            "-I",
            "-m",
            "aider",
            f"--model={self.litellm_model}",
            f"--weak-model={self.litellm_model}",
            f"--editor-model={self.litellm_model}",
            f"--edit-format={self.edit_format}",
            f"--map-tokens={self.map_tokens}",
            f"--message-file={ISSUE_PATH}",
            f"--env-file={ENV_FILE}",
            f"--model-settings-file={HARNESS_HOME}/{SETTINGS_FILE}",
            f"--model-metadata-file={HARNESS_HOME}/{METADATA_FILE}",
            f"--chat-history-file={CHAT_HISTORY}",
            f"--input-history-file={HARNESS_HOME}/.aider.input.history",
            "--yes-always",
            "--no-auto-commits",
            "--no-dirty-commits",
            "--no-gitignore",
            "--no-restore-chat-history",
            "--no-analytics",
            "--no-check-update",
            "--no-show-release-notes",
            "--no-show-model-warnings",
            "--no-check-model-accepts-settings",
            "--no-pretty",
            "--no-fancy-input",
            "--no-auto-lint",
            "--no-auto-test",
            "--no-suggest-shell-commands",
            "--no-detect-urls",
            "--disable-playwright",
            "--encoding=utf-8",
            *self.extra_args,
        ]

    def env(self, gateway_url: str, session_token: str) -> dict[str, str]:
        return {**QUIET_ENV, "OPENAI_API_BASE": gateway_url, "OPENAI_API_KEY": session_token}

    def prelude(self) -> str:
        """Shell lines run before aider: the env file it loads last (from the environment: the token
        never appears in the script), and with a repository map, its cache kept out of git."""
        env_file = shlex.quote(ENV_FILE)
        lines = [
            f'(umask 077; printf \'OPENAI_API_BASE=%s\\nOPENAI_API_KEY=%s\\n\' "$OPENAI_API_BASE" "$OPENAI_API_KEY" > {env_file})'
        ]
        if self.map_tokens > 0:
            lines.append("[ -d .git/info ] && echo '.aider*' >> .git/info/exclude")
        return "\n".join(lines)

    def launch(self, task: Task, sandbox: Sandbox, gateway_url: str, session_token: str, budget: Budget) -> ExecResult:
        return run_program(
            sandbox,
            self.argv(),
            issue=task.problem_statement,
            budget=budget,
            env=self.env(gateway_url, session_token),
            transcript_path=CHAT_HISTORY,
            pre=self.prelude(),
            home_files=self.home_files(budget),
        )

    def collect(self, sandbox: Sandbox, res: ExecResult, budget: Budget) -> HarnessResult:
        out, transcript = split_transcript(res.stdout)
        gave_up = REFLECTION_LIMIT in out
        summary = {"reflection_limit": gave_up, "output": out[-2000:]}
        return result(res, transcript or out, finished=False if gave_up else None, summary=summary)

    def gold_replies(self, task: Any, wrong: bool = False) -> list[str]:
        """The model's answer (in this adapter's edit format) that writes the gold fix, or a wrong one."""
        from legorl.harnesses.scripted import fix_files

        files = fix_files(task, wrong)
        if self.edit_format == "whole":
            blocks = [f"{rel}\n```\n{_line_end(text)}```\n" for rel, text in files.items()]
        else:
            before = {rel: (Path(task.source_dir) / rel).read_text() for rel in files}
            blocks = [search_replace_blocks(rel, before[rel], after) for rel, after in files.items()]
        return ["Here is the fix.\n\n" + "\n".join(blocks)]


def search_replace_blocks(path: str, before: str, after: str, context: int = 2) -> str:
    """aider's SEARCH/REPLACE blocks that turn ``before`` into ``after``, one per changed region
    (with ``context`` unchanged lines around it, so that each SEARCH text is found where it belongs)."""
    old, new = before.splitlines(keepends=True), after.splitlines(keepends=True)
    blocks = []
    for group in difflib.SequenceMatcher(a=old, b=new, autojunk=False).get_grouped_opcodes(context):
        i1, i2, j1, j2 = group[0][1], group[-1][2], group[0][3], group[-1][4]
        search, replace = "".join(old[i1:i2]), "".join(new[j1:j2])
        blocks.append(
            f"{path}\n```\n<<<<<<< SEARCH\n{_line_end(search)}=======\n{_line_end(replace)}>>>>>>> REPLACE\n```\n"
        )
    return "\n".join(blocks)


def _line_end(text: str) -> str:
    return text if not text or text.endswith("\n") else text + "\n"
