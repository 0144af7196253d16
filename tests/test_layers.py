"""LEGO-RL's packages import downwards only: the layer table of docs/architecture.md ("Layers").

Every import statement of a ``src/legorl`` module that names a LEGO-RL module is checked — at module
level, inside functions and under ``TYPE_CHECKING`` alike; ``from legorl.x import y``, ``import
legorl.x`` and relative imports — against the layer of the top-level package or module it belongs
to (its *unit*). A unit may import its own modules and the units of lower layers; an import of a
higher layer, or of another unit of the same layer, is a violation. A module named ``cli`` (or in
a ``cli`` package) belongs to the ``cli`` unit wherever it lives: the command-line faces of the
packages sit on top of everything, as ``legorl.cli`` does. The table is read from the document, so
the document and the check cannot disagree.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"
ARCHITECTURE = ROOT / "docs" / "architecture.md"
SUITES = SRC / "legorl" / "tasks" / "suites"  # the built-in task projects: fixtures, not LEGO-RL's code

# Upward imports not resolved yet: (importing file under src/, imported module) -> why it stays.
# Exact: an entry whose import is gone (or no longer upward) fails test_allowlist_is_exact.
ALLOWED: dict[tuple[str, str], str] = {
    ("legorl/config.py", "legorl.harnesses.external"): (
        "RolloutConfig validates rollout.harness against the harness registry (an import path is"
        " loaded and checked), so a bad name is refused with the config; the registry needs the"
        " harness protocol (sandbox, tasks)"
    ),
    ("legorl/config.py", "legorl.harnesses.registry"): "as legorl.harnesses.external: the harness-name check",
    ("legorl/tasks/check.py", "legorl.grading.grader"): (
        "`legorl tasks check` confirms a task with the real grader: a task tool above grading that"
        " lives in tasks; open: the task tools (check, synth, mining) as a unit above grading"
    ),
    ("legorl/tasks/mining/pipeline.py", "legorl.grading.grader"): (
        "mining confirms a mined task with the real grader: as tasks/check.py"
    ),
}


@dataclass(frozen=True)
class Violation:
    """One import that goes up the layer table (or sideways to another unit of the same layer)."""

    file: str  # relative to the source root
    line: int
    imported: str  # the LEGO-RL module imported
    unit: str
    layer: int | None  # None: the unit is not in the table
    imported_unit: str
    imported_layer: int | None

    def __str__(self) -> str:
        return (
            f"{self.file}:{self.line}: {self.unit} (layer {self.layer}) imports {self.imported} "
            f"({self.imported_unit}, layer {self.imported_layer})"
        )


def read_layers(text: str) -> dict[str, int]:
    """``unit -> layer`` from the table of the document's "Layers" section."""
    section = text.split("\n## Layers\n", 1)[1].split("\n## ", 1)[0]
    layers: dict[str, int] = {}
    for row in re.finditer(r"^\|\s*(\d+)\s*\|([^|]*)\|", section, re.M):
        for unit in re.findall(r"`([\w.]+)`", row.group(2)):
            assert unit not in layers, f"{unit} is in two layers"
            layers[unit] = int(row.group(1))
    return layers


def module_name(path: Path, src: Path) -> str:
    parts = path.relative_to(src).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def unit_of(module: str) -> str:
    """The top-level package or module ``module`` belongs to (``legorl`` for the package itself)."""
    parts = module.split(".")
    if "cli" in parts[1:]:
        return "cli"
    return parts[1] if len(parts) > 1 else "legorl"


def sources(src: Path, skip: Path | None = None) -> list[Path]:
    return sorted(p for p in (src / "legorl").rglob("*.py") if skip is None or not p.is_relative_to(skip))


def imported_modules(path: Path, src: Path, modules: set[str]) -> list[tuple[int, str]]:
    """``(line, module)`` for every LEGO-RL module an import statement anywhere in ``path`` names."""
    module = module_name(path, src)
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names if a.name.split(".")[0] == "legorl"]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".")
                base = base[: len(base) - node.level + (1 if path.name == "__init__.py" else 0)]
                source = ".".join([*base, *([node.module] if node.module else [])])
            else:
                source = node.module or ""
            if source.split(".")[0] != "legorl":
                continue
            for alias in node.names:  # `from legorl.x import y` imports legorl.x.y when that is a module
                child = f"{source}.{alias.name}"
                found.append((node.lineno, child if child in modules else source))
    return list(dict.fromkeys(found))  # `from legorl.x import a, b`: one import of legorl.x


def layer_violations(src: Path, layers: dict[str, int], skip: Path | None = None) -> list[Violation]:
    """Every import under ``src/legorl`` that goes against ``layers`` (see the module docstring)."""
    paths = sources(src, skip)
    modules = {module_name(p, src) for p in paths}
    found: list[Violation] = []
    for path in paths:
        unit = unit_of(module_name(path, src))
        for line, imported in imported_modules(path, src, modules):
            target = unit_of(imported)
            if target == unit:
                continue
            mine, theirs = layers.get(unit), layers.get(target)
            if mine is None or theirs is None or mine <= theirs:
                rel = path.relative_to(src).as_posix()
                found.append(Violation(rel, line, imported, unit, mine, target, theirs))
    return found


LAYERS = read_layers(ARCHITECTURE.read_text(encoding="utf-8"))


def test_the_table_names_every_unit_once():
    units = {unit_of(module_name(p, SRC)) for p in sources(SRC, SUITES)}
    assert units - LAYERS.keys() == set(), "add these to the Layers table of docs/architecture.md"
    assert LAYERS.keys() - units == set(), "the Layers table names units that do not exist"


def test_no_import_goes_up_a_layer():
    found = [v for v in layer_violations(SRC, LAYERS, SUITES) if (v.file, v.imported) not in ALLOWED]
    assert not found, "imports against the Layers table of docs/architecture.md:\n" + "\n".join(map(str, found))


def test_allowlist_is_exact():
    upward = {(v.file, v.imported) for v in layer_violations(SRC, LAYERS, SUITES)}
    assert set(ALLOWED) - upward == set(), "these allowlisted imports are gone or allowed now: drop them"


# A scratch tree: errors (0) < trajectory, sandbox (1) < gateway (2) < cli (3) < the package (4).
SCRATCH_LAYERS = {"errors": 0, "trajectory": 1, "sandbox": 1, "gateway": 2, "cli": 3, "legorl": 4}
SCRATCH = {
    "legorl/__init__.py": "",
    "legorl/errors.py": "class E(Exception): ...\n",
    "legorl/trajectory/__init__.py": "",
    "legorl/trajectory/records.py": "from legorl.errors import E\n",
    "legorl/sandbox/__init__.py": "",
    "legorl/sandbox/base.py": "from ..errors import E\n",
    "legorl/sandbox/cli.py": "from legorl.gateway import app\n",  # a cli module: top layer
    "legorl/gateway/__init__.py": "",
    "legorl/gateway/app.py": "from legorl import errors\nfrom legorl.trajectory.records import E\nfrom . import app\n",
    "legorl/cli.py": "import legorl.gateway.app\nfrom legorl.sandbox.cli import x\n",
}


def _scratch(root: Path, planted: dict[str, str]) -> Path:
    for name, code in {**SCRATCH, **planted}.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(code)
    return root


def test_a_correct_tree_passes(tmp_path):
    assert layer_violations(_scratch(tmp_path, {}), SCRATCH_LAYERS) == []


@pytest.mark.parametrize(
    "file, code, expected",
    [
        (
            "legorl/trajectory/records.py",
            "from legorl.gateway.app import G\n",
            "legorl/trajectory/records.py:1: trajectory (layer 1) imports legorl.gateway.app (gateway, layer 2)",
        ),
        (  # inside a function
            "legorl/trajectory/records.py",
            "import os\n\n\ndef f():\n    import legorl.gateway.app\n",
            "legorl/trajectory/records.py:5: trajectory (layer 1) imports legorl.gateway.app (gateway, layer 2)",
        ),
        (  # relative, the module named in the import list
            "legorl/trajectory/records.py",
            "from ..gateway import app\n",
            "legorl/trajectory/records.py:1: trajectory (layer 1) imports legorl.gateway.app (gateway, layer 2)",
        ),
        (  # relative, from a package's __init__
            "legorl/trajectory/__init__.py",
            "from ..gateway.app import G\n",
            "legorl/trajectory/__init__.py:1: trajectory (layer 1) imports legorl.gateway.app (gateway, layer 2)",
        ),
        (  # for the type checker only: still a dependency
            "legorl/errors.py",
            "from typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n    from legorl.trajectory import records\n",
            "legorl/errors.py:4: errors (layer 0) imports legorl.trajectory.records (trajectory, layer 1)",
        ),
        (  # another unit of the same layer
            "legorl/sandbox/base.py",
            "from legorl.trajectory.records import E\n",
            "legorl/sandbox/base.py:1: sandbox (layer 1) imports legorl.trajectory.records (trajectory, layer 1)",
        ),
        (  # a package's cli module is the top layer's
            "legorl/gateway/app.py",
            "from legorl.sandbox.cli import x\n",
            "legorl/gateway/app.py:1: gateway (layer 2) imports legorl.sandbox.cli (cli, layer 3)",
        ),
        (  # the package's public surface, from inside
            "legorl/cli.py",
            "from legorl import __version__\n",
            "legorl/cli.py:1: cli (layer 3) imports legorl (legorl, layer 4)",
        ),
        (  # a unit the table does not name
            "legorl/cli.py",
            "import legorl.newpkg\n",
            "legorl/cli.py:1: cli (layer 3) imports legorl.newpkg (newpkg, layer None)",
        ),
    ],
)
def test_a_planted_import_is_reported(tmp_path, file, code, expected):
    found = layer_violations(_scratch(tmp_path, {file: code}), SCRATCH_LAYERS)
    assert [str(v) for v in found] == [expected]


def test_read_layers_reads_the_table():
    doc = "# A\n\n## Layers\ntext\n| layer | units |\n|---|---|\n| 1 | `b`, `c` |\n| 0 | `a` |\n## Next\n| 5 | `z` |\n"
    assert read_layers(doc) == {"b": 1, "c": 1, "a": 0}
