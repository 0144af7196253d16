"""The provenance manifest of a run directory (``manifest.json``): what produced this run.

Written when a run starts (and again on each resume, as ``manifest-resume-<step>.json``; ``-2``,
``-3``... for later resumes from the same step): the resolved config, the project's git commit (and whether the checkout had uncommitted changes),
package versions, a hash of the model's weight/config/tokenizer files, a hash of the task suite
(every task record the run may draw from), and the seeds. Hashes are SHA-256 over the sorted
file names and contents, so two runs from the same inputs agree.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import platform
import subprocess
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from legorl.config import RunConfig

PACKAGES = ("legorl", "torch", "transformers", "accelerate", "safetensors", "pydantic", "numpy", "fastapi", "httpx")


def git_state(path: Path) -> dict[str, Any]:
    """Commit and dirtiness of the checkout holding ``path`` (None when it is not a git checkout)."""

    def git(*args: str) -> str | None:
        try:
            out = subprocess.run(["git", "-C", str(path), *args], capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.SubprocessError):
            return None
        return out.stdout.strip() if out.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    status = git("status", "--porcelain", "--untracked-files=no") if commit else None
    return {"commit": commit, "dirty": bool(status) if status is not None else None}


def hash_files(root: Path) -> str | None:
    if not root.exists():
        return None
    h = hashlib.sha256()
    files = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file())
    for p in files:
        h.update(str(p.relative_to(root) if p != root else p.name).encode() + b"\0")
        with open(p, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                h.update(block)
    return h.hexdigest()


def hash_tasks(tasks: Iterable[Any]) -> str:
    h = hashlib.sha256()
    for t in sorted(tasks, key=lambda t: t.instance_id):
        dump = t.model_dump(mode="json") if hasattr(t, "model_dump") else {"instance_id": t.instance_id}
        h.update(json.dumps(dump, sort_keys=True, default=str).encode())
    return h.hexdigest()


def package_versions() -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for name in PACKAGES:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = None
    return out


def write_manifest(
    cfg: RunConfig, run_dir: Path, *, model_path: Path | None, tasks: Iterable[Any], name: str = "manifest.json"
) -> Path:
    manifest = {
        "created_at": time.time(),
        "config": cfg.model_dump(mode="json"),
        "project": git_state(Path(__file__).resolve().parent),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "packages": package_versions(),
        "model": {
            "name": cfg.engine.model,
            "path": str(model_path) if model_path else None,
            "sha256": hash_files(model_path) if model_path else None,
        },
        "suite": {"name": cfg.suite, "task_ids": cfg.task_ids, "sha256": hash_tasks(tasks)},
        "seeds": {"seed": cfg.seed},
    }
    path = Path(run_dir) / name
    path.write_text(json.dumps(manifest, indent=1))
    return path
