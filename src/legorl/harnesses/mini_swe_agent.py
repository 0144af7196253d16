"""Adapter for mini-swe-agent (PyPI ``mini-swe-agent``, pinned), run unmodified from a venv layer.

Runs ``python -m minisweagent.run.mini -t TASK --yolo --exit-immediately -o /tmp/traj.json`` with the
built-in ``mini.yaml`` (native ``bash`` tool calls) or ``mini_textbased.yaml`` (``tool_calling=False``:
actions in a ```mswea_bash_command fence, parsed by mini itself), pointed at the gateway with
``-c model.model_kwargs.api_base=.../v1``. The step budget is ``agent.step_limit`` (= ``Budget.max_turns``),
cost limits are off, and every variable that would make it (or LiteLLM) call another host is set.
The trajectory (``traj.json``) is the transcript; ``info.exit_status == "Submitted"`` means finished.
"""

from __future__ import annotations

import json

from legorl.harnesses.base import Budget, HarnessInstall, HarnessResult
from legorl.harnesses.common import (
    HARNESS_HOME,
    ISSUE_PLACEHOLDER,
    result,
    run_program,
    split_transcript,
)
from legorl.sandbox.base import ExecResult, Sandbox
from legorl.tasks.model import Task

VERSION = "2.4.6"
TRAJ = "/tmp/traj.json"
SUBMIT = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"
# exit statuses that end the run because of what the model wrote (an agent outcome, not a failure)
MODEL_ENDINGS = ("RepeatedFormatError",)
MSWEA_CONFIG_DIR = f"{HARNESS_HOME}/.config/mini-swe-agent"


class MiniSweAgentHarness:
    name = "mini-swe-agent"
    dialect = "openai.chat"

    def __init__(
        self,
        tool_calling: bool = True,
        version: str = VERSION,
        python: str = "python3.12",
        command_timeout: int = 60,
        model: str = "policy",
        extra_config: tuple[str, ...] = (),
    ):
        self.tool_calling = tool_calling
        self.install = HarnessInstall(kind="pip-venv", packages=(f"mini-swe-agent=={version}",), python=python)
        self.command_timeout = command_timeout
        self.model = model
        self.extra_config = tuple(extra_config)  # more "-c key=value" specs (context limits, templates, ...)

    def env(self, session_token: str) -> dict[str, str]:
        # LiteLLM's openai/ provider reads the key from OPENAI_API_KEY: the token never goes on argv.
        return {
            "MSWEA_CONFIGURED": "true",
            "MSWEA_COST_TRACKING": "ignore_errors",
            "MSWEA_SILENT_STARTUP": "1",
            "MSWEA_GLOBAL_CONFIG_DIR": MSWEA_CONFIG_DIR,
            "LITELLM_LOCAL_MODEL_COST_MAP": "True",
            "LITELLM_TELEMETRY": "False",
            "LITELLM_LOG": "ERROR",
            "HF_DATASETS_OFFLINE": "1",
            "OPENAI_API_KEY": session_token,
        }

    def argv(self, gateway_url: str, budget: Budget) -> list[str]:
        py = f"{self.install.mount}/venv/bin/python"
        config = "mini.yaml" if self.tool_calling else "mini_textbased.yaml"
        specs = [
            config,
            f"model.model_kwargs.api_base={gateway_url}",
            f"model.model_kwargs.max_tokens={budget.max_tokens_per_turn}",
            f"model.model_kwargs.temperature={budget.temperature}",
            f"agent.step_limit={budget.max_turns}",
            "agent.cost_limit=0",
            f"environment.timeout={self.command_timeout}",
            "environment.cwd=/workspace",
        ]
        if not self.tool_calling:
            specs.append("model.model_class=litellm_textbased")
        specs += list(self.extra_config)
        # Values are attached to their options (``--task=...``): an issue starting with "-" stays a value.
        argv = [
            py,
            "-E",  # mini itself ignores the task env's PYTHONPATH; the commands it runs keep it
            "-m",
            "minisweagent.run.mini",
            f"--task={ISSUE_PLACEHOLDER}",
            "--yolo",
            "--exit-immediately",
            f"--output={TRAJ}",
            f"--model=openai/{self.model}",
        ]
        argv += [f"--config={spec}" for spec in specs]
        return argv

    def launch(self, task: Task, sandbox: Sandbox, gateway_url: str, session_token: str, budget: Budget) -> ExecResult:
        return run_program(
            sandbox,
            self.argv(gateway_url, budget),
            issue=task.problem_statement,
            budget=budget,
            env=self.env(session_token),
            transcript_path=TRAJ,
            pre=f"mkdir -p {MSWEA_CONFIG_DIR}",
        )

    def collect(self, sandbox: Sandbox, res: ExecResult, budget: Budget) -> HarnessResult:
        out, transcript = split_transcript(res.stdout)
        summary: dict = {}
        try:
            info = json.loads(transcript).get("info", {}) if transcript.strip() else {}
            summary = {
                "exit_status": info.get("exit_status"),
                "api_calls": (info.get("model_stats") or {}).get("api_calls"),
            }
        except (json.JSONDecodeError, AttributeError):
            summary = {"exit_status": None}
        status = summary.get("exit_status")
        # RepeatedFormatError: mini stopped because the *model's* replies broke its format several
        # times in a row. That is the policy's outcome (graded, reward from the diff, in the
        # gradient), not a harness failure: dropping it would hide exactly what RL must punish.
        finished = None if status is None else status in ("Submitted", *MODEL_ENDINGS)
        if status in MODEL_ENDINGS:
            summary["model_ending"] = status
        elif status and status not in ("Submitted", "LimitsExceeded"):
            summary["cause"] = f"mini-swe-agent exit status {status}"
        r = result(res, transcript or out, finished, summary)
        if status and status not in ("Submitted", "LimitsExceeded", *MODEL_ENDINGS) and r.ending == "budget":
            r.ending = "crashed"
        return r

    def scripted_replies(self, shell_command: str) -> list[str]:
        from legorl.harnesses.scripted import tool_call

        if self.tool_calling:
            return [
                f"I will apply the fix.\n{tool_call('bash', {'command': shell_command})}",
                f"Done, submitting.\n{tool_call('bash', {'command': SUBMIT})}",
            ]
        return [
            f"I will apply the fix.\n\n```mswea_bash_command\n{shell_command}\n```",
            f"Done, submitting.\n\n```mswea_bash_command\n{SUBMIT}\n```",
        ]
