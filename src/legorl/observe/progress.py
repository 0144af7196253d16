"""Live progress inside long phases: a step's rollouts, its training, a held-out evaluation.

A step of a real run takes minutes; per-step summary lines alone leave the user in silence between
them. The loop reports phases to a :class:`PhaseProgress`: ``begin`` a phase (with the number of
rollouts it waits for, or none for training), ``rollout_done`` for each finished rollout. The
command line shows them as one rich progress bar on stderr — rollouts done/total, sampled tokens
per second, elapsed time and ETA — while summary lines print above it. Where the console is not a
terminal (a log file, CI), a bar cannot redraw: the same figures print as plain lines instead, at
the start of each phase and at each quarter of its rollouts.
"""

from __future__ import annotations

import time
from types import TracebackType
from typing import Protocol

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from legorl.trajectory.records import Rollout

__all__ = ["NoProgress", "PhaseProgress", "RichPhaseProgress", "StepClock", "sampled_tokens"]


def sampled_tokens(rollout: Rollout) -> int:
    """Tokens the engine sampled for this rollout (what its samples train on)."""
    return sum(s.num_sampled for s in rollout.samples)


class StepClock:
    """ETA of a run's remaining training steps from the durations of the steps seen so far (not
    from the wall time since start, which would count a held-out evaluation before the first step)."""

    def __init__(self, total_steps: int) -> None:
        self.total_steps = total_steps
        self._durations: list[float] = []

    def eta_s(self, step: int, step_s: float) -> float:
        """After 0-based ``step`` took ``step_s`` seconds: seconds left for the steps after it."""
        self._durations.append(step_s)
        return sum(self._durations) / len(self._durations) * max(0, self.total_steps - step - 1)


class PhaseProgress(Protocol):
    def begin(self, label: str, total: int | None = None) -> None:
        """A phase starts: ``total`` rollouts to wait for, or None (e.g. the optimiser step)."""

    def rollout_done(self, rollout: Rollout) -> None:
        """One rollout of the current phase finished (any status)."""


class NoProgress:
    """Reports nothing (library use, tests)."""

    def begin(self, label: str, total: int | None = None) -> None:
        return None

    def rollout_done(self, rollout: Rollout) -> None:
        return None


class RichPhaseProgress:
    """One progress bar for the current phase. Use as a context manager; print summary lines
    through :attr:`console` so they appear above the bar."""

    def __init__(self, console: Console | None = None) -> None:
        self.console = console or Console(stderr=True)
        self._bar = Progress(
            SpinnerColumn(),
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[rate]}"),
            TimeElapsedColumn(),
            TextColumn("ETA"),
            TimeRemainingColumn(),
            console=self.console,
            transient=True,
        )
        self._task: TaskID | None = None
        self._label, self._done = "", 0
        self._total: int | None = None
        self._tokens = 0
        self._t0 = time.monotonic()

    def __enter__(self) -> RichPhaseProgress:
        self._bar.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._bar.stop()

    def begin(self, label: str, total: int | None = None) -> None:
        if self._task is not None:
            self._bar.remove_task(self._task)
        self._tokens, self._t0 = 0, time.monotonic()
        self._task = self._bar.add_task(label, total=total, rate="")
        self._label, self._total, self._done = label, total, 0
        if not self.console.is_terminal:
            self.console.print(f"{label}" + (f": {total} rollouts" if total else ""))

    def rollout_done(self, rollout: Rollout) -> None:
        if self._task is None:
            return
        self._tokens += sampled_tokens(rollout)
        self._done += 1
        elapsed = max(time.monotonic() - self._t0, 1e-6)
        rate = self._tokens / elapsed
        self._bar.update(self._task, advance=1, rate=f"{rate:.1f} tok/s")
        total = self._total
        if not self.console.is_terminal and total and self._done * 4 // total > (self._done - 1) * 4 // total:
            eta = elapsed / self._done * (total - self._done)
            self.console.print(
                f"  {self._label}: {self._done}/{total} rollouts, {rate:.1f} tok/s, "
                f"{elapsed:.0f} s elapsed, ETA {eta:.0f} s"
            )

    @property
    def tasks(self) -> list[tuple[str, float, float | None, str]]:
        """(description, completed, total, rate) of the live phase: what the bar shows."""
        return [(t.description, t.completed, t.total, str(t.fields.get("rate", ""))) for t in self._bar.tasks]
