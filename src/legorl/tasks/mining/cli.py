"""``legorl tasks mine``: the command (registered on the ``tasks`` app in :mod:`legorl.tasks.cli`).

Only typer and rich at module level; the miner loads inside the command.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn
from rich.table import Table

if TYPE_CHECKING:
    from legorl.tasks.mining.pipeline import MineOptions, MiningReport

console = Console(stderr=True)


class RichProgress:
    """The miner's progress (:class:`legorl.tasks.mining.pipeline.MineProgress`) as rich bars; where
    stderr is no terminal (a log file), a line every ``every`` candidates instead."""

    def __init__(self, progress: Progress, every: int = 10) -> None:
        self.progress = progress
        self.task: TaskID | None = None
        self.label = ""
        self.total = 0
        self.done = 0
        self.kept = 0
        self.every = every

    def phase(self, label: str, total: int) -> None:
        self.label, self.total, self.done, self.kept = label, total, 0, 0
        self.task = self.progress.add_task(label, total=total, kept=0)

    def step(self, kept: bool) -> None:
        self.done += 1
        self.kept += int(kept)
        if self.task is not None:
            self.progress.update(self.task, advance=1, kept=self.kept)
        if not self.progress.console.is_terminal and (self.done % self.every == 0 or self.done == self.total):
            self.note(f"{self.label}: {self.done}/{self.total} candidates, {self.kept} kept")

    def note(self, text: str) -> None:
        self.progress.console.print(text, markup=False, soft_wrap=True)


def mine_command(
    sources: list[str] = typer.Argument(
        ..., help="Local git repositories, git bundles (owner__name.bundle) or pypi:NAME==VERSION (its sdist)."
    ),
    out: str = typer.Option(
        ...,
        "--out",
        help="Suite name (written to $LEGORL_HOME/tasks/mined/NAME; `suite: NAME` in a run config) or a "
        "directory path (with a '/'). Mining into an existing suite replaces the tasks of the same sources.",
    ),
    methods: list[str] | None = typer.Option(
        None, "--method", help="commits, mutations (repeat or comma-separate; default: both)."
    ),
    seed: int = typer.Option(0, "--seed", help="Order in which mutants are tried (the suite is a function of it)."),
    workers: int = typer.Option(2, "--workers", min=1, help="Candidates validated in parallel (one sandbox each)."),
    per_function: int = typer.Option(2, "--per-function", min=1, help="Mutation tasks kept per function."),
    max_mutations: int = typer.Option(200, "--max-mutations", min=0, help="Mutation tasks per source (0: no bound)."),
    max_commits: int = typer.Option(200, "--max-commits", min=0, help="Commit tasks per source (0: no bound)."),
    max_fail: int = typer.Option(50, "--max-fail", min=1, help="Drop a mutant that breaks more tests than this."),
    per_test_suite: int = typer.Option(
        1000,
        "--per-test-suite",
        min=0,
        help="A suite with more stable tests than this: a mutant runs only the tests that call its function.",
    ),
    timeout: float = typer.Option(600, "--timeout", help="Seconds per test run."),
    python: str = typer.Option(
        "auto",
        "--python",
        help="auto: the pyenv interpreter of the commit's time that requires-python allows; 3.X: that one; "
        "host: LEGO-RL's own interpreter and packages (no env layer).",
    ),
    repo: str | None = typer.Option(None, "--repo", help="owner/name of the (single) source."),
    ref: str | None = typer.Option(None, "--ref", help="Commit or branch to mine from (default: the head)."),
    decontaminate: bool = typer.Option(
        True, "--decontaminate/--no-decontaminate", help="Exclude what SWE-bench instances of the repository touch."
    ),
    confirm: bool = typer.Option(
        True,
        "--confirm/--no-confirm",
        help="Keep a task only when the real grader resolves it with its gold patch (every defense on).",
    ),
    use_cache: bool = typer.Option(True, "--cache/--no-cache", help="Read finished test runs from the run cache."),
    dedup_against: list[str] | None = typer.Option(
        None, "--dedup-against", help="Also drop tasks that duplicate one in this suite file (repeatable)."
    ),
    dedup_mined: bool = typer.Option(
        True, "--dedup-mined/--no-dedup-mined", help="Drop tasks that duplicate one in another mined suite."
    ),
    backend: str = typer.Option("bwrap", "--backend", help="Sandbox backend of the test runs."),
) -> None:
    """Mine training tasks from real repositories: commits that fix code and tests together, and bugs
    injected into functions the tests cover; each validated in a sandbox, decontaminated against
    SWE-bench and deduplicated (docs/tasks.md)."""
    from legorl.tasks.mining.pipeline import MineOptions

    options = MineOptions(
        methods=_methods(methods),
        seed=seed,
        workers=workers,
        per_function=per_function,
        max_mutations=max_mutations,
        max_commits=max_commits,
        max_fail=max_fail,
        per_test_suite=per_test_suite,
        timeout=timeout,
        python=python,
        backend=backend,
        decontaminate=decontaminate,
        confirm=confirm,
        use_cache=use_cache,
        repo=repo,
        ref=ref,
        dedup_against=[str(Path(p).expanduser()) for p in dedup_against or []],
        dedup_mined=dedup_mined,
    )
    _mine_and_report(sources, out, options)


def _methods(methods: list[str] | None) -> list[str]:
    """The ``--method`` values (repeated or comma-separated; none: every method), checked."""
    from legorl.errors import ConfigError
    from legorl.tasks.cli import split_list
    from legorl.tasks.mining.pipeline import METHODS

    chosen = split_list(methods) or list(METHODS)
    unknown = [m for m in chosen if m not in METHODS]
    if unknown:
        raise ConfigError(f"--method {unknown[0]!r}: choose from {', '.join(METHODS)}")
    return chosen


def _mine_and_report(sources: list[str], out: str, options: MineOptions) -> None:
    """Mine with progress bars, then print the per-source table, the errors and the totals; exit 1
    when no task was kept."""
    from legorl.tasks.mining.pipeline import mine
    from legorl.tasks.mining.suite import REPORT_FILE, SUITE_FILE, suite_dir

    directory = suite_dir(out)
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("kept {task.fields[kept]}"),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=console, transient=False, disable=not console.is_terminal) as bar:
        report = mine(sources, directory, options, RichProgress(bar))
    console.print(_report_table(report, directory))
    for src in report.sources:
        for err in src.errors:
            console.print(f"{src.source}: {err}", markup=False, soft_wrap=True)
    total = report.totals.get("tasks", 0)
    console.print(
        f"{total} tasks in {directory / SUITE_FILE}; report: {directory / REPORT_FILE}; "
        f"runs: {report.runs.get('cache_hits', 0)} from the cache, {report.runs.get('cache_misses', 0)} run; "
        f"{report.wall_s:.0f}s",
        markup=False,
        soft_wrap=True,
    )
    if not total:
        raise typer.Exit(1)


def _report_table(report: MiningReport, directory: Path) -> Table:
    """One row per source and method: candidates, exclusions, duplicates, validated, kept."""
    table = Table(title=f"mined into {directory}")
    for col in ("source", "method", "candidates", "excluded", "duplicates", "validated", "kept", "share"):
        table.add_column(col, justify="left" if col in ("source", "method") else "right")
    for src in report.sources:
        for name, m in src.methods.items():
            share = f"{m.kept / m.validated:.0%}" if m.validated else "-"
            table.add_row(
                src.source,
                name,
                str(m.candidates),
                str(len(m.excluded)),
                str(len(m.duplicates)),
                str(m.validated),
                str(m.kept),
                share,
            )
    return table
