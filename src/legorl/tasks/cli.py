"""``legorl tasks list|check|author|synth``: task suites (tasks/loader.py, check.py, author.py, synth.py).

Only typer and rich are imported at module level; loaders, sandboxes and the grader load inside commands.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.console import Console
from rich.table import Table

if TYPE_CHECKING:
    from legorl.tasks.model import Task

app = typer.Typer(no_args_is_help=True, help="Task suites: list them, validate them, author or synthesize new ones.")
console = Console()


# `legorl tasks list --json` keys (docs/cli.md; tests/test_cli_json.py checks them)
SUITES_JSON_KEYS = ("suites", "total")  # suites: [{"name", "tasks", "available"}]
SUITE_JSON_KEYS = ("suite", "tasks")
TASK_JSON_KEYS = (
    "instance_id",
    "tier",
    "repo",
    "version",
    "fail_to_pass",
    "pass_to_pass",
    "hidden_tests",
    "source_dir",
    "available",
    "unavailable_reason",
)

REPOS_HELP = "Only tasks of these repositories (owner/name; repeat or comma-separate)."
INSTANCES_HELP = "Only these instance ids (repeat or comma-separate); an unknown or unavailable one is an error."
REPOS_DIR_HELP = (
    "SWE-bench suites: take repository trees from clones in this directory (owner__name or owner/name) "
    "or a URL prefix such as https://github.com, instead of the shipped git bundles."
)


def split_list(values: list[str] | None) -> list[str]:
    """``--repos a,b --repos c`` → ``["a", "b", "c"]``."""
    return [v.strip() for raw in values or [] for v in raw.split(",") if v.strip()]


@app.command("list")
def list_(
    suite: str | None = typer.Argument(None, help="Suite name or path; omit to list the suites."),
    repos: list[str] | None = typer.Option(None, "--repos", help=REPOS_HELP),
    instances: list[str] | None = typer.Option(None, "--instances", help=INSTANCES_HELP),
    repos_dir: str | None = typer.Option(None, "--repos-dir", help=REPOS_DIR_HELP),
    as_json: bool = typer.Option(
        False,
        "--json",
        help=(
            'Print JSON. Without SUITE: {"suites": [{"name", "tasks", "available"}], "total"} (mined suites '
            'add "by_method" and "by_repo" counts); with SUITE: '
            '{"suite", "tasks": [{' + ", ".join(f'"{k}"' for k in TASK_JSON_KEYS) + "}]} (fail_to_pass/"
            "pass_to_pass: test counts; hidden_tests: the task has a test_patch; available: its tree can be "
            "had here, else unavailable_reason says why)."
        ),
    ),
) -> None:
    """List the suites, or the tasks of one suite (SWE-bench suites: every instance, available or not)."""
    if suite is None:
        suites = _suite_counts(repos_dir)
    else:
        listing = _suite_listing(suite, split_list(repos), split_list(instances), repos_dir)
    if suite is None:
        _print_suites(suites, as_json)
    else:
        _print_tasks(suite, listing, as_json)


@dataclass(frozen=True)
class _SuiteCounts:
    """Per suite: (tasks, available here); per mined suite its counts by method and repository."""

    counts: dict[str, tuple[int, int]]
    mined: dict[str, dict]


@dataclass(frozen=True)
class _SuiteListing:
    """A suite's tasks, and per task why its tree cannot be had here (None: it can)."""

    tasks: list[Task]
    reasons: dict[str, str | None]


def _suite_counts(repos_dir: str | None) -> _SuiteCounts:
    from legorl.tasks import swebench
    from legorl.tasks.loader import builtin_suites, generated_suites, load_suite

    counts = {name: (len(ts), len(ts)) for name in builtin_suites() for ts in [load_suite(name)]}
    for name in generated_suites():
        n = len(load_suite(name))
        counts[name] = (n, n)
    for name in swebench.SUITES:
        if swebench.suite_file(name).is_file():
            status = swebench.instance_status(swebench.read_records(name), swebench.default_repo_source(repos_dir))
            counts[name] = (len(status), sum(st.available for st in status))
    mined = _mined_counts()
    for name, row in mined.items():
        counts[name] = (row["tasks"], row["tasks"])
    return _SuiteCounts(counts, mined)


def _suite_listing(suite: str, repos: list[str], instances: list[str], repos_dir: str | None) -> _SuiteListing:
    from legorl.tasks import swebench
    from legorl.tasks.loader import filter_tasks, load_suite

    if swebench.is_swebench_suite(suite):
        records = filter_tasks(swebench.read_records(suite), repos=repos, instances=instances, origin=suite)
        reasons = {
            st.instance_id: st.reason
            for st in swebench.instance_status(records, swebench.default_repo_source(repos_dir))
        }
        return _SuiteListing(records, reasons)
    tasks = load_suite(suite, repos=repos, instances=instances)
    return _SuiteListing(tasks, {t.instance_id: None if t.source_dir is not None else "no source tree" for t in tasks})


def _print_suites(suites: _SuiteCounts, as_json: bool) -> None:
    from legorl.tasks.loader import builtin_suites

    counts, mined = suites.counts, suites.mined
    if as_json:
        rows = [{"name": k, "tasks": n, "available": a, **mined.get(k, {})} for k, (n, a) in counts.items()]
        print(json.dumps({"suites": rows, "total": sum(n for n, _ in counts.values())}, indent=2))
        return
    table = Table(title="task suites")
    table.add_column("suite")
    table.add_column("tasks", justify="right")
    table.add_column("available here", justify="right")
    for name, (n, a) in counts.items():
        table.add_row(name, str(n), str(a))
        if name == builtin_suites()[-1]:
            n_all = sum(counts[b][0] for b in builtin_suites())
            table.add_row("builtin (all built-in)", str(n_all), str(n_all))
    console.print(table)


def _print_tasks(suite: str, listing: _SuiteListing, as_json: bool) -> None:
    tasks, reasons = listing.tasks, listing.reasons
    if as_json:
        rows = [
            {
                "instance_id": t.instance_id,
                "tier": t.tier,
                "repo": t.repo,
                "version": t.version,
                "fail_to_pass": len(t.FAIL_TO_PASS),
                "pass_to_pass": len(t.PASS_TO_PASS),
                "hidden_tests": bool(t.test_patch.strip()),
                "source_dir": str(t.source_dir) if t.source_dir is not None else None,
                "available": reasons[t.instance_id] is None,
                "unavailable_reason": reasons[t.instance_id],
            }
            for t in tasks
        ]
        print(json.dumps({"suite": suite, "tasks": rows}, indent=2))
        return
    available = sum(r is None for r in reasons.values())
    table = Table(title=f"{suite}: {len(tasks)} tasks, {available} available here")
    for col in ("task", "tier", "repo", "F2P", "P2P", "hidden tests", "available"):
        table.add_column(col, no_wrap=col == "task", justify="right" if col in ("F2P", "P2P") else "left")
    for t in tasks:
        table.add_row(
            t.instance_id,
            t.tier,
            t.repo,
            str(len(t.FAIL_TO_PASS)),
            str(len(t.PASS_TO_PASS)),
            "yes" if t.test_patch.strip() else "no",
            "yes" if reasons[t.instance_id] is None else "no",
        )
    console.print(table)
    why = Counter(r for r in reasons.values() if r is not None)
    for reason, n in why.most_common():
        console.print(f"unavailable ({n}): {reason}", soft_wrap=True, markup=False)


def _mined_counts() -> dict[str, dict]:
    """Per mined suite (``legorl tasks mine``): its task count, and counts by method and repository."""
    from legorl.tasks.mining.suite import mined_suites, read_records, suite_counts

    return {name: {"tasks": len(read_records(path)), **suite_counts(path)} for name, path in mined_suites().items()}


@app.command("check")
def check(
    suite: str = typer.Argument(..., help="Suite name (trivial, easy, medium, builtin) or path (dir, .jsonl, .json)."),
    backend: str = typer.Option("bwrap", "--backend", help="Sandbox backend: bwrap or podman."),
    workers: int = typer.Option(2, "--workers", min=1, help="Tasks checked in parallel."),
    timeout: float = typer.Option(120, "--timeout", help="Seconds per test run."),
    repos: list[str] | None = typer.Option(None, "--repos", help=REPOS_HELP),
    instances: list[str] | None = typer.Option(None, "--instances", help=INSTANCES_HELP),
    repos_dir: str | None = typer.Option(None, "--repos-dir", help=REPOS_DIR_HELP),
    report: Path | None = typer.Option(
        None,
        "--report",
        help="JSON-lines report, one line per task as it finishes; tasks already in it are not checked "
        "again (resume after an interruption), unless --recheck.",
    ),
    recheck: bool = typer.Option(False, "--recheck", help="Check the tasks already in --report again."),
) -> None:
    """Validate every task: the gold patch resolves it, the empty patch does not (built-in tiers: fails
    every FAIL_TO_PASS test; SWE-bench instances: nor does the test patch alone)."""
    import threading

    from legorl.tasks.check import CheckResult, check_suite, get_backend, read_report
    from legorl.tasks.loader import load_suite

    tasks = load_suite(suite, repos=split_list(repos), instances=split_list(instances), repos_dir=repos_dir)
    sandbox_backend = get_backend(backend)
    wanted = {t.instance_id for t in tasks}
    done = read_report(report) if report is not None and not recheck else {}
    done = {k: v for k, v in done.items() if k in wanted}
    todo = [t for t in tasks if t.instance_id not in done]
    if done:
        console.print(f"{report}: {len(tasks) - len(todo)} of {len(tasks)} tasks already checked; checking the rest")
    console.print(f"checking {len(todo)} tasks of {suite} on {backend} with {workers} workers")
    lock = threading.Lock()
    finished = [0]

    def on_result(r: CheckResult) -> None:
        with lock:
            finished[0] += 1
            if report is not None:
                report.parent.mkdir(parents=True, exist_ok=True)
                with report.open("a", encoding="utf-8") as fh:
                    fh.write(json.dumps(r.as_dict(), default=str) + "\n")
            state = "ok" if r.ok else "BROKEN"
            console.print(f"[{finished[0]}/{len(todo)}] {r.instance_id}: {state} ({r.seconds:.0f}s)", markup=False)

    started = time.monotonic()
    results = check_suite(todo, sandbox_backend, workers=workers, timeout=timeout, on_result=on_result)
    wall = time.monotonic() - started
    if done:  # the report's earlier results count too
        results = [*done.values(), *results]

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
    from legorl.cli.errors import fail
    from legorl.tasks.author import author_task
    from legorl.tasks.check import check_task, get_backend
    from legorl.tasks.loader import load_task_dir

    if tier not in ("trivial", "easy", "medium", "swebench"):
        fail(ValueError(f"--tier must be trivial, easy, medium or swebench, not {tier!r}"))
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
    except OSError as exc:
        fail(exc)
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
    from legorl.cli.errors import fail
    from legorl.tasks.synth import synthesize

    if tier not in ("trivial", "easy", "medium"):
        fail(ValueError(f"--tier must be trivial, easy or medium, not {tier!r}"))
    started = time.monotonic()
    tasks = synthesize(
        repo,
        out,
        max_tasks=max_tasks,
        seed=seed,
        timeout=timeout,
        tier=tier,  # type: ignore[arg-type]
        on_event=None if quiet else (lambda msg: console.print(msg, markup=False, soft_wrap=True)),
    )
    console.print(f"wrote {len(tasks)} tasks to {out} (repos in {out.name}.d/) in {time.monotonic() - started:.1f}s")
    if not tasks:
        raise typer.Exit(1)


def _register_mine() -> None:
    """``legorl tasks mine`` lives with the miner (:mod:`legorl.tasks.mining.cli`)."""
    from legorl.tasks.mining.cli import mine_command

    app.command("mine")(mine_command)


_register_mine()
