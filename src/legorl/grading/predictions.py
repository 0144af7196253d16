"""Grade SWE-bench-format predictions (``legorl grade``): JSONL records with ``instance_id``,
``model_patch`` and optionally ``model_name_or_path``, against a task suite."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from legorl.errors import ConfigError, TaskError


def load_predictions(path: Path) -> list[dict]:
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"predictions file {path} does not exist")
    text = path.read_text(encoding="utf-8")
    records: list = []
    if path.suffix == ".json":
        data = json.loads(text)
        records = list(data.values()) if isinstance(data, dict) else data
    else:
        for n, line in enumerate(text.splitlines(), 1):
            if line.strip():
                try:
                    records.append(json.loads(line))
                except json.JSONDecodeError as exc:
                    raise ConfigError(f"{path}:{n}: not valid JSON: {exc}") from None
    for i, r in enumerate(records):
        if not isinstance(r, dict) or "instance_id" not in r or not isinstance(r.get("model_patch", ""), (str, type(None))):
            raise ConfigError(f"{path}: record {i} needs 'instance_id' and 'model_patch'")
    return records


def grade_predictions(preds: list[dict], suite: str, workers: int = 2, timeout: float = 120,
                      reward_mode: str = "binary", flagged_policy: str = "zero", backend=None) -> dict:  # noqa: ANN001
    from legorl.grading.grader import grade
    from legorl.tasks.loader import load_suite

    tasks = {t.instance_id: t for t in load_suite(suite)}
    unknown = sorted({p["instance_id"] for p in preds} - set(tasks))
    if unknown:
        raise TaskError(f"{len(unknown)} prediction instance id(s) not in suite {suite!r}: {', '.join(unknown)}")
    if backend is None:
        from legorl.sandbox.bwrap import BwrapBackend

        backend = BwrapBackend()

    def one(p: dict) -> tuple[str, dict]:
        r = grade(tasks[p["instance_id"]], p.get("model_patch") or "", backend, timeout=timeout,
                  reward_mode=reward_mode, flagged_policy=flagged_policy)
        return p["instance_id"], {
            "model_name_or_path": p.get("model_name_or_path"), "resolved": r.resolved, "reward": r.reward,
            "status": r.status, "cause": r.cause, "flags": r.flags,
            "blocking_flags": [f.label for f in r.blocking_flags()],
            "flag_details": [f.model_dump() for f in r.flag_details], "tests": r.tests,
            "fail_to_pass_fraction": r.fail_to_pass_fraction, "attempts": r.attempts,
            "duration_s": round(r.duration_s, 3)}

    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        results = dict(pool.map(one, preds))
    total = len(results)
    return {"suite": suite, "instances": results, "summary": {
        "total": total, "resolved": sum(r["resolved"] for r in results.values()),
        "reward_mean": sum(r["reward"] for r in results.values()) / total if total else 0.0,
        "flagged": sum(bool(r["blocking_flags"]) for r in results.values()),
        "env_failure": sum(r["status"] == "env_failure" for r in results.values()),
        "resolved_ids": sorted(k for k, r in results.items() if r["resolved"])}}
