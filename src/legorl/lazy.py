"""Lazy package surfaces: a package lists its public names and the module each lives in, and the
module is imported on first use — so ``import legorl.x`` (and ``legorl --help``) never pulls in
torch or transformers just to reach a name that does not need them."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(
    package: str, exports: Mapping[str, str]
) -> tuple[list[str], Callable[[str], Any], Callable[[], list[str]]]:
    """``(__all__, __getattr__, __dir__)`` for ``package`` whose public names are ``exports``
    (name -> module path). Use as ``__all__, __getattr__, __dir__ = lazy_exports(__name__, {...})``."""
    names = sorted(exports)

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(module), name)

    def __dir__() -> list[str]:
        return sorted({*names, *vars(importlib.import_module(package))})

    return names, __getattr__, __dir__
