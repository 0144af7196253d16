"""`legorl eval` end to end: the real command, sandbox, harness, gateway and grader, a scripted
policy (no model): its JSON report on stdout, its live progress on stderr."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.sandbox]


def test_eval_reports_pass_at_k_and_shows_progress_apart_from_the_json(tmp_path):
    config = tmp_path / "eval.json"
    config.write_text(
        json.dumps(
            {
                "run_dir": str(tmp_path / "run"),
                "suite": "oneline-heldout",
                "task_ids": ["legorl__oneline-heldout-001", "legorl__oneline-heldout-002"],
                "rollout": {"harness": "line-fix", "max_turns": 1, "max_tokens_per_turn": 32},
                "sandbox": {"type": "bwrap", "memory_mb": 1024, "max_pids": 128},
            }
        )
    )
    argv = [sys.executable, "-m", "legorl.cli", "eval", "--config", str(config), "--engine", "scripted-gold"]
    out = subprocess.run(
        [*argv, "-n", "2", "--k", "1", "--k", "2", "--json"], capture_output=True, text=True, timeout=600
    )
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)  # stdout is the report and nothing else
    assert (report["samples"], report["correct"], report["env_failures"]) == (4, 4, 0)
    assert report["pass_at"] == {"1": 1.0, "2": 1.0}
    low, high = report["interval"]["1"]
    assert low < 1.0 <= high  # a 95% interval, not a point
    # not a terminal: the progress bar's figures print as lines on stderr
    assert "evaluation: oneline-heldout: 4 rollouts" in out.stderr
    assert "4/4 rollouts" in out.stderr and "tok/s" in out.stderr
    # a scripted policy per rollout, so they run side by side (they once ran one task after another)
    from legorl.trajectory.store import open_run

    store = open_run(tmp_path / "run")
    try:
        spans = [(r.started_at, r.started_at + r.duration_s) for r in store.iter_rollouts()]
    finally:
        store.close(compact=False)
    assert len(spans) == 4 and max(s for s, _ in spans) < min(e for _, e in spans)
