"""``legorl bench swebench``: validate real SWE-bench instances (``legorl tasks check`` over suites) and
report what their environments cost.

Result keys (:data:`legorl.bench.schema.RESULT_KEYS` ``["swebench"]``):

* ``instances``, ``validated`` (env built, gold resolves with no blocking flag, the empty patch and
  the test patch alone do not), ``failed`` (``{instance_id: first problem}``);
* ``env_cache_hit_rate``: of the instances checked in this run, the share whose env layer was already
  in the cache (built before the run, or by an earlier instance of the same version); a second run over
  the same instances is 1.0 (no environment built);
* ``env_layers_built``: env layers built in this run;
* ``instances_per_min``: instances checked per minute of wall time in this run;
* ``env_layers``: per (repo, version) layer: ``key``, ``bytes``, ``build_seconds``, ``dropped``
  (optional requirements PyPI did not have), ``instances``;
* ``by_repo``: ``{repo: [validated, instances]}``; ``wall_s``; ``report`` (the JSON-lines report);
  ``cache``: the image cache's budget, size and this run's hits, builds and evictions.

The check is resumable: instances already in ``report`` are not checked again (their results count).
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from legorl.sandbox.images import bwrap_base_recipe
from legorl.tasks.check import CheckResult, check_suite, get_backend, read_report
from legorl.tasks.environment import env_recipe
from legorl.tasks.loader import load_suite
from legorl.tasks.model import Task

__all__ = ["run_swebench_bench"]


def _env_key(task: Task) -> str | None:
    env = task.environment
    if env is None or env.unsupported.get("all"):
        return None
    return env_recipe(env).key(bwrap_base_recipe().key())


def run_swebench_bench(
    suites: list[str],
    *,
    repos: list[str] | None = None,
    instances: list[str] | None = None,
    report: Path,
    workers: int = 2,
    timeout: float = 900,
    on_result: Callable[[CheckResult], None] | None = None,
) -> dict[str, Any]:
    backend = get_backend("bwrap")
    tasks = [t for s in suites for t in load_suite(s, repos=repos or (), instances=instances or ())]
    done = read_report(report)
    todo = [t for t in tasks if t.instance_id not in done]
    keys = {t.instance_id: _env_key(t) for t in tasks}
    cache = backend.cache
    present = {k for k in set(keys.values()) if k is not None and cache.get("env", k) is not None}

    def record(r: CheckResult) -> None:
        report.parent.mkdir(parents=True, exist_ok=True)
        with report.open("a", encoding="utf-8") as fh:
            fh.write(json.dumps(r.as_dict(), default=str) + "\n")
        if on_result is not None:
            on_result(r)

    started = time.monotonic()
    fresh = check_suite(todo, backend, workers=workers, timeout=timeout, on_result=record)
    wall = time.monotonic() - started
    results = {**done, **{r.instance_id: r for r in fresh}}
    needed = [keys[t.instance_id] for t in todo if keys[t.instance_id] is not None]
    built = {k for k in needed if k not in present and cache.get("env", k) is not None}
    hits = len(needed) - len(built)  # each layer built in this run was one instance's miss
    layers: dict[str, dict[str, Any]] = {}
    per_key = Counter(k for k in keys.values() if k is not None)
    for t in tasks:
        k = keys[t.instance_id]
        if k is None or f"{t.repo}@{t.version}" in layers:
            continue
        layer = cache.get("env", k)
        meta = layer.meta if layer is not None else {}
        layers[f"{t.repo}@{t.version}"] = {
            "key": k,
            "bytes": meta.get("bytes"),
            "build_seconds": meta.get("build_seconds"),
            "dropped": meta.get("dropped", []),
            "instances": per_key[k],
        }
    by_repo: dict[str, list[int]] = {}
    for t in tasks:
        r = results.get(t.instance_id)
        row = by_repo.setdefault(t.repo, [0, 0])
        row[0] += int(bool(r and r.ok))
        row[1] += 1
    failed = {iid: (r.problems[0] if r.problems else "not ok")[:300] for iid, r in sorted(results.items()) if not r.ok}
    return {
        "instances": len(tasks),
        "validated": sum(1 for t in tasks if (r := results.get(t.instance_id)) is not None and r.ok),
        "failed": failed,
        "env_cache_hit_rate": round(hits / len(needed), 4) if needed else 1.0,
        "env_layers_built": len(built),
        "instances_per_min": round(len(todo) / (wall / 60), 2) if todo and wall > 0 else None,
        "env_layers": layers,
        "by_repo": by_repo,
        "wall_s": round(wall, 1),
        "report": str(report),
        # an eviction during the check means the budget (LEGORL_IMAGE_CACHE_BYTES) cannot hold every
        # layer the suite needs: a second check would build some again
        "cache": {"max_bytes": cache.max_bytes, "total_bytes": cache.total_bytes(), **cache.stats.as_dict()},
    }
