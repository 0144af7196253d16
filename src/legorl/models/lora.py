"""LoRA adapters on a transformers causal LM (PEFT), and the adapter as it travels from the trainer to
an engine or to disk (``docs/lora.md``).

* :func:`add_lora` injects PEFT LoRA layers into the module *in place* (``inject_adapter_in_model``):
  the model keeps its own class and forward, so every scoring function, the embedded engine and the
  FSDP sharding see the same module, now with ``lora_A``/``lora_B`` beside each frozen target. Only
  the adapters require grad. ``lora_B`` starts at zero (PEFT's init), so the adapted model is the base
  model until the first update; ``lora_A``'s random init is drawn from ``seed``, never from the
  global RNG (a resumed run's RNG stream stays the uninterrupted one's).
* :class:`LoraAdapter` is the adapter alone: rank, alpha, the target modules and the ``lora_A`` /
  ``lora_B`` tensors under PEFT's names without the adapter name
  (``model.layers.0.self_attn.q_proj.lora_A.weight``). :meth:`LoraAdapter.save` writes PEFT's adapter
  directory (``adapter_config.json`` + ``adapter_model.safetensors``, keys prefixed
  ``base_model.model.``), which PEFT and vLLM (``/v1/load_lora_adapter``) load.
* :func:`apply_adapter` puts an adapter into a module (injecting the layers on first use): the
  embedded engine's side of an adapter sync. :func:`merged_state_dict` folds the adapters into the
  base weights under the base model's own names (``W + (alpha/r)·B·A``): what an engine without
  adapter support, or a merged export, loads.

Sharded modules (FSDP2 DTensors) are read as whole tensors.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from legorl.errors import ModelError

if TYPE_CHECKING:
    import torch

    from legorl.config import LoraConfig

__all__ = [
    "ADAPTER_CONFIG",
    "ADAPTER_WEIGHTS",
    "LoraAdapter",
    "add_lora",
    "adapter_dropout",
    "adapter_of",
    "apply_adapter",
    "has_lora",
    "merged_state_dict",
]

ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = "adapter_model.safetensors"
_NAME = "default"  # PEFT's adapter name inside the module (never on disk)
_FILE_PREFIX = "base_model.model."  # PeftModel's prefix of the keys in adapter_model.safetensors


def _whole(t: torch.Tensor) -> torch.Tensor:
    gather = getattr(t, "full_tensor", None)  # a DTensor (FSDP2 shard) as the whole tensor
    return (gather() if gather is not None else t).detach()


def _lora_layers(model: torch.nn.Module) -> Iterator[tuple[str, Any]]:
    from peft.tuners.lora import LoraLayer

    for name, module in model.named_modules():
        if isinstance(module, LoraLayer) and _NAME in module.lora_A:
            yield name, module


def has_lora(model: torch.nn.Module) -> bool:
    """Whether ``model`` holds LoRA layers (:func:`add_lora`)."""
    return next(_lora_layers(model), None) is not None


def _peft_config(rank: int, alpha: int, dropout: float, targets: list[str] | str) -> Any:
    from peft import LoraConfig as PeftLoraConfig

    return PeftLoraConfig(r=rank, lora_alpha=alpha, lora_dropout=dropout, target_modules=targets, bias="none")


def add_lora(model: torch.nn.Module, cfg: LoraConfig, seed: int = 0) -> torch.nn.Module:
    """Inject LoRA layers per ``cfg`` into ``model`` in place and freeze everything else; returns
    ``model``. Refuses a model that has them already, and a config that matches no module."""
    import torch
    from peft import inject_adapter_in_model

    if has_lora(model):
        raise ModelError("the model already holds LoRA adapters")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        try:
            inject_adapter_in_model(_peft_config(cfg.rank, cfg.alpha, cfg.dropout, cfg.target_modules), model)
        except ValueError as exc:  # PEFT: "Target modules ... not found in the base model"
            raise ModelError(f"trainer.lora.target_modules: {exc}") from exc
    for name, p in model.named_parameters():
        p.requires_grad_(".lora_A." in name or ".lora_B." in name)
    # the new layers are built in train mode (dropout on): they take the model's mode, as a served
    # model in eval mode must not start sampling with dropout
    model.train(model.training)
    return model


@contextlib.contextmanager
def adapter_dropout(model: torch.nn.Module, active: bool) -> Iterator[None]:
    """With ``active``, the adapters' dropout runs (train mode) inside the block although the model
    is in eval mode; the base model's own dropout stays off."""
    layers = [m.lora_dropout[_NAME] for _, m in _lora_layers(model)] if active else []
    for d in layers:
        d.train()
    try:
        yield
    finally:
        for d in layers:
            d.eval()


@dataclass(frozen=True)
class LoraAdapter:
    """The adapter alone: what an adapter weight sync sends and an adapter export writes."""

    rank: int
    alpha: int
    target_modules: tuple[str, ...]  # module names (last component) that carry an adapter
    tensors: Mapping[str, torch.Tensor]  # PEFT names without the adapter name, whole tensors on CPU

    def save(self, directory: str | Path, base_model: str | None = None) -> Path:
        """PEFT's adapter directory: ``adapter_config.json`` and ``adapter_model.safetensors``."""
        from safetensors.torch import save_file

        out = Path(directory)
        out.mkdir(parents=True, exist_ok=True)
        config = _peft_config(self.rank, self.alpha, 0.0, sorted(self.target_modules))
        config.base_model_name_or_path = base_model
        config.save_pretrained(str(out))
        save_file({_FILE_PREFIX + k: v.contiguous() for k, v in self.tensors.items()}, str(out / ADAPTER_WEIGHTS))
        return out

    @classmethod
    def load(cls, directory: str | Path) -> LoraAdapter:
        """An adapter directory :meth:`save` (or PEFT) wrote."""
        from safetensors.torch import load_file

        d = Path(directory)
        try:
            config = json.loads((d / ADAPTER_CONFIG).read_text())
            raw = load_file(str(d / ADAPTER_WEIGHTS))
        except (OSError, ValueError) as exc:
            raise ModelError(f"{d} is not a LoRA adapter directory: {exc}") from exc
        targets = config["target_modules"]
        return cls(
            rank=int(config["r"]),
            alpha=int(config["lora_alpha"]),
            target_modules=tuple(sorted([targets] if isinstance(targets, str) else targets)),
            tensors={k.removeprefix(_FILE_PREFIX): v for k, v in raw.items()},
        )

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.tensors.values())


def adapter_of(model: torch.nn.Module) -> LoraAdapter:
    """The adapter ``model`` holds (whole tensors, detached, on CPU; an unsharded CPU model's are
    its live tensors, not copies: a colocated engine applies them without a copy)."""
    tensors: dict[str, torch.Tensor] = {}
    rank, alpha = 0, 0
    targets: set[str] = set()
    for name, layer in _lora_layers(model):
        rank, alpha = int(layer.r[_NAME]), int(layer.lora_alpha[_NAME])
        targets.add(name.rsplit(".", 1)[-1])
        for part in ("lora_A", "lora_B"):
            tensors[f"{name}.{part}.weight"] = _whole(getattr(layer, part)[_NAME].weight).cpu()
    if not tensors:
        raise ModelError("the model holds no LoRA adapter")
    return LoraAdapter(rank, alpha, tuple(sorted(targets)), tensors)


def apply_adapter(model: torch.nn.Module, adapter: LoraAdapter) -> None:
    """Load ``adapter`` into ``model`` in place (injecting its layers first when ``model`` has none;
    tensors already in place, a colocated trainer's own, are not copied)."""
    import torch
    from peft import inject_adapter_in_model

    if not has_lora(model):
        inject_adapter_in_model(_peft_config(adapter.rank, adapter.alpha, 0.0, list(adapter.target_modules)), model)
        model.requires_grad_(False)
        model.train(model.training)
    params = dict(model.named_parameters())
    missing = [k for k in adapter.tensors if _in_module(k) not in params]
    if missing or len(adapter.tensors) != 2 * sum(1 for _ in _lora_layers(model)):
        raise ModelError(
            f"the adapter does not fit the model's LoRA layers (unknown: {missing[:3]}, "
            f"{len(adapter.tensors)} tensors for {sum(1 for _ in _lora_layers(model))} layers)"
        )
    with torch.no_grad():
        for k, v in adapter.tensors.items():
            p = params[_in_module(k)]
            if tuple(p.shape) != tuple(v.shape):
                raise ModelError(f"adapter tensor {k} has shape {tuple(v.shape)}, the model's {tuple(p.shape)}")
            if p.data_ptr() != v.data_ptr():
                p.copy_(v)


def _in_module(key: str) -> str:
    """``...q_proj.lora_A.weight`` -> the parameter's name in the module (``...lora_A.default.weight``)."""
    head, part, _ = key.rsplit(".", 2)
    return f"{head}.{part}.{_NAME}.weight"


def merged_state_dict(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The weights of ``model`` with its adapters folded in, under the base model's own names (whole
    tensors): ``W + (alpha/r)·B·A`` for each adapted linear layer, the rest as they are."""
    layers = dict(_lora_layers(model))
    out: dict[str, torch.Tensor] = {}
    for key, value in model.state_dict().items():
        if ".lora_A." in key or ".lora_B." in key or ".lora_dropout." in key:
            continue
        out[key.replace(".base_layer.", ".")] = _whole(value)
    for name, layer in layers.items():
        a = _whole(layer.lora_A[_NAME].weight).float()
        b = _whole(layer.lora_B[_NAME].weight).float()
        weight = out[f"{name}.weight"]
        delta = (b @ a) * float(layer.scaling[_NAME])
        out[f"{name}.weight"] = (weight.float() + delta.to(weight.device)).to(weight.dtype)
    return out
