"""The observability commands (``legorl ui``, ``legorl status``, ``legorl validate``, ``legorl launch``,
``legorl control``), registered on the main app by :mod:`legorl.cli` (``legorl bench ui`` lives in
:mod:`legorl.cli.bench`). Only typer is imported at module level."""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import typer

from legorl.errors import ConfigError


def ui(
    run_dirs: list[str] = typer.Argument(..., help="Run directories to show; or `export RUN_DIR --out DIR`."),
    port: int = typer.Option(8765, "--port", help="Port on 127.0.0.1 (0: any free port)."),
    token: str | None = typer.Option(None, "--token", help="Access token (default: a fresh random one)."),
    out: Path | None = typer.Option(None, "--out", help="`ui export`: the snapshot directory to write."),
    background: bool = typer.Option(
        False, "--background", help="Serve from a detached process; print the URL and its pid."
    ),
) -> None:
    """Serve the run UI on 127.0.0.1 (the printed URL carries the access token); or, as
    `legorl ui export RUN_DIR --out DIR`, write a static snapshot that opens without a server."""
    if run_dirs[0] == "export" and not Path("export").is_dir():
        if len(run_dirs) != 2 or out is None:
            raise typer.BadParameter("usage: legorl ui export RUN_DIR --out DIR")
        from legorl.observe.ui.export import export_snapshot

        result = export_snapshot(run_dirs[1], out)
        print(json.dumps(result, indent=2))
        return
    if out is not None:
        raise typer.BadParameter("--out belongs to `legorl ui export RUN_DIR --out DIR`")
    from legorl.trajectory.store import open_run

    for d in run_dirs:  # the checked open, here too: --background would only show the error in its log
        open_run(d).close(compact=False)
    if background:
        url, pid, log = _detached(
            ["ui", *run_dirs, "--port", str(port), *(["--token", token] if token else [])],
            Path(run_dirs[0]).resolve().parent / f".legorl-ui-{Path(run_dirs[0]).name}.log",
            wait_for="http://127.0.0.1:",
        )
        print(f"{url}\npid {pid} (stop: kill {pid}); log {log}")
        return
    from legorl.observe.ui.server import serve

    serve(run_dirs, port=port, token=token, print_fn=lambda s: print(s, flush=True))


def _detached(args: list[str], log: Path, wait_for: str | None = None, timeout: float = 60.0) -> tuple[str, int, Path]:
    """Start ``legorl ARGS`` in its own session (it outlives this command), output to ``log``; with
    ``wait_for``, wait for the first log line holding it and return that line."""
    import subprocess
    import sys

    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("w") as f:
        proc = subprocess.Popen(
            [sys.executable, "-m", "legorl.cli", *args],
            stdout=f,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    if wait_for is None:
        return "", proc.pid, log
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for line in log.read_text(errors="replace").splitlines():
            if wait_for in line:
                return line[line.index(wait_for) :].strip(), proc.pid, log
        if proc.poll() is not None:
            raise ConfigError(f"legorl {args[0]} exited with {proc.returncode}: {log.read_text()[-500:]}")
        time.sleep(0.1)
    raise ConfigError(f"legorl {args[0]} printed no {wait_for!r} within {timeout:.0f}s (log: {log})")


def launch(
    config: Path = typer.Argument(..., help="Run config (JSON)."),
    set_: list[str] = typer.Option([], "--set", help="Override a field (as for legorl train)."),
) -> None:
    """Start `legorl train --config CONFIG` in the background; print its run directory, pid and log."""
    from legorl.config import RunConfig

    overrides = dict(item.partition("=")[::2] for item in set_)
    cfg = RunConfig.load(config, **overrides)
    run_dir = Path(cfg.run_dir).resolve()
    sets = [a for item in set_ for a in ("--set", item)]
    _, pid, log = _detached(["train", "--config", str(config), *sets], run_dir.parent / f"{run_dir.name}.log")
    print(
        json.dumps(
            {
                "run_dir": str(run_dir),
                "pid": pid,
                "log": str(log),
                "status": f"legorl status {run_dir}",
                "ui": f"legorl ui {run_dir}",
            },
            indent=2,
        )
    )


def status(
    run_dir: Path = typer.Argument(..., help="Run directory (live or finished)."),
    as_json: bool = typer.Option(False, "--json", help="Print the summary as JSON."),
    watch: float = typer.Option(0.0, "--watch", help="Reprint every N seconds until the run finishes (0: once)."),
) -> None:
    """A terminal summary of a run: state, step, reward, alerts, throughput, ETA."""
    from legorl.observe.status import format_summary, run_summary

    while True:  # run_summary opens the store through open_run: RunDirError naming a damaged file
        s = run_summary(run_dir)
        print(json.dumps(s.as_dict(), indent=2) if as_json else format_summary(s), flush=True)
        if watch <= 0 or s.state != "running":
            return
        time.sleep(watch)
        print()


def control(
    run_dir: Path = typer.Argument(..., help="Run directory of a training run."),
    action: str = typer.Argument(..., help="pause | resume | stop"),
    reason: str = typer.Option("", "--reason", help="Why (shown by legorl status and the UI)."),
) -> None:
    """Pause, resume or stop a training run between steps (stop: after a checkpoint; resume a
    stopped run with `legorl train --resume RUN_DIR`)."""
    from legorl.observe.control import read_control, write_control

    states = {"pause": "paused", "resume": "running", "stop": "stop"}
    if action not in states:
        raise typer.BadParameter(f"ACTION must be one of {', '.join(states)}, not {action!r}")
    if not (run_dir / "config.json").exists():
        raise ConfigError(f"{run_dir} is not a LEGO-RL run directory (no config.json)")
    before = read_control(run_dir)
    after = write_control(run_dir, states[action], reason or f"legorl control {action}", by="user")  # type: ignore[arg-type]
    print(f"{run_dir}: {before.state} -> {after.state}")


def validate(
    config: Path = typer.Argument(..., help="Run config (JSON)."),
    set_: list[str] = typer.Option([], "--set", help="Override a field: --set rollout.max_turns=4 (repeatable)."),
    structure_only: bool = typer.Option(
        False, "--structure-only", help="Skip the checks that need the model or sandboxes."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the checks as JSON."),
    sample: int = typer.Option(2, "--sample", min=1, help="Tasks whose gold and empty patches are graded."),
) -> None:
    """Check a run config: one line per check (PASS / WARN / FATAL, each fatal saying what to change);
    exit code 1 on any fatal."""
    from legorl.loop.validate import report
    from legorl.loop.validate import validate as run_checks

    overrides: dict[str, object] = {}
    for item in set_:
        key, sep, raw = item.partition("=")
        if not sep:
            raise typer.BadParameter(f"--set takes key=value, got {item!r}")
        try:
            overrides[key] = json.loads(raw)
        except json.JSONDecodeError:
            overrides[key] = raw

    def show(check: Any) -> None:
        print(check.line(), flush=True)

    checks = run_checks(
        config,
        structure_only=structure_only,
        overrides=overrides,
        sample_tasks=sample,
        on_check=None if as_json else show,
    )
    result = report(checks)
    if as_json:
        print(json.dumps(result, indent=2))
    else:
        print(
            f"{'OK' if result['ok'] else 'FAILED'}: {len(checks)} checks, {len(result['fatal'])} fatal, "
            f"{len(result['warn'])} warn"
        )
    if not result["ok"]:
        raise typer.Exit(1)


@contextlib.contextmanager
def train_ui(cfg: Any, port: int = 8765) -> Iterator[None]:
    """``legorl train --ui``: the run UI served from this process while the block (training) runs."""
    from legorl.observe.ui.server import BackgroundUI
    from legorl.trajectory.store import RunStore

    RunStore(cfg.run_dir).close(compact=False)  # the run directory exists before the first rollout
    with BackgroundUI([cfg.run_dir], port=port) as server:
        print(f"LEGO-RL UI: {server.url}", flush=True)
        yield


def check_before_train(cfg: Any, *, live: bool = False) -> None:
    """What ``legorl train`` runs first (unless ``--no-validate``): the structure checks of
    ``legorl validate`` (and the live ones with ``--validate-live``) on the config it will train;
    any fatal stops it with exit code 1."""
    from legorl.loop.validate import report
    from legorl.loop.validate import validate as run_checks

    checks = run_checks(cfg, structure_only=not live, on_check=lambda c: c.level != "pass" and print(c.line()))
    result = report(checks)
    print(
        f"validate: {len(checks)} checks, {len(result['fatal'])} fatal, {len(result['warn'])} warn"
        + ("" if live else " (structure only; --validate-live for the live checks, --no-validate to skip)"),
        flush=True,
    )
    if not result["ok"]:
        raise typer.Exit(1)
