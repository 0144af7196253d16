"""``legorl tasks filter``: pass-rate pre-filtering of a suite with pilot rollouts.

A task every rollout solves, or none does, gives a GSPO group no reward variance and so no gradient.
Agentic RL recipes therefore measure each task's pass rate first and train on the tasks solved
sometimes. Here: ``samples`` pilot rollouts of every task (the config's harness, budget, sandbox and
grading; any engine of ``legorl eval``, through :func:`legorl.loop.eval.run_samples`), then a suite
of the tasks solved between ``min_solved`` and ``max_solved`` times, each record carrying its
:class:`~legorl.tasks.model.PassRate`.

The output directory (``out``)::

    spec.json      what the pilots ran (harness, engine, model, checkpoint, seed, rollout budget,
                   grading): a rerun must match
    pilot.jsonl    one PilotResult a line, appended (and flushed) as each rollout ends
    run/           the pilot rollouts' run store (turns, samples: `legorl export`, `legorl ui`)
    suite.jsonl    the kept tasks (a record file: `suite: OUT/suite.jsonl`, `legorl tasks list OUT/suite.jsonl`)
    report.json    every task's counts and verdict (FilterReport)

Resume: a rerun reads ``pilot.jsonl`` and runs only the (task, sample index) pairs without a
counted result. Results that do not count (``env_failure``, ``harness_error``: they say nothing
about the task, as in evaluation) are retried by a rerun; a task still short of ``samples`` counted
rollouts is left out of the suite as incomplete, never judged on fewer samples.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from legorl.config import RunConfig
from legorl.errors import ConfigError
from legorl.loop.eval import run_samples
from legorl.loop.eval_stats import COUNTED_STATUSES
from legorl.observe.progress import PhaseProgress
from legorl.tasks.loader import run_tasks
from legorl.tasks.model import PassRate, Task
from legorl.trajectory.records import Rollout

SPEC, PILOT, RUN, SUITE, REPORT = "spec.json", "pilot.jsonl", "run", "suite.jsonl", "report.json"


class FilterSpec(BaseModel):
    """What produced the pilot results in a directory; a rerun with another spec would mix policies."""

    harness: str
    engine: str
    model: str
    checkpoint: str | None = None
    seed: int
    rollout: dict[str, Any] = Field(default_factory=dict)  # the config's rollout section: budget, sampling
    grading: dict[str, Any] = Field(default_factory=dict)


class PilotResult(BaseModel):
    """One finished pilot rollout."""

    task_id: str
    sample: int  # the sample index (0 .. samples-1)
    status: str
    reward: float
    rollout_id: str
    cause: str | None = None
    duration_s: float = 0.0

    @property
    def counts(self) -> bool:
        return self.status in COUNTED_STATUSES

    @property
    def solved(self) -> bool:
        return self.counts and self.reward > 0  # as evaluation counts a correct sample


Verdict = Literal["kept", "too_easy", "too_hard", "incomplete"]


class TaskVerdict(BaseModel):
    task_id: str
    solved: int
    samples: int  # counted pilot rollouts
    uncounted: int  # samples still without a counted result (env failures, harness crashes)
    verdict: Verdict


class FilterReport(BaseModel):
    suite: str  # the suite filtered
    out_suite: str  # the written suite file
    spec: FilterSpec
    samples: int
    min_solved: int
    max_solved: int
    ran: int = 0  # pilot rollouts run by this invocation (the rest came from pilot.jsonl)
    tasks: list[TaskVerdict] = Field(default_factory=list)

    @property
    def kept(self) -> list[TaskVerdict]:
        return [t for t in self.tasks if t.verdict == "kept"]


def read_results(path: Path) -> list[PilotResult]:
    """The pilot results in ``path`` (none if it does not exist); a torn last line (a kill
    mid-write) is ignored: that rollout simply runs again."""
    if not path.is_file():
        return []
    out = []
    lines = path.read_text(encoding="utf-8").splitlines()
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            out.append(PilotResult.model_validate_json(line))
        except ValueError:
            if i == len(lines) - 1:
                continue
            raise ConfigError(f"{path}:{i + 1}: not a pilot result") from None
    return out


def latest_counted(results: Iterable[PilotResult]) -> dict[tuple[str, int], PilotResult]:
    """The counted result of each (task, sample index); a later one replaces an earlier one."""
    return {(r.task_id, r.sample): r for r in results if r.counts}


def judge(task_id: str, results: Sequence[PilotResult], samples: int, min_solved: int, max_solved: int) -> TaskVerdict:
    """A task's verdict from its counted results of sample indices 0..samples-1."""
    solved = sum(r.solved for r in results)
    missing = samples - len(results)
    if missing > 0:
        verdict: Verdict = "incomplete"
    elif solved < min_solved:
        verdict = "too_hard"
    elif solved > max_solved:
        verdict = "too_easy"
    else:
        verdict = "kept"
    return TaskVerdict(task_id=task_id, solved=solved, samples=len(results), uncounted=max(0, missing), verdict=verdict)


def _check_spec(out: Path, spec: FilterSpec) -> None:
    path = out / SPEC
    if path.is_file():
        old = FilterSpec.model_validate_json(path.read_text(encoding="utf-8"))
        if old != spec:
            differ = [k for k in FilterSpec.model_fields if getattr(old, k) != getattr(spec, k)]
            raise ConfigError(
                f"{out} holds pilot rollouts of another {', '.join(differ)} ({SPEC}): "
                "use another --out (or remove it to start over)"
            )
        return
    out.mkdir(parents=True, exist_ok=True)
    _write_whole(path, spec.model_dump_json(indent=2))


def _write_whole(path: Path, text: str) -> None:
    """Through a temporary sibling and a rename: a reader (or a kill) never leaves half a file."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


async def filter_suite(
    cfg: RunConfig,
    out: Path,
    *,
    samples: int,
    min_solved: int = 1,
    max_solved: int | None = None,
    engine: str = "embedded",
    checkpoint: Path | None = None,
    concurrency: int = 8,
    progress: PhaseProgress | None = None,
) -> FilterReport:
    """Pilot ``samples`` rollouts of every task of ``cfg.suite`` (``cfg.task_ids``/``task_repos``)
    not yet in ``out/pilot.jsonl``, then write the suite of tasks solved ``min_solved`` to
    ``max_solved`` (default ``samples - 1``) times. A suite marked as an evaluation set is refused
    as in training (``allow_eval_suite``): the filtered suite is meant to be trained on."""
    max_solved = samples - 1 if max_solved is None else max_solved
    if samples < 1:
        raise ConfigError("--samples must be at least 1")
    if not 0 <= min_solved <= max_solved <= samples:
        raise ConfigError(f"need 0 <= min_solved <= max_solved <= samples, got {min_solved}, {max_solved}, {samples}")
    tasks = run_tasks(cfg, training=True)
    spec = FilterSpec(
        harness=cfg.rollout.harness,
        engine=engine,
        model=cfg.engine.model if engine == "embedded" else "scripted",
        checkpoint=str(checkpoint.resolve()) if checkpoint is not None else None,
        seed=cfg.seed,
        rollout=cfg.rollout.model_dump(mode="json"),
        grading=cfg.grading.model_dump(mode="json"),
    )
    _check_spec(out, spec)
    pilot = out / PILOT
    done = latest_counted(read_results(pilot))
    work = [(t, g) for t in tasks for g in range(samples) if (t.instance_id, g) not in done]

    def record(r: Rollout) -> None:  # on disk as it ends: an interrupted filter loses no finished rollout
        line = PilotResult(
            task_id=r.task_id,
            sample=r.group_index,
            status=r.status,
            reward=r.reward,
            rollout_id=r.rollout_id,
            cause=r.cause,
            duration_s=round(r.duration_s, 3),
        ).model_dump_json()
        with pilot.open("a", encoding="utf-8") as fh:
            fh.write(line + "\n")
            fh.flush()
            os.fsync(fh.fileno())

    ran: list[Rollout] = []
    if work:
        pilot_cfg = cfg.model_copy(update={"run_dir": out / RUN})
        ran, _ = await run_samples(
            pilot_cfg,
            work,
            engine=engine,
            checkpoint=checkpoint,
            concurrency=concurrency,
            progress=progress,
            label=f"pilot rollouts: {cfg.suite} ({len(done)} done before)",
            on_rollout=record,
        )
    counted = latest_counted(read_results(pilot))
    report = FilterReport(
        suite=cfg.suite,
        out_suite=str(out / SUITE),
        spec=spec,
        samples=samples,
        min_solved=min_solved,
        max_solved=max_solved,
        ran=len(ran),
    )
    kept: list[Task] = []
    for t in tasks:
        results = [counted[(t.instance_id, g)] for g in range(samples) if (t.instance_id, g) in counted]
        verdict = judge(t.instance_id, results, samples, min_solved, max_solved)
        report.tasks.append(verdict)
        if verdict.verdict == "kept":
            rate = PassRate(
                solved=verdict.solved,
                samples=verdict.samples,
                rate=verdict.solved / verdict.samples if verdict.samples else 0.0,
                harness=spec.harness,
                engine=spec.engine,
                model=spec.checkpoint or spec.model,
            )
            kept.append(t.model_copy(update={"pass_rate": rate}))
    # source_dir absolute (json mode writes paths as strings): the file loads from anywhere
    _write_whole(out / SUITE, "".join(t.model_dump_json(exclude_none=True) + "\n" for t in kept))
    _write_whole(out / REPORT, report.model_dump_json(indent=2))
    return report
