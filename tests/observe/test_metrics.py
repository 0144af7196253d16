"""The metrics sinks: metrics.jsonl (the source of truth), and Weights & Biases in offline mode (its own
run files under RUN_DIR/wandb) when the run config names a project."""

from __future__ import annotations

import builtins
import importlib.util
import json
import time

import pytest
from needs import unavailable

from legorl.config import RunConfig
from legorl.errors import ConfigError
from legorl.loop.validate import Validator
from legorl.observe.metrics import MetricsLogger, read_metrics


def test_jsonl_rows_store_nan_as_null(tmp_path):
    log = MetricsLogger(tmp_path, tensorboard=False)
    log.log(0, {"mismatch/pearson": float("nan"), "rollout/count": 4})
    log.close()
    (row,) = read_metrics(tmp_path)
    assert row["step"] == 0 and row["mismatch/pearson"] is None and row["rollout/count"] == 4


def test_wandb_offline_run_gets_every_step(tmp_path, monkeypatch):
    if importlib.util.find_spec("wandb") is None:
        unavailable("wandb (in the dev extras, installed by make setup)")
    monkeypatch.setenv("WANDB_SILENT", "true")
    cfg = RunConfig.load(None, run_dir=str(tmp_path), **{"wandb.project": "legorl-tests", "wandb.name": "wb-check"})
    log = MetricsLogger(tmp_path, tensorboard=False, wandb=cfg.wandb, run_config=cfg.model_dump(mode="json"))
    for step in range(3):
        log.log(step, {"rollout/reward_mean": 0.25 * step, "train/updated": True, "mismatch/pearson": float("nan")})
    log.close()
    (run_file,) = (tmp_path / "wandb").glob("offline-run-*/run-*.wandb")
    deadline = time.monotonic() + 60
    while b"rollout/reward_mean" not in (data := run_file.read_bytes()) and time.monotonic() < deadline:
        time.sleep(0.1)  # W&B's service process writes the records after finish() returns (all by exit)
    # W&B's record log (protobuf): the metric keys, the run config and the run name are in it
    for needle in (b"rollout/reward_mean", b"legorl-tests", b"wb-check", b"max_tokens_per_turn"):
        assert needle in data, needle
    assert b"train/updated" not in data, "booleans and NaN stay out of W&B's history"
    assert len(read_metrics(tmp_path)) == 3


def test_wandb_project_without_the_package_is_a_clear_error(tmp_path, monkeypatch):
    real_import = builtins.__import__

    def no_wandb(name, *args, **kwargs):
        if name == "wandb":
            raise ImportError("No module named 'wandb'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_wandb)
    cfg = RunConfig.load(None, **{"wandb.project": "p"})
    with pytest.raises(ConfigError, match=r"wandb.project is 'p' but the wandb package is not installed: pip install"):
        MetricsLogger(tmp_path, wandb=cfg.wandb)
    assert not (tmp_path / "metrics.jsonl").exists() or not read_metrics(tmp_path)


def test_validate_names_monitors_that_act_and_wandb(tmp_path, monkeypatch):
    cfg_file = tmp_path / "cfg.json"
    cfg_file.write_text(json.dumps({"monitors": {"mismatch": {"action": "stop"}}, "wandb": {"project": "p"}}))
    checks = {c.name: c for c in Validator(cfg_file).run(structure_only=True)}
    c = checks["observe.monitors_wandb"]
    assert c.level == "pass" and "mismatch=stop" in c.message and "'p' (offline)" in c.message
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda n, *a: None if n == "wandb" else real(n, *a))
    checks = {c.name: c for c in Validator(cfg_file).run(structure_only=True)}
    c = checks["observe.monitors_wandb"]
    assert c.level == "fatal" and "pip install wandb" in c.fix
