"""Validate task suites in a sandbox: is every task real?

For each task: the gold patch may change source files only (by the grader's own path rules,
:mod:`legorl.grading.rules`), it must resolve it (every FAIL_TO_PASS and PASS_TO_PASS test seen
passing, reward 1, no flags such as a gold patch touching test files), and the empty patch must
not (every FAIL_TO_PASS test fails, every PASS_TO_PASS test still passes). Both runs go through the
real grader (:func:`legorl.grading.grader.grade`), so a task that passes here grades the same way
during training.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

from legorl.diffs import touched_paths
from legorl.errors import ConfigError, LegoRLError
from legorl.rules import PathKind, classify_path, protected_paths
from legorl.tasks.model import Task

BACKENDS = ("bwrap", "podman", "docker")


def get_backend(name: str, **kwargs):  # a SandboxBackend
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
    """One task's check (also a line of the JSON report: :meth:`as_dict`)."""

    instance_id: str
    tier: str
    gold: str = "-"  # "ok" | "fail" | "env" | "-" (not run)
    empty: str = "-"  # "ok" | "fail" | "env" | "-"
    test_patch: str = "-"  # SWE-bench instances: the test patch alone as the diff must not resolve
    seconds: float = 0.0
    problems: list[str] = field(default_factory=list)
    repo: str = ""
    version: str = ""
    env: str = "-"  # "built" | the cause it could not be (an env failure of the gold run)
    run_seconds: dict[str, float] = field(default_factory=dict)  # per graded run, wall seconds
    notes: list[str] = field(default_factory=list)  # facts that are no problem (info flags, P2P that fail unfixed)

    @property
    def ok(self) -> bool:
        runs = (self.gold, self.empty) + ((self.test_patch,) if self.test_patch != "-" else ())
        return not self.problems and all(r == "ok" for r in runs)

    def as_dict(self) -> dict[str, object]:
        return {**asdict(self), "ok": self.ok}


def _not_passing(tests: dict[str, str], ids: list[str]) -> list[str]:
    return [f"{t} ({tests.get(t, 'missing')})" for t in ids if tests.get(t) != "passed"]


def check_task(task: Task, backend, timeout: float = 120) -> CheckResult:
    """Gold patch resolves the task; the empty patch does not.

    Built-in tiers are held to more: a gold run without any flag, and an empty run in which every
    FAIL_TO_PASS test fails and every PASS_TO_PASS test passes. SWE-bench instances (tier
    ``swebench``) are held to SWE-bench's own rule: gold resolves with no *blocking* flag, the empty
    patch and the test patch alone (the hidden tests offered as the fix) do not resolve; info flags
    and PASS_TO_PASS tests that fail without the fix are recorded as notes.
    """
    from legorl.grading.grader import grade

    started = time.monotonic()
    swebench = task.tier == "swebench"
    res = CheckResult(task.instance_id, task.tier, repo=task.repo, version=task.version)
    res.problems.extend(_static_problems(task))
    if task.source_dir is None:
        res.problems.append("no source_dir (only locally runnable tasks can be checked)")
        res.seconds = time.monotonic() - started
        return res

    def run(name: str, diff: str):  # a GraderReport
        t = time.monotonic()
        report = grade(task, diff, backend, timeout=timeout)
        res.run_seconds[name] = round(time.monotonic() - t, 2)
        return report

    try:
        gold = _judge_gold(task, run("gold", task.patch), swebench)
        res.gold, res.env = gold.outcome, gold.env
        gold.add_to(res)
        if res.gold == "env":  # the environment is broken: the other runs would say the same
            res.seconds = time.monotonic() - started
            return res
        empty = _judge_empty(task, run("empty", ""), swebench)
        res.empty = empty.outcome
        empty.add_to(res)
        if swebench and task.test_patch.strip():
            alone = _judge_test_patch(run("test_patch", task.test_patch))
            res.test_patch = alone.outcome
            alone.add_to(res)
    except LegoRLError as exc:
        res.problems.append(f"error: {exc}")
    except Exception as exc:  # one broken task must not hide the others
        res.problems.append(f"crashed: {type(exc).__name__}: {exc}")
    res.seconds = time.monotonic() - started
    return res


def _static_problems(task: Task) -> list[str]:
    """What is wrong with the task before running anything."""
    problems = []
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
        if kind not in (PathKind.SOURCE, PathKind.PYPROJECT) and not _framework_source(task, kind):
            problems.append(f"gold patch touches {path} ({kind.value}): the grader drops it")
    return problems


@dataclass
class _RunVerdict:
    """One graded run's outcome ("ok" | "fail" | "env"), with the problems and notes it adds."""

    outcome: str
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    env: str = "-"  # the gold run only: "built" | the cause it could not be

    def add_to(self, res: CheckResult) -> None:
        res.problems.extend(self.problems)
        res.notes.extend(self.notes)


def _judge_gold(task: Task, gold, swebench: bool) -> _RunVerdict:
    """The gold patch must resolve: every FAIL_TO_PASS and PASS_TO_PASS test passing, reward 1, no
    flag (SWE-bench: no blocking flag)."""
    if gold.status != "ok":
        return _RunVerdict("env", [f"gold: {gold.status}: {gold.cause}"], env=gold.cause or gold.status)
    bad = _not_passing(gold.tests, [*task.FAIL_TO_PASS, *task.PASS_TO_PASS])
    blocking = [f.label for f in gold.flag_details if f.severity == "blocking"]
    flags_ok = not blocking if swebench else not gold.flags
    if gold.resolved and gold.reward == 1.0 and flags_ok and not bad:
        notes = ["gold: info flags " + ", ".join(gold.flags)] if gold.flags else []
        return _RunVerdict("ok", notes=notes, env="built")
    verdict = _RunVerdict("fail", env="built")
    if bad:
        verdict.problems.append("gold: not passing: " + ", ".join(bad))
    if not flags_ok:
        verdict.problems.append("gold: flags " + ", ".join(blocking if swebench else gold.flags))
    if not bad and flags_ok:
        verdict.problems.append(f"gold: not resolved (runner exit {gold.runner_exit_code})")
    return verdict


def _judge_empty(task: Task, empty, swebench: bool) -> _RunVerdict:
    """The empty patch must not resolve; built-in tiers: every FAIL_TO_PASS test fails and every
    PASS_TO_PASS test passes (SWE-bench: recorded as notes)."""
    if empty.status != "ok":
        return _RunVerdict("env", [f"empty: {empty.status}: {empty.cause}"])
    passing_f2p = [t for t in task.FAIL_TO_PASS if empty.tests.get(t) == "passed"]
    failing_p2p = _not_passing(empty.tests, task.PASS_TO_PASS)
    if swebench:
        verdict = _RunVerdict("fail" if empty.resolved else "ok")
        if empty.resolved:
            verdict.problems.append("empty: resolved without the fix")
        if passing_f2p:
            verdict.notes.append("empty: FAIL_TO_PASS passing without the fix: " + ", ".join(passing_f2p))
        if failing_p2p:
            verdict.notes.append("empty: PASS_TO_PASS failing without the fix: " + ", ".join(failing_p2p))
        return verdict
    verdict = _RunVerdict("ok" if not passing_f2p and not failing_p2p and not empty.resolved else "fail")
    if passing_f2p:
        verdict.problems.append("empty: FAIL_TO_PASS passes without the fix: " + ", ".join(passing_f2p))
    if failing_p2p:
        verdict.problems.append("empty: PASS_TO_PASS fails without the fix: " + ", ".join(failing_p2p))
    if empty.resolved and not passing_f2p:
        verdict.problems.append("empty: resolved without the fix")
    return verdict


def _judge_test_patch(alone) -> _RunVerdict:
    """SWE-bench: the test patch alone offered as the fix must not resolve."""
    if alone.status != "ok":
        return _RunVerdict("env", [f"test patch alone: {alone.status}: {alone.cause}"])
    if alone.resolved and alone.reward > 0:
        return _RunVerdict("fail", ["test patch alone: resolved"])
    return _RunVerdict("ok")


def _framework_source(task: Task, kind: PathKind) -> bool:
    """A file of the test framework in the framework's own repository is its source."""
    return kind is PathKind.FRAMEWORK_SHADOW and task.environment is not None and task.environment.framework_under_test


def read_report(path: Path) -> dict[str, CheckResult]:
    """The results already in a JSON-lines check report, by instance id (the last line of each wins)."""
    done: dict[str, CheckResult] = {}
    if path.is_file():
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                continue  # a line cut by a crash: that instance is checked again
            if isinstance(rec, dict) and "instance_id" in rec:
                rec.pop("ok", None)
                try:
                    done[str(rec["instance_id"])] = CheckResult(**rec)
                except TypeError:
                    continue  # a line of another version of the report: checked again
    return done


def check_suite(
    tasks: list[Task],
    backend,
    workers: int | None = None,
    timeout: float = 120,
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
