"""Acceptance: `sandbox.type: podman` in the RunConfig runs a rollout in podman through the code path
of `legorl rollout` (the CLI itself, then legorl.loop.single with the builders train uses): the
scripted-gold model, the real command harness with the tiny tool agent inside the container, the
real gateway on its Unix socket, the grader in a fresh podman sandbox — reward 1.

The agent program runs with the image's own python3: the harnesses that start the host's interpreter
(minimal, the command harness's default) cannot run in a container, which sees nothing of the host.
The first run builds the base image (debootstrap + podman import, minutes; needs the Debian mirror);
later runs find it in the image cache ($LEGORL_HOME/images) and podman's storage.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from needs import unavailable
from typer.testing import CliRunner

import legorl.harnesses.tiny_tool_agent as tiny_tool_agent
from legorl.cli import app
from legorl.config import RunConfig
from legorl.errors import SandboxError
from legorl.trajectory.store import RunStore

pytestmark = [pytest.mark.slow, pytest.mark.sandbox, pytest.mark.podman]

TASK = "legorl__trivial-001"
# The tiny tool agent's source travels in the environment (podman passes a multi-line value by name,
# never on a command line) and runs with the container's python3.
AGENT_CMD = (
    'python3 -c "$TINY_AGENT" --issue-file {issue_file} --max-turns {max_turns} '
    "--max-tokens {max_tokens} --model {model}"
)


@pytest.fixture(scope="module")
def podman_base():
    from legorl.loop.stack import sandbox_backend

    try:
        sandbox_backend(RunConfig.load(None, **{"sandbox.type": "podman"}).sandbox).base_layer()
    except SandboxError as exc:  # e.g. no Debian mirror reachable: say why, precisely
        unavailable(f"cannot build the podman base image here: {exc}")


def test_podman_rollout_from_the_run_config(podman_base, tmp_path):
    config = tmp_path / "podman.json"
    config.write_text(
        json.dumps(
            {
                "run_dir": str(tmp_path / "run"),
                "rollout": {
                    "harness": "command",
                    "max_turns": 3,
                    "max_tokens_per_turn": 4096,
                    "wall_clock_s": 300,
                    "harness_options": {
                        "command": AGENT_CMD,
                        "env": {"TINY_AGENT": Path(tiny_tool_agent.__file__).read_text()},
                    },
                },
                "sandbox": {"type": "podman", "memory_mb": 1024, "max_pids": 128},
                "grading": {"timeout_s": 120},
            }
        )
    )
    result = CliRunner().invoke(app, ["rollout", "--config", str(config), "--task", TASK, "--engine", "scripted-gold"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert (summary["status"], summary["reward"]) == ("ok", 1.0), summary

    run = tmp_path / "run"
    assert RunConfig.model_validate_json((run / "config.json").read_text()) == RunConfig.load(config)
    (rollout,) = RunStore(run).iter_rollouts()
    assert rollout.sandbox == "podman" and rollout.grader is not None and rollout.grader.status == "ok"
    assert "return a + b" in rollout.diff
    # the model was served through the gateway: both agent turns recorded, trainable
    assert sum(len(s.turn_indices) for s in rollout.samples) == 2
    assert all(s.num_sampled > 0 for s in rollout.samples)
