"""``legorl validate``: the shipped demo config passes; broken configs fail naming the cause.

Structure checks run on the real registries and files; live checks on the real grader, sandbox,
gateway, engine and trainer. Fault injection only where a fault cannot be configured: a sandbox
backend that leaves the network reachable, an engine serving other weights than the trainer's."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from legorl.config import CONFIGS_DIR
from legorl.loop.validate import Injected, report, validate
from legorl.tasks.loader import get_task

DEMO = CONFIGS_DIR / "demo.json"


def _by_name(checks):
    return {c.name: c for c in checks}


def _config(tmp_path: Path, **changes) -> Path:
    cfg = json.loads(DEMO.read_text())
    for dotted, value in changes.items():
        node = cfg
        *parents, leaf = dotted.split("__")
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = value
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    return path


@pytest.mark.sandbox
def test_demo_config_passes_the_structure_checks():
    out = subprocess.run(
        [sys.executable, "-m", "legorl.cli", "validate", str(DEMO), "--structure-only"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    lines = out.stdout.splitlines()
    assert sum(line.startswith("PASS ") for line in lines) == 10 and lines[-1].startswith("OK: 10 checks, 0 fatal")


def test_harness_and_tool_format_mismatch_is_fatal(tmp_path):
    # the command harness runs the OpenAI-chat tool-calling agent; configured for Anthropic Messages
    path = _config(tmp_path, rollout__harness="command", rollout__harness_options={"dialect": "anthropic.messages"})
    out = subprocess.run(
        [sys.executable, "-m", "legorl.cli", "validate", str(path), "--structure-only", "--json"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 1
    result = json.loads(out.stdout)
    assert "harness.dialect_tool_format" in result["fatal"]
    check = next(c for c in result["checks"] if c["name"] == "harness.dialect_tool_format")
    assert "anthropic.messages" in check["message"] and "openai.chat" in check["fix"]


def test_budget_and_batch_arithmetic_are_fatal_with_the_fix(tmp_path):
    checks = _by_name(
        validate(
            _config(
                tmp_path,
                rollout__max_tokens_per_turn=9000,
                tasks_per_step=5,
                task_ids=[f"legorl__oneline-train-{i:03d}" for i in (1, 2, 3)],
            ),
            structure_only=True,
        )
    )
    assert checks["budget.context"].level == "fatal" and "8192" in checks["budget.context"].message
    assert "max_tokens_per_turn" in checks["budget.context"].fix
    assert checks["batch.arithmetic"].level == "fatal" and "tasks_per_step <= 3" in checks["batch.arithmetic"].fix


def test_schema_error_names_the_field_and_skips_the_rest(tmp_path):
    checks = validate(_config(tmp_path, rollout__max_turns=0), structure_only=True)
    assert checks[0].level == "fatal" and "rollout.max_turns" in checks[0].message
    assert all(c.level == "skip" for c in checks[1:])
    assert report(checks)["ok"] is False


# -- live checks -------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.sandbox
def test_demo_config_passes_every_live_check():
    checks = validate(DEMO, sample_tasks=1)
    bad = [c.line() for c in checks if c.level != "pass"]
    assert not bad, bad
    assert len(checks) == 16


def _broken_gold_suite(tmp_path: Path) -> Path:
    """A suite of one task (a repo/ directory and task.json) whose gold patch applies but fixes nothing."""
    task = get_task("legorl__trivial-001")
    d = tmp_path / "suite" / "legorl__broken-001"
    shutil.copytree(task.source_dir, d / "repo", ignore=shutil.ignore_patterns(".git"))
    record = json.loads(task.model_dump_json(exclude={"source_dir"}))
    record.update(instance_id="legorl__broken-001", patch=task.patch.replace("+    return a + b", "+    return a * b"))
    (d / "task.json").write_text(json.dumps(record))
    return d.parent


@pytest.mark.slow
@pytest.mark.sandbox
def test_broken_gold_patch_is_fatal(tmp_path):
    path = _config(tmp_path, suite=str(_broken_gold_suite(tmp_path)), task_ids=["legorl__broken-001"], tasks_per_step=1)
    v = _by_name(validate(path, sample_tasks=1))
    check = v["live.gold_and_empty_patches"]
    assert check.level == "fatal", check.line()
    assert "legorl__broken-001: gold patch does not resolve" in check.message and "tests/test_arith.py" in check.message


@pytest.mark.slow
@pytest.mark.sandbox
def test_sandbox_backend_leaving_the_network_reachable_is_fatal(tmp_path):
    from legorl.sandbox.bwrap import BwrapBackend, BwrapSandbox

    class LeakySandbox(BwrapSandbox):  # fault injection: the network namespace is shared with the host
        def bwrap_options(self, cwd, env):
            return [*super().bwrap_options(cwd, env), "--share-net"]

    class LeakyBackend(BwrapBackend):
        def create(self, spec):
            sb = super().create(spec)
            sb.__class__ = LeakySandbox
            return sb

    from legorl.loop.validate import Validator

    val = Validator(DEMO, inject=Injected(backend=LeakyBackend()), sample_tasks=1)
    val.run(structure_only=True)
    check = val.run_check("live.sandbox_no_network", val.c_network, live=True)
    assert check.level == "fatal", check.line()
    assert "reaches the network" in check.message and "unshare" in check.fix


@pytest.mark.slow
def test_engine_serving_another_model_is_fatal():
    import asyncio

    import torch

    from legorl.engines.embedded import EmbeddedEngine
    from legorl.loop.validate import Validator
    from legorl.models.registry import resolve_model

    engine = EmbeddedEngine.from_pretrained(str(resolve_model("smollm2-135m")))
    weights = {k: v + 0.02 * torch.randn_like(v) if v.dim() == 2 else v for k, v in engine.model.state_dict().items()}
    asyncio.run(engine.update_weights(weights, version=1))  # the engine now serves other weights
    val = Validator(DEMO, inject=Injected(engine=engine))
    val.run(structure_only=True)
    val.run_check("live.engine_trainer_logprobs", val.c_logprobs, live=True)
    check = _by_name(val.checks)["live.engine_trainer_logprobs"]
    assert check.level == "fatal", check.line()
    assert "does not serve the model the trainer trains" in check.message
