"""Rollout start-up cost per harness: cold (harness layer built from scratch) vs warm (cached layer).

``run_rollout_bench("mini-swe-agent")`` → JSON-able dict:
* ``cold_layer_build_s``: building the harness layer in an empty cache (package downloads may still
  come from pip's/npm's own caches under ``$LEGORL_HOME``; ``None`` with ``cold=False``);
* ``warm_layer_lookup_s``: the same call once the layer exists (no package manager runs);
* per rollout (scripted-gold engine, the real harness, sandbox, gateway and grader):
  ``first_call_s`` (rollout start → first model request reaches the gateway: sandbox creation, layer
  mount, harness start-up), ``total_s``, status and reward. ``cold_start_s`` = build + first rollout's
  first call; ``warm_start_s`` = the warm rollout's first call.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from legorl.config import RunConfig
from legorl.harnesses.install import harness_layer
from legorl.loop.single import rollout_once, single_rollout_config
from legorl.loop.stack import build_harness, sandbox_backend
from legorl.sandbox.base import SandboxBackend
from legorl.sandbox.images import ImageCache, default_cache

TASK = "legorl__trivial-001"


def _rollout(cfg_overrides: dict, task: str, backend: SandboxBackend, run_dir: Path) -> dict[str, Any]:
    cfg = single_rollout_config(None, {**cfg_overrides, "run_dir": str(run_dir)})
    t0 = time.perf_counter()
    single = asyncio.run(rollout_once(cfg, task, engine="scripted-gold", backend=backend))
    total = time.perf_counter() - t0
    r = single.rollout
    store_turns = sorted(t.started_at for t in _turns(run_dir))
    first = (store_turns[0] - r.started_at) if store_turns else None
    return {
        "status": r.status,
        "reward": r.reward,
        "total_s": round(total, 3),
        "first_call_s": round(first, 3) if first is not None else None,
        "turns": sum(len(s.turn_indices) for s in r.samples),
    }


def _turns(run_dir: Path) -> list:
    from legorl.trajectory.store import open_run

    return list(open_run(run_dir).iter_turns())


def run_rollout_bench(
    harness: str = "minimal",
    task: str = TASK,
    cold: bool = True,
    rollouts: int = 2,
    options: dict | None = None,
    sandbox: str = "bwrap",
) -> dict[str, Any]:
    """``sandbox``: the backend type (``RunConfig.sandbox.type``) the rollouts run in."""
    overrides: dict[str, Any] = {
        "rollout.harness": harness,
        "rollout.harness_options": options or {},
        "sandbox.type": sandbox,
    }
    install = build_harness(RunConfig.load(None, **overrides).rollout).install  # validates it all first
    work = Path(tempfile.mkdtemp(prefix="legorl-bench-rollout-"))
    try:
        cache = ImageCache(work / "images") if cold else default_cache()
        t0 = time.perf_counter()
        layer = harness_layer(install, cache)
        build_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        harness_layer(install, cache)
        lookup_s = time.perf_counter() - t0
        overrides["sandbox.root"] = str(work / "sandboxes")
        backend = sandbox_backend(RunConfig.load(None, **overrides).sandbox, cache=cache)
        runs = [_rollout(overrides, task, backend, work / f"run{i}") for i in range(rollouts)]
        first = runs[0]["first_call_s"] or 0.0
        out = {
            "harness": harness,
            "task": task,
            "sandbox": sandbox,
            "install": {"kind": install.kind, "packages": list(install.packages)},
            "layer_bytes": layer.size_bytes if layer is not None else 0,
            "cold_layer_build_s": round(build_s, 3) if cold else None,
            "warm_layer_lookup_s": round(lookup_s, 4),
            "cold_start_s": round(build_s + first, 3) if cold else None,
            "warm_start_s": runs[-1]["first_call_s"],
            "rollouts": runs,
        }
        return out
    finally:
        shutil.rmtree(work, ignore_errors=True)
