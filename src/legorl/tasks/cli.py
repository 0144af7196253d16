"""``legorl tasks list|check|author|synth``: task suites (tasks/loader.py, check.py, author.py, synth.py).

Only typer and rich are imported at module level; loaders, sandboxes and the grader load inside commands.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import NoReturn

import typer
from rich.console import Console
from rich.table import Table

app = typer.Typer(no_args_is_help=True, help="Task suites: list them, validate them, author or synthesize new ones.")
console = Console()


def _fail(exc: Exception) -> NoReturn:
    """Hand an error to the CLI's central handler (``legorl.cli``): one line on stderr, exit 2."""
    from legorl.errors import ConfigError, LegoRLError

    if isinstance(exc, LegoRLError):
        raise exc
    raise ConfigError(str(exc)) from exc


# `legorl tasks list --json` keys (docs/cli.md; tests/test_cli_json.py checks them)
SUITES_JSON_KEYS = ("suites", "total")  # suites: [{"name", "tasks"}]
SUITE_JSON_KEYS = ("suite", "tasks")
TASK_JSON_KEYS = ("instance_id", "tier", "repo", "fail_to_pass", "pass_to_pass", "hidden_tests", "source_dir")


@app.command("list")
def list_(
    suite: str | None = typer.Argument(None, help="Suite name or path; omit to list the built-in suites."),
    as_json: bool = typer.Option(
        False,
        "--json",
        help=(
            'Print JSON. Without SUITE: {"suites": [{"name", "tasks"}], "total"}; with SUITE: {"suite", '
            '"tasks": [{' + ", ".join(f'"{k}"' for k in TASK_JSON_KEYS) + "}]} (fail_to_pass/pass_to_pass: test "
            "counts; hidden_tests: the task has a test_patch)."
        ),
    ),
) -> None:
    """List the built-in suites, or the tasks of one suite."""
    from legorl.tasks.loader import builtin_suites, load_suite

    if suite is None:
        counts = {name: len(load_suite(name)) for name in builtin_suites()}
        if as_json:
            print(
                json.dumps(
                    {"suites": [{"name": k, "tasks": n} for k, n in counts.items()], "total": sum(counts.values())},
                    indent=2,
                )
            )
            return
        table = Table(title="built-in task suites")
        table.add_column("suite")
        table.add_column("tasks", justify="right")
        for name, n in counts.items():
            table.add_row(name, str(n))
        table.add_row("builtin (all)", str(sum(counts.values())))
        console.print(table)
        return
    tasks = load_suite(suite)
    if as_json:
        rows = [
            {
                "instance_id": t.instance_id,
                "tier": t.tier,
                "repo": t.repo,
                "fail_to_pass": len(t.FAIL_TO_PASS),
                "pass_to_pass": len(t.PASS_TO_PASS),
                "hidden_tests": bool(t.test_patch.strip()),
                "source_dir": str(t.source_dir) if t.source_dir is not None else None,
            }
            for t in tasks
        ]
        print(json.dumps({"suite": suite, "tasks": rows}, indent=2))
        return
    table = Table(title=f"{suite}: {len(tasks)} tasks")
    for col in ("task", "tier", "repo", "F2P", "P2P", "hidden tests"):
        table.add_column(col, no_wrap=col == "task", justify="right" if col in ("F2P", "P2P") else "left")
    for t in tasks:
        table.add_row(
            t.instance_id,
            t.tier,
            t.repo,
            str(len(t.FAIL_TO_PASS)),
            str(len(t.PASS_TO_PASS)),
            "yes" if t.test_patch.strip() else "no",
        )
    console.print(table)


@app.command("check")
def check(
    suite: str = typer.Argument(..., help="Suite name (trivial, easy, medium, builtin) or path (dir, .jsonl, .json)."),
    backend: str = typer.Option("bwrap", "--backend", help="Sandbox backend: bwrap or podman."),
    workers: int = typer.Option(2, "--workers", min=1, help="Tasks checked in parallel."),
    timeout: float = typer.Option(120, "--timeout", help="Seconds per test run."),
) -> None:
    """Validate every task: the gold patch resolves it, the empty patch fails every FAIL_TO_PASS test."""
    from legorl.errors import LegoRLError
    from legorl.tasks.check import check_suite, get_backend
    from legorl.tasks.loader import load_suite

    try:
        tasks = load_suite(suite)
        sandbox_backend = get_backend(backend)
    except LegoRLError as exc:
        _fail(exc)
    console.print(f"checking {len(tasks)} tasks of {suite} on {backend} with {workers} workers")
    started = time.monotonic()
    results = check_suite(tasks, sandbox_backend, workers=workers, timeout=timeout)
    wall = time.monotonic() - started

    table = Table(title=f"tasks check {suite} ({backend})")
    table.add_column("task", no_wrap=True)
    table.add_column("gold")
    table.add_column("empty")
    table.add_column("seconds", justify="right")
    table.add_column("problem", overflow="fold")
    style = {"ok": "green", "fail": "red", "env": "yellow", "-": "dim"}
    for r in results:
        table.add_row(
            r.instance_id,
            f"[{style[r.gold]}]{r.gold}[/]",
            f"[{style[r.empty]}]{r.empty}[/]",
            f"{r.seconds:.1f}",
            "; ".join(r.problems),
        )
    console.print(table)
    broken = [r for r in results if not r.ok]
    for r in broken:
        console.print(f"BROKEN {r.instance_id}: {'; '.join(r.problems) or 'not ok'}", soft_wrap=True, markup=False)
    console.print(
        f"{len(results)} tasks: {len(results) - len(broken)} ok, {len(broken)} broken; "
        f"wall {wall:.1f}s, {sum(r.seconds for r in results):.1f} task-seconds"
    )
    if broken:
        raise typer.Exit(1)


@app.command("author")
def author(
    base: Path = typer.Argument(..., help="The project's fixed tree: source and visible tests."),
    buggy: Path = typer.Argument(
        ...,
        help="A copy of BASE with the bug injected and, for easy/medium, the hidden "
        "tests added to test files; or a diff from BASE to that.",
    ),
    out: Path = typer.Option(..., "--out", help="Task directory to write (it gets task.json only)."),
    tier: str = typer.Option(..., "--tier", help="trivial, easy, medium or swebench (no tier rules)."),
    statement: Path = typer.Option(..., "--statement", help="File holding the problem statement (the issue)."),
    instance_id: str | None = typer.Option(None, "--id", help="Instance id (default: the name of --out)."),
    repo: str | None = typer.Option(None, "--repo", help="Repository name (default: legorl/<BASE's name>)."),
    hints: str = typer.Option("", "--hints", help="hints_text."),
    check: bool = typer.Option(True, "--check/--no-check", help="Validate the task in the sandbox afterwards."),
    backend: str = typer.Option("bwrap", "--backend", help="Sandbox backend for the check."),
) -> None:
    """Write a task (task.json naming BASE, the gold patch, hidden tests, FAIL_TO_PASS/PASS_TO_PASS) and check it."""
    from legorl.errors import LegoRLError
    from legorl.tasks.author import author_task
    from legorl.tasks.check import check_task, get_backend
    from legorl.tasks.loader import load_task_dir

    if tier not in ("trivial", "easy", "medium", "swebench"):
        _fail(ValueError(f"--tier must be trivial, easy, medium or swebench, not {tier!r}"))
    try:
        sandbox_backend = get_backend(backend) if check else None
        task_file = author_task(
            base,
            buggy,
            out,
            instance_id=instance_id or out.resolve().name,
            tier=tier,
            statement=statement.read_text(encoding="utf-8"),
            repo=repo,
            hints=hints,
        )
        task = load_task_dir(out)
    except (LegoRLError, OSError) as exc:
        _fail(exc)
    console.print(
        f"wrote {task_file}: FAIL_TO_PASS {len(task.FAIL_TO_PASS)}, PASS_TO_PASS {len(task.PASS_TO_PASS)}, "
        f"hidden tests: {'yes' if task.test_patch else 'no'}",
        markup=False,
        soft_wrap=True,
    )
    if sandbox_backend is None:
        return
    result = check_task(task, sandbox_backend)
    if not result.ok:
        task_file.unlink()
        console.print(
            f"BROKEN {task.instance_id} (task.json removed): {'; '.join(result.problems) or 'not ok'}",
            markup=False,
            soft_wrap=True,
        )
        raise typer.Exit(1)
    console.print(
        f"checked {task.instance_id} on {backend}: gold resolves it, the empty patch does not ({result.seconds:.1f}s)",
        markup=False,
    )


@app.command("synth")
def synth(
    repo: Path = typer.Argument(..., help="A local Python repository whose tests pass."),
    out: Path = typer.Option(..., "--out", help="Output .jsonl file; mutated repos go to FILE.d/."),
    max_tasks: int = typer.Option(10, "--max", min=1, help="At most this many tasks."),
    seed: int = typer.Option(0, "--seed", help="Random seed for the order in which mutations are tried."),
    timeout: float | None = typer.Option(None, "--timeout", help="Seconds per test run (default 5x baseline)."),
    tier: str = typer.Option("trivial", "--tier", help="Tier recorded in the tasks."),
    quiet: bool = typer.Option(False, "--quiet", help="Only print the summary."),
) -> None:
    """Synthesize tasks by mutating REPO (SWE-smith style); keeps mutations that break some tests."""
    from legorl.errors import LegoRLError
    from legorl.tasks.synth import synthesize

    if tier not in ("trivial", "easy", "medium"):
        _fail(ValueError(f"--tier must be trivial, easy or medium, not {tier!r}"))
    started = time.monotonic()
    try:
        tasks = synthesize(
            repo,
            out,
            max_tasks=max_tasks,
            seed=seed,
            timeout=timeout,
            tier=tier,  # type: ignore[arg-type]
            on_event=None if quiet else (lambda msg: console.print(msg, markup=False, soft_wrap=True)),
        )
    except LegoRLError as exc:
        _fail(exc)
    console.print(f"wrote {len(tasks)} tasks to {out} (repos in {out.name}.d/) in {time.monotonic() - started:.1f}s")
    if not tasks:
        raise typer.Exit(1)
