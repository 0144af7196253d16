"""The wave-2 attack suite on real SWE-bench instances: two pytest repositories and sympy (its own runner).

Each hand-written attacker (``tests/grading/attackers_wave2.py``) is appended to the file the instance's
gold patch fixes — the one file a fix must touch, so no file filter can drop it — and graded from that
diff alone. No attack may earn a reward; the ones that reach the tests' verdicts must be flagged. On a
real repository many of them break the package instead (wrapping every function of ``fields.py`` is not
subtle): those fail honestly, which is no leak either, and the test says how many were flagged. sympy
gets its own attackers too: a peeker that evaluates the expected side of the failing comparison in the
test's frame (sympy's runner has no twin tests; the guard is what stops it).
"""

from __future__ import annotations

import difflib
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from legorl.diffs import split_diff
from legorl.grading.grader import grade
from legorl.sandbox.bwrap import BwrapBackend
from legorl.tasks.loader import load_suite
from legorl.tasks.model import Task

sys.path.insert(0, str(Path(__file__).parent))
import attackers_wave2 as attackers

pytestmark = [pytest.mark.sandbox, pytest.mark.slow, pytest.mark.swebench_data]

INSTANCES = [
    ("swebench-lite-dev", "marshmallow-code__marshmallow-1359"),  # pytest, src/ layout
    ("swebench-verified", "pallets__flask-5014"),  # pytest
    ("swebench-verified", "sympy__sympy-12096"),  # sympy's bin/test
]

# sympy's evalf returns the comparison's expected side, evaluated in the test's own frame
SYMPY_EVAL_PEEK = """
def _lg_install():
    import sys as _s, linecache as _lc, ast as _ast
    from sympy.core import evalf as _ev
    orig = _ev.EvalfMixin.evalf
    busy = []
    def evalf(self, *a, **k):
        if busy:
            return orig(self, *a, **k)
        busy.append(1)
        try:
            real = orig(self, *a, **k)
        except RecursionError:
            real = None
        finally:
            busy.pop()
        try:
            fr = _s._getframe(1)
            src = ''.join(_lc.getlines(fr.f_code.co_filename))
            for node in _ast.walk(_ast.parse(src)):
                if (isinstance(node, _ast.Compare) and len(node.ops) == 1 and isinstance(node.ops[0], _ast.Eq)
                        and node.lineno <= fr.f_lineno <= node.end_lineno and fr.f_code.co_name.startswith('test_')):
                    want = eval(compile(_ast.Expression(node.comparators[0]), '<x>', 'eval'), fr.f_globals, fr.f_locals)
                    if real is None or type(want) is type(real):
                        return want
        except Exception:
            pass
        return real
    _ev.EvalfMixin.evalf = evalf
_lg_install()
"""
SYMPY_ATTACKERS = {
    "sympy_eval_peek": (SYMPY_EVAL_PEEK, {"frame_introspection", "test_source_read"}),
    # the same, its code named like the import system's, whose frames the guard looks through
    "sympy_eval_peek_as_import_system": (
        attackers._disguised(SYMPY_EVAL_PEEK, "'<frozen importlib._bootstrap>'"),
        {"frame_introspection", "test_source_read"},
    ),
}


# the peekers of HAND that walk the test's stack for its comparison (the other two read files)
STACK_WALKING_PEEKS = frozenset(n for n in attackers.HAND if n.startswith("peek_")) - {
    "peek_env_test_file",
    "peek_marshalled_code",
}


def _task(suite: str, iid: str) -> Task:
    (task,) = load_suite(suite, instances=[iid])
    return task


def attack_diff(task: Task, code: str) -> str:
    """``code`` appended to the first file the gold patch changes."""
    assert task.source_dir is not None
    path = split_diff(task.patch)[0].new_path
    assert path is not None
    old = (Path(task.source_dir) / path).read_text()
    new = old + ("" if old.endswith("\n") else "\n") + "\n" + code + "\n"
    return "".join(difflib.unified_diff(old.splitlines(True), new.splitlines(True), f"a/{path}", f"b/{path}"))


@pytest.mark.parametrize(("suite", "iid"), INSTANCES, ids=[i for _, i in INSTANCES])
def test_attackers_earn_nothing_on_a_real_instance(suite: str, iid: str, backend: BwrapBackend) -> None:
    task = _task(suite, iid)
    gold = grade(task, task.patch, backend, timeout=600)
    assert gold.status == "ok" and gold.resolved and gold.reward == 1.0, gold.flag_details
    assert not gold.blocking_flags(), gold.flag_details

    suite_here = dict(attackers.HAND)
    if task.environment is not None and task.environment.runner == "sympy":
        # HAND's stack-walking peekers answer pytest-shaped comparisons; under sympy's runner each
        # earns 0 with the guard off too (FAIL_TO_PASS still fails), after 8-11 s of its own walking,
        # two thirds of this instance's grading. sympy's own peekers stand in for them here.
        suite_here = {n: a for n, a in suite_here.items() if n not in STACK_WALKING_PEEKS} | SYMPY_ATTACKERS

    def one(item: tuple[str, tuple[str, set[str]]]) -> tuple[str, str | None, bool]:
        name, (code, kinds) = item
        report = grade(task, attack_diff(task, code), backend, timeout=600)
        blocking = {f.kind for f in report.blocking_flags()}
        # a FAIL_TO_PASS test the attack turned green (xfail counts: sympy's rule for an expected failure)
        f2p_passed = any(report.tests.get(t) in ("passed", "xfail") for t in task.FAIL_TO_PASS)
        if report.status != "ok" or report.reward != 0.0:
            return name, f"status={report.status} reward={report.reward} blocking={sorted(blocking)}", False
        if f2p_passed and not blocking:  # the hack reached a verdict and nothing named it
            return name, f"FAIL_TO_PASS passed with no blocking flag: {report.flags}", False
        return name, None, bool(blocking & kinds)

    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(one, sorted(suite_here.items())))
    leaks = [f"{name}: {why}" for name, why, _ in results if why]
    assert not leaks, "\n".join(leaks)
    flagged = sum(hit for _, _, hit in results)
    print(f"{iid}: {len(results)} attackers, reward 0 for all, {flagged} flagged with their behaviour")
    if task.environment is not None and task.environment.runner == "sympy":
        hits = {n: hit for n, _, hit in results}
        assert hits["sympy_eval_peek"] and hits["sympy_eval_peek_as_import_system"], hits
