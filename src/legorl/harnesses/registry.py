"""Harness registry: a harness id → the adapter module exporting its one class.

``get_harness("mini-swe-agent", tool_calling=False)`` imports the module lazily (adapters written by
others need not import cleanly for the rest to work) and builds the class with ``**options``.
A name ``package.module:Class`` is a harness from outside the project (:mod:`legorl.harnesses.external`).
"""

from __future__ import annotations

import importlib

from legorl.errors import UnknownHarnessError  # defined in the error tree, re-exported
from legorl.harnesses.base import Harness
from legorl.harnesses.external import checked_harness, is_import_path, load_harness_class

# id → (module, class name). Each module exports exactly one harness class.
HARNESSES: dict[str, tuple[str, str]] = {
    "minimal": ("legorl.harnesses.minimal", "MinimalHarness"),
    "command": ("legorl.harnesses.command", "CommandHarness"),
    "mini-swe-agent": ("legorl.harnesses.mini_swe_agent", "MiniSweAgentHarness"),
    "openhands": ("legorl.harnesses.openhands", "OpenHandsHarness"),
    "claude-code": ("legorl.harnesses.claude_code", "ClaudeCodeHarness"),
    "opencode": ("legorl.harnesses.opencode", "OpenCodeHarness"),
    "opencode-responses": ("legorl.harnesses.opencode", "OpenCodeHarness"),
    "line-fix": ("legorl.harnesses.line_fix", "LineFixHarness"),
    "aider": ("legorl.harnesses.aider", "AiderHarness"),
    "qwen-code": ("legorl.harnesses.qwen_code", "QwenCodeHarness"),
    "codex": ("legorl.harnesses.codex", "CodexHarness"),
    "gemini-cli": ("legorl.harnesses.gemini_cli", "GeminiCliHarness"),
}
# Options a harness id implies (the same class configured differently).
DEFAULT_OPTIONS: dict[str, dict] = {
    "opencode-responses": {"name": "opencode-responses"},  # OpenCodeHarness(name=...) picks the Responses API
}
HARNESS_NAMES = tuple(HARNESSES)


def harness_class(name: str) -> type:
    if is_import_path(name):
        return load_harness_class(name)
    try:
        module_name, class_name = HARNESSES[name]
    except KeyError:
        close = [n for n in HARNESSES if name.replace("_", "-").lower() in n]
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        raise UnknownHarnessError(f"unknown harness {name!r}{hint}; known: {', '.join(HARNESSES)}") from None
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name == module_name:
            raise UnknownHarnessError(
                f"harness {name!r} is registered but its adapter {module_name} is not available in this checkout"
            ) from None
        raise
    try:
        return getattr(module, class_name)
    except AttributeError:
        raise UnknownHarnessError(f"harness {name!r}: {module_name} has no class {class_name}") from None


def get_harness(name: str, /, **options) -> Harness:
    """An instance of harness ``name`` configured with ``options`` (adapter-specific keywords)."""
    cls = harness_class(name)
    opts = {**DEFAULT_OPTIONS.get(name, {}), **options}
    try:
        harness = cls(**opts)
    except TypeError as exc:
        raise UnknownHarnessError(f"harness {name!r} does not accept options {sorted(opts)}: {exc}") from None
    return checked_harness(harness, name) if is_import_path(name) else harness


__all__ = ["HARNESSES", "HARNESS_NAMES", "UnknownHarnessError", "get_harness", "harness_class"]
