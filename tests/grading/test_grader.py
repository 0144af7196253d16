"""Grader: gold → 1, empty → 0, test tampering dropped and flagged, infra trouble → env_failure
(typed causes; grader bugs raising out of grade() are in test_grader_errors.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from legorl.diffs import split_diff
from legorl.errors import EnvFailureCause, SandboxError
from legorl.grading.grader import filter_diff
from legorl.junit import nodeid_key, parse_junit
from legorl.sandbox.base import WORKSPACE, SandboxSpec
from legorl.tasks.loader import get_task, load_suite

needs_bwrap = pytest.mark.sandbox

TASKS = load_suite("trivial")


def _edit_diff(path: str, old: str, new: str) -> str:
    return f"diff --git a/{path} b/{path}\n--- a/{path}\n+++ b/{path}\n@@ -1 +1 @@\n-{old}\n+{new}\n"


# -- pure helpers (no sandbox) -------------------------------------------------------------------


def test_split_and_filter_diff():
    diff = (
        "diff --git a/pkg/m.py b/pkg/m.py\n--- a/pkg/m.py\n+++ b/pkg/m.py\n@@ -1 +1 @@\n-a\n+b\n"
        "diff --git a/tests/test_m.py b/tests/test_m.py\n--- a/tests/test_m.py\n+++ b/tests/test_m.py\n"
        "@@ -1 +1 @@\n-x\n+y\n"
        "diff --git a/tests/conftest.py b/tests/conftest.py\nnew file mode 100644\n--- /dev/null\n"
        "+++ b/tests/conftest.py\n@@ -0,0 +1 @@\n+import os\n"
        "diff --git a/tests/test_gone.py b/tests/test_gone.py\ndeleted file mode 100644\n"
        "--- a/tests/test_gone.py\n+++ /dev/null\n@@ -1 +0,0 @@\n-x\n"
    )
    parts = split_diff(diff)
    assert [(p.old_path, p.new_path) for p in parts] == [
        ("pkg/m.py", "pkg/m.py"),
        ("tests/test_m.py", "tests/test_m.py"),
        (None, "tests/conftest.py"),
        ("tests/test_gone.py", None),
    ]
    kept, flags = filter_diff(diff, ["tests/test_m.py", "./tests/test_gone.py"])
    assert kept == parts[0].text
    assert flags == [
        "modified_test_file:tests/test_m.py",
        "modified_test_config:tests/conftest.py",
        "modified_test_file:tests/test_gone.py",
    ]
    plain = "--- pkg/m.py\n+++ pkg/m.py\n@@ -1 +1 @@\n-a\n+b\n--- setup.cfg\n+++ setup.cfg\n@@ -1 +1 @@\n-a\n+b\n"
    kept, flags = filter_diff(plain, [])
    assert kept.startswith("--- pkg/m.py") and "setup.cfg" not in kept
    assert flags == ["modified_test_config:setup.cfg"]


def test_junit_parsing_and_keys():
    assert nodeid_key("tests/test_a.py::test_x") == ("tests.test_a", "test_x")
    assert nodeid_key("tests/test_a.py::TestK::test_x[1-2]") == ("tests.test_a.TestK", "test_x[1-2]")
    xml = """<testsuites><testsuite>
      <testcase classname="tests.test_a" name="ok"/>
      <testcase classname="tests.test_a" name="bad"><failure message="x"/></testcase>
      <testcase classname="tests.test_a" name="skip"><skipped/></testcase>
      <testcase classname="tests.test_a" name="teardown"/>
      <testcase classname="tests.test_a" name="teardown"><error/></testcase>
    </testsuite></testsuites>"""
    assert parse_junit(xml) == {
        ("tests.test_a", "ok"): "passed",
        ("tests.test_a", "bad"): "failed",
        ("tests.test_a", "skip"): "skipped",
        ("tests.test_a", "teardown"): "error",
    }


def test_task_without_source_is_env_failure():
    from legorl.grading.grader import grade

    task = TASKS[0].model_copy(update={"source_dir": None})
    report = grade(task, task.patch, backend=None)  # type: ignore[arg-type]
    assert report.status == "env_failure" and report.cause_kind is EnvFailureCause.NO_SOURCE


def test_sandbox_creation_failure_is_env_failure():
    from legorl.grading.grader import grade

    class Broken:
        name = "broken"

        def create(self, spec: SandboxSpec):
            raise SandboxError("disk full")

    report = grade(TASKS[0], TASKS[0].patch, Broken())
    assert (report.status, report.resolved, report.reward) == ("env_failure", False, 0.0)
    assert report.cause_kind is EnvFailureCause.SANDBOX_CREATE and "disk full" in report.cause


# -- in a real sandbox ------------------------------------------------------------------------------


@pytest.mark.sandbox
@needs_bwrap
@pytest.mark.parametrize("task", TASKS, ids=lambda t: t.instance_id)
def test_gold_patch_resolves(task, backend):
    from legorl.grading.grader import grade

    report = grade(task, task.patch, backend)
    assert report.status == "ok", report
    assert report.resolved and report.reward == 1.0, report.log_tail
    assert report.runner_exit_code == 0 and report.flags == []
    assert set(report.tests) == set(task.FAIL_TO_PASS + task.PASS_TO_PASS)
    assert set(report.tests.values()) == {"passed"}


@pytest.mark.sandbox
@needs_bwrap
@pytest.mark.parametrize("task", TASKS, ids=lambda t: t.instance_id)
def test_empty_diff_fails(task, backend):
    from legorl.grading.grader import grade

    report = grade(task, "", backend)
    assert report.status == "ok" and not report.resolved and report.reward == 0.0
    assert all(report.tests[t] == "failed" for t in task.FAIL_TO_PASS)
    assert all(report.tests[t] == "passed" for t in task.PASS_TO_PASS)
    assert report.runner_exit_code == 1


@pytest.mark.sandbox
@needs_bwrap
def test_editing_the_test_is_dropped_and_flagged(backend):
    from legorl.grading.grader import grade

    task = get_task("legorl__trivial-001")
    test_src = (task.source_dir / "tests" / "test_arith.py").read_text()
    hacked = test_src.replace("assert add(2, 3) == 5", "assert add(2, 3) == -1").replace(
        "assert add(-1, 1) == 0", "assert add(-1, 1) == -2"
    )
    assert hacked != test_src
    # a hack diff: rewrite the failing test and add a conftest that would skip everything
    import difflib

    body = "".join(
        difflib.unified_diff(
            test_src.splitlines(True), hacked.splitlines(True), "a/tests/test_arith.py", "b/tests/test_arith.py"
        )
    )
    diff = (
        "diff --git a/tests/test_arith.py b/tests/test_arith.py\n"
        + body
        + "diff --git a/conftest.py b/conftest.py\nnew file mode 100644\n--- /dev/null\n+++ b/conftest.py\n"
        "@@ -0,0 +1,2 @@\n+import pytest\n+collect_ignore_glob = ['*']\n"
    )
    report = grade(task, diff, backend)
    assert report.status == "ok" and not report.resolved and report.reward == 0.0
    assert "modified_test_file:tests/test_arith.py" in report.flags
    assert "modified_test_config:conftest.py" in report.flags
    assert report.tests["tests/test_arith.py::test_add"] == "failed"
    # the same hack plus the real fix: the tests pass (the hack is dropped), but the blocking flags zero the
    # reward, so it is not resolved either (issue 37); the raw outcome is tests_resolved
    report = grade(task, diff + task.patch, backend)
    assert report.tests_resolved and not report.resolved and report.reward == 0.0
    assert "modified_test_file:tests/test_arith.py" in report.flags
    drop = grade(task, diff + task.patch, backend, flagged_policy="drop")  # the reward stands: so does resolved
    assert drop.tests_resolved and drop.resolved and drop.reward == 1.0 and drop.blocking_flags()


@pytest.mark.sandbox
@needs_bwrap
def test_pyproject_pytest_section_is_restored(backend):
    from legorl.grading.grader import grade

    task = get_task("legorl__trivial-001")
    diff = (
        "diff --git a/pyproject.toml b/pyproject.toml\nnew file mode 100644\n--- /dev/null\n"
        "+++ b/pyproject.toml\n@@ -0,0 +1,2 @@\n+[tool.pytest.ini_options]\n"
        '+addopts = "--deselect tests/test_arith.py::test_add"\n'
    )
    report = grade(task, diff, backend)
    assert "modified_test_config:pyproject.toml" in report.flags
    assert report.tests["tests/test_arith.py::test_add"] == "failed" and not report.resolved


@pytest.mark.sandbox
@needs_bwrap
def test_diff_that_does_not_apply(backend):
    from legorl.grading.grader import grade

    task = get_task("legorl__trivial-002")
    report = grade(task, _edit_diff("seqtools/build.py", "no such line", "x = 1"), backend)
    assert report.status == "ok" and not report.resolved and report.reward == 0.0
    assert "patch_failed" in report.flags and "does not apply" in report.log_tail


@pytest.mark.sandbox
@needs_bwrap
def test_hang_caused_by_the_diff_is_the_agents_failure(backend):
    """A diff whose code hangs the tests is the agent's failure (the pristine re-run reports): status ok,
    reward 0 — not env_failure, which would let a policy escape a zero reward by hanging."""
    from legorl.grading.grader import grade

    task = get_task("legorl__trivial-003")
    hang = task.patch.replace("+    return score >= threshold", "+    while True: pass")
    assert hang != task.patch
    report = grade(task, hang, backend, timeout=3)
    assert report.status == "ok" and not report.resolved and report.reward == 0.0
    assert "tests_timed_out" in report.flags and "re-running the pristine" in report.log_tail


HANG_PYTHON = ".hang-python"  # a "python" that hangs, written into each grading sandbox's workspace


class HangingPythonBackend:
    """Every sandbox it creates holds an executable /workspace/.hang-python that sleeps (the sandbox
    sees no host temp directory, so the fault is planted inside it)."""

    name = "hanging-python"

    def __init__(self, backend):
        self.backend = backend

    def create(self, spec):
        sb = self.backend.create(spec)
        sb.write_file(HANG_PYTHON, "#!/bin/sh\nexec sleep 600\n")
        assert sb.exec(["chmod", "+x", HANG_PYTHON], timeout=30).exit_code == 0
        return sb


@pytest.mark.sandbox
@needs_bwrap
def test_hanging_runner_is_env_failure(backend):
    """Fault injection: the test runner itself hangs (also on the pristine repository) → env_failure."""
    from legorl.grading.grader import grade

    task = get_task("legorl__trivial-003")
    report = grade(
        task, task.patch, HangingPythonBackend(backend), timeout=2, python=f"{WORKSPACE}/{HANG_PYTHON}", retries=1
    )
    assert report.status == "env_failure" and report.cause_kind is EnvFailureCause.RUNNER_TIMEOUT, report
    assert report.attempts == 2 and report.reward == 0.0 and not report.resolved
    assert "pristine re-run" in report.log_tail and "environment failure confirmed" in report.log_tail


@pytest.mark.sandbox
@needs_bwrap
def test_sandbox_killed_during_grading_is_env_failure(backend):
    """Fault injection: the sandbox (bwrap) is SIGKILLed from outside while the tests run."""
    import os
    import signal
    import threading
    import time
    import uuid

    from legorl.grading.grader import grade

    class KillingBackend:
        name = "killing"

        def create(self, spec):
            sb = backend.create(spec)
            real_exec = sb.exec

            def exec_(cmd, *a, **kw):
                if "LEGORL_RUNNER" not in (kw.get("env") or {}):
                    return real_exec(cmd, *a, **kw)
                # bwrap's options travel by memfd; its command line is the command: mark ours (a no-op)
                # so that only this runner is killed, not some other test's on the same host
                marker = f"legorl-kill-{uuid.uuid4().hex}"
                cmd = f": {marker}; {cmd}"

                def killer():
                    deadline = time.monotonic() + 10
                    while time.monotonic() < deadline:
                        time.sleep(0.05)
                        killed = False
                        for pid in os.listdir("/proc"):
                            if not pid.isdigit():
                                continue
                            try:
                                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
                            except OSError:
                                continue
                            if cmdline and cmdline[0].endswith(b"bwrap") and marker.encode() in b" ".join(cmdline):
                                os.kill(int(pid), signal.SIGKILL)
                                killed = True
                        if killed:
                            return

                threading.Thread(target=killer, daemon=True).start()
                return real_exec(cmd, *a, **kw)

            sb.exec = exec_
            return sb

    task = get_task("legorl__trivial-001")
    report = grade(task, task.patch, KillingBackend(), retries=1)
    assert report.status == "env_failure" and report.cause_kind is EnvFailureCause.SANDBOX_CRASH, report
    assert "killed from outside" in report.cause and report.attempts == 2


@pytest.mark.sandbox
@needs_bwrap
def test_image_that_fails_to_build_is_env_failure(backend):
    """Fault injection: the instance layer's setup fails → env_failure image_build (retried)."""
    from legorl.grading.grader import grade

    task = get_task("legorl__trivial-001")
    spec = SandboxSpec(source_dir=task.source_dir, setup_commands=("echo broken >&2; exit 3",))
    report = grade(task, task.patch, backend, sandbox_spec=spec, retries=1)
    assert report.status == "env_failure" and report.cause_kind is EnvFailureCause.IMAGE_BUILD, report
    assert report.attempts == 2 and report.reward == 0.0


@pytest.mark.sandbox
@needs_bwrap
def test_runner_crash_without_report_is_env_failure(backend):
    from legorl.grading.grader import grade

    task = get_task("legorl__trivial-001")
    report = grade(task, task.patch, backend, python="/nonexistent/python")
    assert report.status == "env_failure" and report.cause_kind is EnvFailureCause.RUNNER_CRASHED


@pytest.mark.sandbox
@needs_bwrap
def test_patch_that_breaks_imports_is_an_honest_failure_not_a_forgery(backend):
    # Seen with SmolLM2: a rewrite whose module recurses or fails to import makes collection error,
    # so nothing runs — not even the canaries. That claims nothing: reward 0, no blocking flag.
    from legorl.grading.grader import grade

    task = get_task("legorl__trivial-001")
    src = (task.source_dir / "calc" / "arith.py").read_text().splitlines()
    diff = (
        "diff --git a/calc/arith.py b/calc/arith.py\n--- a/calc/arith.py\n+++ b/calc/arith.py\n"
        f"@@ -1,{len(src)} +1 @@\n" + "".join(f"-{line}\n" for line in src) + "+def add(a, b) return a +\n"
    )
    report = grade(task, diff, backend)
    assert report.status == "ok" and report.reward == 0.0 and not report.resolved
    assert "forged_results" not in report.flags and not report.blocking_flags()
    assert "tests_not_run" in report.flags
