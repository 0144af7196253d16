"""Harnesses from outside the project: ``rollout.harness: "package.module:Class"``.

As SkyRL and verl take an environment or an agent loop by import path, a run config may name any
class that satisfies :class:`~legorl.harnesses.base.Harness` instead of a registered id. The module
must be importable by this process (installed, or on ``PYTHONPATH``); nothing of it is copied into
the sandbox — the class's ``install`` says what the sandbox needs, as a built-in adapter's does.

The name is checked where the config is validated (:class:`legorl.config.RolloutConfig`), each
problem as one :class:`~legorl.errors.UnknownHarnessError` that says what is wrong:

* the import path's shape (``module.path:Class``, identifiers only);
* the module cannot be imported (the exception it raised);
* the module has no such attribute, or it is not a class;
* the class does not satisfy the protocol (:func:`class_problems`): ``launch`` and ``collect``
  missing or not callable with the protocol's arguments;
* built with the config's ``harness_options`` (:func:`instance_problems`): ``name``, ``dialect``
  (strings) or ``install`` (a :class:`~legorl.harnesses.base.HarnessInstall`) missing or of
  another type — attributes an adapter may set in ``__init__``, so they are checked on the instance.

Everything else (scripted policies through ``scripted_replies``, ``side_requests``,
``max_concurrency``) is optional, as for the built-in adapters.
"""

from __future__ import annotations

import importlib
import inspect
import re
from typing import Any

from legorl.errors import UnknownHarnessError
from legorl.harnesses.base import Harness, HarnessInstall

IMPORT_PATH = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*:[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*")
PROTOCOL = "legorl.harnesses.base.Harness"
# the protocol's methods and the arguments they are called with (after self)
METHODS: dict[str, tuple[str, ...]] = {
    "launch": ("task", "sandbox", "gateway_url", "session_token", "budget"),
    "collect": ("sandbox", "result", "budget"),
}
ATTRIBUTES: dict[str, type] = {"name": str, "dialect": str, "install": HarnessInstall}


def is_import_path(name: str) -> bool:
    """Whether a harness name is an import path (registered ids never contain ``:``)."""
    return ":" in name


def load_harness_class(path: str) -> type:
    """The class ``path`` (``package.module:Class``) names, checked against the protocol's methods."""
    if not IMPORT_PATH.fullmatch(path):
        raise UnknownHarnessError(
            f"harness {path!r}: an import path is 'package.module:Class' (dotted identifiers, one ':')"
        )
    module_name, qualname = path.split(":")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # whatever the import raised, the config names a broken module
        raise UnknownHarnessError(
            f"harness {path!r}: cannot import module {module_name!r}: {type(exc).__name__}: {exc}"
        ) from None
    obj: Any = module
    for part in qualname.split("."):
        if not hasattr(obj, part):
            raise UnknownHarnessError(f"harness {path!r}: module {module_name!r} has no attribute {qualname!r}")
        obj = getattr(obj, part)
    if not inspect.isclass(obj):
        raise UnknownHarnessError(f"harness {path!r}: {qualname} is a {type(obj).__name__}, not a class")
    problems = class_problems(obj)
    if problems:
        raise UnknownHarnessError(f"harness {path!r}: {qualname} does not satisfy {PROTOCOL}: {'; '.join(problems)}")
    return obj


def class_problems(cls: type) -> list[str]:
    """What the class lacks of the protocol's methods (each with the arguments it must take)."""
    problems = []
    for method, params in METHODS.items():
        wanted = f"{method}(self, {', '.join(params)})"
        if not hasattr(cls, method):
            problems.append(f"missing method {wanted}")
            continue
        fn = getattr(cls, method)
        if not callable(fn):
            problems.append(f"{method} is a {type(fn).__name__}, not the method {wanted}")
            continue
        bound = isinstance(inspect.getattr_static(cls, method), staticmethod | classmethod)
        try:
            signature = inspect.signature(fn)
        except (TypeError, ValueError):  # a callable without a signature: cannot tell, let it run
            continue
        try:
            signature.bind(*([] if bound else [None]), *params)
        except TypeError:
            problems.append(f"{method}{signature} cannot be called as {wanted}")
    return problems


def instance_problems(harness: object) -> list[str]:
    """What a built harness lacks of the protocol's attributes (or has of another type)."""
    problems = []
    for attr, kind in ATTRIBUTES.items():
        if not hasattr(harness, attr):
            problems.append(f"missing attribute {attr} ({kind.__name__})")
        elif not isinstance(getattr(harness, attr), kind):
            problems.append(f"{attr} is a {type(getattr(harness, attr)).__name__}, not a {kind.__name__}")
        elif kind is str and not getattr(harness, attr):
            problems.append(f"{attr} is empty")
    return problems


def checked_harness(harness: object, path: str) -> Harness:
    """``harness`` (built from ``path``) as a :class:`Harness`, or an error naming what it lacks."""
    problems = instance_problems(harness)
    if problems or not isinstance(harness, Harness):
        problems = problems or ["it is not a Harness"]
        raise UnknownHarnessError(
            f"harness {path!r}: {type(harness).__name__} does not satisfy {PROTOCOL}: {'; '.join(problems)}"
        )
    return harness


__all__ = ["checked_harness", "class_problems", "instance_problems", "is_import_path", "load_harness_class"]
