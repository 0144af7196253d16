"""The commands run what one RunConfig says: `legorl demo` is `legorl train --config configs/demo.json`,
`legorl rollout` and `legorl gateway` build theirs from the same loader (no model is loaded here:
the call each command makes is recorded instead)."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from types import SimpleNamespace

import pytest
from typer.testing import CliRunner

import legorl.cli as cli
from legorl.cli import run as cli_run
from legorl.config import CONFIGS_DIR, RunConfig

runner = CliRunner()


@pytest.fixture
def train_calls(monkeypatch):
    """Each `_run(cfg)` (the one call into the training loop) the commands make."""
    calls: list[tuple] = []

    def record(*args, **kwargs):
        calls.append((args, kwargs))
        return []

    monkeypatch.setattr(cli_run, "_run", record)
    return calls


def test_demo_is_train_with_the_demo_config(train_calls, monkeypatch):
    monkeypatch.chdir(CONFIGS_DIR.parent)  # where `legorl train --config configs/demo.json` is typed
    for argv in (
        ["demo"],
        ["train", "--config", "configs/demo.json"],
        ["demo", "--set", "steps=1"],
        ["train", "--config", "configs/demo.json", "--set", "steps=1"],
    ):
        result = runner.invoke(cli.app, argv)
        assert result.exit_code == 0, (argv, result.output)
    demo, train, demo1, train1 = train_calls
    assert demo == train and demo1 == train1  # the same call, the same RunConfig
    (cfg,), kwargs = demo
    assert kwargs == {} and cfg == RunConfig.load(CONFIGS_DIR / "demo.json")
    assert demo1[0][0].steps == 1 and cfg.steps == 5
    assert cfg.eval.suite == "oneline-heldout" and cfg.suite == "oneline-train"  # the demo is a learning run


def test_demo_does_not_depend_on_the_working_directory(train_calls, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    assert runner.invoke(cli.app, ["demo"]).exit_code == 0
    assert train_calls[0][0][0] == RunConfig.load(CONFIGS_DIR / "demo.json")


@pytest.fixture
def rollout_calls(monkeypatch, tmp_path):
    import legorl.loop.single as single

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # the command's fresh run dirs go here

    calls: list[tuple] = []

    async def record(cfg, task, *, engine):
        calls.append((cfg, task, engine))
        return SimpleNamespace(summary=lambda: {"status": "ok"})

    monkeypatch.setattr(single, "rollout_once", record)
    return calls


def test_rollout_command_builds_its_run_config(rollout_calls):
    result = runner.invoke(
        cli.app,
        [
            "rollout",
            "--sandbox",
            "podman",
            "--harness",
            "command",
            "--max-turns",
            "2",
            "-o",
            "command=echo hi",
            "-o",
            'env={"A": "1"}',
            "--task",
            "legorl__trivial-004",
        ],
    )
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == {"status": "ok"}
    cfg, task, engine = rollout_calls[-1]
    assert (task, engine, cfg.sandbox.type, cfg.rollout.harness) == (
        "legorl__trivial-004",
        "scripted-gold",
        "podman",
        "command",
    )
    assert cfg.rollout.harness_options == {"command": "echo hi", "env": {"A": "1"}}
    # without a config: the rollout command's defaults, room for scripted replies, a fresh run dir
    assert (cfg.rollout.max_turns, cfg.rollout.wall_clock_s, cfg.rollout.max_tokens_per_turn) == (2, 600.0, 4096)
    assert cfg.run_dir.is_dir() and cfg.run_dir.name.startswith("legorl-rollout-")
    assert cfg.run_dir.parent == Path(tempfile.gettempdir())

    assert runner.invoke(cli.app, ["rollout", "--engine", "embedded", "--run-dir", "somewhere"]).exit_code == 0
    cfg, _, engine = rollout_calls[-1]
    assert (engine, cfg.rollout.max_tokens_per_turn, cfg.run_dir) == ("embedded", 512, Path("somewhere"))

    # with a config: its values as written, then --set, then the flags
    demo = str(CONFIGS_DIR / "demo.json")
    assert (
        runner.invoke(
            cli.app, ["rollout", "--config", demo, "--set", "grading.retries=0", "--max-tokens", "100"]
        ).exit_code
        == 0
    )
    cfg, _, _ = rollout_calls[-1]
    expected = RunConfig.load(demo, **{"grading.retries": 0, "rollout.max_tokens_per_turn": 100})
    assert cfg == expected


def test_rollout_command_reports_config_errors(rollout_calls):
    for argv, msg in (
        (["--sandbox", "lxc"], "does not match any of the expected tags"),
        (["--harness", "nope"], "unknown harness 'nope'; known: minimal"),
        (["-o", "no-equals-sign"], "--option expects KEY=VALUE"),
    ):
        result = runner.invoke(cli.app, ["rollout", *argv])
        assert result.exit_code == 2 and msg in " ".join(result.output.split()), (argv, result.output)
    assert rollout_calls == []


def test_gateway_command_serves_the_config_engine(monkeypatch, tmp_path):
    import legorl.loop.stack as stack

    calls = []
    monkeypatch.setattr(stack, "serve_gateway", lambda engine, **kw: calls.append((engine, kw)))
    assert (
        runner.invoke(cli.app, ["gateway", "--model", "/models/x", "--port", "0", "--run-dir", str(tmp_path)]).exit_code
        == 0
    )
    engine, kw = calls[-1]
    assert (engine.type, engine.model, kw["port"], kw["run_dir"]) == ("embedded", "/models/x", 0, tmp_path)
    for name in ("vllm", "sglang"):
        assert runner.invoke(cli.app, ["gateway", "--engine", name, "--port", "0"]).exit_code == 0
        assert calls[-1][0].type == name
    result = runner.invoke(cli.app, ["gateway", "--engine", "tgi"])  # not an engine we have
    assert result.exit_code == 2 and "engine.type" in result.output and len(calls) == 3
