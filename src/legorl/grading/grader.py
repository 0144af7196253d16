"""The grader: a verdict on an agent's diff, in a fresh sandbox (DESIGN.md §7 "after" stage).

Stages: take only the diff; drop every file section that touches a test file (``task.test_files``,
files the ``test_patch`` touches) or test configuration (``conftest.py``, ``pytest.ini``,
``setup.cfg``, ``tox.ini``, ``sitecustomize.py``/``usercustomize.py``, ``*.pth``, the
``[tool.pytest*]`` tables of ``pyproject.toml``), flagging each; apply what is left with
``git apply`` to a fresh copy of ``task.source_dir`` (test files therefore stay pristine); apply
``task.test_patch``; run the expected tests with ``-p no:cacheprovider`` and ``--confcutdir``;
require every expected test to be *seen passing* and the runner's exit code to be 0.

Status: a diff that does not apply is the agent's fault (``ok``, reward 0); anything that keeps the
grader from a verdict (no sandbox, runner timeout, runner crash without a report, a broken
``test_patch``) is ``env_failure`` with a ``cause`` — never reward 0 with status ``ok``.
"""

from __future__ import annotations

import re
import shlex
import sys
import time
import tomllib
import uuid
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

from legorl.errors import LegoRLError
from legorl.sandbox.base import WORKSPACE, Sandbox, SandboxBackend, SandboxSpec
from legorl.tasks.model import Task
from legorl.trajectory.records import GraderReport

TEST_CONFIG_NAMES = {"conftest.py", "pytest.ini", ".pytest.ini", "setup.cfg", "tox.ini",
                     "sitecustomize.py", "usercustomize.py"}
_LOG_TAIL = 4000
_OUTCOME_RANK = {"passed": 0, "skipped": 1, "failed": 2, "error": 3}


@dataclass
class FilePatch:
    old_path: str | None  # None for a new file
    new_path: str | None  # None for a deleted file
    text: str

    @property
    def paths(self) -> list[str]:
        return [p for p in dict.fromkeys([self.old_path, self.new_path]) if p]


def _unquote(path: str) -> str:
    path = path.strip()
    if path.startswith('"') and path.endswith('"'):
        path = path[1:-1].encode("latin-1", "backslashreplace").decode("unicode_escape").encode("latin-1").decode(
            "utf-8", "replace")
    return path


def _strip_prefix(path: str) -> str | None:
    path = _unquote(path.split("\t")[0])
    if path == "/dev/null":
        return None
    if path[:2] in ("a/", "b/"):
        return path[2:]
    return path


_GIT_HEADER = re.compile(r'^diff --git ("(?:[^"\\]|\\.)*"|\S+) ("(?:[^"\\]|\\.)*"|\S+)$')


def split_diff(diff: str) -> list[FilePatch]:
    """Split a unified diff (git or plain) into per-file sections."""
    lines = diff.splitlines(keepends=True)
    starts: list[int] = []
    git_style = any(line.startswith("diff --git ") for line in lines)
    for i, line in enumerate(lines):
        if git_style:
            if line.startswith("diff --git "):
                starts.append(i)
        elif line.startswith("--- ") and i + 1 < len(lines) and lines[i + 1].startswith("+++ "):
            starts.append(i)
    patches = []
    for n, start in enumerate(starts):
        end = starts[n + 1] if n + 1 < len(starts) else len(lines)
        block = lines[start:end]
        old = new = None
        if git_style:
            m = _GIT_HEADER.match(block[0].rstrip("\n"))
            if m:
                old, new = _strip_prefix(m.group(1)), _strip_prefix(m.group(2))
        for line in block[1:]:
            if line.startswith("--- "):
                old = _strip_prefix(line[4:].rstrip("\n"))
            elif line.startswith("+++ "):
                new = _strip_prefix(line[4:].rstrip("\n"))
                break
            elif line.startswith("rename from "):
                old = _unquote(line[len("rename from "):].rstrip("\n"))
            elif line.startswith("rename to "):
                new = _unquote(line[len("rename to "):].rstrip("\n"))
            elif line.startswith("new file mode"):
                old = None
            elif line.startswith("deleted file mode"):
                new = None
            elif line.startswith("@@"):
                break
        patches.append(FilePatch(old, new, "".join(block)))
    return patches


def _norm(path: str) -> str:
    parts = [p for p in path.replace("\\", "/").split("/") if p not in ("", ".")]
    return "/".join(parts)


def protected_reason(path: str, test_files: set[str]) -> str | None:
    """Why ``path`` may not be changed by the agent, or None (pyproject.toml is checked separately)."""
    p = _norm(path)
    name = p.rsplit("/", 1)[-1]
    if p in test_files:
        return "modified_test_file"
    if name in TEST_CONFIG_NAMES or name.endswith(".pth"):
        return "modified_test_config"
    return None


def filter_diff(diff: str, test_files: list[str] | set[str]) -> tuple[str, list[str]]:
    """Drop file sections touching test files or test config; return (kept diff, flags)."""
    protected = {_norm(p) for p in test_files}
    kept, flags = [], []
    for fp in split_diff(diff):
        reasons = [(r, p) for p in fp.paths if (r := protected_reason(p, protected))]
        if reasons:
            flags.extend(f"{r}:{p}" for r, p in reasons)
        else:
            kept.append(fp.text)
    out = "".join(kept)
    if out and not out.endswith("\n"):
        out += "\n"
    return out, list(dict.fromkeys(flags))


def _pytest_tables(text: str | None) -> object:
    if text is None:
        return None
    try:
        tool = tomllib.loads(text).get("tool", {})
    except tomllib.TOMLDecodeError:
        return "<unparseable>"
    return {k: v for k, v in tool.items() if k.startswith("pytest")} if isinstance(tool, dict) else None


def nodeid_key(nodeid: str) -> tuple[str, str]:
    """(junit classname, name) that pytest's junit XML gives the test ``nodeid``."""
    path, _, rest = nodeid.partition("::")
    parts = rest.split("::") if rest else []
    module = path[:-3] if path.endswith(".py") else path
    module = module.replace("/", ".")
    if not parts:
        return module, ""
    return ".".join([module, *parts[:-1]]), parts[-1]


def parse_junit(xml_text: str) -> dict[tuple[str, str], str]:
    """(classname, name) -> passed|failed|error|skipped (the worst outcome seen for a test)."""
    root = ET.fromstring(xml_text)
    outcomes: dict[tuple[str, str], str] = {}
    for case in root.iter("testcase"):
        key = (case.get("classname", ""), case.get("name", ""))
        tags = {child.tag for child in case}
        if "error" in tags:
            outcome = "error"
        elif "failure" in tags:
            outcome = "failed"
        elif "skipped" in tags:
            outcome = "skipped"
        else:
            outcome = "passed"
        prev = outcomes.get(key)
        if prev is None or _OUTCOME_RANK[outcome] > _OUTCOME_RANK[prev]:
            outcomes[key] = outcome
    return outcomes


def _lookup(outcomes: dict[tuple[str, str], str], nodeid: str) -> str:
    key = nodeid_key(nodeid)
    if key in outcomes:
        return outcomes[key]
    # Fallback: same test name, classname ending like ours (rootdir differences).
    for (cls, name), outcome in outcomes.items():
        if name == key[1] and (cls.endswith("." + key[0]) or key[0].endswith("." + cls) or cls == key[0]):
            return outcome
    return "missing"


def _tail(*parts: str) -> str:
    text = "\n".join(p for p in parts if p)
    return text[-_LOG_TAIL:]


def grade(task: Task, diff: str, backend: SandboxBackend, timeout: float = 120,
          python: str | None = None) -> GraderReport:
    """Grade ``diff`` against ``task`` in a fresh sandbox; ``timeout`` bounds the test run.

    ``python``: interpreter with pytest used inside the sandbox (default: this process's).
    """
    started = time.monotonic()
    python = python or sys.executable
    log: list[str] = []

    def report(**kw) -> GraderReport:
        kw.setdefault("log_tail", _tail(*log))
        return GraderReport(duration_s=time.monotonic() - started, **kw)

    if task.source_dir is None:
        return report(resolved=False, reward=0.0, status="env_failure",
                      cause=f"no_source: task {task.instance_id} has no local source_dir (no image backend yet)")

    protected = set(task.test_files)
    for fp in split_diff(task.test_patch or ""):
        protected.update(fp.paths)
    filtered, flags = filter_diff(diff or "", protected)
    for flag in flags:
        log.append(f"dropped from diff: {flag}")

    try:
        sandbox: Sandbox = backend.create(SandboxSpec(source_dir=Path(task.source_dir)))
    except LegoRLError as exc:
        return report(resolved=False, reward=0.0, flags=flags, status="env_failure",
                      cause=f"sandbox_create: {exc}")
    except OSError as exc:
        return report(resolved=False, reward=0.0, flags=flags, status="env_failure",
                      cause=f"sandbox_create: {exc}")
    try:
        return _grade_in(sandbox, task, filtered, flags, python, timeout, log, report)
    except LegoRLError as exc:
        return report(resolved=False, reward=0.0, flags=flags, status="env_failure", cause=f"sandbox: {exc}")
    finally:
        try:
            sandbox.destroy()
        except Exception:  # noqa: BLE001 - cleanup must not hide the verdict
            pass


def _apply(sandbox: Sandbox, patch: str) -> tuple[bool, str]:
    res = sandbox.exec(["git", "-c", "core.hooksPath=/dev/null", "apply", "--verbose", "--whitespace=nowarn", "-"],
                       stdin=patch, timeout=120)
    if res.exit_code == 0:
        return True, res.stderr
    first = res.stderr
    res2 = sandbox.exec(["patch", "--batch", "--fuzz=5", "-p1", "--forward", "--no-backup-if-mismatch"],
                        stdin=patch, timeout=120)
    if res2.exit_code == 0:
        return True, first + "\n(git apply failed; applied with patch --fuzz=5)\n" + res2.stdout
    return False, f"git apply: {first.strip()}\npatch: {(res2.stdout + res2.stderr).strip()}"


def _grade_in(sandbox, task, filtered, flags, python, timeout, log, report) -> GraderReport:  # noqa: ANN001
    pristine_pyproject = None
    try:
        pristine_pyproject = sandbox.read_file("pyproject.toml")
    except FileNotFoundError:
        pass

    if filtered.strip():
        ok, why = _apply(sandbox, filtered)
        if not ok:
            log.append(f"the diff does not apply:\n{why}")
            return report(resolved=False, reward=0.0, flags=[*flags, "patch_failed"], status="ok")
        log.append("applied the diff")
    else:
        log.append("empty diff (after filtering)")

    # The pytest tables of pyproject.toml are test configuration: restore them if the diff changed them.
    try:
        patched_pyproject = sandbox.read_file("pyproject.toml")
    except FileNotFoundError:
        patched_pyproject = None
    if _pytest_tables(patched_pyproject) != _pytest_tables(pristine_pyproject):
        flags = [*flags, "modified_test_config:pyproject.toml"]
        log.append("diff changed pyproject.toml's pytest configuration; restored the original file")
        if pristine_pyproject is None:
            sandbox.exec(["rm", "-f", "pyproject.toml"], timeout=30)
        else:
            sandbox.write_file("pyproject.toml", pristine_pyproject)

    if task.test_patch.strip():
        ok, why = _apply(sandbox, task.test_patch)
        if not ok:
            return report(resolved=False, reward=0.0, flags=flags, status="env_failure",
                          cause=f"test_patch_failed: {why[-500:]}")

    expected = list(dict.fromkeys([*task.FAIL_TO_PASS, *task.PASS_TO_PASS]))
    if not expected:
        return report(resolved=False, reward=0.0, flags=flags, status="env_failure",
                      cause="no_tests: task lists no FAIL_TO_PASS/PASS_TO_PASS tests")
    junit = f"/tmp/junit-{uuid.uuid4().hex}.xml"
    pytest_argv = [python, "-m", "pytest", "-p", "no:cacheprovider", f"--rootdir={WORKSPACE}",
                   f"--confcutdir={WORKSPACE}", f"--junitxml={junit}", "-o", "junit_family=xunit2",
                   "-q", *expected]
    # stdout carries only the junit report; pytest's own output goes to stderr.
    script = f"{shlex.join(pytest_argv)} 1>&2; rc=$?; cat {junit} 2>/dev/null; exit $rc"
    env = {"PYTHONDONTWRITEBYTECODE": "1", "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", "PYTHONHASHSEED": "0"}
    res = sandbox.exec(script, timeout=timeout, env=env, max_output_bytes=8_000_000)
    log.append(res.stderr)
    if res.timed_out:
        return report(resolved=False, reward=0.0, flags=flags, runner_exit_code=None, status="env_failure",
                      cause=f"runner_timeout: tests ran past {timeout:g}s")
    xml_text = res.stdout.strip()
    outcomes: dict[tuple[str, str], str] | None = None
    if xml_text:
        try:
            outcomes = parse_junit(xml_text)
        except ET.ParseError as exc:
            log.append(f"junit report unreadable: {exc}")
    if outcomes is None:
        return report(resolved=False, reward=0.0, flags=flags, runner_exit_code=res.exit_code,
                      status="env_failure", cause=f"runner_crashed: no junit report (exit {res.exit_code})")
    tests = {nodeid: _lookup(outcomes, nodeid) for nodeid in expected}
    resolved = res.exit_code == 0 and all(v == "passed" for v in tests.values())
    if res.exit_code == 0 and not resolved:
        flags = [*flags, "tests_skipped_or_missing"]
    return report(resolved=resolved, reward=1.0 if resolved else 0.0, tests=tests,
                  runner_exit_code=res.exit_code, flags=flags, status="ok")
