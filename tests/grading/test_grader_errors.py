"""The grader's errors: only the environment's typed errors are ``env_failure`` (with an
:class:`EnvFailureCause`, retried when transient); a bug in our own code raises out of ``grade()``,
unretried. Fake backends/sandboxes, no bubblewrap needed."""

from __future__ import annotations

import ast
import importlib
import json
import re
from pathlib import Path

import pytest

from legorl import errors
from legorl.errors import EnvFailureCause, ImageBuildError, LegoRLError, SandboxError
from legorl.grading import defenses, grader
from legorl.grading.grader import grade
from legorl.sandbox.base import ExecResult, SandboxSpec
from legorl.tasks.model import Task
from legorl.trajectory.records import GraderReport

SRC = Path(errors.__file__).parent

FIX = (
    "diff --git a/pkg/m.py b/pkg/m.py\n--- a/pkg/m.py\n+++ b/pkg/m.py\n@@ -1 +1 @@\n"
    "-def f(): return 0\n+def f(): return 1\n"
)
TEST_PATCH = (
    "diff --git a/tests/test_m.py b/tests/test_m.py\nnew file mode 100644\n--- /dev/null\n"
    "+++ b/tests/test_m.py\n@@ -0,0 +1,2 @@\n+from pkg.m import f\n+def test_f(): assert f() == 1\n"
)


def _task(test_patch: str = TEST_PATCH) -> Task:
    return Task(
        instance_id="fake__1",
        repo="fake/fake",
        patch=FIX,
        test_patch=test_patch,
        problem_statement="f",
        FAIL_TO_PASS=["tests/test_m.py::test_f"],
        source_dir=Path("/nonexistent-fake-source"),
    )


class FakeSandbox:
    """Answers ``git apply``/``patch`` with ``apply_rc``; the hardened test run with ``run`` (an
    ExecResult or an exception to raise); files are absent."""

    def __init__(
        self, run: ExecResult | BaseException | None = None, apply_rc: int = 0, exec_error: BaseException | None = None
    ):
        self.name, self.workdir = "fake", Path("/nonexistent-fake-workdir")
        self.run, self.apply_rc, self.exec_error = run, apply_rc, exec_error
        self.destroyed = False
        self.runs = 0

    def exec(self, cmd, timeout=60.0, env=None, cwd="/workspace", max_output_bytes=200_000, stdin=None):
        if self.exec_error is not None:
            raise self.exec_error
        if env and "LEGORL_RUNNER" in env:
            self.runs += 1
            if isinstance(self.run, BaseException):
                raise self.run
            return self.run
        return ExecResult(self.apply_rc, "", "" if self.apply_rc == 0 else "does not apply", 0.01)

    def read_file(self, path: str) -> str:
        raise FileNotFoundError(path)

    def read_bytes(self, path: str) -> bytes:
        raise FileNotFoundError(path)

    def write_file(self, path: str, content: str) -> None:
        pass

    def write_bytes(self, path: str, data: bytes) -> None:
        pass

    def diff(self) -> str:
        return ""

    def destroy(self) -> None:
        self.destroyed = True


class FakeBackend:
    name = "fake"

    def __init__(self, make=FakeSandbox, create_error: BaseException | None = None):
        self.make, self.create_error = make, create_error
        self.created: list[FakeSandbox] = []
        self.calls = 0

    def create(self, spec: SandboxSpec) -> FakeSandbox:
        self.calls += 1
        if self.create_error is not None:
            raise self.create_error
        sb = self.make()
        self.created.append(sb)
        return sb


# -- our own bugs are errors, not environment failures ----------------------------------------------


def test_a_bug_inside_grading_raises_out_of_grade_unretried(monkeypatch):
    """Inject a bug into an internal grading function: it must raise out of grade() (not become
    env_failure: infra_error, not be retried, not silently leave the gradient)."""

    def buggy_scan(*args, **kwargs):
        raise TypeError("grader bug: unsupported operand")

    monkeypatch.setattr(defenses, "scan_source_changes", buggy_scan)
    backend = FakeBackend()
    with pytest.raises(TypeError, match="grader bug"):
        grade(_task(), FIX, backend, retries=3)
    assert backend.calls == 1, "a bug must not be retried"
    assert backend.created[0].destroyed, "the sandbox is still cleaned up"


def test_a_bug_in_the_diff_apply_step_raises(monkeypatch):
    def buggy_apply(sandbox, patch, *rest):
        raise AttributeError("'NoneType' object has no attribute 'exit_code'")

    monkeypatch.setattr(grader, "_apply", buggy_apply)
    backend = FakeBackend()
    with pytest.raises(AttributeError):
        grade(_task(), FIX, backend, retries=2)
    assert backend.calls == 1


def test_a_bug_in_the_backend_raises_out_of_grade():
    backend = FakeBackend(create_error=TypeError("create() got an unexpected keyword argument"))
    with pytest.raises(TypeError, match="unexpected keyword"):
        grade(_task(), FIX, backend, retries=2)
    assert backend.calls == 1


def test_a_bug_while_attributing_a_hang_raises(monkeypatch):
    """The pristine re-run after a timeout is grading code too: a bug there is not swallowed."""
    real_grade_in = grader._grade_in
    calls = []

    def grade_in(sandbox, job, *rest, **kw):
        calls.append(job.filtered)
        if len(calls) == 2:  # the pristine re-run (no diff applied)
            assert job.filtered == ""
            raise KeyError("bug in the re-run")
        return real_grade_in(sandbox, job, *rest, **kw)

    monkeypatch.setattr(grader, "_grade_in", grade_in)
    backend = FakeBackend(lambda: FakeSandbox(run=ExecResult(137, "", "", 2.0, timed_out=True)))
    with pytest.raises(KeyError, match="bug in the re-run"):
        grade(_task(), FIX, backend, retries=1)
    assert backend.calls == 2 and all(sb.destroyed for sb in backend.created)


# -- the environment's typed errors are env_failure with their enum cause ---------------------------


def _env(report: GraderReport, cause: EnvFailureCause) -> None:
    assert (report.status, report.resolved, report.reward) == ("env_failure", False, 0.0), report
    assert report.cause_kind is cause, report
    assert report.cause.startswith(cause.value + ": "), report.cause  # the record reads as before


def test_sandbox_error_while_grading_is_env_failure_sandbox_crash():
    backend = FakeBackend(lambda: FakeSandbox(exec_error=SandboxError("sandbox fake was destroyed")))
    report = grade(_task(), FIX, backend, retries=1)
    _env(report, EnvFailureCause.SANDBOX_CRASH)
    assert "sandbox fake was destroyed" in report.cause
    assert report.attempts == 2 and backend.calls == 2 and all(sb.destroyed for sb in backend.created)


def test_sandbox_error_on_create_is_sandbox_create_and_image_error_is_image_build():
    report = grade(_task(), FIX, FakeBackend(create_error=SandboxError("no space for the copy")), retries=0)
    _env(report, EnvFailureCause.SANDBOX_CREATE)
    assert "no space for the copy" in report.cause and report.attempts == 1
    backend = FakeBackend(create_error=ImageBuildError("exited with status 3", kind="instance", step="setup[0]"))
    report = grade(_task(), FIX, backend, retries=2)
    _env(report, EnvFailureCause.IMAGE_BUILD)
    assert "setup[0]" in report.cause and report.attempts == 3 and backend.calls == 3


def test_sandbox_killed_from_outside_is_sandbox_crash():
    res = ExecResult(
        137, "", "", 0.5, killed_by_signal=9, cause="sandbox killed from outside by signal 9", killed_from_outside=True
    )
    report = grade(_task(), "", FakeBackend(lambda: FakeSandbox(run=res)), retries=1)
    _env(report, EnvFailureCause.SANDBOX_CRASH)
    assert report.attempts == 2


def test_runner_timeout_and_crash_causes():
    report = grade(
        _task(),
        "",
        FakeBackend(lambda: FakeSandbox(run=ExecResult(137, "", "", 2.0, timed_out=True))),
        timeout=2,
        retries=0,
    )
    _env(report, EnvFailureCause.RUNNER_TIMEOUT)
    report = grade(_task(), "", FakeBackend(lambda: FakeSandbox(run=ExecResult(1, "garbage", "boom", 0.1))), retries=0)
    _env(report, EnvFailureCause.RUNNER_CRASHED)


def test_a_hang_the_pristine_repository_shares_stays_runner_timeout():
    """With a diff, a timed-out run is attributed by a pristine re-run; when that hangs too the
    environment is to blame (the enum drives that branch, not a string prefix)."""
    backend = FakeBackend(lambda: FakeSandbox(run=ExecResult(137, "", "", 2.0, timed_out=True)))
    report = grade(_task(), FIX, backend, timeout=2, retries=0)
    _env(report, EnvFailureCause.RUNNER_TIMEOUT)
    assert backend.calls == 2 and "re-running the pristine repository" in report.log_tail
    assert all(sb.runs == 1 for sb in backend.created)


def test_broken_test_patch_is_not_retried():
    backend = FakeBackend(lambda: FakeSandbox(apply_rc=1))
    report = grade(_task(), "", backend, retries=3)
    _env(report, EnvFailureCause.TEST_PATCH_FAILED)
    assert report.attempts == 1 and backend.calls == 1


def test_task_problems_have_their_causes():
    report = grade(_task().model_copy(update={"source_dir": None}), FIX, FakeBackend())
    _env(report, EnvFailureCause.NO_SOURCE)
    report = grade(_task().model_copy(update={"FAIL_TO_PASS": []}), FIX, FakeBackend())
    _env(report, EnvFailureCause.NO_TESTS)


def test_destroy_failure_of_the_environment_does_not_hide_the_verdict():
    class Sticky(FakeSandbox):
        def destroy(self) -> None:
            raise SandboxError("cannot remove sandbox dir")

    report = grade(
        _task(), "", FakeBackend(lambda: Sticky(run=ExecResult(137, "", "", 2.0, timed_out=True))), retries=0
    )
    _env(report, EnvFailureCause.RUNNER_TIMEOUT)
    assert "cannot remove sandbox dir" in report.log_tail


# -- records ------------------------------------------------------------------------------------------


def test_cause_enum_serialises_as_its_value_and_old_records_load():
    report = grade(
        _task(),
        "",
        FakeBackend(lambda: FakeSandbox(run=ExecResult(137, "", "", 2.0, timed_out=True))),
        timeout=2,
        retries=0,
    )
    data = json.loads(report.model_dump_json())
    assert data["cause_kind"] == "runner_timeout" and data["cause"] == "runner_timeout: tests ran past 2s"
    back = GraderReport.model_validate_json(report.model_dump_json())
    assert back.cause_kind is EnvFailureCause.RUNNER_TIMEOUT and back.cause == report.cause
    old = {"resolved": False, "reward": 0.0, "status": "env_failure", "cause": "infra_error: TypeError: x"}
    legacy = GraderReport.model_validate(old)  # written before cause_kind existed
    assert legacy.cause_kind is None and legacy.cause == "infra_error: TypeError: x"
    assert (
        json.dumps(EnvFailureCause.SANDBOX_CRASH) == '"sandbox_crash"' and str(EnvFailureCause.NO_TESTS) == "no_tests"
    )
    assert {c for c in EnvFailureCause if c.transient} == set(grader.RETRYABLE)
    assert not EnvFailureCause.TEST_PATCH_FAILED.transient and not EnvFailureCause.NO_SOURCE.transient


# -- the error tree ---------------------------------------------------------------------------------


def _error_classes() -> dict[str, type]:
    return {
        n: c
        for n, c in vars(errors).items()
        if isinstance(c, type) and issubclass(c, BaseException) and c.__module__ == errors.__name__
    }


def _project_sources() -> list[Path]:
    return [p for p in SRC.rglob("*.py") if "suites" not in p.relative_to(SRC).parts]


def test_every_error_class_is_in_the_tree_drawn_in_errors_py():
    """Every exception class of the project is a LegoRLError drawn in legorl.errors' tree; one defined
    outside legorl/errors.py must be marked there with its module."""
    classes = _error_classes()
    elsewhere: dict[str, str] = {}
    for path in _project_sources():
        if path == Path(errors.__file__):
            continue
        module = ".".join(("legorl", *path.relative_to(SRC).with_suffix("").parts))
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef):
                bases = [ast.unparse(b) for b in node.bases]
                if re.search(r"(Error|Exception|Refusal|Timeout|Disconnected)$", node.name) or any(
                    re.search(r"(Error|Exception)$", b) for b in bases
                ):
                    elsewhere[node.name] = module
    tree = errors.__doc__.split("Environment failures.")[0]
    drawn = re.findall(r"[├└]── (\w+)", tree) + re.findall(r"^\s+(LegoRLError)\s*$", tree, re.MULTILINE)
    undrawn = sorted({*classes, *elsewhere} - set(drawn))
    assert undrawn == [], (
        f"not in the tree drawn in legorl/errors.py: {undrawn} (defined in "
        f"{sorted({elsewhere.get(n, 'legorl.errors') for n in undrawn})}); define them there"
    )
    assert sorted(drawn) == sorted([*classes, *elsewhere]), "the tree draws a class that does not exist"
    for name, module in elsewhere.items():
        assert re.search(rf"── {name}\b.*\[{re.escape(module)}\]", tree), f"{name}: mark it [{module}] in the tree"
        cls = getattr(importlib.import_module(module), name)
        assert issubclass(cls, LegoRLError), name
    for name, cls in classes.items():
        assert issubclass(cls, LegoRLError), name


def test_every_error_class_is_raised_somewhere():
    """A class nobody raises is noise in the tree (SandboxTimeout, HarnessError, GradingError were)."""
    text = "\n".join(p.read_text(encoding="utf-8") for p in _project_sources() if p != Path(errors.__file__))
    never = [n for n in _error_classes() if not re.search(rf"(?<!class )\b{n}\(", text)]
    assert never == []
    for gone in ("SandboxTimeout", "HarnessError", "GradingError"):
        assert not hasattr(errors, gone)


def test_moved_classes_are_still_importable_where_they_were():
    from legorl.gateway.dialects.base import ClientDisconnected, GatewayError
    from legorl.harnesses.registry import UnknownHarnessError
    from legorl.sandbox.images import ImageBuildError as ImagesIBE
    from legorl.sandbox.images import ImageDiskFullError
    from legorl.trajectory.builder import AlignmentBuildError

    assert (
        GatewayError,
        ClientDisconnected,
        UnknownHarnessError,
        ImagesIBE,
        ImageDiskFullError,
        AlignmentBuildError,
    ) == (
        errors.GatewayError,
        errors.ClientDisconnected,
        errors.UnknownHarnessError,
        errors.ImageBuildError,
        errors.ImageDiskFullError,
        errors.AlignmentBuildError,
    )
    assert issubclass(ImageDiskFullError, SandboxError) and issubclass(UnknownHarnessError, ValueError)
    err = GatewayError(401, "bad key", code="invalid_api_key")
    assert err.body()["error"]["code"] == "invalid_api_key"
    assert err.response().status_code == 401 and err.response().headers["WWW-Authenticate"] == "Bearer"
