"""The run directory's provenance manifest and the metrics rewind on resume."""

from __future__ import annotations

import json

from legorl.config import RunConfig
from legorl.loop.provenance import hash_files, write_manifest
from legorl.tasks.loader import load_suite
from legorl.training.checkpoint import keep_metrics_until


def test_manifest_records_config_commit_packages_hashes_and_seeds(tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    cfg = RunConfig.load(None, run_dir=str(tmp_path / "run"), seed=5)
    (tmp_path / "run").mkdir()
    tasks = load_suite("trivial")
    path = write_manifest(cfg, tmp_path / "run", model_path=model, tasks=tasks)
    m = json.loads(path.read_text())
    assert m["config"]["seed"] == 5 and m["seeds"] == {"seed": 5}
    assert m["project"]["commit"] and len(m["project"]["commit"]) == 40
    assert m["packages"]["torch"] and m["packages"]["legorl"]
    assert m["model"]["sha256"] == hash_files(model)
    again = json.loads(
        write_manifest(cfg, tmp_path / "run", model_path=model, tasks=list(reversed(tasks)), name="m2.json").read_text()
    )
    assert again["suite"]["sha256"] == m["suite"]["sha256"]  # order-independent
    (model / "config.json").write_text('{"x": 1}')
    assert hash_files(model) != m["model"]["sha256"]


def test_metrics_rows_after_the_checkpoint_are_dropped(tmp_path):
    rows = [{"step": i, "train/loss": float(i)} for i in range(4)]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    keep_metrics_until(tmp_path, 1)
    kept = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in kept] == [0, 1]
