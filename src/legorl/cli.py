"""The `legorl` command line. Heavy imports (torch, transformers) happen inside commands so that
`legorl --help` answers instantly."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.table import Table

from legorl.errors import LegoRLError

app = typer.Typer(no_args_is_help=True, add_completion=False, help="LEGO-RL: RL for coding agents inside real harnesses.")
models_app = typer.Typer(no_args_is_help=True, help="Model registry.")
bench_app = typer.Typer(no_args_is_help=True, help="Benchmarks (print JSON).")
app.add_typer(models_app, name="models")
app.add_typer(bench_app, name="bench")
# A pipe or CI log gets a wide fixed width so the run table is never squashed.
console = Console(width=None if sys.stdout.isatty() else 160)

# Sub-command groups owned by their packages (each module imports only typer at top level).
# -- sub-apps: one `app.add_typer(...)` line per package below --
from legorl.tasks.cli import app as tasks_app  # noqa: E402
app.add_typer(tasks_app, name="tasks")
from legorl.sandbox.cli import app as images_app  # noqa: E402
app.add_typer(images_app, name="images")

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # never reach a model hub
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def _fail(exc: Exception) -> None:
    console.print(f"[bold red]error:[/] {exc}")
    raise typer.Exit(2)


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


@models_app.command("list")
def models_list() -> None:
    """Built-in model names."""
    from legorl.models.registry import KNOWN_MODELS

    for name in KNOWN_MODELS:
        console.print(name)


def _run(cfg) -> list[dict]:
    import asyncio

    from legorl.loop.train import train

    def on_step(step: int, m: dict) -> None:
        console.print(
            f"step {step}: reward {m['rollout/reward_mean']:.3f}  resolved {m['rollout/resolved']}/{m['rollout/count']}"
            f"  trainable samples {m['train/trainable_samples']}  loss {m['train/loss']:+.4f}"
            f"  logprob pearson {m.get('mismatch/pearson') or float('nan'):.5f}  {m['time/step_s']:.0f}s"
        )

    try:
        return asyncio.run(train(cfg, on_step=on_step))
    except LegoRLError as exc:
        _fail(exc)
    return []


def _summary(history: list[dict], run_dir: Path) -> None:
    table = Table(title=f"LEGO-RL run {run_dir}")
    cols = [
        ("step", "step", "{}"), ("rollouts", "rollout/count", "{}"), ("reward", "rollout/reward_mean", "{:.3f}"),
        ("solved", "rollout/resolved", "{}"), ("env fail", "rollout/status_env_failure", "{}"),
        ("turns", "rollout/turns", "{}"), ("extend", "align/extend", "{}"), ("realign", "align/realign", "{}"),
        ("fork", "align/fork", "{}"), ("train smp", "train/trainable_samples", "{}"), ("loss", "train/loss", "{:+.4f}"),
        ("grad", "train/grad_norm", "{:.2f}"), ("pearson", "mismatch/pearson", "{:.6f}"),
        ("max|Δlp|", "mismatch/max_abs_diff", "{:.1e}"), ("weights", "weight_version", "{}"),
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
    console.print(f"turns+rollouts: {run_dir}/run.sqlite (legorl export {run_dir} --out DIR)  metrics: {run_dir}/metrics.jsonl")


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


def _load_config(config: Optional[Path], set_: list[str], **more: object):
    from legorl.config import RunConfig

    try:
        return RunConfig.load(config, **{**_overrides(set_), **more})
    except LegoRLError as exc:
        _fail(exc)


_SET_HELP = "Override a field: --set trainer.lr=2e-6 (JSON values; repeatable)."


def _train(config: Optional[Path], set_: list[str]) -> None:
    """``legorl train`` and ``legorl demo``: one code path."""
    cfg = _load_config(config, set_)
    _summary(_run(cfg), Path(cfg.run_dir))


@app.command()
def demo(set_: list[str] = typer.Option([], "--set", help=_SET_HELP)) -> None:
    """Exactly `legorl train --config configs/demo.json`: the walking skeleton end to end on the
    embedded model (trivial tasks, minimal harness, GSPO)."""
    from legorl.config import shipped_config

    try:
        path = shipped_config("demo")
    except LegoRLError as exc:
        _fail(exc)
    _train(path, set_)


@app.command()
def train(
    config: Optional[Path] = typer.Option(None, help="Run config (JSON); see legorl.config.RunConfig."),
    set_: list[str] = typer.Option([], "--set", help=_SET_HELP),
) -> None:
    """Train with a config file."""
    _train(config, set_)


@app.command()
def gateway(
    config: Optional[Path] = typer.Option(None, help="Run config (JSON): its engine section is served."),
    model: Optional[str] = typer.Option(None, help="Model name or local directory (default: the config's, smollm2-135m)."),
    engine: Optional[str] = typer.Option(None, help="Inference engine (default: the config's, embedded)."),
    port: int = typer.Option(8000, help="Port on 127.0.0.1."),
    run_dir: Path = typer.Option(Path("runs/gateway"), help="Where Turns are recorded."),
) -> None:
    """Serve the gateway on loopback; prints a session token to use as the API key."""
    from legorl.loop.stack import serve_gateway

    cfg = _load_config(config, [], **{"engine.type": engine, "engine.model": model})
    try:
        serve_gateway(cfg.engine, port=port, run_dir=run_dir, print_fn=console.print)
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

    try:
        result = export_run(run_dir, out, format=format)  # type: ignore[arg-type]
    except (ValueError, FileNotFoundError) as exc:
        _fail(LegoRLError(str(exc)))
    print(json.dumps(result, indent=2))


@bench_app.command("gateway")
def bench_gateway(
    output_tokens: int = typer.Option(16, help="Tokens the zero-cost engine returns per request."),
    requests: int = typer.Option(400, help="Requests per measurement."),
    concurrency: int = typer.Option(32, help="Concurrent clients for the throughput run."),
    as_json: bool = typer.Option(True, "--json/--no-json", help="Print JSON."),
) -> None:
    """Gateway overhead with a zero-cost engine: added latency p50/p99, requests/s at 1 and N clients."""
    from legorl.bench.gateway import run_gateway_bench

    result = run_gateway_bench(output_tokens=output_tokens, requests=requests, concurrency=concurrency)
    print(json.dumps(result, indent=2) if as_json else result)


@bench_app.command("engine")
def bench_engine(
    model: str = typer.Option("smollm2-135m", help="Model name or local directory."),
    max_tokens: int = typer.Option(64, help="Tokens generated per request."),
    as_json: bool = typer.Option(True, "--json/--no-json", help="Print JSON."),
) -> None:
    """Generation, prefill and recompute throughput of the embedded engine; peak RSS."""
    from legorl.bench.engine import run_engine_bench

    try:
        result = run_engine_bench(model=model, max_tokens=max_tokens)
    except LegoRLError as exc:
        _fail(exc)
    print(json.dumps(result, indent=2) if as_json else result)


@bench_app.command("sandbox")
def bench_sandbox(
    backend: str = typer.Option("bwrap", help="bwrap or podman (podman is measured too when present)."),
    n: int = typer.Option(50, help="Sequential create+exec+destroy cycles."),
    concurrency: int = typer.Option(16, help="Concurrent sandboxes for the throughput figure."),
    podman: bool = typer.Option(True, "--podman/--no-podman", help="Also measure podman when available."),
    as_json: bool = typer.Option(True, "--json/--no-json", help="Print JSON (--no-json: one summary line each)."),
) -> None:
    """Sandbox latency on a cache hit, cold instance-layer build time, concurrent throughput."""
    from legorl.bench.sandbox import run_sandbox_bench, summary_lines

    try:
        result = run_sandbox_bench(backend, n=n, concurrency=concurrency, include_podman=podman)
    except LegoRLError as exc:
        _fail(exc)
    print(json.dumps(result, indent=2) if as_json else "\n".join(summary_lines(result)))


@app.command("grade")
def grade_predictions(
    predictions: Path = typer.Argument(..., help="SWE-bench predictions JSONL: instance_id, model_patch[, model_name_or_path]."),
    tasks: str = typer.Option("builtin", "--tasks", help="Suite: built-in name, 'builtin', a directory or a .jsonl/.json file."),
    out: Optional[Path] = typer.Option(None, "--out", help="Write the report JSON here."),
    workers: int = typer.Option(2, "--workers", help="Grading threads."),
    timeout: float = typer.Option(120.0, "--timeout", help="Test-run time limit per instance (s)."),
    reward_mode: str = typer.Option("binary", "--reward-mode", help="binary | partial"),
    flagged_policy: str = typer.Option("zero", "--flagged-policy", help="zero | drop"),
) -> None:
    """Grade SWE-bench-format predictions against a task suite; prints a summary, writes a report.

    Several models' predictions for one instance are each graded (reported per instance and model);
    the same instance and model twice is refused."""
    from legorl.grading.predictions import grade_predictions as _grade, load_predictions

    try:
        preds = load_predictions(predictions)
        report = _grade(preds, tasks, workers=workers, timeout=timeout, reward_mode=reward_mode,
                        flagged_policy=flagged_policy)
    except LegoRLError as exc:
        _fail(exc)
    table = Table(title=f"graded {len(report['instances'])} predictions")
    for col in ("instance", "model", "status", "resolved", "reward", "blocking flags", "info flags"):
        table.add_column(col)
    for r in report["instances"].values():
        table.add_row(r["instance_id"], r.get("model_name_or_path") or "",
                      r["status"] + (f" ({r['cause'][:40]})" if r.get("cause") else ""),
                      "yes" if r["resolved"] else "no", f"{r['reward']:.2f}",
                      ", ".join(r["blocking_flags"])[:60], str(len(r["flags"]) - len(r["blocking_flags"])))
    console.print(table)
    s = report["summary"]
    models = s.get("by_model", {})
    for name, m in (models.items() if len(models) > 1 else ()):
        console.print(f"{name or '(no model)'}: resolved {m['resolved']}/{m['total']}  reward mean "
                      f"{m['reward_mean']:.3f}  flagged {m['flagged']}  env_failure {m['env_failure']}")
    console.print(f"resolved {s['resolved']}/{s['total']}  reward mean {s['reward_mean']:.3f}  "
                  f"flagged {s['flagged']}  env_failure {s['env_failure']}")
    if out is not None:
        out.write_text(json.dumps(report, indent=2))
        console.print(f"report: {out}")


@bench_app.command("grader")
def bench_grader(
    workers: int = typer.Option(2, help="Grading threads."),
    rounds: int = typer.Option(1, help="Times the built-in suite is graded."),
    as_json: bool = typer.Option(True, "--json/--no-json", help="Print JSON."),
) -> None:
    """Grader throughput on the built-in suite (gold patches) and the cost of each stage."""
    from legorl.bench.grader import run_grader_bench

    try:
        result = run_grader_bench(workers=workers, rounds=rounds)
    except LegoRLError as exc:
        _fail(exc)
    print(json.dumps(result, indent=2) if as_json else result)



@app.command("rollout")
def rollout_cmd(
    config: Optional[Path] = typer.Option(None, help="Run config (JSON): harness, budget, sandbox, grading, engine."),
    set_: list[str] = typer.Option([], "--set", help=_SET_HELP),
    harness: Optional[str] = typer.Option(None, help="Harness id (see legorl.harnesses.registry; default: the config's, minimal)."),
    task: str = typer.Option("legorl__trivial-001", help="Task instance id."),
    engine: str = typer.Option("scripted-gold", help="embedded | scripted-gold | scripted-wrong"),
    model: Optional[str] = typer.Option(None, help="Model for the embedded engine (default: the config's, smollm2-135m)."),
    sandbox: Optional[str] = typer.Option(None, help="Sandbox backend: bwrap | podman (default: the config's, bwrap)."),
    max_turns: Optional[int] = typer.Option(None, help="Model calls (harness step budget; default: the config's, 6 without one)."),
    max_tokens: Optional[int] = typer.Option(None, help="Tokens per model call (default: the config's; without one 4096 for scripted engines, 512 for embedded)."),
    wall_clock_s: Optional[float] = typer.Option(None, help="Harness time limit (default: the config's, 600 without one)."),
    run_dir: Optional[Path] = typer.Option(None, help="Where turns/rollout/strace go (default: the config's run_dir when it names one, else a temp dir)."),
    option: list[str] = typer.Option([], "--option", "-o", help="Harness option key=value (JSON values ok)."),
) -> None:
    """Run one rollout of any registered harness on one task and print a summary."""
    import asyncio

    from legorl.loop.single import rollout_once, single_rollout_config

    flags = {"rollout.harness": harness, "engine.model": model, "rollout.max_turns": max_turns,
             "rollout.max_tokens_per_turn": max_tokens, "rollout.wall_clock_s": wall_clock_s,
             "sandbox.type": sandbox, "run_dir": str(run_dir) if run_dir is not None else None}
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
    as_json: bool = typer.Option(True, "--json/--no-json", help="Print JSON."),
) -> None:
    """Cold (harness layer build) vs warm start of a harness rollout."""
    from legorl.bench.rollout import run_rollout_bench

    try:
        result = run_rollout_bench(harness, task, cold=cold, rollouts=rollouts, sandbox=sandbox)
    except (LegoRLError, ValueError) as exc:
        _fail(exc)
    print(json.dumps(result, indent=2) if as_json else result)


if __name__ == "__main__":
    app()
