"""No module of LEGO-RL uses another module's private names (``_name``).

A helper two modules need lives in a public module both import (STYLE.md); reaching into another
module's ``_private`` names couples it to what its owner considers free to change. Checked on the
source, for every module of ``src/legorl``: ``from legorl.x import _name`` (relative imports too) and
``m._name`` where ``m`` is a LEGO-RL module bound by an import. Dunder names (``__version__``) are
public; a module's own private names are its own business.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGE = SRC / "legorl"
SUITES = PACKAGE / "tasks" / "suites"  # the built-in task projects: fixtures, not LEGO-RL's code


def _module_name(path: Path, src: Path = SRC) -> str:
    parts = path.relative_to(src).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _sources() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if not p.is_relative_to(SUITES))


MODULES = {_module_name(p) for p in _sources()}


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _absolute(node: ast.ImportFrom, module: str, is_package: bool) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".")
    base = base[: len(base) - node.level + (1 if is_package else 0)]
    return ".".join([*base, *([node.module] if node.module else [])])


def private_uses(path: Path, src: Path = SRC) -> list[str]:
    """``file:line: what`` for each use of another LEGO-RL module's private name in ``path`` (a file
    under ``src``)."""
    module = _module_name(path, src)
    where = path.relative_to(src)
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found: list[str] = []
    bound: dict[str, str] = {}  # local name -> the LEGO-RL module it is bound to
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            source = _absolute(node, module, path.name == "__init__.py")
            if source.split(".")[0] != "legorl":
                continue
            for alias in node.names:
                if source != module and _private(alias.name):
                    found.append(f"{where}:{node.lineno}: from {source} import {alias.name}")
                if f"{source}.{alias.name}" in MODULES:
                    bound[alias.asname or alias.name] = f"{source}.{alias.name}"
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "legorl":
                    for part in alias.name.split("."):
                        if _private(part):
                            found.append(f"{where}:{node.lineno}: import {alias.name}")
                    if alias.asname:
                        bound[alias.asname] = alias.name
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _private(node.attr):
            chain = node.value
            names: list[str] = []
            while isinstance(chain, ast.Attribute):
                names.insert(0, chain.attr)
                chain = chain.value
            if not isinstance(chain, ast.Name):
                continue
            if chain.id in bound:
                target = ".".join([bound[chain.id], *names])
            elif chain.id == "legorl":  # import legorl.x.y, then legorl.x.y._name
                target = ".".join(["legorl", *names])
            else:
                continue
            if target in MODULES and target != module:
                found.append(f"{where}:{node.lineno}: {target}.{node.attr}")
    return found


def test_no_module_uses_another_modules_private_names():
    offenders = [use for path in _sources() for use in private_uses(path)]
    assert not offenders, "private names used across modules (share them through a public module):\n" + "\n".join(
        offenders
    )


@pytest.mark.parametrize(
    "code, expected",
    [
        ("from legorl.sandbox.bwrap import _drain\n", "from legorl.sandbox.bwrap import _drain"),
        ("from legorl.sandbox.bwrap import GIT_CONFIG, _GIT_ENV as env\n", "from legorl.sandbox.bwrap import _GIT_ENV"),
        ("from .bwrap import _discard\n", "from legorl.sandbox.bwrap import _discard"),
        ("from legorl.sandbox import bwrap\nbwrap._feed(1, b'')\n", "legorl.sandbox.bwrap._feed"),
        ("import legorl.sandbox.bwrap as b\nb._drain\n", "legorl.sandbox.bwrap._drain"),
        ("import legorl.sandbox.bwrap\nlegorl.sandbox.bwrap._drain\n", "legorl.sandbox.bwrap._drain"),
        ("import legorl.sandbox._impl\n", "import legorl.sandbox._impl"),
        ("from legorl.sandbox.base import WORKSPACE\nfrom legorl import __version__\n", None),
        ("from legorl.sandbox.podman import _KEEPER\n", None),  # the module itself
        ("import os\nos._exit\n", None),
    ],
)
def test_the_check_sees_each_form(tmp_path, code, expected):
    # the code as the module legorl/sandbox/podman.py of a scratch tree
    path = tmp_path / "legorl" / "sandbox" / "podman.py"
    path.parent.mkdir(parents=True)
    path.write_text(code)
    uses = private_uses(path, tmp_path)
    if expected is None:
        assert uses == []
    else:
        assert len(uses) == 1 and uses[0].endswith(expected), uses
