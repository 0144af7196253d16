"""The one-line-fix task family: tiny repositories whose single bug is one wrong ``return`` line.

Made for the learning benchmark (``legorl bench learn``) and fast demos: a small model answers with one
line (harness ``line-fix``), so a rollout costs seconds, and SmolLM2-135M starts at roughly 10–40%.
Each task is a real repository graded like any other: ``lib/funcs.py`` holds one function (signature,
docstring saying what it should do, a wrong ``return``), ``tests/test_funcs.py`` checks it on a few
inputs (FAIL_TO_PASS) plus that it stays importable (PASS_TO_PASS). The issue gives one failing call
and names the faulty line.

A *family* is one intended behaviour (its docstring and correct expression) with the wrong
expressions that break it. The split is by family: the held-out tasks' functions, docstrings and
bugs never occur in training, so a held-out gain is a skill, not a memorised answer.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from legorl.tasks.author import git_diff

Split = Literal["train", "heldout"]
FUNC_FILE = "lib/funcs.py"
BUG_LINE = 3  # def, docstring, return


@dataclass(frozen=True)
class Family:
    doc: str  # what the function should do (its docstring)
    good: str  # the correct expression
    bugs: tuple[str, ...]  # wrong expressions, one task each
    params: str
    cases: tuple[tuple[Any, ...], ...]  # argument tuples the test checks


FAMILIES: tuple[Family, ...] = (
    Family("Return a plus b.", "a + b", ("a - b", "a * b"), "a, b", ((2, 3), (5, 1), (0, 4))),
    Family("Return a minus b.", "a - b", ("a + b", "b - a"), "a, b", ((7, 3), (5, 1), (2, 2))),
    Family("Return a times b.", "a * b", ("a + b", "a ** b"), "a, b", ((2, 3), (4, 5), (1, 1))),
    Family("Return the larger of a and b.", "max(a, b)", ("min(a, b)", "a"), "a, b", ((2, 3), (9, 1), (4, 7))),
    Family("Return the smaller of a and b.", "min(a, b)", ("max(a, b)", "b"), "a, b", ((2, 3), (9, 1), (4, 7))),
    Family("Return True when a is greater than b.", "a > b", ("a < b", "a >= b"), "a, b", ((2, 3), (3, 3), (5, 1))),
    Family("Return True when a is less than b.", "a < b", ("a > b", "a <= b"), "a, b", ((2, 3), (3, 3), (5, 1))),
    Family("Return s in upper case.", "s.upper()", ("s.lower()", "s.title()"), "s", (("abc",), ("Hi",))),
    Family("Return s in lower case.", "s.lower()", ("s.upper()", "s"), "s", (("ABC",), ("Hi",))),
    Family("Return the first item of xs.", "xs[0]", ("xs[1]", "xs[-1]"), "xs", (([4, 5, 6],), ([1, 2],))),
    Family("Return the last item of xs.", "xs[-1]", ("xs[0]", "xs[1]"), "xs", (([4, 5, 6],), ([1, 2, 3],))),
    Family(
        "Return the number of items in xs.", "len(xs)", ("len(xs) - 1", "len(xs) + 1"), "xs", (([4, 5, 6],), ([1],))
    ),
    Family("Return the sum of xs.", "sum(xs)", ("max(xs)", "len(xs)"), "xs", (([4, 5, 6],), ([1, 2],))),
    Family("Return n doubled.", "n * 2", ("n + 2", "n * 3"), "n", ((4,), (7,))),
    Family("Return the absolute value of n.", "abs(n)", ("-n", "n"), "n", ((-4,), (7,))),
    Family("Return True when n is even.", "n % 2 == 0", ("n % 2 == 1", "n % 3 == 0"), "n", ((4,), (7,), (9,))),
    Family("Return a divided by b, rounded down.", "a // b", ("a % b", "a * b"), "a, b", ((7, 2), (9, 3))),
    Family("Return the remainder of a divided by b.", "a % b", ("a // b", "b % a"), "a, b", ((7, 2), (9, 4))),
    Family("Return True when both a and b are true.", "a and b", ("a or b",), "a, b", ((True, False), (True, True))),
    Family("Return True when a or b is true.", "a or b", ("a and b",), "a, b", ((True, False), (False, False))),
    Family("Return s reversed.", "s[::-1]", ("s[1:]", "s"), "s", (("abc",), ("xy",))),
    Family("Return n squared.", "n * n", ("n * 2", "n + n"), "n", ((3,), (5,))),
    Family("Return the largest item of xs.", "max(xs)", ("min(xs)", "xs[0]"), "xs", (([4, 9, 6],), ([1, 2],))),
    Family("Return the smallest item of xs.", "min(xs)", ("max(xs)", "xs[-1]"), "xs", (([4, 1, 6],), ([3, 2],))),
    Family("Return n plus one.", "n + 1", ("n - 1", "n"), "n", ((4,), (0,))),
    Family("Return True when s is empty.", "len(s) == 0", ("len(s) > 0", "len(s) == 1"), "s", (("",), ("ab",), ("x",))),
)
NAMES = ("calc", "compute", "value", "result", "pick", "get", "apply", "check", "run", "solve", "do_it", "work")


def family_split(index: int) -> Split:
    """Every third family is held out (never trained on)."""
    return "heldout" if index % 3 == 2 else "train"


def evaluate(params: str, expr: str, args: tuple[Any, ...]) -> Any:
    ns: dict[str, Any] = {}
    exec(f"def f({params}):\n    return {expr}\n", ns)  # our own constant expressions
    return ns["f"](*args)


def _source(name: str, fam: Family, expr: str) -> str:
    return f'def {name}({fam.params}):\n    """{fam.doc}"""\n    return {expr}\n'


def _tests(name: str, fam: Family) -> str:
    checks = "".join(
        f"    assert {name}({', '.join(map(repr, c))}) == {evaluate(fam.params, fam.good, c)!r}\n" for c in fam.cases
    )
    return (
        f"from lib.funcs import {name}\n\n\ndef test_{name}():\n{checks}\n\n"
        f"def test_{name}_is_a_function():\n    assert callable({name})\n"
    )


def build_record(instance_id: str, name: str, fam: Family, bug: str, split: Split) -> tuple[dict[str, Any], dict]:
    """One task record and its buggy repository (``{path: (mode, bytes)}``)."""
    failing = next((c for c in fam.cases if evaluate(fam.params, bug, c) != evaluate(fam.params, fam.good, c)), None)
    if failing is None:
        raise ValueError(f"{instance_id}: bug {bug!r} passes every case of {fam.doc!r}")
    call = f"{name}({', '.join(map(repr, failing))})"
    files = {
        "lib/__init__.py": (0o644, b""),
        FUNC_FILE: (0o644, _source(name, fam, bug).encode()),
        "tests/__init__.py": (0o644, b""),
        "tests/test_funcs.py": (0o644, _tests(name, fam).encode()),
    }
    fixed = {**files, FUNC_FILE: (0o644, _source(name, fam, fam.good).encode())}
    record = {
        "instance_id": instance_id,
        "repo": f"legorl/oneline-{split}",
        "problem_statement": (
            f"`{call}` returns {evaluate(fam.params, bug, failing)!r}, expected "
            f"{evaluate(fam.params, fam.good, failing)!r}. The bug is on line {BUG_LINE} of `{FUNC_FILE}`."
        ),
        "patch": git_diff(files, fixed),
        "FAIL_TO_PASS": [f"tests/test_funcs.py::test_{name}"],
        "PASS_TO_PASS": [f"tests/test_funcs.py::test_{name}_is_a_function"],
        "tier": "trivial",
        "test_command": "python -m pytest",
        "test_files": ["tests/test_funcs.py"],
    }
    return record, files


SUITES: dict[str, Split] = {"oneline-train": "train", "oneline-heldout": "heldout"}
_FORMAT = 1  # bump when generated tasks change: a new cache directory


def suite_path(name: str) -> Path:
    """The JSONL of generated suite ``name`` (``oneline-train`` / ``oneline-heldout``), generated once
    (:func:`cached_suite`)."""
    split = SUITES[name]
    return cached_suite(f"oneline-v{_FORMAT}-{split}", split, lambda out: generate(out, split))


def cached_suite(dirname: str, split: str, make: Callable[[Path], Path]) -> Path:
    """``$LEGORL_HOME/tasks/generated/<dirname>/<split>.jsonl``, written by ``make(directory)`` the
    first time: into a temporary directory, then renamed into place, so concurrent loaders never
    see half a suite."""
    import shutil
    import tempfile

    from legorl.settings import legorl_home

    root = legorl_home() / "tasks" / "generated"
    final = root / dirname
    if not (final / f"{split}.jsonl").is_file():
        root.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}-", dir=root))
        make(tmp)
        try:
            tmp.rename(final)
        except OSError:  # another loader won the race
            shutil.rmtree(tmp, ignore_errors=True)
    return final / f"{split}.jsonl"


def generate(out: Path, split: Split, seed: int = 0) -> Path:
    """Write the ``split`` tasks as ``out/<split>.jsonl`` with their repositories under
    ``out/<split>.jsonl.d/<instance_id>/``; returns the JSONL path (``load_suite`` reads it).
    Deterministic in ``seed`` (the function names)."""
    from legorl.tasks.author import write_tree

    rng = random.Random(f"oneline-{seed}")
    path = Path(out) / f"{split}.jsonl"
    trees = path.with_name(path.name + ".d")
    trees.mkdir(parents=True, exist_ok=True)
    lines = []
    n = 0
    for index, fam in enumerate(FAMILIES):
        names = [rng.choice(NAMES) for _ in fam.bugs]  # drawn for every family, so both splits stay stable
        if family_split(index) != split:
            continue
        for bug, name in zip(fam.bugs, names):
            n += 1
            iid = f"legorl__oneline-{split}-{n:03d}"
            record, files = build_record(iid, name, fam, bug, split)
            write_tree(trees / iid, files)
            record["source_dir"] = f"{trees.name}/{iid}"
            lines.append(json.dumps(record))
    path.write_text("\n".join(lines) + "\n")
    return path
