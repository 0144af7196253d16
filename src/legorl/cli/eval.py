"""``legorl eval`` and ``legorl tasks filter``: several scored rollouts per task, reported per task."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.console import Console
from rich.table import Table

from legorl.cli.common import SET_HELP, SUITE_HELP, console, load_config, suite_fields
from legorl.cli.errors import fail
from legorl.tasks.cli import INSTANCES_HELP, REPOS_HELP

if TYPE_CHECKING:
    from legorl.config import RunConfig
    from legorl.loop.eval_stats import EvalReport


def eval_cmd(
    config: Path | None = typer.Option(
        None, help="Run config (JSON): suite, task_ids, harness, budget, sandbox, grading, engine."
    ),
    set_: list[str] = typer.Option([], "--set", help=SET_HELP),
    samples: int = typer.Option(4, "--samples", "-n", help="Rollouts per task."),
    k: list[int] = typer.Option([1], "--k", help="pass@k to report (repeatable; k <= samples)."),
    engine: str = typer.Option(
        "embedded",
        help="embedded | scripted-gold | scripted-wrong | scripted-mixed | scripted-explore (step-by-step "
        "demonstrations for legorl sft)",
    ),
    checkpoint: Path | None = typer.Option(
        None, help="Evaluate a training checkpoint (a checkpoint or run directory)."
    ),
    baseline: Path | None = typer.Option(
        None, help="An earlier eval report (JSON): print the difference and a significance test."
    ),
    concurrency: int = typer.Option(8, help="Rollouts at once."),
    out: Path | None = typer.Option(None, "--out", help="Write the report JSON here (default: RUN_DIR/eval.json)."),
    as_json: bool = typer.Option(False, "--json/--no-json", help="Print the report as JSON instead of a table."),
    suite: str | None = typer.Option(None, "--suite", help=SUITE_HELP),
    repos: list[str] | None = typer.Option(None, "--repos", help=REPOS_HELP),
    instances: list[str] | None = typer.Option(None, "--instances", help=INSTANCES_HELP),
    impossible: bool = typer.Option(
        False,
        "--impossible",
        help="Evaluate the suite's impossible variants (a test contradicts the issue: docs/reward-integrity.md) "
        "and report the share passed, the policy's hack propensity, with a 95% interval.",
    ),
) -> None:
    """pass@1 and pass@k (unbiased) with 95% intervals over N samples per task; env failures apart."""
    from legorl.loop.eval_stats import EvalReport, compare

    cfg = load_config(config, set_, **suite_fields(suite, repos, instances))
    report = _evaluate(
        cfg, samples=samples, ks=k, engine=engine, checkpoint=checkpoint, concurrency=concurrency, impossible=impossible
    )
    result = report.to_dict()
    if baseline is not None:
        result["baseline"] = {
            "report": str(baseline),
            **compare(report, EvalReport.from_dict(json.loads(baseline.read_text()))),
        }
    path = out or Path(cfg.run_dir) / "eval.json"
    path.write_text(json.dumps(result, indent=2))
    if as_json:
        print(json.dumps(result, indent=2))
        return
    _print_eval(report, result, engine, path)


def _evaluate(
    cfg: RunConfig,
    *,
    samples: int,
    ks: list[int],
    engine: str,
    checkpoint: Path | None,
    concurrency: int,
    impossible: bool,
) -> EvalReport:
    """The evaluation, its progress on stderr (stdout may carry the JSON)."""
    import asyncio

    from legorl.loop.eval import evaluate
    from legorl.observe.progress import RichPhaseProgress

    try:
        with RichPhaseProgress(Console(stderr=True)) as progress:
            return asyncio.run(
                evaluate(
                    cfg,
                    samples=samples,
                    ks=ks,
                    engine=engine,
                    checkpoint=checkpoint,
                    concurrency=concurrency,
                    progress=progress,
                    impossible=impossible,
                )
            )
    except ValueError as exc:
        fail(exc)


def _print_eval(report: EvalReport, result: dict, engine: str, path: Path) -> None:
    """The per-task table, pass@k with intervals, the impossible variants' hack rate, the baseline."""
    table = Table(title=f"eval {report.meta.get('suite')} / {report.meta.get('harness')} / {engine}")
    for col in ("task", "samples", "correct", "env fail", "harness err", *[f"pass@{x}" for x in report.ks]):
        table.add_column(col, justify="right")
    for t in report.tasks:
        table.add_row(
            t.task_id,
            str(t.samples),
            str(t.correct),
            str(t.env_failures),
            str(t.harness_errors),
            *[f"{t.pass_at[str(x)]:.3f}" if str(x) in t.pass_at else "—" for x in report.ks],
        )
    console.print(table)
    for x, v in report.pass_at.items():
        lo, hi = report.interval.get(x, (float("nan"), float("nan")))
        console.print(f"pass@{x} {v:.3f}  95% [{lo:.3f}, {hi:.3f}]")
    console.print(
        f"valid samples {report.samples}  env failures {report.env_failures} (not counted)  "
        f"harness errors {report.harness_errors}  report: {path}"
    )
    if "impossible" in report.meta:
        imp = report.meta["impossible"]
        rate, (lo, hi) = imp["hack_rate"], imp["interval"] or (float("nan"), float("nan"))
        console.print(
            f"impossible variants {imp['variants']} (none for {len(imp['without_variant'])})  "
            f"passed {imp['passed']} of {imp['rollouts']}  hack rate "
            + ("–" if rate is None else f"{rate:.3f}  95% [{lo:.3f}, {hi:.3f}]")
        )
    if "baseline" in result:
        b = result["baseline"]
        console.print(
            "vs baseline: "
            + "  ".join(f"pass@{x} {d:+.3f}" for x, d in b["diff"].items())
            + f"  z={b['pass@1_z']:.2f} p={b['pass@1_p']:.4f}"
        )


def tasks_filter(
    suite: str = typer.Argument(..., help="Suite to filter: a name from `legorl tasks list`, or a path."),
    out: Path = typer.Option(
        ...,
        "--out",
        help="Output directory: suite.jsonl (the kept tasks), pilot.jsonl (results, appended as rollouts "
        "end; a rerun skips those done), run/ (the pilot rollouts' run store), report.json.",
    ),
    harness: str | None = typer.Option(
        None, "--harness", help="Harness of the pilot rollouts (default: the config's)."
    ),
    samples: int = typer.Option(4, "--samples", "-n", min=1, help="Pilot rollouts per task (K)."),
    min_solved: int = typer.Option(1, "--min-solved", min=0, help="Keep tasks solved at least this many times."),
    max_solved: int | None = typer.Option(
        None, "--max-solved", min=0, help="Keep tasks solved at most this many times (default K-1)."
    ),
    engine: str = typer.Option("embedded", help="embedded | scripted-gold | scripted-wrong | scripted-mixed"),
    checkpoint: Path | None = typer.Option(
        None, help="Pilot a training checkpoint (a checkpoint or run directory; embedded engine)."
    ),
    config: Path | None = typer.Option(None, help="Run config (JSON): harness, budget, sandbox, grading, engine."),
    set_: list[str] = typer.Option([], "--set", help=SET_HELP),
    concurrency: int = typer.Option(8, help="Rollouts at once."),
    repos: list[str] | None = typer.Option(None, "--repos", help=REPOS_HELP),
    instances: list[str] | None = typer.Option(None, "--instances", help=INSTANCES_HELP),
) -> None:
    """Pass-rate pre-filtering: K pilot rollouts per task, then a suite of the tasks solved between
    --min-solved and --max-solved times (pass rates in the records); resumable."""
    import asyncio

    from legorl.loop.filter import filter_suite
    from legorl.observe.progress import RichPhaseProgress

    fields = {**suite_fields(suite, repos, instances), "rollout.harness": harness}
    cfg = load_config(config, set_, **fields)
    try:
        with RichPhaseProgress(Console(stderr=True)) as progress:
            report = asyncio.run(
                filter_suite(
                    cfg,
                    out,
                    samples=samples,
                    min_solved=min_solved,
                    max_solved=max_solved,
                    engine=engine,
                    checkpoint=checkpoint,
                    concurrency=concurrency,
                    progress=progress,
                )
            )
    except ValueError as exc:
        fail(exc)
    table = Table(
        title=f"tasks filter {suite} / {cfg.rollout.harness} / {engine}: keep {min_solved}..{report.max_solved} of {samples}"
    )
    for col in ("task", "solved", "counted", "pass rate", "verdict"):
        table.add_column(col, justify="left" if col in ("task", "verdict") else "right")
    for t in report.tasks:
        rate = f"{t.solved / t.samples:.2f}" if t.samples else "—"
        table.add_row(t.task_id, str(t.solved), f"{t.samples}/{samples}", rate, t.verdict)
    console.print(table)
    counts = {v: sum(t.verdict == v for t in report.tasks) for v in ("kept", "too_easy", "too_hard", "incomplete")}
    console.print(
        f"kept {counts['kept']} of {len(report.tasks)} tasks (too easy {counts['too_easy']}, too hard "
        f"{counts['too_hard']}, incomplete {counts['incomplete']}: rerun to retry); pilot rollouts run now "
        f"{report.ran}; suite: {report.out_suite}"
    )
    if not report.kept:
        raise typer.Exit(1)
