"""``legorl train``, ``legorl demo`` (one code path) and ``legorl gateway``; the run's closing summary.
``launch``, ``validate``, ``status``, ``control`` and ``ui`` live in :mod:`legorl.observe.cli`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich.table import Table

from legorl.cli.common import SET_HELP, SUITE_HELP, console, load_config, suite_fields
from legorl.observe import cli as observe_cli
from legorl.tasks.cli import INSTANCES_HELP, REPOS_HELP

if TYPE_CHECKING:
    from legorl.config import RunConfig
    from legorl.observe.memory import TreeMemory


def _run(cfg: RunConfig, resume: bool = False) -> list[dict[str, Any]]:
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

    with RichPhaseProgress(console) as progress:
        return asyncio.run(train(cfg, on_step=on_step, resume=resume, progress=progress))


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
    from legorl.observe.control import read_control

    control = read_control(run_dir)
    if control.state == "stop":  # ended early: say why, and leave a non-zero exit for scripts
        console.print(
            f"[bold red]run stopped[/] ({control.reason}, by {control.by}); "
            f"continue with: legorl train --resume {run_dir}"
        )
        raise typer.Exit(3)


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
            cfg = load_config(config or resume / "config.json", set_, run_dir=str(resume))
            history = _run(cfg, resume=True)
        else:
            cfg = load_config(config, set_)
            if validate:
                observe_cli.check_before_train(cfg, live=validate_live)
            with observe_cli.train_ui(cfg, port=ui_port) if ui else contextlib.nullcontext():
                history = _run(cfg)
    _summary(history, Path(cfg.run_dir), (time.monotonic() - t0, memory))


def demo(set_: list[str] = typer.Option([], "--set", help=SET_HELP)) -> None:
    """Exactly `legorl train --config configs/demo.json`: a short GSPO learning run of the embedded
    SmolLM2 on one-line fixes (line-fix harness), held-out solve rate before and after."""
    from legorl.config import shipped_config

    _train(shipped_config("demo"), set_)


def train(
    config: Path | None = typer.Option(None, help="Run config (JSON); see legorl.config.RunConfig."),
    set_: list[str] = typer.Option([], "--set", help=SET_HELP),
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
    suite: str | None = typer.Option(None, "--suite", help=SUITE_HELP),
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
    fields: dict[str, object] = dict(suite_fields(suite, repos, instances))
    if executor is not None:
        fields["executor.type"] = executor
    if address is not None:
        fields["executor.address"] = address
    set_ = [*set_, *(f"{k}={json.dumps(v)}" for k, v in fields.items())]
    _train(config, set_, validate=not no_validate, validate_live=validate_live, ui=ui, ui_port=ui_port, resume=resume)


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
    from legorl.gateway.sessions import new_token
    from legorl.harnesses.client_env import client_envs, format_client_envs
    from legorl.loop.stack import serve_gateway

    cfg = load_config(config, [], **{"engine.type": engine, "engine.model": model})
    token = new_token()
    print("# Client environment (paste into a shell once the gateway says it is serving):")
    print(format_client_envs(client_envs(f"http://127.0.0.1:{port}", token, cfg.engine.model)), flush=True)
    serve_gateway(cfg.engine, port=port, run_dir=run_dir, token=token, print_fn=console.print)
