"""FSDP2 on 2 CPU ranks (gloo), launched by torchrun: the sharded trainer's step equals the
single-process trainer's on the same batch, and a checkpoint saved at world size 2 resumes at world
size 1 onto the uninterrupted run's parameters (``fsdp_worker.py`` is one rank)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from legorl.engines.server_process import free_port

WORKER = Path(__file__).with_name("fsdp_worker.py")

CONFIGS = {
    # GRPO groups share a prompt: shared-prefix passes; two mini-batches (π_old recomputed)
    "prefix-sharing": {},
    # packed rows in small passes (the ranks run different numbers of them), two epochs
    "packing": {"packing": True, "prefix_sharing": False, "forward_tokens": 64, "ppo_epochs": 2},
}


def _launch(args: list[str], timeout: int = 300) -> None:
    done = subprocess.run(args, capture_output=True, text=True, timeout=timeout, cwd=WORKER.parent)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]


@pytest.mark.parametrize("name", list(CONFIGS))
def test_two_fsdp_ranks_take_the_single_process_step_and_resume_at_world_size_1(name, tmp_path):
    cfg = json.dumps(CONFIGS[name])
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2"]
    _launch([*torchrun, "--master-port", str(free_port()), str(WORKER), "train", str(tmp_path), "--cfg", cfg])
    train = json.loads((tmp_path / "result-train.json").read_text())
    steps = train["relative_gradient_diff"]
    print(f"\n[{name}] optimiser steps {train['optimizer_steps']}; worst per-tensor ‖Δg‖/‖g‖ per step:")
    print("  " + ", ".join(f"{max(s.values()):.2e}" for s in steps))
    assert train["world_size"] == 2 and len(steps) >= 2
    # the first optimiser step: same weights, same batch -> the same gradient, tensor by tensor
    assert max(steps[0].values()) <= 1e-5, sorted(steps[0].items(), key=lambda kv: -kv[1])[:5]
    # later steps start from weights one sharded update apart (float rounding): still close
    assert all(max(s.values()) <= 1e-4 for s in steps)
    (single_loss, sharded_loss) = train["loss"]
    assert abs(single_loss - sharded_loss) <= 1e-6 * max(1.0, abs(single_loss))
    assert train["grad_norm"][0] == pytest.approx(train["grad_norm"][1], rel=1e-5)
    assert train["sampled_tokens"][0] == train["sampled_tokens"][1] == train["fidelity_tokens"][1]
    assert sorted(p.name for p in (tmp_path / "run" / "checkpoints" / "step-000001").iterdir()) == [
        ".metadata",
        "__0_0.distcp",  # each rank wrote its own shards
        "__1_0.distcp",
        "meta.json",
    ]

    _launch([sys.executable, str(WORKER), "resume", str(tmp_path), "--cfg", cfg])
    resumed = json.loads((tmp_path / "result-resume.json").read_text())
    worst = max(resumed["relative_param_diff"].values())
    print(f"[{name}] resumed at world size 1: worst per-tensor ‖Δθ‖/‖θ‖ after the next step {worst:.2e}")
    assert worst <= 1e-6 and resumed["version"] == 2
