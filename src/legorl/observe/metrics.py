"""Metrics: one JSON line per step in ``metrics.jsonl`` (the source of truth), TensorBoard scalars, and
Weights & Biases when the run config names a project (``RunConfig.wandb``)."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from legorl.errors import ConfigError

if TYPE_CHECKING:
    from torch.utils.tensorboard import SummaryWriter

    from legorl.config import WandbConfig


class MetricsLogger:
    def __init__(
        self,
        run_dir: Path,
        tensorboard: bool = True,
        wandb: WandbConfig | None = None,
        run_config: dict[str, Any] | None = None,
    ) -> None:
        """``wandb``: log to Weights & Biases too when it names a project (``run_config`` becomes the W&B
        run's config); the W&B run id is derived from the run directory, so a resumed run continues it."""
        self.path = Path(run_dir) / "metrics.jsonl"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._tb: SummaryWriter | None = None
        self._wandb: Any = None
        if wandb is not None and wandb.project:
            self._wandb = _wandb_run(Path(run_dir), wandb, run_config or {})
        if tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError:  # tensorboard is optional: the JSONL file is complete on its own
                pass
            else:
                self._tb = SummaryWriter(log_dir=str(Path(run_dir) / "tensorboard"))

    def log(self, step: int, metrics: dict[str, Any]) -> None:
        row = {"step": step, "time": time.time(), **{k: _finite(v) for k, v in metrics.items()}}
        with self.path.open("a") as f:
            f.write(json.dumps(row, default=_jsonable) + "\n")
        if self._tb is not None:
            for k, v in metrics.items():
                if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
                    self._tb.add_scalar(k, v, step)
            self._tb.flush()
        if self._wandb is not None:
            self._wandb.log({k: v for k, v in row.items() if k != "step" and _scalar(v)}, step=step)

    def close(self) -> None:
        if self._tb is not None:
            self._tb.close()
        if self._wandb is not None:
            self._wandb.finish()
            self._wandb = None


def _scalar(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _wandb_run(run_dir: Path, cfg: WandbConfig, run_config: dict[str, Any]) -> Any:
    try:
        import wandb
    except ImportError:
        raise ConfigError(
            f"wandb.project is {cfg.project!r} but the wandb package is not installed: pip install wandb "
            "(or set wandb.project to null)"
        ) from None
    import hashlib

    run_id = hashlib.sha1(str(run_dir.resolve()).encode()).hexdigest()[:16]
    return wandb.init(
        project=cfg.project,
        entity=cfg.entity,
        name=cfg.name or run_dir.name,
        mode=cfg.mode,
        dir=str(run_dir),
        config=run_config,
        id=run_id,
        resume="allow",
        reinit="create_new",
    )


def read_metrics(run_dir: Path) -> list[dict[str, Any]]:
    path = Path(run_dir) / "metrics.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def _finite(v: Any) -> Any:
    # NaN/inf are not JSON: store null so any reader can parse the file.
    return None if isinstance(v, float) and not math.isfinite(v) else v


def _jsonable(v: Any) -> Any:
    return str(v)
