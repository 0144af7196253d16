"""``legorl images build|list|prune``: the environment image cache (sandbox/images.py).

Only typer and rich are imported at module level; the cache and backends load inside commands.
"""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

app = typer.Typer(no_args_is_help=True, help="Environment image cache: build, list, prune layers.")
console = Console()


def _backend(name: str):
    if name == "bwrap":
        from legorl.sandbox.bwrap import BwrapBackend

        return BwrapBackend()
    if name in ("podman", "docker"):
        from legorl.sandbox.podman import PodmanBackend

        return PodmanBackend(executable=name)
    raise typer.BadParameter(f"unknown backend {name!r} (bwrap, podman, docker)")


def _human(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


@app.command("build")
def build(
    suite: list[str] = typer.Option([], "--suite", help="Task suite name or path (repeatable)."),
    source: list[Path] = typer.Option([], "--source", help="A repository directory (repeatable)."),
    base_commit: str = typer.Option("", "--base-commit", help="Base commit for --source git repositories."),
    backend: str = typer.Option("bwrap", "--backend", help="bwrap | podman | docker"),
    workers: int = typer.Option(4, "--workers", min=1, help="Parallel builders."),
    repos: list[str] = typer.Option([], "--repos", help="With --suite: only these repositories (owner/name)."),
    instances: list[str] = typer.Option([], "--instances", help="With --suite: only these instance ids."),
    as_json: bool = typer.Option(False, "--json", help="Print stats as JSON."),
) -> None:
    """Build (pre-warm) the base, env and instance layers of tasks or source directories (a SWE-bench
    suite's env layers come from SWE-bench's specs)."""
    from legorl.sandbox.images import InstanceRecipe

    # a LegoRLError goes to the CLI's central handler (legorl.cli): one line on stderr
    be = _backend(backend)
    items: list = [InstanceRecipe(Path(s).resolve(), base_commit) for s in source]
    unsupported: dict[str, str] = {}
    if suite:
        from legorl.errors import UnsupportedEnvironment
        from legorl.sandbox.images import spec_recipes
        from legorl.tasks.cli import split_list
        from legorl.tasks.environment import sandbox_spec
        from legorl.tasks.loader import load_suite

        for name in suite:
            for task in load_suite(name, repos=split_list(repos), instances=split_list(instances)):
                if task.environment is None:
                    items.append(task)
                    continue
                try:  # SWE-bench instances: their env layer from SWE-bench's spec
                    items.append((task.instance_id, *spec_recipes(sandbox_spec(task, be))))
                except UnsupportedEnvironment as exc:
                    unsupported[task.instance_id] = str(exc)
    if backend != "bwrap":
        be.base_layer()
    if not items and backend == "bwrap":
        console.print("nothing to build: give --suite or --source")
        raise typer.Exit(1)
    handle = be.cache.prewarm(items, backend=be, workers=workers)
    results = handle.wait()
    failed = {k: str(v) for k, v in results.items() if isinstance(v, BaseException)} | unsupported
    out = {
        "built": len(results) - len(failed),
        "failed": failed,
        "stats": be.cache.stats.as_dict(),
        "bytes": be.cache.total_bytes(),
    }
    if as_json:
        print(json.dumps(out, indent=2))
    else:
        console.print(
            f"{out['built']} ready, {len(failed)} failed; cache {_human(out['bytes'])}; "
            f"hits {out['stats']['hits']}, misses {out['stats']['misses']}, "
            f"build {out['stats']['build_seconds']:.1f}s"
        )
        for name, err in failed.items():
            console.print(f"[red]{name}[/]: {err}")
    if failed:
        raise typer.Exit(1)


# `legorl images list --json` keys (docs/cli.md; tests/test_cli_json.py checks them)
LIST_JSON_KEYS = ("root", "max_bytes", "total_bytes", "layers")
LAYER_JSON_KEYS = ("kind", "key", "bytes", "last_used", "pinned", "in_use", "parent", "build_seconds", "image")


@app.command("list")
def list_(
    as_json: bool = typer.Option(
        False,
        "--json",
        help=(
            "Print JSON: {"
            + ", ".join(f'"{k}"' for k in LIST_JSON_KEYS)
            + "}; each layer: {"
            + ", ".join(f'"{k}"' for k in LAYER_JSON_KEYS)
            + "} (last_used: Unix time)."
        ),
    ),
) -> None:
    """List cached layers (most recently used first)."""
    import time

    from legorl.sandbox.images import default_cache

    cache = default_cache()
    layers = sorted(cache.layers(), key=lambda x: -x["last_used"])
    if as_json:
        print(
            json.dumps(
                {
                    "root": str(cache.root),
                    "max_bytes": cache.max_bytes,
                    "total_bytes": sum(x["bytes"] for x in layers),
                    "layers": layers,
                },
                indent=2,
            )
        )
        return
    table = Table(title=f"{cache.root} (bound {_human(cache.max_bytes)})")
    for col in ("kind", "key", "size", "last used", "flags", "image"):
        table.add_column(col)
    for x in layers:
        flags = ",".join(f for f, on in (("pinned", x["pinned"]), ("in-use", x["in_use"])) if on)
        ago = f"{(time.time() - x['last_used']) / 60:.0f} min ago"
        table.add_row(x["kind"], x["key"][:16], _human(x["bytes"]), ago, flags, x["image"])
    console.print(table)
    console.print(f"total {_human(sum(x['bytes'] for x in layers))}")


@app.command("prune")
def prune(
    max_bytes: int | None = typer.Option(None, "--max-bytes", help="Evict LRU layers down to this size."),
    everything: bool = typer.Option(False, "--all", help="Remove every layer not pinned or in use."),
) -> None:
    """Evict least-recently-used layers (never pinned or in-use ones)."""
    from legorl.sandbox.images import default_cache

    cache = default_cache()
    removed = cache.prune(max_bytes=max_bytes, everything=everything)
    console.print(f"removed {len(removed)} layer(s); cache now {_human(cache.total_bytes())}")
