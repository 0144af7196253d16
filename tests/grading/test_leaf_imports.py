"""The shared rules stay leaves: importing one pulls in no grader, monitor, sandbox or harness code;
the grading modules import each other without cycles; harnesses import nothing from legorl.grading."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src" / "legorl"
LEAVES = ["legorl.diffs", "legorl.rules", "legorl.junit", "legorl.grading.strace"]
# What a leaf may pull in: the other leaves, the typed records and errors, and their packages (whose
# lazy public surfaces load through legorl.lazy, a standard-library helper).
ALLOWED = {
    *LEAVES,
    "legorl",
    "legorl.lazy",
    "legorl.grading",
    "legorl.trajectory",
    "legorl.trajectory.records",
    "legorl.errors",
}


def _loaded_after_import(module: str) -> set[str]:
    code = (
        f"import importlib, json, sys; importlib.import_module({module!r}); "
        "print(json.dumps(sorted(m for m in sys.modules if m == 'legorl' or m.startswith('legorl.'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    return set(json.loads(out.stdout))


@pytest.mark.parametrize("module", LEAVES)
def test_a_leaf_imports_no_other_legorl_module(module):
    assert _loaded_after_import(module) - ALLOWED == set()


def _module_name(path: Path) -> str:
    rel = path.relative_to(SRC.parent).with_suffix("")
    parts = list(rel.parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _legorl_imports(path: Path) -> set[str]:
    """Every legorl module ``path`` imports, at module level or inside functions (lazy imports count)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("legorl"))
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("legorl") and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{a.name}" for a in node.names)  # "from legorl.grading import rules"
    return found


def test_harnesses_import_nothing_from_grading():
    offenders = {
        f"{p.name}: {m}"
        for p in (SRC / "harnesses").rglob("*.py")
        for m in _legorl_imports(p)
        if m == "legorl.grading" or m.startswith("legorl.grading.")
    }
    assert offenders == set()


def test_grading_modules_import_each_other_without_cycles():
    leaves = [SRC / "diffs.py", SRC / "rules.py", SRC / "junit.py"]  # the top-level leaves grading shares
    files = {_module_name(p): p for p in [*(SRC / "grading").glob("*.py"), *leaves]}
    graph = {name: {m for m in _legorl_imports(path) if m in files and m != name} for name, path in files.items()}
    assert "legorl.grading.monitor" not in graph["legorl.grading.grader"]
    assert "legorl.grading.grader" not in graph["legorl.grading.monitor"]
    visiting: list[str] = []
    done: set[str] = set()

    def visit(node: str) -> None:
        assert node not in visiting, "import cycle: " + " -> ".join([*visiting[visiting.index(node) :], node])
        if node in done:
            return
        visiting.append(node)
        for dep in sorted(graph[node]):
            visit(dep)
        visiting.pop()
        done.add(node)

    for name in sorted(graph):
        visit(name)
    for leaf in LEAVES:  # and the leaves depend on leaves only (statically, lazy imports included)
        assert graph.get(leaf, set()) <= set(LEAVES), (leaf, graph.get(leaf))
