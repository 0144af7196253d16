"""Validate task suites in a sandbox: is every task real?

For each task: the gold patch may change source files only (by the grader's own path rules,
:mod:`legorl.grading.rules`), it must resolve it (every FAIL_TO_PASS and PASS_TO_PASS test seen
passing, reward 1, no flags such as a gold patch touching test files), and the empty patch must
not (every FAIL_TO_PASS test fails, every PASS_TO_PASS test still passes). Both runs go through the
real grader (:func:`legorl.grading.grader.grade`), so a task that passes here grades the same way
during training.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from legorl.diffs import touched_paths
from legorl.errors import ConfigError, LegoRLError
from legorl.grading.rules import PathKind, classify_path, protected_paths
from legorl.tasks.model import Task

BACKENDS = ("bwrap", "podman", "docker")


def get_backend(name: str, **kwargs):  # noqa: ANN201 - a SandboxBackend
    """A sandbox backend by name, imported lazily; a clear ConfigError when it is unknown or unavailable."""
    if name == "bwrap":
        from legorl.sandbox.bwrap import BwrapBackend

        return BwrapBackend(**kwargs)
    if name in ("podman", "docker"):
        try:
            from legorl.sandbox.podman import PodmanBackend
        except ImportError as exc:
            raise ConfigError(
                f"the {name} sandbox backend is not available in this installation "
                f"(legorl.sandbox.podman: {exc}); use --backend bwrap"
            ) from None
        try:
            backend = PodmanBackend(executable=name, **kwargs)
            getattr(backend, "exe", None)  # fail now, not once per task, when the executable is missing
        except (TypeError, LegoRLError) as exc:
            raise ConfigError(f"the {name} sandbox backend is not usable here: {exc}") from None
        return backend
    raise ConfigError(f"unknown sandbox backend {name!r} (choose from {', '.join(BACKENDS)})")


@dataclass
class CheckResult:
    instance_id: str
    tier: str
    gold: str = "-"  # "ok" | "fail" | "env" | "-" (not run)
    empty: str = "-"  # "ok" | "fail" | "env" | "-"
    seconds: float = 0.0
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems and self.gold == "ok" and self.empty == "ok"


def _not_passing(tests: dict[str, str], ids: list[str]) -> list[str]:
    return [f"{t} ({tests.get(t, 'missing')})" for t in ids if tests.get(t) != "passed"]


def check_task(task: Task, backend, timeout: float = 120) -> CheckResult:  # noqa: ANN001
    """Gold patch resolves the task; the empty patch fails every FAIL_TO_PASS and no PASS_TO_PASS."""
    from legorl.grading.grader import grade

    started = time.monotonic()
    res = CheckResult(task.instance_id, task.tier)
    problems = res.problems
    if not task.FAIL_TO_PASS:
        problems.append("no FAIL_TO_PASS tests")
    if overlap := sorted(set(task.FAIL_TO_PASS) & set(task.PASS_TO_PASS)):
        problems.append(f"in both FAIL_TO_PASS and PASS_TO_PASS: {', '.join(overlap)}")
    if not task.patch.strip():
        problems.append("empty gold patch")
    # The grader would drop these sections (and flag them): say which, before running anything.
    protected = protected_paths(task.test_files, task.test_patch)
    for path in touched_paths(task.patch):
        kind = classify_path(path, protected)
        if kind not in (PathKind.SOURCE, PathKind.PYPROJECT):
            problems.append(f"gold patch touches {path} ({kind.value}): the grader drops it")
    if task.source_dir is None:
        problems.append("no source_dir (only locally runnable tasks can be checked)")
        res.seconds = time.monotonic() - started
        return res

    try:
        gold = grade(task, task.patch, backend, timeout=timeout)
        if gold.status != "ok":
            res.gold = "env"
            problems.append(f"gold: {gold.status}: {gold.cause}")
        else:
            bad = _not_passing(gold.tests, [*task.FAIL_TO_PASS, *task.PASS_TO_PASS])
            if gold.resolved and gold.reward == 1.0 and not gold.flags and not bad:
                res.gold = "ok"
            else:
                res.gold = "fail"
                if bad:
                    problems.append("gold: not passing: " + ", ".join(bad))
                if gold.flags:
                    problems.append("gold: flags " + ", ".join(gold.flags))
                if not bad and not gold.flags:
                    problems.append(f"gold: not resolved (runner exit {gold.runner_exit_code})")

        empty = grade(task, "", backend, timeout=timeout)
        if empty.status != "ok":
            res.empty = "env"
            problems.append(f"empty: {empty.status}: {empty.cause}")
        else:
            passing_f2p = [t for t in task.FAIL_TO_PASS if empty.tests.get(t) == "passed"]
            failing_p2p = _not_passing(empty.tests, task.PASS_TO_PASS)
            res.empty = "ok" if not passing_f2p and not failing_p2p and not empty.resolved else "fail"
            if passing_f2p:
                problems.append("empty: FAIL_TO_PASS passes without the fix: " + ", ".join(passing_f2p))
            if failing_p2p:
                problems.append("empty: PASS_TO_PASS fails without the fix: " + ", ".join(failing_p2p))
            if empty.resolved and not passing_f2p:
                problems.append("empty: resolved without the fix")
    except LegoRLError as exc:
        problems.append(f"error: {exc}")
    except Exception as exc:  # noqa: BLE001 - one broken task must not hide the others
        problems.append(f"crashed: {type(exc).__name__}: {exc}")
    res.seconds = time.monotonic() - started
    return res


def check_suite(
    tasks: list[Task],
    backend,
    workers: int | None = None,
    timeout: float = 120,  # noqa: ANN001
    on_result: Callable[[CheckResult], None] | None = None,
) -> list[CheckResult]:
    """:func:`check_task` over ``tasks`` with ``workers`` threads (default 2); results in input order.

    ``on_result`` is called (from worker threads) as each task finishes, e.g. for progress output.
    """
    workers = max(1, workers or 2)

    def one(task: Task) -> CheckResult:
        result = check_task(task, backend, timeout=timeout)
        if on_result is not None:
            on_result(result)
        return result

    if workers == 1 or len(tasks) <= 1:
        return [one(t) for t in tasks]
    with ThreadPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(one, tasks))
