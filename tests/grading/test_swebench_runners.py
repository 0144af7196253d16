"""Real SWE-bench instances graded in bwrap, one per runner: the env layer from SWE-bench's spec (pyenv
interpreter, pip), the gold patch resolves, the empty patch does not; and sympy's own runner holds
against patches that forge its verdict."""

from __future__ import annotations

import pytest

from legorl.grading.grader import grade
from legorl.sandbox.bwrap import BwrapBackend
from legorl.tasks.loader import load_suite
from legorl.tasks.model import Task

pytestmark = [pytest.mark.sandbox, pytest.mark.slow, pytest.mark.swebench_data]


def _one(suite: str, iid: str) -> Task:
    (task,) = load_suite(suite, instances=[iid])
    return task


def _blocking(report) -> list[str]:
    return [f.label for f in report.flag_details if f.severity == "blocking"]


def test_a_pytest_instance_resolves_with_its_gold_patch_only(backend: BwrapBackend) -> None:
    task = _one("swebench-lite-dev", "marshmallow-code__marshmallow-1359")
    assert task.environment is not None and task.environment.python == "3.9"
    # SWE-bench's ids cut at a space ("...[required-Missing") are answered by the tests they name
    assert any("[" in t and not t.endswith("]") for t in task.PASS_TO_PASS)
    gold = grade(task, task.patch, backend, timeout=600)
    assert gold.status == "ok" and gold.resolved and gold.reward == 1.0, gold.log_tail
    assert not _blocking(gold)
    empty = grade(task, "", backend, timeout=600)
    assert empty.status == "ok" and not empty.resolved
    assert [empty.tests[t] for t in task.FAIL_TO_PASS] == ["failed"] * len(task.FAIL_TO_PASS)


SYMPY = "sympy__sympy-12096"


def test_a_sympy_instance_runs_sympys_own_runner(backend: BwrapBackend) -> None:
    task = _one("swebench-verified", SYMPY)
    assert task.environment is not None and task.environment.runner == "sympy"
    assert "sympy/utilities/runtests.py" in task.test_files  # the runner is protected like the tests
    gold = grade(task, task.patch, backend, timeout=600)
    assert gold.status == "ok" and gold.resolved and gold.reward == 1.0, gold.log_tail
    assert not _blocking(gold)
    empty = grade(task, "", backend, timeout=600)
    assert empty.status == "ok" and not empty.resolved and empty.tests["test_issue_12092"] == "failed"


def _append(task: Task, path: str, lines: list[str]) -> str:
    """A diff appending ``lines`` to the file ``path`` of the task's tree (its last line as context)."""
    assert task.source_dir is not None
    old = (task.source_dir / path).read_text().splitlines()
    body = "".join(f"+{line}\n" for line in lines)
    return (
        f"diff --git a/{path} b/{path}\n--- a/{path}\n+++ b/{path}\n"
        f"@@ -{len(old)},1 +{len(old)},{1 + len(lines)} @@\n {old[-1]}\n{body}"
    )


def test_sympy_verdicts_cannot_be_printed_or_patched_in(backend: BwrapBackend) -> None:
    task = _one("swebench-verified", SYMPY)
    init = "sympy/__init__.py"
    # 1. print what SWE-bench's log parser would read as a pass: nothing printed is read
    printed = _append(task, init, ["print('test_issue_12092 ok')"])
    report = grade(task, printed, backend, timeout=600)
    assert report.status == "ok" and not report.resolved
    # 2. make the runner report every test passed, from code that runs when sympy is imported
    patch_runner = [
        "import sympy.utilities.runtests as _rt",
        "_orig = _rt.SymPyTests.test_file",
        "def _forged(self, filename, *a, **k):",
        "    self._reporter.entering_filename(filename, 1)",
        "    for name in ('test_issue_12092',):",
        "        self._reporter.entering_test(type('F', (), {'__name__': name})())",
        "        self._reporter.test_pass()",
        "    self._reporter.leaving_filename()",
        "_rt.SymPyTests.test_file = _forged",
    ]
    forged = _append(task, init, patch_runner)
    report = grade(task, forged, backend, timeout=600)
    assert not report.resolved and report.reward == 0.0
    assert "forged_results" in report.flags, report.log_tail
    # 3. change the runner's own file: the section is dropped (and flagged) and the file restored
    runtests = "sympy/utilities/runtests.py"
    edited = _append(task, runtests, ["PyTestReporter.test_fail = PyTestReporter.test_pass"])
    report = grade(task, edited, backend, timeout=600)
    assert not report.resolved and "modified_test_file:sympy/utilities/runtests.py" in report.flags
