"""``legorl export`` of a harness rollout's run directory, checked against its own turns: every
sample's loss-masked tokens are, in order, the output tokens of the turns it was built from, and
the samples together hold every token the engine sampled (no turn lost, none re-tokenized)."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from legorl.cli import app


def assert_export_matches_turns(run_dir: Path | None, out: Path) -> list[dict]:
    """Run ``legorl export RUN_DIR --format jsonl --out OUT`` and compare; returns the sample rows."""
    assert run_dir is not None, "the rollout left no run directory"
    res = CliRunner().invoke(app, ["export", str(run_dir), "--format", "jsonl", "--out", str(out)])
    assert res.exit_code == 0, res.output
    samples = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    turns = [json.loads(line) for line in (out / "turns.jsonl").read_text().splitlines()]
    assert samples and turns, (len(samples), len(turns))
    by_index = {(t["session_id"], t["turn_index"]): t for t in turns}
    for s in samples:
        masked = [tid for m, tid in zip(s["loss_mask"], s["token_ids"]) if m]
        outputs = [tid for i in s["turn_indices"] for tid in by_index[(s["session_id"], i)]["output_token_ids"]]
        assert masked == outputs, (s["segment_kind"], s["turn_indices"])
        assert s["num_sampled"] == len(outputs) > 0
        assert len(s["rollout_logprobs"]) == len(s["token_ids"]) == len(s["loss_mask"])
    sampled = sum(len(t["output_token_ids"]) for t in turns if not t["failed"])
    assert sum(s["num_sampled"] for s in samples) == sampled
    return samples
