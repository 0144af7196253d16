"""Parsing Python source in the host process, safely from any thread.

CPython keeps the AST converter's recursion-depth counter in interpreter-wide state (3.11.7 here):
two threads parsing at once can fail with ``SystemError: AST constructor recursion depth mismatch``.
Graders run in threads (``--workers``), so every host-side ``ast.parse``/``ast.literal_eval`` of the
project goes through this module's one lock. A leaf module: it imports nothing from ``legorl``.
"""

from __future__ import annotations

import ast
import threading
import warnings
from typing import Any

__all__ = ["literal_eval", "parse"]

_LOCK = threading.Lock()


def parse(source: str, *, quiet: bool = False) -> ast.Module:
    """``ast.parse(source)``; ``quiet``: without the warnings old code gives (``"\\s"`` escapes)."""
    with _LOCK, warnings.catch_warnings():
        if quiet:
            warnings.simplefilter("ignore")
        return ast.parse(source)


def literal_eval(node_or_string: Any) -> Any:  # whatever the literal is
    """``ast.literal_eval``, under the same lock (it parses a string first)."""
    with _LOCK:
        return ast.literal_eval(node_or_string)
