"""Adapter for the OpenHands SDK (PyPI ``openhands-sdk`` + ``openhands-tools``, pinned) in a Python 3.12
venv layer, driven by :mod:`legorl.harnesses.openhands_driver` (run by the layer's interpreter).

Options: ``tools`` (reduced tool set, default only the terminal: the OpenHands system prompt plus
three tools overflows an 8k-context model), the step budget is ``Budget.max_turns``
(``max_iteration_per_run``), ``max_input_tokens`` (context limit told to the SDK). LiteLLM's cost map is
local, telemetry off; the gateway is the only host it knows.
"""

from __future__ import annotations

import json
from pathlib import Path

from legorl.harnesses.base import Budget, HarnessInstall, HarnessResult
from legorl.harnesses.common import ISSUE_PATH, result, run_program, split_transcript
from legorl.sandbox.base import ExecResult, Sandbox
from legorl.tasks.model import Task

VERSION = "1.58.2"
DRIVER = Path(__file__).resolve().with_name("openhands_driver.py")
TRANSCRIPT = "/tmp/openhands.json"


class OpenHandsHarness:
    name = "openhands"
    dialect = "openai.chat"

    def __init__(
        self,
        tools: tuple[str, ...] | list[str] | str = ("terminal",),
        version: str = VERSION,
        python: str = "python3.12",
        max_input_tokens: int = 0,
        model: str = "policy",
        llm_timeout_s: int = 1800,
    ):
        self.tools = tuple(tools.split(",")) if isinstance(tools, str) else tuple(tools)
        self.install = HarnessInstall(
            kind="pip-venv", python=python, packages=(f"openhands-sdk=={version}", f"openhands-tools=={version}")
        )
        self.max_input_tokens = max_input_tokens
        self.model = model
        self.llm_timeout_s = llm_timeout_s  # LiteLLM's per-call timeout (its default is too short for CPU engines)

    def env(self, token: str) -> dict[str, str]:
        return {
            "LEGORL_API_KEY": token,
            "LITELLM_LOCAL_MODEL_COST_MAP": "True",
            "LITELLM_TELEMETRY": "False",
            "LITELLM_LOG": "ERROR",
            "OPENHANDS_SUPPRESS_BANNER": "1",
            "OH_ENABLE_TELEMETRY": "false",
            "LMNR_PROJECT_API_KEY": "",
            "OTEL_SDK_DISABLED": "true",
            "TOKENIZERS_PARALLELISM": "false",
        }

    def argv(self, gateway_url: str, budget: Budget) -> list[str]:
        # values attached to their options: none can be taken for an option; the token is in the env
        return [
            f"{self.install.mount}/venv/bin/python",
            "-I",
            str(DRIVER),
            f"--base-url={gateway_url}",
            f"--model={self.model}",
            f"--issue-file={ISSUE_PATH}",
            "--workspace=/workspace",
            f"--max-steps={budget.max_turns}",
            f"--max-tokens={budget.max_tokens_per_turn}",
            f"--max-input-tokens={self.max_input_tokens}",
            f"--temperature={budget.temperature}",
            f"--tools={','.join(self.tools)}",
            f"--llm-timeout={self.llm_timeout_s}",
            f"--out={TRANSCRIPT}",
        ]

    def launch(self, task: Task, sandbox: Sandbox, gateway_url: str, session_token: str, budget: Budget) -> ExecResult:
        return run_program(
            sandbox,
            self.argv(gateway_url, budget),
            issue=task.problem_statement,
            budget=budget,
            env=self.env(session_token),
            transcript_path=TRANSCRIPT,
        )

    def collect(self, sandbox: Sandbox, res: ExecResult, budget: Budget) -> HarnessResult:
        out, transcript = split_transcript(res.stdout)
        summary: dict = {}
        try:
            data = json.loads(transcript) if transcript.strip() else {}
            summary = {k: data.get(k) for k in ("status", "finished", "steps", "error")}
        except json.JSONDecodeError:
            data = {}
        if summary.get("error"):
            summary["cause"] = f"openhands driver: {summary['error']}"
        finished = None if not data else bool(data.get("finished"))
        return result(res, transcript or out, finished, summary)

    def scripted_replies(self, shell_command: str) -> list[str]:
        from legorl.harnesses.scripted import tool_call

        return [
            tool_call("terminal", {"command": shell_command, "security_risk": "LOW", "summary": "apply the fix"}),
            tool_call("finish", {"message": "Fixed the bug.", "summary": "done"}),
        ]
