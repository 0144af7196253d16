"""The harness interface: how to launch one agent program inside a sandbox against the gateway."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Protocol, runtime_checkable

from legorl.sandbox.base import Sandbox
from legorl.tasks.model import Task

HarnessEnding = Literal["finished", "budget", "timeout", "crashed"]


@dataclass(frozen=True)
class Budget:
    max_turns: int = 3
    max_tokens_per_turn: int = 512
    wall_clock_s: float = 600.0
    temperature: float = 1.0


@dataclass
class HarnessResult:
    ending: HarnessEnding
    exit_code: int | None
    transcript: str  # the harness's own output (stdout), for the UI
    log_tail: str = ""
    summary: dict = field(default_factory=dict)


@runtime_checkable
class Harness(Protocol):
    name: str
    dialect: str  # the wire API it speaks, e.g. "openai.chat"

    def run(self, task: Task, sandbox: Sandbox, base_url: str, session_token: str, budget: Budget) -> HarnessResult:
        """Run the harness to its end inside ``sandbox``; never raises for the agent's own failures."""
