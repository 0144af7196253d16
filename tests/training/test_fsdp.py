"""FSDP2 on 2 CPU ranks (gloo), launched by torchrun: the sharded trainer's step equals the
single-process trainer's on the same batch, and a checkpoint saved at world size 2 resumes at world
size 1 onto the uninterrupted run's parameters (``fsdp_worker.py`` is one rank)."""

from __future__ import annotations

import json
import os
import re
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
    # LoRA adapters on every linear layer, sharded with their decoder layers; the base stays frozen
    "lora": {"lora": {"rank": 4, "alpha": 8}},
}


# a rank that died of a signal (torchrun's report: "exitcode  : -6")
KILLED_BY_SIGNAL = re.compile(r"exitcode\s*:\s*-\d+")


def _rank_logs(log_dir: Path, chars: int = 4000) -> str:
    """The tail of each rank's own output (torchrun ``--tee``: ``<run>/attempt_0/<rank>/*.log``)."""
    return "\n".join(
        f"--- {f.relative_to(log_dir)} ---\n{f.read_text(errors='replace')[-chars:]}"
        for f in sorted(log_dir.rglob("*.log"))
        if f.stat().st_size
    )


class RankKilled(AssertionError):
    """A torchrun rank died of a signal (the report and every rank's log are the message)."""


def _launch(args: list[str], log_dir: Path, ranks: int = 1, timeout: int = 300) -> None:
    """Run the worker with ``args`` (under torchrun with ``ranks`` > 1); a rank's faults print its
    Python stacks (faulthandler) into its log, which the failure carries with the launcher's report."""
    env = {**os.environ, "PYTHONFAULTHANDLER": "1", "TORCH_SHOW_CPP_STACKTRACES": "1"}
    launcher = [sys.executable]
    if ranks > 1:  # each rank's output also goes to its own file
        launcher += ["-m", "torch.distributed.run", "--nproc-per-node", str(ranks), "--master-port"]
        launcher += [str(free_port()), "--log-dir", str(log_dir), "--tee", "3"]
    done = subprocess.run(
        [*launcher, str(WORKER), *args], capture_output=True, text=True, timeout=timeout, cwd=WORKER.parent, env=env
    )
    if done.returncode == 0:
        return
    report = done.stdout[-3000:] + done.stderr[-5000:] + "\n" + (_rank_logs(log_dir) if log_dir.is_dir() else "")
    raise (RankKilled if KILLED_BY_SIGNAL.search(done.stderr) else AssertionError)(report)


@pytest.mark.flaky(
    reason="a torchrun rank died of a signal in a CI run (torchrun's report: exitcode -6), cause not found; "
    "the failed run's report carries every rank's log and Python stacks",
    runs=2,
    on=RankKilled,
)
@pytest.mark.parametrize("name", list(CONFIGS))
def test_two_fsdp_ranks_take_the_single_process_step_and_resume_at_world_size_1(name, tmp_path):
    cfg = json.dumps(CONFIGS[name])
    _launch(["train", str(tmp_path), "--cfg", cfg], tmp_path / "logs", ranks=2)
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

    _launch(["resume", str(tmp_path), "--cfg", cfg], tmp_path / "logs")
    resumed = json.loads((tmp_path / "result-resume.json").read_text())
    worst = max(resumed["relative_param_diff"].values())
    print(f"[{name}] resumed at world size 1: worst per-tensor ‖Δθ‖/‖θ‖ after the next step {worst:.2e}")
    assert worst <= 1e-6 and resumed["version"] == 2
