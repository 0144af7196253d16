"""The `legorl` command line. Heavy imports (torch, transformers) happen inside commands so that
`legorl --help` answers instantly."""

from __future__ import annotations

import json
import os
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
console = Console()

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
        ("resolved", "rollout/resolved", "{}"), ("env fail", "rollout/status_env_failure", "{}"),
        ("turns", "rollout/turns", "{}"), ("extend", "align/extend", "{}"), ("fork", "align/fork", "{}"),
        ("train samples", "train/trainable_samples", "{}"), ("loss", "train/loss", "{:+.5f}"),
        ("grad norm", "train/grad_norm", "{:.3f}"), ("pearson", "mismatch/pearson", "{:.5f}"),
        ("max |Δlogp|", "mismatch/max_abs_diff", "{:.2e}"), ("weights", "weight_version", "{}"),
        ("time s", "time/step_s", "{:.0f}"),
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


@app.command()
def demo(
    steps: int = typer.Option(2, help="Training steps."),
    group_size: int = typer.Option(4, help="Rollouts per task."),
    tasks_per_step: int = typer.Option(3, help="Tasks per step."),
    run_dir: Path = typer.Option(Path("runs/demo"), help="Run directory."),
    model: str = typer.Option("smollm2-135m", help="Model name or local directory."),
    temperature: float = typer.Option(
        0.4, help="Sampling temperature; the trainer recomputes at the same one. SmolLM2-135M (Q4 GGUF) "
        "almost never solves a task at 1.0, and a group without reward variance trains nothing."),
) -> None:
    """The walking skeleton end to end on the embedded model: trivial tasks, minimal harness, GSPO."""
    from legorl.config import RunConfig

    try:
        cfg = RunConfig.load(None, steps=steps, group_size=group_size, tasks_per_step=tasks_per_step,
                             run_dir=str(run_dir), **{"engine.model": model, "rollout.temperature": temperature})
    except LegoRLError as exc:
        _fail(exc)
    _summary(_run(cfg), run_dir)


@app.command()
def train(
    config: Optional[Path] = typer.Option(None, help="Run config (JSON); see legorl.config.RunConfig."),
    set_: list[str] = typer.Option([], "--set", help="Override a field: --set trainer.lr=2e-6"),
) -> None:
    """Train with a config file."""
    from legorl.config import RunConfig

    overrides = {}
    for item in set_:
        key, sep, value = item.partition("=")
        if not sep:
            _fail(LegoRLError(f"--set expects KEY=VALUE, got {item!r}"))
        try:
            overrides[key] = json.loads(value)
        except json.JSONDecodeError:
            overrides[key] = value
    try:
        cfg = RunConfig.load(config, **overrides)
    except LegoRLError as exc:
        _fail(exc)
    _summary(_run(cfg), Path(cfg.run_dir))


@app.command()
def gateway(
    model: str = typer.Option("smollm2-135m", help="Model name or local directory."),
    engine: str = typer.Option("embedded", help="Inference engine."),
    port: int = typer.Option(8000, help="Port on 127.0.0.1."),
    run_dir: Path = typer.Option(Path("runs/gateway"), help="Where Turns are recorded."),
) -> None:
    """Serve the gateway on loopback; prints a session token to use as the API key."""
    from legorl.gateway.server import serve_forever

    if engine != "embedded":
        _fail(LegoRLError(f"unknown engine {engine!r}; available: embedded"))
    try:
        serve_forever(model=model, port=port, run_dir=run_dir, print_fn=console.print)
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
) -> None:
    """Sandbox latency on a cache hit, cold instance-layer build time, concurrent throughput."""
    from legorl.bench.sandbox import run_sandbox_bench

    try:
        result = run_sandbox_bench(backend, n=n, concurrency=concurrency, include_podman=podman)
    except LegoRLError as exc:
        _fail(exc)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    app()
