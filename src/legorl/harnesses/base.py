"""The harness interface: how to install, launch and read one agent program inside a sandbox.

A harness adapter is one module exporting one class that satisfies :class:`Harness`. The program
itself is never modified: the adapter only sets its configuration (base URL, token, the variables
that keep it from calling any other host, budgets) and reads what it leaves behind.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Protocol, runtime_checkable

from legorl.sandbox.base import ExecResult, Sandbox
from legorl.tasks.model import Task

HarnessEnding = Literal["finished", "budget", "timeout", "crashed"]


@dataclass(frozen=True)
class Budget:
    """A rollout's budget. The adapter tells the harness (its own step/token settings), and the
    gateway enforces it on every call of the rollout's session whatever the harness does
    (:class:`legorl.gateway.sessions.SessionBudget`, built with ``SessionBudget.from_budget``):

    * ``max_turns`` — the harness's agent steps; the gateway serves ``max_turns + turn_slack`` model
      calls in all (every thread and segment), ``turn_slack`` None meaning
      ``max(2, ceil(max_turns / 4))`` for an honest harness's side calls (titles, summaries);
    * ``max_tokens_per_turn`` — clip of every call's ``max_tokens``;
    * ``max_total_tokens`` — generated tokens over the whole rollout (None: only the two above);
    * ``max_concurrent_requests`` — calls of the session in flight at once (more are refused, 429).
    """

    max_turns: int = 3
    max_tokens_per_turn: int = 512
    wall_clock_s: float = 600.0
    temperature: float = 1.0
    max_total_tokens: int | None = None
    max_concurrent_requests: int = 8
    turn_slack: int | None = None


@dataclass(frozen=True)
class HarnessInstall:
    """What the harness needs inside the sandbox, built once into a cached image layer keyed by
    this record (pinned versions), and mounted read-only — never installed at rollout time."""

    kind: Literal["none", "npm", "pip-venv"] = "none"
    packages: tuple[str, ...] = ()  # pinned: "@anthropic-ai/claude-code@2.1.197", "mini-swe-agent==1.2.3"
    python: str | None = None  # pip-venv: the interpreter that makes the venv, e.g. "python3.12"
    mount: str = "/opt/legorl-harness"  # where the layer appears inside the sandbox


@dataclass
class HarnessResult:
    ending: HarnessEnding
    exit_code: int | None
    transcript: str  # the harness's own output (stdout / its transcript file), for the UI
    log_tail: str = ""
    summary: dict = field(default_factory=dict)


@runtime_checkable
class Harness(Protocol):
    name: str
    dialect: str  # the wire API it speaks, e.g. "openai.chat", "anthropic.messages"
    install: HarnessInstall

    def launch(self, task: Task, sandbox: Sandbox, gateway_url: str, session_token: str, budget: Budget) -> ExecResult:
        """Run the harness inside ``sandbox`` until it exits or the wall-clock budget ends."""

    def collect(self, sandbox: Sandbox, result: ExecResult, budget: Budget) -> HarnessResult:
        """Read the harness's transcript and classify how it ended; never raises for the agent's failures."""


def run_harness(
    harness: Harness, task: Task, sandbox: Sandbox, gateway_url: str, session_token: str, budget: Budget
) -> HarnessResult:
    return harness.collect(sandbox, harness.launch(task, sandbox, gateway_url, session_token, budget), budget)
