"""``legorl rollout``, ``grade``, ``export``, ``export-hf`` and ``sft``: one rollout, graded predictions,
and what a run recorded turned into data sets, checkpoints and a warm start."""

from __future__ import annotations

import json
import os
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from legorl.cli.common import SET_HELP, console, load_config, overrides
from legorl.cli.errors import fail
from legorl.errors import ConfigError, LegoRLError


def _write_whole(path: Path, text: str) -> None:
    """Write ``path`` through a temporary sibling and a rename: a reader never sees half of it."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def rollout_cmd(
    config: Path | None = typer.Option(None, help="Run config (JSON): harness, budget, sandbox, grading, engine."),
    set_: list[str] = typer.Option([], "--set", help=SET_HELP),
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
        flags["rollout.harness_options"] = overrides(option, "--option")
    try:
        cfg = single_rollout_config(config, {**overrides(set_), **flags}, engine=engine)
        single = asyncio.run(rollout_once(cfg, task, engine=engine))
    except ValueError as exc:
        fail(exc)
    print(json.dumps(single.summary(), indent=2))


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
        raise ConfigError(f"--out {out}: directory {out.resolve().parent} does not exist")
    preds = load_predictions(predictions)
    report = _grade(
        preds, tasks, workers=workers, timeout=timeout, reward_mode=reward_mode, flagged_policy=flagged_policy
    )
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


def export(
    run_dir: Path = typer.Argument(..., help="Run directory (holds run.sqlite)."),
    format: str = typer.Option("parquet", "--format", help="parquet | jsonl"),
    out: Path = typer.Option(..., "--out", help="Output directory (samples.<fmt>, turns.<fmt>)."),
) -> None:
    """Export a run's samples (token_ids, loss_mask, rollout_logprobs, reward, ...) and turns."""
    from legorl.trajectory.export import export_run

    result = export_run(run_dir, out, format=format)  # type: ignore[arg-type]
    print(json.dumps(result, indent=2))


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
    set_: list[str] = typer.Option([], "--set", help=SET_HELP + " SFT fields: --set sft.lr=1e-5."),
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

    cfg = load_config(config, set_, **{"sft.min_reward": min_reward, "sft.epochs": epochs, "sft.lr": lr})
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
        except ValueError as exc:
            fail(exc)
    for s in report.sources:
        skipped = ", ".join(f"{why}: {n}" for why, n in s.skipped.items()) or "none"
        console.print(f"{s.run_dir}: {len(s.rollouts)} rollouts, {s.samples} samples kept (skipped {skipped})")
    losses = " → ".join(f"{x:.4f}" for x in report.epoch_loss)
    console.print(
        f"fine-tuned {report.base_model} on {report.samples} samples ({report.sampled_tokens} sampled tokens) in "
        f"{report.optimizer_steps} steps; loss per sampled token by epoch {losses}; {report.seconds:.0f}s"
    )
    console.print(f"checkpoint: {report.checkpoint}; continue with RL: legorl train --resume {out}")


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
        raise LegoRLError(f"{source}: no complete checkpoint")
    try:
        path = export_hf(ckpt, out, base_model, adapter=adapter)
    except ValueError as exc:
        fail(exc)
    console.print(f"{ckpt} -> {path}")
