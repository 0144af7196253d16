"""Training checkpoints: written atomically with torch.distributed.checkpoint, resumed exactly.

On disk (``<run_dir>/checkpoints/``)::

    step-000003/          one checkpoint: the state after training step 3
      __0_0.distcp        model + optimizer state (torch.distributed.checkpoint; reshardable);
      .metadata           with LoRA the adapters alone (the frozen base is the base model's)
      meta.json           step, trainer counters (weight version, schedule index), the loop's
                          state (data cursor, task-order RNG), torch/python RNG states, base model,
                          the LoRA config (null: full weights), the step's metrics
    latest                the name of the newest complete checkpoint

Atomicity: a checkpoint is written into a hidden temporary directory, ``meta.json`` last, each
file fsynced, then renamed into place; ``latest`` is replaced by rename after that. A SIGKILL at
any point leaves either the previous checkpoint as ``latest`` or the new one complete — never a
half-written one under a ``step-*`` name (:func:`latest_checkpoint` also ignores any directory
without ``meta.json``). torch.distributed.checkpoint works in a single process without
``init_process_group`` (it then assumes one rank). With several ranks (FSDP2) every rank writes its
shards into the same directory and rank 0 finishes it; a checkpoint loads at any world size.
"""

from __future__ import annotations

import base64
import json
import os
import random
import shutil
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from legorl.errors import ConfigError
from legorl.training import distributed as dp

if TYPE_CHECKING:  # the trainer module builds on this one (Trainer.save_checkpoint)
    from legorl.training.trainer import Trainer

__all__ = [
    "CHECKPOINTS",
    "checkpoint_step",
    "export_hf",
    "keep_metrics_until",
    "latest_checkpoint",
    "load_checkpoint",
    "prune_checkpoints",
    "save_checkpoint",
    "tuple_state",
]

CHECKPOINTS = "checkpoints"
_LATEST = "latest"
_META = "meta.json"


@contextmanager
def _single_process() -> Iterator[None]:
    """DCP warns on every call that it assumes one process: that is the intended use here."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="torch.distributed is disabled")
        yield


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with open(tmp, "w") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    _fsync_dir(path.parent)


def rng_state() -> dict[str, Any]:
    """torch's and Python's global RNG states, JSON-able."""
    return {
        "torch": base64.b64encode(torch.get_rng_state().numpy().tobytes()).decode(),
        "python": _jsonable(random.getstate()),
    }


def set_rng_state(state: dict[str, Any]) -> None:
    raw = base64.b64decode(state["torch"])
    torch.set_rng_state(torch.frombuffer(bytearray(raw), dtype=torch.uint8).clone())
    random.setstate(tuple_state(state["python"]))


def _jsonable(x: Any) -> Any:
    return [_jsonable(v) for v in x] if isinstance(x, (tuple, list)) else x


def tuple_state(x: Any) -> Any:
    """A ``random.Random`` state read back from JSON (lists) as the tuples ``setstate`` wants."""
    return tuple(tuple_state(v) for v in x) if isinstance(x, list) else x


def prune_checkpoints(run_dir: str | Path, keep: int) -> None:
    """Remove all but the ``keep`` newest complete checkpoints (never the one ``latest`` names)."""
    root = Path(run_dir) / CHECKPOINTS
    latest = latest_checkpoint(run_dir)
    done = sorted(d for d in root.glob("step-*") if (d / _META).is_file())
    for d in done[: max(0, len(done) - keep)]:
        if d != latest:
            shutil.rmtree(d, ignore_errors=True)
    for d in root.glob(".tmp-step-*"):  # half-written by a process killed mid-save (never this one's: it renamed)
        shutil.rmtree(d, ignore_errors=True)


def keep_metrics_until(run_dir: str | Path, step: int) -> None:
    """Drop ``metrics.jsonl`` rows of steps after ``step`` (logged by a run killed before its next
    checkpoint: the resumed run logs those steps again), atomically."""
    path = Path(run_dir) / "metrics.jsonl"
    if not path.is_file():
        return
    rows = [line for line in path.read_text().splitlines() if line.strip()]
    kept = [line for line in rows if int(json.loads(line).get("step", -1)) <= step]
    if len(kept) != len(rows):
        _write_atomic(path, "".join(line + "\n" for line in kept))


@dataclass(frozen=True)
class CheckpointRequest:
    """What the loop asks a trainer to checkpoint after step ``step`` (in this process or on every rank)."""

    run_dir: Path
    step: int
    loop_state: dict[str, Any]  # the loop's own state: next step, task-order RNG
    metrics: dict[str, Any] | None = None
    base_model: str | None = None  # the model the weights started from (exports and LoRA merges need it)

    def save(self, trainer: Trainer) -> Path:
        return save_checkpoint(self.run_dir, self.step, trainer, self.loop_state, self.metrics, self.base_model)


def save_checkpoint(
    run_dir: str | Path,
    step: int,
    trainer: Trainer,
    loop_state: dict[str, Any],
    metrics: dict[str, Any] | None = None,
    base_model: str | None = None,
) -> Path:
    """Write the state after training step ``step``; returns the checkpoint directory."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict

    root = Path(run_dir) / CHECKPOINTS
    final = root / f"step-{step:06d}"
    # several ranks write their shards into one directory; rank 0 alone finishes it
    lead = dp.rank() == 0
    tmp = root / (f".tmp-step-{step:06d}" if dp.is_distributed() else f".tmp-step-{step:06d}-{os.getpid()}")
    if lead:
        root.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(tmp, ignore_errors=True)
    dp.barrier()
    model_sd, optim_sd = get_state_dict(trainer.model, trainer.optimizer, options=_options(trainer))
    with _single_process():
        dcp.save({"model": model_sd, "optim": optim_sd}, checkpoint_id=str(tmp))
    dp.barrier()
    if lead:
        _finish_checkpoint(tmp, final, root, step, trainer, loop_state, metrics, base_model)
    dp.barrier()
    return final


def _finish_checkpoint(
    tmp: Path,
    final: Path,
    root: Path,
    step: int,
    trainer: Trainer,
    loop_state: dict[str, Any],
    metrics: dict[str, Any] | None,
    base_model: str | None,
) -> None:
    for f in tmp.iterdir():
        with open(f, "rb") as fh:
            os.fsync(fh.fileno())
    meta = {
        "step": step,
        "trainer": {"version": trainer.version, "step_index": trainer.step_index},
        "loop": loop_state,
        "rng": rng_state(),
        "base_model": base_model,
        "lora": trainer.cfg.lora.model_dump(mode="json") if trainer.cfg.lora is not None else None,
        "metrics": {k: v for k, v in (metrics or {}).items() if isinstance(v, (int, float, str, bool, type(None)))},
    }
    _write_atomic(tmp / _META, json.dumps(meta, indent=1))
    if final.exists():  # a rerun of the same step after a resume: the new one replaces it
        shutil.rmtree(final)
    os.replace(tmp, final)
    _fsync_dir(root)
    _write_atomic(root / _LATEST, final.name)


def latest_checkpoint(run_dir: str | Path) -> Path | None:
    """The newest complete checkpoint of a run (None: none yet)."""
    root = Path(run_dir) / CHECKPOINTS
    pointer = root / _LATEST
    if pointer.is_file():
        d = root / pointer.read_text().strip()
        if (d / _META).is_file():
            return d
    done = sorted(d for d in root.glob("step-*") if (d / _META).is_file()) if root.is_dir() else []
    return done[-1] if done else None


def checkpoint_step(path: str | Path) -> int:
    """The training step a complete checkpoint holds the state after."""
    return int(json.loads((Path(path) / _META).read_text())["step"])


def load_checkpoint(path: str | Path, trainer: Trainer, restore_rng: bool = True) -> dict[str, Any]:
    """Load model, optimizer and counters into ``trainer`` (and the global RNGs); returns meta.json."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

    path = Path(path)
    meta: dict[str, Any] = json.loads((path / _META).read_text())
    saved, ours = meta.get("lora"), trainer.cfg.lora
    if (saved is None) != (ours is None):
        raise ConfigError(
            f"{path} holds {'LoRA adapters' if saved is not None else 'full weights'}; this run's trainer.lora "
            f"is {'set' if ours is not None else 'null'}: resume with the checkpoint's trainer.lora"
        )
    options = _options(trainer)
    model_sd, optim_sd = get_state_dict(trainer.model, trainer.optimizer, options=options)
    state: dict[str, Any] = {"model": model_sd, "optim": optim_sd}
    with _single_process():
        dcp.load(state, checkpoint_id=str(path))
    set_state_dict(
        trainer.model,
        trainer.optimizer,
        model_state_dict=state["model"],
        optim_state_dict=state["optim"],
        options=options,
    )
    trainer.version = int(meta["trainer"]["version"])
    trainer.step_index = int(meta["trainer"]["step_index"])
    if restore_rng:
        set_rng_state(meta["rng"])
    return meta


def _options(trainer: Trainer) -> Any:
    """With LoRA, the model's state is its trainable adapters alone (the frozen base is the base model's)."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions

    return StateDictOptions(ignore_frozen_params=trainer.lora, strict=not trainer.lora)


def export_hf(
    checkpoint: str | Path, out: str | Path, base_model: str | Path | None = None, *, adapter: bool = False
) -> Path:
    """A Hugging Face model directory (safetensors weights, config, tokenizer files) with the
    checkpoint's weights, servable by vLLM or SGLang; a LoRA checkpoint's adapters merged into the
    base weights. ``adapter``: a LoRA checkpoint as PEFT's adapter directory instead
    (``adapter_config.json``, ``adapter_model.safetensors``; vLLM's ``--lora-modules``, PEFT's
    ``PeftModel.from_pretrained``). ``base_model``: the model the run started from (default: the
    one recorded in the checkpoint)."""
    import torch.distributed.checkpoint as dcp

    from legorl.config import LoraConfig
    from legorl.models.lora import adapter_of, add_lora, merged_state_dict
    from legorl.models.registry import load_model, resolve_model

    checkpoint = Path(checkpoint)
    meta = json.loads((checkpoint / _META).read_text())
    base = base_model or meta.get("base_model")
    if base is None:
        raise ValueError(f"{checkpoint}: no base model recorded; pass base_model")
    lora = meta.get("lora")
    if adapter and lora is None:
        raise ValueError(f"{checkpoint} holds full weights, not a LoRA adapter: export it without adapter")
    base_dir = resolve_model(str(base))
    model = load_model(base_dir)
    if lora is not None:
        add_lora(model, LoraConfig.model_validate(lora))
    trained = {k: v for k, v in model.state_dict().items() if lora is None or ".lora_" in k}
    state: dict[str, Any] = {"model": trained}
    with _single_process():
        dcp.load(state, checkpoint_id=str(checkpoint))
    model.load_state_dict(state["model"], strict=lora is None)
    out = Path(out)
    if adapter:
        adapter_of(model).save(out, base_model=str(base))
        return out
    if lora is not None:  # the adapters folded in, under the base model's names
        merged = merged_state_dict(model)
        model = load_model(base_dir)
        model.load_state_dict(merged)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    for f in Path(base_dir).iterdir():  # tokenizer and chat template travel unchanged
        if f.is_file() and (
            f.name.startswith(("tokenizer", "special_tokens", "vocab", "merges", "chat_template"))
            or f.name == "generation_config.json"
        ):
            shutil.copy2(f, out / f.name)
    return out
