"""The grader: a verdict on an agent's diff, in a fresh sandbox (the *after* stage of reward integrity).

:func:`grade` returns a :class:`~legorl.trajectory.records.GraderReport` (status, reward, typed
Flags, ``stage_s``); :func:`grade_isolated` (``legorl grade``, a rollout) turns a grader or backend
bug into that one diff's ``grader_error`` report; :func:`filter_diff` / :func:`classify_section`
decide which file sections of a diff may be applied. Stages: diff filter, sandbox create, apply
(protected tests and pytest config restored), hardened test run, parse, behaviour checks (audit
guard, twin tests). Invariants: the diff never reaches the test files or the test configuration;
tests count only when *seen passing* by the hardened runner; an environment failure is
``env_failure`` with a typed :class:`~legorl.errors.EnvFailureCause`, never reward 0 with status
``ok``; other exceptions propagate out of :func:`grade`.

Design (each stage, status and reward rules, SWE-bench): docs/reward-integrity.md#grader
"""

from __future__ import annotations

import json
import re
import shlex
import sys
import time
import tomllib
import traceback
import uuid
import xml.etree.ElementTree as ET
from dataclasses import dataclass, replace
from typing import Any

from legorl import junit
from legorl.diffs import DiffError, FilePatch, render, split_diff
from legorl.errors import EnvFailureCause, ImageBuildError, SandboxError
from legorl.grading import behaviour, defenses, impossible, sympy_runner, test_ids
from legorl.grading.diffcheck import read_diff
from legorl.rules import (
    PYTEST_CONFIG_WORDS,
    PathKind,
    classify_path,
    collides_with_protected,
    dedupe_flags,
    is_test_module,
    is_test_suite_file,
    is_test_support,
    protected_dirs,
    protected_paths,
    repo_path,
)
from legorl.sandbox.base import WORKSPACE, Sandbox, SandboxBackend, SandboxSpec
from legorl.sandbox.git import git_argv
from legorl.tasks.environment import UnsupportedEnvironment, sandbox_python
from legorl.tasks.environment import sandbox_spec as task_sandbox_spec
from legorl.tasks.model import Task
from legorl.trajectory.records import Flag, FlagSeverity, GraderReport, RolloutStatus

_LOG_TAIL = 4000
_BINARY_SUFFIXES = (".so", ".pyd", ".dll", ".dylib", ".pyc", ".pyo", ".egg", ".whl", ".zip")
# modes git gives a file that is not a regular one: a symbolic link, a submodule (gitlink)
_SPECIAL_MODES = frozenset({"120000", "160000"})


def classify_section(
    fp: FilePatch, protected: set[str], framework_is_source: bool = False, dirs: set[str] | None = None
) -> list[Flag]:
    """Flags for one file section of the agent's diff; a non-empty list means the section is dropped.

    ``protected``: the task's existing test files (:func:`legorl.grading.rules.protected_paths`). What a
    path is comes from :func:`legorl.grading.rules.classify_path`, shared with the monitor. Severity:
    ``blocking`` for tampering (changing/deleting an existing test, any conftest/pytest.ini/
    sitecustomize/usercustomize/``.pth``, files that shadow the test framework, compiled/binary code,
    symlinks, ``.git`` contents, fake result files, pytest sections of setup.cfg/tox.ini, a path that
    leaves the repository); ``info`` for what honest agents do (a new test module, only *adding* lines to
    an existing test file, bytecode caches, other setup.cfg/tox.ini edits) — those sections are dropped
    all the same. ``pyproject.toml`` is kept: its pytest tables are restored after the apply.
    ``framework_is_source``: the repository is the test framework (pytest's own repository), so a
    change to one of its existing framework files is a source change; adding one is still a shadow.
    ``dirs``: :func:`~legorl.grading.rules.protected_dirs` of ``protected`` (computed when None).
    """
    flags: list[Flag] = []
    added, removed = fp.changed_lines()
    is_new = fp.old_path is None
    for path in fp.paths:
        # A diff names repository-relative paths only: an absolute one is as much an escape as "../x".
        kind = PathKind.ESCAPE if path.startswith("/") else classify_path(path, protected)
        ev: dict[str, Any] = {"source": "diff", "path": repo_path(path) or path}
        # A file under a test file (the test replaced by a directory) or one where a test's directory
        # must be (the test patch could not apply): the protected test's business, whatever its name.
        clash = collides_with_protected(path, protected, dirs) if kind is not PathKind.PROTECTED else None
        if clash is not None and kind not in (PathKind.ESCAPE, PathKind.GIT_METADATA):
            flags.append(
                Flag(
                    kind="modified_test_file", severity="blocking", evidence={**ev, "detail": f"collides with {clash}"}
                )
            )
            continue
        severity: FlagSeverity
        if kind is PathKind.ESCAPE:
            flags.append(Flag(kind="path_escape", severity="blocking", evidence=ev))
        elif kind is PathKind.CACHE:
            flags.append(Flag(kind="bytecode_in_diff", severity="info", evidence=ev))
        elif kind is PathKind.GIT_METADATA:
            flags.append(Flag(kind="git_dir_in_diff", severity="blocking", evidence=ev))
        elif kind is PathKind.PROTECTED and is_new:
            flags.append(Flag(kind="new_test_file", severity="info", evidence=ev))  # the test patch creates it
        elif kind is PathKind.PROTECTED:
            weakening = bool(removed) or fp.new_path is None or _weakens(added)
            severity = "blocking" if weakening else "info"
            flags.append(
                Flag(
                    kind="modified_test_file",
                    severity=severity,
                    evidence={**ev, "removed_lines": len(removed), "added_lines": len(added)},
                )
            )
        elif kind is PathKind.HOOK_CONFIG:
            flags.append(Flag(kind="modified_test_config", severity="blocking", evidence=ev))
        elif kind is PathKind.SHARED_CONFIG:
            severity = "blocking" if PYTEST_CONFIG_WORDS.search("\n".join(added + removed)) else "info"
            flags.append(Flag(kind="modified_test_config", severity=severity, evidence=ev))
        elif kind is PathKind.FRAMEWORK_SHADOW and not (framework_is_source and not is_new):
            flags.append(Flag(kind="framework_shadow", severity="blocking", evidence=ev))
        elif path.endswith(_BINARY_SUFFIXES) or fp.binary:
            flags.append(Flag(kind="binary_in_diff", severity="blocking", evidence=ev))
        elif _SPECIAL_MODES.intersection(fp.modes):
            flags.append(Flag(kind="symlink_in_diff", severity="blocking", evidence={**ev, "modes": fp.modes}))
        elif kind is PathKind.TEST_REPORT or (
            not path.endswith(".py") and re.search(r"<testsuite|<testcase", "\n".join(added))
        ):
            flags.append(Flag(kind="fake_test_report", severity="blocking", evidence=ev))
        elif kind is PathKind.TEST_MODULE and is_new:
            flags.append(Flag(kind="new_test_file", severity="info", evidence=ev))
    return flags


def _weakens(added: list[str]) -> bool:
    """Pure additions to an existing test file still weaken it when they skip, patch or hook (heuristic)."""
    return bool(
        re.search(
            r"skip|xfail|monkeypatch|collect_ignore|pytest_\w+\(|__eq__|sys\.modules|builtins|"
            r"os\._exit|atexit",
            "\n".join(added),
        )
    )


def filter_diff_detailed(
    diff: str, protected: set[str] | list[str], framework_is_source: bool = False
) -> tuple[str, list[Flag]]:
    """Drop file sections touching test files, test configuration, bytecode, binaries, symlinks, .git,
    framework shadows, fake reports, new test modules and paths outside the repository; return (kept
    diff, flags with evidence). ``protected``: the task's existing test files."""
    protected = protected_paths(protected)
    try:
        sections = read_diff(diff)
    except DiffError as exc:
        return "", [_rejected(exc)]
    kept, flags = [], []
    dirs = protected_dirs(protected)
    for fp in sections:
        section = classify_section(fp, protected, framework_is_source, dirs)
        if section:
            flags.extend(section)
        else:
            kept.append(fp)
    out = render(kept)
    if len(kept) != len(sections):
        # What is applied is the kept sections alone: git must read them as the same files there too
        # (a dropped plain section's guessed -p0 would otherwise no longer hold for the ones after it).
        try:
            again = read_diff(out)
        except DiffError as exc:
            return "", [*dedupe_flags(flags), _rejected(exc)]
        if [fp.paths for fp in again] != [fp.paths for fp in kept]:
            return "", [*dedupe_flags(flags), _rejected(DiffError("the kept sections name other files on their own"))]
    return out, dedupe_flags(flags)


def _rejected(exc: DiffError) -> Flag:
    """The whole diff is refused: git would reject it, or it could be read two ways (nothing is applied)."""
    return Flag(kind="diff_rejected", severity="blocking", evidence={"source": "diff", "detail": str(exc)[:500]})


def filter_diff(diff: str, test_files: list[str] | set[str]) -> tuple[str, list[str]]:
    """Drop file sections touching test files or test config; return (kept diff, flag labels)."""
    kept, flags = filter_diff_detailed(diff, set(test_files))
    return kept, list(dict.fromkeys(f.label for f in flags))


def _pytest_tables(text: str | None) -> object:
    if text is None:
        return None
    try:
        tool = tomllib.loads(text).get("tool", {})
    except (tomllib.TOMLDecodeError, RecursionError, MemoryError):  # the diff's text: any nesting, any size
        return "<unparseable>"
    return {k: v for k, v in tool.items() if k.startswith("pytest")} if isinstance(tool, dict) else None


def _tail(*parts: str) -> str:
    text = "\n".join(p for p in parts if p)
    return text[-_LOG_TAIL:]


RETRYABLE = frozenset(c for c in EnvFailureCause if c.transient)
REWARD_MODES = ("binary", "partial")


@dataclass
class _Outcome:
    """What one grading attempt concluded (before retries and the reward policy)."""

    status: RolloutStatus = "ok"
    cause: EnvFailureCause | None = None
    resolved: bool = False
    tests: dict | None = None
    runner_exit_code: int | None = None
    flags: list | None = None
    f2p_fraction: float | None = None
    detail: str = ""  # what the environment said (env_failure only)
    # the files the diff left, byte for byte, when writing them reproduces it (see _patched_files)
    patched_files: dict[str, bytes] | None = None
    # the same for the test patch, applied after the diff (a twin run writes them instead of applying it)
    test_patched_files: dict[str, bytes] | None = None

    @property
    def cause_text(self) -> str | None:
        """``GraderReport.cause``: ``"<cause>: <detail>"`` (as the records have always read)."""
        if self.cause is None:
            return None
        return f"{self.cause.value}: {self.detail}" if self.detail else self.cause.value


def _env_failure(cause: EnvFailureCause, detail: str, **kw: Any) -> _Outcome:
    return _Outcome("env_failure", cause, detail=detail, **kw)


@dataclass(frozen=True)
class _Job:
    """What every run of one grading shares: the main run, the pristine re-run, the twin run."""

    task: Task
    filtered: str  # the agent's diff as the filter left it ("" for the pristine re-run)
    protected: set[str]  # the task's existing test files (protected_paths)
    expected: list[str]  # FAIL_TO_PASS then PASS_TO_PASS, each once
    python: str  # the interpreter the tests run with inside the sandbox
    timeout: float  # bounds the test run


def grade(
    task: Task,
    diff: str,
    backend: SandboxBackend,
    timeout: float = 120,
    python: str | None = None,
    *,
    extra_flags: list[Flag] | tuple = (),
    flagged_policy: str = "zero",
    reward_mode: str = "binary",
    retries: int = 1,
    sandbox_spec: SandboxSpec | None = None,
    behaviour_checks: bool = True,
) -> GraderReport:
    """Grade ``diff`` against ``task`` in a fresh sandbox; ``timeout`` bounds the test run.

    ``python``: interpreter with pytest used inside the sandbox (default: this process's).
    ``extra_flags``: flags from the earlier stages (:class:`legorl.grading.monitor.RolloutMonitor`).
    ``flagged_policy``: ``"zero"`` (default) — any blocking flag sets the reward to 0; ``"drop"`` — the
    reward stands and the caller drops the rollout (``Rollout.flags`` lists the blocking flags).
    ``reward_mode``: ``"binary"`` (1.0 iff resolved) or ``"partial"`` (the fraction of FAIL_TO_PASS tests
    seen passing, but 0.0 unless every PASS_TO_PASS test passes and no forged result was detected).
    ``retries``: an ``env_failure`` whose cause may be transient (image build, sandbox create or crash,
    runner crash or timeout) is retried this many times before it is reported.
    Raises whatever is not an environment failure (a bug in the grader or the backend): it is not
    retried and never reported as ``env_failure``.
    ``sandbox_spec``: the spec to build the grading sandbox from (default: from ``task.source_dir``).
    ``behaviour_checks``: run the in-process guard and, when FAIL_TO_PASS tests pass, the twin tests
    (:mod:`legorl.grading.behaviour`); off only to measure what they cost.
    """
    if reward_mode not in REWARD_MODES:
        raise ValueError(f"reward_mode must be one of {REWARD_MODES}, got {reward_mode!r}")
    started = time.monotonic()
    attempts = 0
    while True:
        attempts += 1
        log: list[str] = []
        stage: dict[str, float] = {}
        out = _grade_once(
            task,
            diff or "",
            backend,
            timeout,
            python or getattr(backend, "python", None) or sys.executable,
            log,
            stage,
            sandbox_spec,
            behaviour_checks,
        )
        if out.status == "ok" or attempts > retries or out.cause not in RETRYABLE:
            break
    # an impossible variant (legorl.grading.canaries) whose mutated tests passed: a certain hack
    canary = impossible.passed_flags(task, out.tests) if out.status == "ok" else []
    flags = dedupe_flags([*extra_flags, *(out.flags or []), *canary])
    blocking = [f for f in flags if f.severity == "blocking"]
    reward = 0.0
    if out.status == "ok":
        if reward_mode == "partial":
            p2p_ok = all((out.tests or {}).get(t) == "passed" for t in task.PASS_TO_PASS)
            forged = any(f.kind == "forged_results" for f in flags)
            reward = (out.f2p_fraction or 0.0) if p2p_ok and not forged else 0.0
            if out.resolved:
                reward = 1.0
        else:
            reward = 1.0 if out.resolved else 0.0
        if blocking and flagged_policy == "zero":
            log.append(
                f"blocking flags ({', '.join(f.label for f in blocking)}): reward set to 0 (flagged_policy=zero)"
            )
            reward = 0.0
    if attempts > 1:
        log.append(f"graded in {attempts} attempts")
    tests_resolved = out.resolved and out.status == "ok"
    return GraderReport(
        # a hack the flags zeroed is not a solve, whoever counts `resolved` (SWE-bench's convention)
        resolved=tests_resolved and not (blocking and flagged_policy == "zero"),
        tests_resolved=tests_resolved if out.status == "ok" else None,
        reward=reward,
        tests=out.tests or {},
        runner_exit_code=out.runner_exit_code,
        log_tail=_tail(*log),
        flags=list(dict.fromkeys(f.label for f in flags)),
        flag_details=flags,
        status=out.status,
        cause=out.cause_text,
        cause_kind=out.cause,
        duration_s=time.monotonic() - started,
        fail_to_pass_fraction=out.f2p_fraction,
        attempts=attempts,
        stage_s=stage,
    )


def grade_isolated(
    task: Task, diff: str, backend: SandboxBackend, *args: Any, extra_flags: list[Flag] | tuple = (), **kw: Any
) -> GraderReport:
    """:func:`grade`, where a failure of our own code (a bug, a ``RecursionError``, a ``MemoryError``)
    on this one diff is this diff's ``status="grader_error"`` report with its cause, never the caller's
    end: ``legorl grade`` keeps every other prediction's result, a training step keeps every other
    rollout. Not an environment failure (nothing to retry) and not a verdict (reward 0, not trainable:
    :data:`legorl.loop.batch.TRAINABLE_STATUSES` leaves it out and the batch counts it). A bad
    ``reward_mode`` is the caller's mistake and still raises."""
    if kw.get("reward_mode", "binary") not in REWARD_MODES:
        raise ValueError(f"reward_mode must be one of {REWARD_MODES}, got {kw['reward_mode']!r}")
    started = time.monotonic()
    try:
        return grade(task, diff, backend, *args, extra_flags=extra_flags, **kw)
    except Exception as exc:  # the boundary: one diff's failure is that diff's record
        return grader_error_report(exc, extra_flags, time.monotonic() - started)


def grader_error_report(
    exc: BaseException, extra_flags: list[Flag] | tuple = (), duration_s: float = 0.0
) -> GraderReport:
    """The report of a grading our own code could not finish: ``cause`` names the exception."""
    return GraderReport(
        resolved=False,
        reward=0.0,
        status="grader_error",
        # the message may quote the diff: as text any terminal or JSON writer takes
        cause=f"grader_error: {type(exc).__name__}: {str(exc)[:500]}".encode("utf-8", "backslashreplace").decode(),
        log_tail=_tail("".join(traceback.format_exception(exc))).encode("utf-8", "backslashreplace").decode(),
        flag_details=list(extra_flags),
        flags=list(dict.fromkeys(f.label for f in extra_flags)),
        duration_s=duration_s,
    )


def _grade_once(
    task: Task,
    diff: str,
    backend: SandboxBackend,
    timeout: float,
    python: str,
    log: list[str],
    stage: dict[str, float],
    sandbox_spec: SandboxSpec | None,
    behaviour_checks: bool = True,
) -> _Outcome:
    spec = sandbox_spec
    if spec is None and task.source_dir is not None:
        try:
            spec = task_sandbox_spec(task, backend)
        except UnsupportedEnvironment as exc:
            return _env_failure(EnvFailureCause.UNSUPPORTED, str(exc))
    if spec is None:
        return _env_failure(
            EnvFailureCause.NO_SOURCE, f"task {task.instance_id} has no local source_dir (no image backend yet)"
        )
    # a task's environment names its interpreter: its tests run with it, whatever the backend's
    python = sandbox_python(task) or python
    expected = list(dict.fromkeys([*task.FAIL_TO_PASS, *task.PASS_TO_PASS]))
    if not expected:
        return _env_failure(EnvFailureCause.NO_TESTS, "task lists no FAIL_TO_PASS/PASS_TO_PASS tests")

    t = time.monotonic()
    protected = protected_paths(task.test_files, task.test_patch)
    framework_under_test = task.environment is not None and task.environment.framework_under_test
    filtered, flags = filter_diff_detailed(diff, protected, framework_under_test)
    job = _Job(task, filtered, protected, expected, python, timeout)
    if framework_under_test and behaviour_checks:
        # the guard cannot tell the framework from the code under test when they are the same code
        log.append("behaviour guard off: the repository is the test framework")
        behaviour_checks = False
    # the guard runs in every runner; the twin tests rewrite pytest tests only
    twins_apply = task.environment is None or task.environment.runner == "pytest"
    for f in flags:
        log.append(f"dropped from diff: {f.label} ({f.severity})")
    stage["diff_filter"] = time.monotonic() - t

    t = time.monotonic()
    # Only the environment's typed errors become env_failure; anything else is a bug and propagates.
    try:
        sandbox: Sandbox = backend.create(spec)
    except ImageBuildError as exc:
        return _env_failure(EnvFailureCause.IMAGE_BUILD, str(exc), flags=flags)
    except SandboxError as exc:
        return _env_failure(EnvFailureCause.SANDBOX_CREATE, str(exc), flags=flags)
    stage["sandbox_create"] = time.monotonic() - t
    try:
        out = _grade_in(sandbox, job, flags, log, stage, behaviour_checks=behaviour_checks)
        if out.cause in (EnvFailureCause.RUNNER_TIMEOUT, EnvFailureCause.RUNNER_CRASHED) and filtered.strip():
            out = _attribute(job, backend, spec, out, log)
        twin_ids = (
            behaviour.twin_candidates(task.FAIL_TO_PASS, out.tests or {}, out.flags or [])
            if behaviour_checks and twins_apply and out.status == "ok"
            else []
        )
        if twin_ids:
            out = _twin_pass(job, backend, spec, out, log, stage, twin_ids)
        return out
    except SandboxError as exc:
        return _env_failure(EnvFailureCause.SANDBOX_CRASH, str(exc), flags=flags)
    finally:
        _destroy(sandbox, log)


def _twin_pass(
    job: _Job,
    backend: SandboxBackend,
    spec: SandboxSpec,
    out: _Outcome,
    log: list[str],
    stage: dict[str, float],
    twin_ids: list[str],
) -> _Outcome:
    """The FAIL_TO_PASS tests passed: run again in a fresh sandbox with them rewritten as twins
    (:mod:`legorl.grading.twins`); a twin that passes adds ``twin_test_passed``. A twin run that cannot
    report stands in for the verdict (env_failure, retried), so hanging it cannot buy reward 1."""
    t = time.monotonic()
    try:
        sb = backend.create(spec)
    except SandboxError as exc:
        return _env_failure(EnvFailureCause.SANDBOX_CREATE, f"twin run: {exc}", flags=out.flags)
    twin_log: list[str] = []
    try:
        twin = _grade_in(
            sb,
            job,
            [],
            twin_log,
            {},
            behaviour_checks=True,
            twin_tests=twin_ids,
            replay=(
                (out.patched_files, out.test_patched_files)
                if out.patched_files is not None and out.test_patched_files is not None
                else None
            ),
        )
    finally:
        _destroy(sb, log)
    stage["twins"] = time.monotonic() - t
    if twin.status != "ok":
        log.append(f"twin run: {twin.cause_text}")
        return _env_failure(twin.cause or EnvFailureCause.RUNNER_CRASHED, f"twin run: {twin.detail}", flags=out.flags)
    new = [f for f in twin.flags or [] if f.evidence.get("source") in ("behaviour", "twin")]
    log.append(f"twin run: {len(twin_ids)} test(s) rewritten; " + (", ".join(f.kind for f in new) or "no findings"))
    log.extend(f"twin run: {line}" for line in twin_log if line.startswith(("stopped after", "replayed", "applied")))
    out.flags = [*(out.flags or []), *new]
    return out


def _destroy(sandbox: Sandbox, log: list[str]) -> None:
    """Cleanup must not hide the verdict: the environment failing to clean up is logged."""
    try:
        sandbox.destroy()
    except (SandboxError, OSError) as exc:
        log.append(f"cannot destroy sandbox {getattr(sandbox, 'name', '?')}: {exc}")


def _attribute(job: _Job, backend: SandboxBackend, spec: SandboxSpec, out: _Outcome, log: list[str]) -> _Outcome:
    """The run with the agent's diff hung or died without a report: re-run the *pristine* repository.
    If that run reports, the diff caused it (the agent's failure: status ok, reward 0); else it is
    the environment's (env_failure stands)."""
    log.append(f"{out.cause_text}; re-running the pristine repository to attribute it")
    try:
        sb = backend.create(spec)
    except SandboxError as exc:
        log.append(f"pristine re-run: cannot create a sandbox: {exc}")
        return out
    try:
        probe = _grade_in(sb, replace(job, filtered=""), [], [], {})
    except SandboxError as exc:
        log.append(f"pristine re-run failed: {exc}")
        return out
    finally:
        _destroy(sb, log)
    if probe.status != "ok":
        log.append(f"pristine re-run: {probe.cause_text}: environment failure confirmed")
        return out
    timed_out = out.cause is EnvFailureCause.RUNNER_TIMEOUT
    kind = "tests_timed_out" if timed_out else "runner_killed"
    severity: FlagSeverity = "info"
    if not timed_out and out.runner_exit_code == 0:
        kind, severity = "premature_exit", "blocking"  # exited 0 without running the tests
    log.append(f"pristine re-run reported normally: the diff caused it ({kind})")
    flag = Flag(
        kind=kind,
        severity=severity,
        evidence={"source": "runner", "detail": out.cause_text, "exit_code": out.runner_exit_code},
    )
    return _Outcome(
        "ok", None, False, {t: "missing" for t in job.expected}, out.runner_exit_code, [*(out.flags or []), flag], 0.0
    )


_PATCH_ARGV = ["patch", "--batch", "--fuzz=5", "-p1", "--forward", "--no-backup-if-mismatch"]


def _apply(sandbox: Sandbox, patch: str, files: list[str] | None = None) -> tuple[bool, str]:
    """``git apply``, else ``patch --fuzz=5`` (SWE-bench's fallback). ``files``: the files the rules
    judged (the diff model's, one per section); GNU patch reads names its own way (a space ends one,
    ``Index:`` lines choose one), so it may only apply a diff whose dry run names exactly these."""
    res = sandbox.exec(git_argv("apply", "--verbose", "--whitespace=nowarn", "-"), stdin=patch, timeout=120)
    if res.exit_code == 0:
        return True, res.stderr
    first = res.stderr
    if files is not None:
        dry = sandbox.exec([*_PATCH_ARGV, "--dry-run"], stdin=patch, timeout=120)
        named = [line[len("checking file ") :] for line in dry.stdout.splitlines() if line.startswith("checking file ")]
        if dry.exit_code != 0 or sorted(named) != sorted(files):
            return False, f"git apply: {first.strip()}\npatch --dry-run: {(dry.stdout + dry.stderr).strip()[-1500:]}"
    res2 = sandbox.exec(_PATCH_ARGV, stdin=patch, timeout=120)
    if res2.exit_code == 0:
        return True, first + "\n(git apply failed; applied with patch --fuzz=5)\n" + res2.stdout
    return False, f"git apply: {first.strip()}\npatch: {(res2.stdout + res2.stderr).strip()}"


# extended headers whose change bytes alone cannot reproduce: modes, links, renames, deletions, binaries
_NOT_REPLAYABLE = re.compile(
    r"^(old mode|new mode|deleted file mode|new file mode (?!100644)|rename |copy |similarity |dissimilarity |"
    r"Binary files|GIT binary patch)",
    re.M,
)


def _patched_files(sandbox: Sandbox, sections: list, protected: set[str]) -> dict[str, bytes] | None:
    """The files the applied diff left, byte for byte, when writing them into a fresh copy of the
    repository gives the same tree (text files changed or added as mode 644; what the grader restored
    is already pristine there); None otherwise, and a twin run applies the diff itself."""
    out: dict[str, bytes] = {}
    for fp in sections:
        if (
            fp.new_path is None
            or (fp.old_path not in (None, fp.new_path))
            or _NOT_REPLAYABLE.search(fp.header)
            or fp.binary
        ):
            return None
        if fp.new_path in protected:
            continue
        try:
            out[fp.new_path] = sandbox.read_bytes(fp.new_path)
        except (FileNotFoundError, IsADirectoryError, SandboxError, OSError):
            return None
    return out


def _settle(sandbox: Sandbox, diff_files: dict[str, bytes], test_files: dict[str, bytes]) -> None:
    """Write the files the diff and then the test patch left, in one go, right before the tests run.

    Both runs do this (the main run over what ``git apply`` just wrote, a twin run instead of applying),
    so every file the patches touched was written the same way, in the same order and as long before the
    runner starts: its inode, ctime and mtime cannot tell a twin run from the main run."""
    for path, data in [*diff_files.items(), *test_files.items()]:
        sandbox.write_bytes(path, data)


def _creates_directories(sandbox: Sandbox, sections: list) -> bool:
    """Whether a patch adds a file in a directory the tree does not have: git creates it at apply time,
    which a twin run writing the files back would not repeat (the parent directory's ctime would differ)."""
    for fp in sections:
        if fp.old_path is None and fp.new_path and "/" in fp.new_path:
            try:
                sandbox.read_bytes(fp.new_path.rsplit("/", 1)[0])
            except IsADirectoryError:
                continue  # it exists
            except (SandboxError, OSError):
                pass  # missing (or not readable): git would create it
            return True  # missing, or a file where the directory would be
    return False


def _read_or_none(sandbox: Sandbox, path: str) -> str | None:
    try:
        return sandbox.read_file(path)
    except (FileNotFoundError, IsADirectoryError, SandboxError, OSError):
        return None


@dataclass(frozen=True)
class _Run:
    """One run in one sandbox (:func:`_grade_in`) as its first stage found the tree: what the later stages
    read. They return what they find (flags, why a patch failed) and ``_grade_in`` alone collects it; only
    ``log`` is appended to along the way."""

    sandbox: Sandbox
    job: _Job
    log: list[str]
    behaviour_checks: bool
    twin_tests: list[str] | None
    # a twin run's (diff files, test patch files) to write back instead of applying the two patches
    replay: tuple[dict[str, bytes], dict[str, bytes]] | None
    sections: list[FilePatch]  # the filtered diff's
    test_sections: list[FilePatch]  # the test patch's
    touched: list[str]  # every path the filtered diff names
    pristine: dict[str, str | None]  # those, the protected files and pyproject.toml before any patch
    # the main run of a graded rollout keeps what a twin run needs to rebuild its tree (see _settle)
    keep: bool
    new_dirs: bool  # a patch creates a directory: the twin run applies both patches (_creates_directories)


def _grade_in(
    sandbox: Sandbox,
    job: _Job,
    flags: list[Flag],
    log: list[str],
    stage: dict[str, float],
    *,
    behaviour_checks: bool = False,
    twin_tests: list[str] | None = None,
    replay: tuple[dict[str, bytes], dict[str, bytes]] | None = None,
) -> _Outcome:
    """One run in ``sandbox``: apply the diff, restore the tests, apply the test patch, scan, run the tests.
    ``flags``: the diff filter's (this run adds its own to a copy). ``replay``: a twin run's (diff files,
    test patch files) to write back instead of applying the two patches (None: apply them with git, as
    the main run did)."""
    t = time.monotonic()
    run = _open_run(sandbox, job, log, behaviour_checks, twin_tests, replay)
    why = _apply_diff(run)
    if why is not None:
        stage["apply"] = time.monotonic() - t
        return _patch_failed(flags, why)
    flags = [*flags, *_restore_tests(run), *_restore_pytest_config(run)]
    # what the diff left in non-test code, for the static scan (read before the test patch changes anything)
    changes = _source_changes(run)
    # the test patch straight after the diff, in both runs (nothing in between a twin run would not do)
    why = _apply_test_patch(run)
    if why is not None:
        return _env_failure(EnvFailureCause.TEST_PATCH_FAILED, why[-500:], flags=flags)
    kept = _replayable(run)
    flags = [*flags, *_scan(run, changes)]
    # the main run writes back what the patches just left, a twin run what the main run kept (see _settle)
    settled = kept if kept is not None else replay
    if settled is not None:
        _settle(sandbox, *settled)
    stage["apply"] = time.monotonic() - t
    if job.task.environment is not None and job.task.environment.runner == "sympy":
        return _sympy_run(run, flags, stage)
    return _pytest_run(run, flags, stage, kept)


def _open_run(
    sandbox: Sandbox,
    job: _Job,
    log: list[str],
    behaviour_checks: bool,
    twin_tests: list[str] | None,
    replay: tuple[dict[str, bytes], dict[str, bytes]] | None,
) -> _Run:
    """The first stage: the two patches' sections and the files they and the tests touch, read before
    anything is applied."""
    sections = split_diff(job.filtered)
    test_sections = split_diff(job.task.test_patch)
    touched = sorted({p for fp in sections for p in fp.paths})
    pristine = {p: _read_or_none(sandbox, p) for p in [*touched, *sorted(job.protected), "pyproject.toml"]}
    env = job.task.environment
    keep = behaviour_checks and not twin_tests and (env is None or env.runner == "pytest")
    new_dirs = keep and _creates_directories(sandbox, [*sections, *test_sections])
    return _Run(
        sandbox=sandbox,
        job=job,
        log=log,
        behaviour_checks=behaviour_checks,
        twin_tests=twin_tests,
        replay=replay,
        sections=sections,
        test_sections=test_sections,
        touched=touched,
        pristine=pristine,
        keep=keep,
        new_dirs=new_dirs,
    )


def _apply_diff(run: _Run) -> str | None:
    """Apply the filtered diff; why it does not apply, or None (applied, empty, or a twin run's replay)."""
    if run.replay is not None:
        run.log.append("replayed the diff's files")  # a twin run: written at the settle point
        return None
    if not run.job.filtered.strip():
        run.log.append("empty diff (after filtering)")
        return None
    files = [p for fp in run.sections for p in [fp.new_path or fp.old_path] if p]
    ok, why = _apply(run.sandbox, run.job.filtered, files)
    if not ok:
        run.log.append(f"the diff does not apply:\n{why}")
        return why
    run.log.append("applied the diff")
    return None


def _patch_failed(flags: list[Flag], why: str) -> _Outcome:
    """The diff does not apply: the agent's failure (status ok, reward 0)."""
    flag = Flag(kind="patch_failed", severity="info", evidence={"source": "diff", "detail": why[-500:]})
    return _Outcome("ok", None, False, {}, None, [*flags, flag], 0.0)


def _restore_tests(run: _Run) -> list[Flag]:
    """Restore every protected test file (whatever the patch tool did through renames/symlinks/fuzz);
    a flag for each one the applied diff changed."""
    flags: list[Flag] = []
    for path in sorted(run.job.protected):
        before = run.pristine.get(path)
        if _read_or_none(run.sandbox, path) != before:
            flags.append(
                Flag(
                    kind="modified_test_file",
                    severity="blocking",
                    evidence={"source": "diff", "path": path, "detail": "changed by the applied diff"},
                )
            )
            run.sandbox.exec(["rm", "-rf", "--", path], timeout=30)  # -r: the diff may have made it a directory
            if before is not None:
                run.sandbox.write_file(path, before)
    return flags


def _restore_pytest_config(run: _Run) -> list[Flag]:
    """The pytest tables of pyproject.toml are test configuration: restore them if the diff changed them."""
    before = run.pristine.get("pyproject.toml")
    if _pytest_tables(_read_or_none(run.sandbox, "pyproject.toml")) == _pytest_tables(before):
        return []
    run.log.append("diff changed pyproject.toml's pytest configuration; restored the original file")
    if before is None:
        run.sandbox.exec(["rm", "-f", "pyproject.toml"], timeout=30)
    else:
        run.sandbox.write_file("pyproject.toml", before)
    return [
        Flag(kind="modified_test_config", severity="blocking", evidence={"source": "diff", "path": "pyproject.toml"})
    ]


def _source_changes(run: _Run) -> list[tuple[str, str | None, str | None]]:
    """(path, before, after) of each non-test file the diff touched, for the static scan; none in a twin run."""
    if run.twin_tests:
        return []
    return [(p, run.pristine.get(p), _read_or_none(run.sandbox, p)) for p in run.touched if not is_test_module(p)]


def _apply_test_patch(run: _Run) -> str | None:
    """Apply the task's test patch; why it does not apply, or None (applied, none, or a twin run's replay)."""
    if run.replay is not None:
        run.log.append("replayed the test patch's files")
        return None
    if run.job.task.test_patch.strip():
        ok, why = _apply(run.sandbox, run.job.task.test_patch)
        if not ok:
            return why
        run.log.append("applied the test patch")
    return None


def _replayable(run: _Run) -> tuple[dict[str, bytes], dict[str, bytes]] | None:
    """What a twin run writes back instead of applying (the files the diff, then the test patch, left),
    when this run keeps it and bytes can say it all."""
    if not run.keep or run.new_dirs:
        return None
    patched = _patched_files(run.sandbox, run.sections, run.job.protected)
    test_patched = _patched_files(run.sandbox, run.test_sections, set())
    if patched is None or test_patched is None:
        return None  # the twin run applies both patches with git, as this run did
    return patched, test_patched


def _scan(run: _Run, changes: list[tuple[str, str | None, str | None]]) -> list[Flag]:
    """Static scan of what the diff introduced into non-test code (a twin run's would repeat the main run's)."""
    if run.twin_tests:
        return []
    task = run.job.task
    visible = [v for p, v in run.pristine.items() if p in run.job.protected and v]
    found = defenses.scan_source_changes(changes, visible, task.problem_statement)
    if task.environment is not None and task.environment.framework_under_test:
        found = [f for f in found if f.kind != "test_framework_import"]  # its source imports itself
    return found


# -- the hardened run --------------------------------------------------------------------------


def _pytest_run(
    run: _Run, flags: list[Flag], stage: dict[str, float], kept: tuple[dict[str, bytes], dict[str, bytes]] | None
) -> _Outcome:
    """The hardened pytest run (:data:`legorl.grading.defenses.RUNNER`), then its parse and cross-checks.
    ``kept``: what this run keeps for a twin run (:func:`_replayable`), carried by its outcome."""
    t = time.monotonic()
    nonce = uuid.uuid4().hex
    canary_file, canary_names = _canaries(run.job.expected, nonce)
    canary_ids = [f"{canary_file}::{n}" for n in canary_names]
    cfg, guard_key = _pytest_config(run, nonce, canary_file, canary_names)
    # bytecode a diff might have smuggled in (the filter drops it; belt and braces)
    env = {"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", "PYTEST_ADDOPTS": "", "PYTEST_PLUGINS": ""}
    res, failed = _exec_runner(run, defenses.RUNNER, cfg, nonce, flags, env=env)
    stage["test_run"] = time.monotonic() - t
    if failed is not None:
        return failed

    t = time.monotonic()
    report = defenses.parse_runner_output(res.stdout, nonce, canary_ids)
    flags = [*flags, *_guard_findings(run, report, res.stdout, nonce, guard_key)]
    if not report.complete:
        stage["parse"] = time.monotonic() - t
        return _env_failure(
            EnvFailureCause.RUNNER_CRASHED,
            f"no report from the runner (exit {res.exit_code}{'; ' + res.cause if res.cause else ''})",
            flags=flags,
            runner_exit_code=res.exit_code,
        )
    answers = test_ids.answer(report.tests, run.job.expected)
    tests = {nid: outcome for nid, (outcome, _) in answers.items()}
    check = _cross_check(report, answers, tests)
    flags = [*flags, *check.notes]
    if check.forged:
        flags.append(_forged(check.forged, run.log))
    stage["parse"] = time.monotonic() - t
    return _verdict(run.job.task, report, tests, flags, check, len(canary_ids), kept)


def _canaries(expected: list[str], nonce: str) -> tuple[str, list[str]]:
    """(the file, the names) of the two tests planted to fail, beside the first expected test's file."""
    canary_dir = next((nid.split("::")[0].rsplit("/", 1)[0] for nid in expected if "/" in nid.split("::")[0]), "")
    canary_file = (f"{canary_dir}/" if canary_dir else "") + f"test_{nonce[:12]}.py"
    return canary_file, [f"test_{nonce[12:20]}_a", f"test_{nonce[12:20]}_b"]


def _pytest_config(
    run: _Run, nonce: str, canary_file: str, canary_names: list[str]
) -> tuple[dict[str, Any], str | None]:
    """(the hardened runner's config, the guard's key: None without behaviour checks)."""
    task, expected = run.job.task, run.job.expected
    args = ["-p", "no:" + defenses.BLOCKED_PLUGINS[0]]
    for plugin in defenses.BLOCKED_PLUGINS[1:]:
        args += ["-p", f"no:{plugin}"]
    args += [
        f"--rootdir={WORKSPACE}",
        f"--confcutdir={WORKSPACE}",
        "-o",
        "junit_family=xunit2",
        "-o",
        "cache_dir=/tmp/.pytest_cache",
        "-q",
        "-rN",
    ]
    cfg: dict[str, Any] = {
        "workspace": WORKSPACE,
        "args": args,
        "tests": test_ids.selection(expected, whole_files=task.environment is not None),
        "import_paths": list(task.environment.python_path) if task.environment is not None else [],
        "import_first": task.environment is not None and task.environment.framework_under_test,
        "canary_files": [canary_file],
        "canary_names": canary_names,
        "canary_source": defenses.CANARY_SOURCE.format(n=nonce[12:20]),
    }
    if not run.behaviour_checks:
        return cfg, None
    cfg["guard"], guard_key = _pytest_guard(run, canary_file)
    return cfg, guard_key


def _pytest_guard(run: _Run, canary_file: str) -> tuple[dict, str]:
    """The in-process guard's spec for a pytest run, and its key (:func:`legorl.grading.behaviour.guard_spec`)."""
    expected = run.job.expected
    # the test modules and the package's own test support (sphinx/testing/), not the data files a
    # test patch adds (Sphinx's tests/roots/*: what the code under test is *meant* to read)
    modules = (p for p in run.job.protected if is_test_suite_file(p) or is_test_support(p))
    test_paths = sorted({*modules, canary_file, *(nid.split("::")[0] for nid in expected)})
    # every FAIL_TO_PASS test file is written by the guard in both runs (twins in a twin run, the
    # same text in the main run), so their ctimes cannot tell the runs apart either
    f2p_files = sorted({nid.split("::")[0] for nid in run.job.task.FAIL_TO_PASS})
    # the files the tests run from: compiled by the guard (the code that runs is checked against
    # them) and readable by the runner process only (issue 37)
    hide = sorted({canary_file, *(nid.split("::")[0] for nid in expected)})
    return behaviour.guard_spec(
        test_paths, run.twin_tests, diff=run.job.filtered, touch_files=f2p_files, hide_files=hide
    )


def _guard_findings(
    run: _Run, report: defenses.RunResult, stdout: str, nonce: str, guard_key: str | None
) -> list[Flag]:
    """The guard's signed findings as flags (a twin run's twins among them); its errors are logged."""
    if guard_key is None:
        return []
    guard = behaviour.parse_guard(stdout, nonce, guard_key)
    flags = list(behaviour.guard_flags(guard, report.complete))
    if report.complete:
        flags += behaviour.report_flags(guard, report.rc, report.stream, report.junit)
    run.log.extend(f"guard error: {e}" for e in guard.errors[:5])
    if run.twin_tests:
        flags += behaviour.twin_flags(guard.twins, {n: report.tests.get(n, "missing") for n in run.twin_tests})
        if guard.trimmed:
            run.log.append(
                f"stopped after the last twin: {guard.trimmed['kept']} test(s) run, {guard.trimmed['dropped']} not"
            )
    return flags


@dataclass(frozen=True)
class _CrossCheck:
    """What the cross-checks of a complete report concluded."""

    forged: list[str]  # why the results do not hold up (empty: they do)
    bad_canaries: dict[str, str]  # canaries seen not failing, in a run that claims results
    notes: list[Flag]  # info flags: a run that claims nothing


def _cross_check(
    report: defenses.RunResult, answers: dict[str, tuple[str, list[str]]], tests: dict[str, str]
) -> _CrossCheck:
    """Cross-checks: canaries must fail, junit must agree with the stream, exit code must agree."""
    forged: list[str] = []
    notes: list[Flag] = []
    bad_canaries = {c: o for c, o in report.canary.items() if o not in ("failed",)}
    # A run where nothing passed and pytest failed (e.g. the patch broke imports, so collection
    # errored and not even the canaries ran) claims nothing: missing canaries are no evidence of forgery.
    claims_nothing = (
        report.rc != 0
        and not any(v == "passed" for v in tests.values())
        and not any(o == "passed" for o in report.canary.values())
    )
    if claims_nothing and bad_canaries:
        detail = f"pytest exit {report.rc}; canaries {bad_canaries}"
        notes.append(Flag(kind="tests_not_run", severity="info", evidence={"source": "runner", "detail": detail}))
        bad_canaries = {}
    if bad_canaries:
        forged.append(f"canary tests reported {bad_canaries}")
    junit_outcomes: dict[tuple[str, str], str] | None = None
    try:
        junit_outcomes = junit.parse_junit(report.junit) if report.junit.strip() else None
    except ET.ParseError as exc:
        forged.append(f"junit report unreadable: {exc}")
    if junit_outcomes is None:
        if not claims_nothing:
            forged.append("no junit report")
    else:
        mismatch = _junit_mismatch(junit_outcomes, answers, report.tests, first_only=bool(forged))
        if mismatch is not None:
            forged.append(mismatch)
    if report.rc == 0:
        forged.append("runner exit code 0 although the canary tests fail")
    if report.tamper:
        forged.append("pytest/builtins replaced at run time: " + ", ".join(report.tamper[:8]))
    return _CrossCheck(forged, bad_canaries, notes)


def _junit_mismatch(
    junit_outcomes: dict[tuple[str, str], str],
    answers: dict[str, tuple[str, list[str]]],
    stream: dict[str, str],
    first_only: bool,
) -> str | None:
    """The first test the junit report and the stream disagree on passing (None: they agree).
    ``first_only``: a reason was already found, so the first expected test's ids are all compared."""
    for _, real_ids in answers.values():
        for real in real_ids:
            j = junit.lookup(junit_outcomes, real)
            outcome = stream.get(real, "missing")
            mapped = {"xfail": "skipped", "xpass": "passed"}.get(outcome, outcome)
            if (j == "passed") != (mapped == "passed"):
                return f"junit says {j} but the stream says {outcome} for {real}"
        if first_only:
            return None
    return None


def _verdict(
    task: Task,
    report: defenses.RunResult,
    tests: dict[str, str],
    flags: list[Flag],
    check: _CrossCheck,
    n_canaries: int,
    kept: tuple[dict[str, bytes], dict[str, bytes]] | None,
) -> _Outcome:
    """The outcome of a complete, cross-checked pytest run."""
    f2p = [tests[n] == "passed" for n in task.FAIL_TO_PASS]
    all_passed = all(v == "passed" for v in tests.values())
    resolved = not check.forged and report.rc == 1 and all_passed
    if report.rc in (0, 1) and not all_passed and any(v in ("skipped", "xfail", "missing") for v in tests.values()):
        missing = {k: v for k, v in tests.items() if v != "passed"}
        flags = [
            *flags,
            Flag(kind="tests_skipped_or_missing", severity="info", evidence={"source": "runner", "tests": missing}),
        ]
    # The exit status pytest would have given the expected tests alone (the canaries' failures discounted).
    rc = report.rc
    finish = report.finish
    if rc == 1 and not check.bad_canaries and finish is not None and finish.get("failed") == n_canaries and all_passed:
        rc = 0
    return _Outcome(
        "ok",
        None,
        resolved,
        tests,
        rc,
        flags,
        sum(f2p) / len(f2p) if f2p else None,
        patched_files=kept[0] if kept is not None else None,
        test_patched_files=kept[1] if kept is not None else None,
    )


def _forged(reasons: list[str], log: list[str]) -> Flag:
    """The blocking flag of a run whose results do not hold up (why, logged too)."""
    log.append("result cross-check failed: " + "; ".join(reasons))
    return Flag(
        kind="forged_results", severity="blocking", evidence={"source": "runner", "detail": "; ".join(reasons)[:1500]}
    )


def _exec_runner(
    run: _Run,
    runner: str,
    cfg: dict,
    nonce: str,
    flags: list[Flag],
    *,
    env: dict[str, str] | None = None,
    args: tuple[str, ...] = (),
) -> tuple[Any, _Outcome | None]:
    """Run a hardened runner (its source in ``LEGORL_RUNNER``, the nonce and ``cfg`` on stdin) with
    ``python -I -S -B`` after removing any bytecode a diff smuggled in; (the exec result, None) or
    (it, the environment failure it amounts to: killed from outside, timed out)."""
    python, timeout = run.job.python, run.job.timeout
    script = (
        "find . -name __pycache__ -prune -exec rm -rf {} + 2>/dev/null; "
        "find . \\( -name '*.pyc' -o -name '*.pyo' \\) -delete 2>/dev/null; "
        f'LEGORL_PYTHONPATH="${{PYTHONPATH:-}}" exec {shlex.quote(python)} -I -S -B '
        f'{" ".join(shlex.quote(a) for a in args)} -c "$LEGORL_RUNNER"'
    )
    res = run.sandbox.exec(
        script,
        timeout=timeout,
        env={"PYTHONHASHSEED": "0", "LEGORL_RUNNER": runner, **(env or {})},
        max_output_bytes=16_000_000,
        stdin=nonce + "\n" + json.dumps(cfg) + "\n",
    )
    run.log.append(res.stderr[-3000:])
    if res.killed_from_outside:
        cause = res.cause or "sandbox killed from outside"
        return res, _env_failure(EnvFailureCause.SANDBOX_CRASH, cause, flags=flags, runner_exit_code=res.exit_code)
    if res.timed_out:
        return res, _env_failure(EnvFailureCause.RUNNER_TIMEOUT, f"tests ran past {timeout:g}s", flags=flags)
    return res, None


_SYMPY_WATCH = [
    ("sympy.testing.runtests", "sympy/testing/runtests.py"),
    ("sympy.utilities.runtests", "sympy/utilities/runtests.py"),
    ("sympy.testing.pytest", "sympy/testing/pytest.py"),
    ("sympy.utilities.pytest", "sympy/utilities/pytest.py"),
]


def _sympy_run(run: _Run, flags: list[Flag], stage: dict[str, float]) -> _Outcome:
    """The hardened run of sympy's own runner (:mod:`legorl.grading.sympy_runner`), with the
    in-process guard when ``behaviour_checks``."""
    t = time.monotonic()
    files = sympy_runner.test_files(run.job.task.test_patch)
    if not files:
        return _env_failure(EnvFailureCause.NO_TESTS, "the test patch names no sympy test module", flags=flags)
    nonce = uuid.uuid4().hex
    tag = nonce[12:20]
    canary_file = f"{files[0].rsplit('/', 1)[0]}/test_{nonce[:12]}.py"
    canary_names = [f"test_{tag}_a", f"test_{tag}_b"]
    runtests = next(
        (name for name, rel in _SYMPY_WATCH[:2] if _read_or_none(run.sandbox, rel) is not None), _SYMPY_WATCH[1][0]
    )
    cfg = {
        "workspace": WORKSPACE,
        "files": files,
        "canary_files": [canary_file],
        "canary_source": sympy_runner.canary_source(tag),
        "watch": _SYMPY_WATCH,
        "runtests": runtests,
        "seed": 0,
    }
    guard_key = None
    if run.behaviour_checks:
        # the test modules, the runner's own files (test infrastructure) and the canary are the test side
        test_paths = sorted({*(p for p in run.job.protected if p.endswith(".py") or p == "bin/test"), canary_file})
        argv = ["bin/test", "-C", "--verbose", *files]
        cfg["guard"], guard_key = behaviour.guard_spec(test_paths, argv=argv, diff=run.job.filtered)
    # SWE-bench runs bin/test with PYTHONWARNINGS=ignore::UserWarning,ignore::SyntaxWarning
    warn = ("-W", "ignore::UserWarning", "-W", "ignore::SyntaxWarning")
    res, failed = _exec_runner(run, sympy_runner.RUNNER, cfg, nonce, flags, args=warn)
    stage["test_run"] = time.monotonic() - t
    if failed is not None:
        return failed
    report = sympy_runner.parse_output(res.stdout, nonce, canary_names)
    if guard_key is not None:
        guard = behaviour.parse_guard(res.stdout, nonce, guard_key)
        flags = [*flags, *behaviour.guard_flags(guard, report.complete)]
        run.log.extend(f"guard error: {e}" for e in guard.errors[:5])
    if not report.complete:
        return _env_failure(
            EnvFailureCause.RUNNER_CRASHED,
            f"no report from sympy's runner (exit {res.exit_code}{'; ' + res.cause if res.cause else ''})",
            flags=flags,
            runner_exit_code=res.exit_code,
        )
    return _sympy_verdict(run, report, flags)


def _sympy_verdict(run: _Run, report: sympy_runner.SympyRun, flags: list[Flag]) -> _Outcome:
    """The outcome of a complete run of sympy's runner: its canaries, exit status and runner checked."""
    tests = {name: report.tests.get(name, "missing") for name in run.job.expected}
    forged = []
    bad_canaries = {c: o for c, o in report.canary.items() if o not in ("failed", "error")}
    nothing_ran = not report.tests and not any(o != "missing" for o in report.canary.values())
    if bad_canaries and not nothing_ran:
        forged.append(f"canary tests reported {bad_canaries}")
    if report.rc == 0 and not bad_canaries:
        forged.append("runner exit status 0 although the canary tests fail")
    if report.tamper:
        forged.append("sympy's runner replaced: " + ", ".join(report.tamper[:8]))
    flags = list(flags)
    if nothing_ran:
        flags.append(
            Flag(
                kind="tests_not_run",
                severity="info",
                evidence={"source": "runner", "detail": "; ".join(report.import_errors)[:500]},
            )
        )
    if forged:
        flags.append(_forged(forged, run.log))
    passing = ("passed", "xfail")  # SWE-bench's rule: an expected failure that still fails is a pass
    resolved = not forged and all(v in passing for v in tests.values())
    f2p = [tests[n] in passing for n in run.job.task.FAIL_TO_PASS]
    return _Outcome("ok", None, resolved, tests, report.rc, flags, sum(f2p) / len(f2p) if f2p else None)
