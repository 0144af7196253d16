"""The miner's pure parts: function names, mutants, what a patch edits, declared environments, the
order-preserving validation scheduler, suite naming. No sandbox, no network."""

from __future__ import annotations

import random
import threading
import time
from datetime import date
from pathlib import Path

import pytest

from legorl.errors import TaskError
from legorl.tasks.mining.env import index_date, read_declared
from legorl.tasks.mining.functions import MODULE_SCOPE, FunctionIndex, function_spans
from legorl.tasks.mining.mutations import mutants
from legorl.tasks.mining.patches import (
    apply_section,
    diff_key,
    diff_size,
    edited_functions,
    hunk_names,
    post_images,
)
from legorl.tasks.mining.pipeline import Verdict, ordered_validation
from legorl.tasks.mining.suite import mined_root, suite_dir

MODULE = '''"""A module."""

LIMIT = 3


def clamp(value, low, high):
    """Keep value within [low, high]."""
    if value < low:
        return low
    if value > high:
        return high
    return value


class Box:
    @property
    def size(self):
        return 2

    def grow(self, n=1):
        total = 0
        for _ in range(n):
            total += self.size - 1
        def inner(x):
            return x * 2
        log(total, n)
        return inner(total)
'''


def test_function_names_are_code_object_qualnames():
    spans = {s.qualname: s for s in function_spans(MODULE)}
    assert set(spans) == {"clamp", "Box.size", "Box.grow", "Box.grow.<locals>.inner"}
    assert spans["Box.size"].first_line == spans["Box.size"].def_line - 1  # the decorator's line
    index = FunctionIndex(MODULE)
    lines = MODULE.splitlines()
    assert index.at(lines.index("        return high") + 1) == "clamp"
    assert index.at(lines.index("            return x * 2") + 1) == "Box.grow.<locals>.inner"
    assert index.at(lines.index("        log(total, n)") + 1) == "Box.grow"
    assert index.at(lines.index("LIMIT = 3") + 1) == MODULE_SCOPE
    # a code object reports its first decorator's line; the def line is accepted too
    assert (
        index.code_object(spans["Box.size"].first_line) == index.code_object(spans["Box.size"].def_line) == "Box.size"
    )


def test_mutants_edit_function_bodies_only_one_point_each(tmp_path):
    (tmp_path / "m.py").write_text(MODULE)
    found = mutants(tmp_path, "m.py")
    kinds = {m.kind for m in found}
    assert {
        "flip_comparison",
        "negate_if",
        "drop_return_value",
        "off_by_one",
        "swap_operands",
        "swap_arguments",
        "remove_statement",
        "remove_conditional",
        "remove_loop",
        "swap_plus_minus",
    } <= kinds
    assert all(m.function != MODULE_SCOPE for m in found)  # LIMIT = 3 is module level: never mutated
    assert len({m.key for m in found}) == len(found)
    for m in found:
        original, mutated = MODULE.splitlines(), m.mutated.splitlines()
        changed = [i for i, (a, b) in enumerate(zip(original, mutated)) if a != b]
        assert m.mutated != MODULE and (len(changed) <= 1 or m.kind.startswith("remove_")), m
    removed = next(m for m in found if m.kind == "remove_statement" and "log(" in m.before)
    assert removed.function == "Box.grow" and "log(total, n)" not in removed.mutated
    # the order is the source's, so two reads of one module give the same list
    assert [m.key for m in mutants(tmp_path, "m.py")] == [m.key for m in found]


PATCH = """diff --git a/m.py b/m.py
--- a/m.py
+++ b/m.py
@@ -8,7 +8,7 @@ def clamp(value, low, high):
     if value < low:
         return low
     if value > high:
-        return high
+        return low
     return value
~
~
@@ -25,3 +25,5 @@ class Box:
             return x * 2
         log(total, n)
         return inner(total)
+    def shrink(self):
+        return 1
""".replace("\n~\n", "\n \n").replace("\n~\n", "\n \n")


def test_what_a_patch_edits_by_function_and_its_key():
    new = post_images(PATCH, lambda p: MODULE if p == "m.py" else None)("m.py")
    assert new is not None and "def shrink" in new and "        return low\n    return value" in new
    assert apply_section(MODULE.replace("return high", "return HIGH"), PATCH) is None  # no fuzz
    assert edited_functions(PATCH, lambda p: MODULE, lambda p: new) == {("m.py", "clamp"), ("m.py", "Box.shrink")}
    # without the post-image an added line counts for the function it follows
    assert edited_functions(PATCH, lambda p: MODULE) == {("m.py", "clamp"), ("m.py", "Box.grow")}
    assert ("m.py", "clamp") in hunk_names(PATCH) and ("m.py", "shrink") in hunk_names(PATCH)
    assert diff_size(PATCH) == (1, 4)
    moved = PATCH.replace("@@ -8,7 +8,7 @@", "@@ -18,7 +18,7 @@").replace("     if value < low:", "     if value <low:")
    assert diff_key(moved) == diff_key(PATCH)  # same change elsewhere: the same key
    assert diff_key(PATCH.replace("+        return low", "+        return -1")) != diff_key(PATCH)


def test_declared_environment_from_every_kind_of_file(tmp_path):
    (tmp_path / "pyproject.toml").write_text(
        '[project]\nname = "demo-pkg"\nrequires-python = ">=3.9"\ndependencies = ["attrs>=22"]\n'
        '[project.optional-dependencies]\ntest = ["hypothesis"]\ndocs = ["sphinx"]\n'
        '[dependency-groups]\ntests = ["pytest-mock", {include-group = "base"}]\nbase = ["freezegun"]\n'
    )
    (tmp_path / "tox.ini").write_text("[testenv]\ndeps =\n    pytest\n    py311: tomli\n    -r{toxinidir}/x.txt\n")
    (tmp_path / "requirements").mkdir()
    (tmp_path / "requirements" / "tests.txt").write_text("# pinned\nresponses==0.25\n-e .\n")
    (tmp_path / "requirements" / "docs.txt").write_text("furo\n")
    (tmp_path / "setup.cfg").write_text("[options]\ninstall_requires =\n    six\n")
    d = read_declared(tmp_path)
    assert d.name == "demo-pkg" and d.requires_python == ">=3.9"
    assert set(d.runtime) == {"attrs>=22", "six"}
    assert {"hypothesis", "pytest-mock", "freezegun", "pytest", "tomli", "responses==0.25"} == set(d.tests)
    assert "sphinx" not in d.tests and "furo" not in d.tests
    assert d.key() == read_declared(tmp_path).key()


def test_index_date_is_the_end_of_the_commits_half_year_and_never_the_future():
    assert index_date(date(2021, 3, 4), today=date(2030, 1, 1)) == "2021-07-01"
    assert index_date(date(2021, 9, 4), today=date(2030, 1, 1)) == "2022-01-01"
    assert index_date(date(2026, 11, 1), today=date(2026, 12, 6)) == "2026-12-06"


def test_ordered_validation_keeps_the_same_set_whatever_the_timing():
    items = [(f"g{i % 4}", i) for i in range(40)]
    passes = {i for _, i in items if (i * 7) % 3 != 0}

    def run(workers: int, jitter: bool) -> list[tuple[int, bool | None]]:
        rng = random.Random(workers)
        lock = threading.Lock()
        out: list[tuple[int, bool | None]] = []

        def validate(item):
            if jitter:
                time.sleep(rng.random() / 200)
            return Verdict(item[1] in passes)

        def commit(i, item, verdict):
            with lock:
                out.append((i, None if verdict is None else verdict.keep))

        ordered_validation(
            items, validate, lambda it: it[0], per_group=2, max_kept=6, workers=workers, on_commit=commit
        )
        return out

    sequential = run(1, False)
    assert [i for i, _ in sequential] == list(range(40))  # in item order
    kept = [i for i, k in sequential if k]
    assert len(kept) == 6 and all(sum(items[i][0] == g for i in kept) <= 2 for g in {"g0", "g1", "g2", "g3"})
    expected: list[int] = []
    for _, i in items:  # the rule itself: first two of each group that pass, six in all
        if i in passes and sum(items[j][0] == items[i][0] for j in expected) < 2 and len(expected) < 6:
            expected.append(i)
    assert kept == expected
    for workers in (2, 3, 8):
        parallel = run(workers, True)
        assert [i for i, k in parallel if k] == kept


def test_suite_names_and_paths(tmp_path, monkeypatch):
    monkeypatch.setenv("LEGORL_HOME", str(tmp_path))
    assert suite_dir("pool-v1") == mined_root() / "pool-v1" == tmp_path / "tasks" / "mined" / "pool-v1"
    assert suite_dir(str(tmp_path / "x")) == tmp_path / "x"
    with pytest.raises(TaskError, match="a suite name is"):
        suite_dir("bad name!")
    assert Path(suite_dir("./rel")).is_absolute()


def test_a_run_without_tests_says_what_pytest_said():
    from legorl.tasks.mining.testrun import parse_output

    out = parse_output(
        'LEGORL-MINING-PROBE-3\n{"tests": {}, "durations": {}, "messages": {}, "frames": {}, "collect_errors": {}, '
        '"coverage": null}\n\nLEGORL-MINING-STDERR\nINTERNALERROR> ...\nINTERNALERROR> pytest.PytestConfigWarning: '
        "Unknown config option: cache_dir\n",
        1.5,
    )
    assert not out.ok and out.exit_code == 3
    assert out.problem.endswith("pytest.PytestConfigWarning: Unknown config option: cache_dir")
    ok = parse_output('LEGORL-MINING-PROBE-1\n{"tests": {"t.py::a": "passed", "t.py::b": "failed"}}\n', 2.0)
    assert ok.ok and ok.passed == {"t.py::a"} and ok.exit_code == 1
