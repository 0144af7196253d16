"""Sandbox benchmark: create+exec(true)+destroy latency on a cache hit, cold instance-layer build
time, and throughput with many concurrent sandboxes (bwrap, and podman when installed).

    from legorl.bench.sandbox import run_sandbox_bench
    print(run_sandbox_bench("bwrap", n=50, concurrency=16))
"""

from __future__ import annotations

import os
import shutil
import statistics
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from legorl.sandbox.base import SandboxSpec
    from legorl.sandbox.bwrap import BwrapBackend
    from legorl.sandbox.images import ImageCache
    from legorl.sandbox.podman import PodmanBackend


def _make_repo(root: Path, files: int = 50) -> Path:
    src = root / "repo"
    (src / "pkg").mkdir(parents=True)
    for i in range(files):
        (src / "pkg" / f"mod{i}.py").write_text(f"def f{i}(x):\n    return x + {i}\n" * 20)
    (src / "tests").mkdir()
    (src / "tests" / "test_mod.py").write_text("from pkg.mod0 import f0\n\ndef test_f():\n    assert f0(1) == 1\n")
    return src


def _pct(values: list[float], q: float) -> float:
    values = sorted(values)
    if not values:
        return float("nan")
    idx = min(len(values) - 1, max(0, round(q * (len(values) - 1))))
    return values[idx]


def _ms(x: float) -> float:
    return round(x * 1000, 1)


def run_sandbox_bench(
    backend: str = "bwrap", n: int = 50, concurrency: int = 16, workdir: Path | None = None, include_podman: bool = True
) -> dict[str, Any]:
    """Returns ``{"bwrap": {...}, "podman": {...} | {"skipped": why}}`` (``backend`` first).

    Per backend: ``hit_latency_ms`` (bwrap: with its per-sandbox pids/memory cgroup when available;
    ``hit_latency_ms_rlimits_only`` without it) p50/p99/mean of create+exec(true)+destroy on a cache hit (n runs),
    ``cold_instance_build_s`` (a new 50-file repo, base/env warm), ``throughput`` (sandboxes per
    second completing create+exec+destroy with ``concurrency`` in flight), the cache stats.
    """
    tmp = Path(tempfile.mkdtemp(prefix="legorl-bench-", dir=workdir))
    out: dict[str, Any] = {}
    names = [backend] + ([b for b in ("bwrap", "podman") if b != backend] if include_podman else [])
    try:
        for name in names:
            skipped = _skip_reason(name)
            if skipped is not None:
                out[name] = {"skipped": skipped}
                continue
            out[name] = _bench_backend(_open_backend(name, tmp, n, concurrency), tmp)
        return out
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _skip_reason(name: str) -> str | None:
    """Why backend ``name`` cannot be measured here, or None when its program is installed."""
    if name in ("podman", "docker") and shutil.which(name) is None:
        return f"{name} not installed"
    if name == "bwrap" and shutil.which("bwrap") is None:
        return "bubblewrap not installed"
    return None


@dataclass
class _Backend:
    """A backend ready to measure, with its own image cache and how hard to drive it."""

    name: str
    be: BwrapBackend | PodmanBackend
    cache: ImageCache
    runs: int
    conc: int
    base_image_s: float | None  # podman: building (or finding) the shared base image


def _open_backend(name: str, tmp: Path, n: int, concurrency: int) -> _Backend:
    from legorl.config import BwrapSandboxConfig, PodmanSandboxConfig
    from legorl.loop.stack import sandbox_backend
    from legorl.sandbox.bwrap import BwrapBackend
    from legorl.sandbox.images import ImageCache, default_cache
    from legorl.sandbox.podman import PodmanBackend

    cache = ImageCache(tmp / f"images-{name}")
    root = tmp / f"sandboxes-{name}"
    # model_validate: the config models' positional Field defaults are invisible to mypy without
    # the pydantic plugin, so keyword construction would be flagged as missing every defaulted field
    if name == "bwrap":
        bbe = sandbox_backend(BwrapSandboxConfig.model_validate({"root": root}), cache=cache)
        assert isinstance(bbe, BwrapBackend)
        return _Backend(name, bbe, cache, n, concurrency, None)
    box = PodmanSandboxConfig.model_validate({"root": root, "executable": name})
    # the base image lives in the shared cache (built once, minutes); instances are local
    pbe = sandbox_backend(box, cache=default_cache())
    assert isinstance(pbe, PodmanBackend)
    t0 = time.perf_counter()
    pbe.base_layer()
    base_s = time.perf_counter() - t0
    podman_be = sandbox_backend(box, cache=cache)
    assert isinstance(podman_be, PodmanBackend)
    podman_be.base_layer()
    return _Backend(name, podman_be, cache, max(5, min(n, 20)), max(2, min(concurrency, 8)), base_s)


def _once(be: BwrapBackend | PodmanBackend, spec: SandboxSpec) -> tuple[float, float, float, float]:
    """Seconds of create+exec(true)+destroy, then of each of the three."""
    t0 = time.perf_counter()
    sb = be.create(spec)
    t1 = time.perf_counter()
    res = sb.exec(["true"])
    t2 = time.perf_counter()
    sb.destroy()
    t3 = time.perf_counter()
    if res.exit_code != 0:
        raise RuntimeError(f"exec(true) failed: {res}")
    return t3 - t0, t1 - t0, t2 - t1, t3 - t2


def _bench_backend(b: _Backend, tmp: Path) -> dict[str, Any]:
    """One backend's figures: cold instance build, serial cache-hit latency, concurrent throughput."""
    from legorl.sandbox.base import SandboxSpec
    from legorl.sandbox.bwrap import BwrapBackend
    from legorl.sandbox.images import InstanceRecipe

    be, cache, runs, conc = b.be, b.cache, b.runs, b.conc
    src = _make_repo(tmp / f"src-{b.name}")
    spec = SandboxSpec(source_dir=src)
    be.create(spec).destroy()  # warm base + env + this instance
    cold_src = _make_repo(tmp / f"cold-{b.name}")
    (cold_src / "pkg" / "mod0.py").write_text("X = 'cold'\n")
    t0 = time.perf_counter()
    be.prepare_layers(InstanceRecipe(cold_src))
    cold = time.perf_counter() - t0
    hits_before, misses_before = cache.stats.hits, cache.stats.misses
    samples = [_once(be, spec) for _ in range(runs)]
    total = [s[0] for s in samples]
    t0 = time.perf_counter()
    with ThreadPoolExecutor(max_workers=conc) as pool:
        par = list(pool.map(lambda _: _once(be, spec), range(max(runs, conc * 2))))
    wall = time.perf_counter() - t0
    out: dict[str, Any] = {
        "runs": runs,
        "hit_latency_ms": {
            "p50": _ms(_pct(total, 0.5)),
            "p99": _ms(_pct(total, 0.99)),
            "mean": _ms(statistics.fmean(total)),
        },
        "phase_p50_ms": {
            "create": _ms(_pct([s[1] for s in samples], 0.5)),
            "exec_true": _ms(_pct([s[2] for s in samples], 0.5)),
            "destroy": _ms(_pct([s[3] for s in samples], 0.5)),
        },
        "cold_instance_build_s": round(cold, 3),
        "throughput": {
            "concurrency": conc,
            "sandboxes": len(par),
            "wall_s": round(wall, 2),
            "per_s": round(len(par) / wall, 1),
            "latency_p50_ms": _ms(_pct([s[0] for s in par], 0.5)),
            "latency_p99_ms": _ms(_pct([s[0] for s in par], 0.99)),
        },
        "cache": {
            **cache.stats.as_dict(),
            "hits_in_loop": cache.stats.hits - hits_before,
            "misses_in_loop": cache.stats.misses - misses_before,
        },
        "cpus": os.cpu_count(),
    }
    if b.base_image_s is not None:  # podman (bwrap has no base image to build)
        out["base_image_s"] = round(b.base_image_s, 2)
    elif isinstance(be, BwrapBackend) and be.cgroups:
        # the per-exec cgroup join (pids + memory, cgroup v1) costs ~2 RCU syncs; show without
        be.cgroups = False
        quick = [_once(be, spec)[0] for _ in range(runs)]
        out["hit_latency_ms_rlimits_only"] = {"p50": _ms(_pct(quick, 0.5)), "p99": _ms(_pct(quick, 0.99))}
        be.cgroups = True
    return out


def summary_lines(result: dict[str, Any]) -> list[str]:
    """One human-readable line per backend of a :func:`run_sandbox_bench` result."""
    lines = []
    for name, r in result.items():
        if "skipped" in r:
            lines.append(f"{name}: skipped ({r['skipped']})")
            continue
        hit, ph = r["hit_latency_ms"], r["phase_p50_ms"]
        lines.append(
            f"{name}: create+exec+destroy p50 {hit['p50']} ms, p99 {hit['p99']} ms (create {ph['create']}, "
            f"exec {ph['exec_true']}, destroy {ph['destroy']}); {r['throughput']['per_s']}/s at "
            f"concurrency {r['throughput']['concurrency']}; cold instance {r['cold_instance_build_s']} s"
        )
    return lines
