"""The multi-turn fix family: small packages with one wrong ``return`` line somewhere in them.

Made for learning *through* agent harnesses over several turns (``legorl bench learn --harness``):
unlike the one-line suites, the issue names neither the file nor the line, only the failing call,
so an agent has to look (list, grep or view), edit, and may run the tests. Each repository is a
package ``lib/`` of two or three modules grouped by what their functions take (two numbers, one
number, a string, a list), each module holding two or three documented functions; one of them
carries the bug. ``tests/test_<module>.py`` checks every function: the buggy one's test is
FAIL_TO_PASS, the rest PASS_TO_PASS (so a fix that breaks a neighbour scores 0).

Behaviours and bugs come from :data:`legorl.tasks.oneline.FAMILIES` with the same split by family
(:func:`legorl.tasks.oneline.family_split`): a held-out task's buggy function *and* its neighbours
come from held-out families only, so nothing of it was seen in training. Every bug of a split
gives ``VARIANTS`` tasks that differ in names, neighbours and layout.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from legorl.tasks.author import git_diff
from legorl.tasks.oneline import FAMILIES, Family, Split, evaluate, family_split

# module of a family by its parameters: what a reader would look in first
MODULES = {"a, b": "pairs", "n": "numbers", "s": "text", "xs": "seqs"}
NAMES = (
    "calc", "compute", "value", "result", "pick", "get", "apply", "check", "run", "solve", "work",
    "handle", "process", "evaluate", "transform", "derive", "resolve", "measure", "judge", "reduce_one",
)  # fmt: skip
VARIANTS = 2
NEIGHBOURS = 4  # correct functions beside the buggy one, spread over the modules
SUITES: dict[str, Split] = {"multiturn-train": "train", "multiturn-heldout": "heldout"}
_FORMAT = 1  # bump when generated tasks change: a new cache directory


def _function(name: str, fam: Family, expr: str) -> str:
    return f'def {name}({fam.params}):\n    """{fam.doc}"""\n    return {expr}\n'


def _test(module: str, name: str, fam: Family) -> str:
    checks = "".join(
        f"    assert {name}({', '.join(map(repr, c))}) == {evaluate(fam.params, fam.good, c)!r}\n" for c in fam.cases
    )
    return f"def test_{name}():\n{checks}"


def build_record(
    instance_id: str, bug_fam: Family, bug: str, neighbours: list[Family], names: list[str], split: Split
) -> tuple[dict[str, Any], dict]:
    """One task record and its buggy repository (``{path: (mode, bytes)}``); ``names[0]`` is the
    buggy function's, the rest the neighbours'."""
    failing = next(
        (c for c in bug_fam.cases if evaluate(bug_fam.params, bug, c) != evaluate(bug_fam.params, bug_fam.good, c)),
        None,
    )
    if failing is None:
        raise ValueError(f"{instance_id}: bug {bug!r} passes every case of {bug_fam.doc!r}")
    entries = [(names[0], bug_fam, bug), *((n, f, f.good) for n, f in zip(names[1:], neighbours))]
    by_module: dict[str, list[tuple[str, Family, str]]] = {}
    for entry in entries:
        by_module.setdefault(MODULES[entry[1].params], []).append(entry)
    files: dict[str, tuple[int, bytes]] = {"lib/__init__.py": (0o644, b""), "tests/__init__.py": (0o644, b"")}
    fixed = dict(files)
    bug_module = MODULES[bug_fam.params]
    for module, funcs in sorted(by_module.items()):
        funcs = sorted(funcs, key=lambda e: e[0])  # the buggy function is not always first
        src = "\n\n".join(_function(n, f, e) for n, f, e in funcs)
        good = "\n\n".join(_function(n, f, f.good) for n, f, _ in funcs)
        files[f"lib/{module}.py"] = (0o644, src.encode())
        fixed[f"lib/{module}.py"] = (0o644, good.encode())
        imports = f"from lib.{module} import {', '.join(n for n, _, _ in funcs)}\n\n\n"
        test = imports + "\n\n".join(_test(module, n, f) for n, f, _ in funcs)
        files[f"tests/test_{module}.py"] = fixed[f"tests/test_{module}.py"] = (0o644, test.encode())
    name = names[0]
    call = f"{name}({', '.join(map(repr, failing))})"
    others = [f"tests/test_{MODULES[f.params]}.py::test_{n}" for n, f, _ in entries[1:]]  # the neighbours keep passing
    record = {
        "instance_id": instance_id,
        "repo": f"legorl/multiturn-{split}",
        "problem_statement": (
            f"`{call}` returns {evaluate(bug_fam.params, bug, failing)!r}, expected "
            f"{evaluate(bug_fam.params, bug_fam.good, failing)!r}. `{name}` is defined somewhere in "
            "the `lib` package. Find the wrong line and fix it."
        ),
        "patch": git_diff(files, fixed),
        "FAIL_TO_PASS": [f"tests/test_{bug_module}.py::test_{name}"],
        "PASS_TO_PASS": sorted(others),
        "tier": "easy",
        "test_command": "python -m pytest",
        "test_files": sorted(p for p in files if p.startswith("tests/test_")),
    }
    return record, files


def generate(out: Path, split: Split, seed: int = 0) -> Path:
    """Write the ``split`` tasks as ``out/<split>.jsonl`` with their repositories under
    ``out/<split>.jsonl.d/<instance_id>/``; returns the JSONL path. Deterministic in ``seed``."""
    from legorl.tasks.author import write_tree

    rng = random.Random(f"multiturn-{seed}-{split}")
    pool = [f for i, f in enumerate(FAMILIES) if family_split(i) == split]
    path = Path(out) / f"{split}.jsonl"
    trees = path.with_name(path.name + ".d")
    trees.mkdir(parents=True, exist_ok=True)
    lines = []
    n = 0
    for fam in pool:
        for bug in fam.bugs:
            for _ in range(VARIANTS):
                n += 1
                iid = f"legorl__multiturn-{split}-{n:03d}"
                neighbours = rng.sample([f for f in pool if f is not fam], NEIGHBOURS)
                names = rng.sample(NAMES, 1 + NEIGHBOURS)
                record, files = build_record(iid, fam, bug, neighbours, names, split)
                write_tree(trees / iid, files)
                record["source_dir"] = f"{trees.name}/{iid}"
                lines.append(json.dumps(record))
    path.write_text("\n".join(lines) + "\n")
    return path


def suite_path(name: str) -> Path:
    """The JSONL of generated suite ``name``, generated once under ``$LEGORL_HOME/tasks/generated/``
    (:func:`legorl.tasks.oneline.cached_suite`)."""
    from legorl.tasks.oneline import cached_suite

    split = SUITES[name]
    return cached_suite(f"multiturn-v{_FORMAT}-{split}", split, lambda out: generate(out, split))
