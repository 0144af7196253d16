"""A run's reward curve lands beside its metrics as a PNG."""

from __future__ import annotations

import json

from legorl.observe.plots import run_reward_curve


def test_run_reward_curve_is_a_png_of_the_metrics(tmp_path):
    assert run_reward_curve(tmp_path) is None  # no metrics yet: nothing written
    assert not (tmp_path / "reward_curve.png").exists()
    rows = [{"step": s, "rollout/reward_mean": r} for s, r in enumerate([0.1, 0.25, 0.3])]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    path = run_reward_curve(tmp_path)
    assert path == tmp_path / "reward_curve.png"
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 2000
