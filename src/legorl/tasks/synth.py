"""SWE-smith-style task synthesis: break a working repository on purpose, keep what the tests catch.

From a local Python repository whose tests pass: parse its (non-test) modules with :mod:`ast`,
list single-point mutations inside functions (flip a comparison, ``+``/``-``, off-by-one on an
integer constant, ``and``/``or``, negate an ``if``, drop a ``return`` value, ...), apply them one at
a time (as a minimal text edit, so the rest of the file keeps its formatting) and run the repo's
tests in a sandbox. A mutation is kept when some tests that passed before now fail: the mutated
repository becomes the task's source, the gold patch is the reverse diff, FAIL_TO_PASS the broken
tests and PASS_TO_PASS the ones still passing. The problem statement names the failing tests and
their assertion messages, never the mutation.

Output: a JSONL file of task records whose ``source_dir`` (relative to the file) points to a
materialized copy of each mutated repository in ``FILE.d/<instance_id>/`` (no ``.git``: history
would give the fix away); ``load_suite(FILE)`` reads it back.
"""

from __future__ import annotations

import ast
import difflib
import hashlib
import json
import random
import re
import shlex
import shutil
import subprocess
import sys
import uuid
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from legorl import junit, pyparse
from legorl.errors import LegoRLError, TaskError
from legorl.rules import is_test_suite_file
from legorl.tasks.ast_edits import ModuleEdits, SourceText
from legorl.tasks.model import Task, Tier

_COPY_IGNORE = shutil.ignore_patterns(
    ".git",
    "__pycache__",
    ".pytest_cache",
    "*.pyc",
    ".venv",
    "venv",
    ".tox",
    ".nox",
    ".mypy_cache",
    ".ruff_cache",
    "*.egg-info",
    "build",
    "dist",
)
_SKIP_DIRS = {
    ".git",
    "__pycache__",
    ".pytest_cache",
    ".venv",
    "venv",
    ".tox",
    ".nox",
    "build",
    "dist",
    "node_modules",
    ".mypy_cache",
    ".ruff_cache",
}
_MESSAGE_LIMIT = 600


# -- test runs -------------------------------------------------------------------------------------


@dataclass
class TestRun:
    exit_code: int | None
    outcomes: dict[str, str]  # nodeid -> passed|failed|error|skipped
    messages: dict[str, str]  # nodeid -> failure/error message
    duration_s: float
    timed_out: bool = False
    unmapped: list[str] = field(default_factory=list)  # junit entries with no test file (collection errors)
    log: str = ""

    @property
    def passed(self) -> set[str]:
        return {t for t, v in self.outcomes.items() if v == "passed"}


def parse_junit_report(xml_text: str, repo: Path) -> tuple[dict[str, str], dict[str, str], list[str]]:
    outcomes: dict[str, str] = {}
    messages: dict[str, str] = {}
    unmapped: list[str] = []
    for case in junit.parse_cases(xml_text):
        nodeid = junit.case_nodeid(case, lambda rel: (repo / rel).is_file())
        if nodeid is None:
            unmapped.append(f"{case.classname}::{case.name} ({case.outcome})")
            continue
        outcomes[nodeid] = junit.worse(case.outcome, outcomes.get(nodeid))
        if case.message is not None:
            messages[nodeid] = case.message[:_MESSAGE_LIMIT]
    return outcomes, messages, unmapped


def run_tests(
    backend,
    repo: Path,
    edits: dict[str, str] | None = None,
    timeout: float = 300,
    python: str | None = None,
) -> TestRun:
    """Run the repo's whole test suite in a fresh sandbox (after writing ``edits``: path -> text)."""
    from legorl.sandbox.base import WORKSPACE, SandboxSpec

    python = python or sys.executable
    sandbox = backend.create(SandboxSpec(source_dir=Path(repo)))
    try:
        for path, text in (edits or {}).items():
            sandbox.write_file(path, text)
        junit = f"/tmp/junit-{uuid.uuid4().hex}.xml"
        argv = [
            python,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            f"--rootdir={WORKSPACE}",
            f"--confcutdir={WORKSPACE}",
            f"--junitxml={junit}",
            "-o",
            "junit_family=xunit2",
            "-q",
        ]
        script = shlex.join(argv) + f" 1>&2; rc=$?; cat {junit} 2>/dev/null; exit $rc"
        env = {"PYTHONDONTWRITEBYTECODE": "1", "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", "PYTHONHASHSEED": "0"}
        res = sandbox.exec(script, timeout=timeout, env=env, max_output_bytes=8_000_000)
    finally:
        try:
            sandbox.destroy()
        except Exception:
            pass
    if res.timed_out:
        return TestRun(None, {}, {}, res.duration_s, timed_out=True, log=res.stderr[-4000:])
    xml_text = res.stdout.strip()
    if not xml_text:
        return TestRun(res.exit_code, {}, {}, res.duration_s, log=res.stderr[-4000:])
    try:
        outcomes, messages, unmapped = parse_junit_report(xml_text, Path(repo))
    except ET.ParseError:
        return TestRun(res.exit_code, {}, {}, res.duration_s, log=res.stderr[-4000:])
    return TestRun(res.exit_code, outcomes, messages, res.duration_s, unmapped=unmapped, log=res.stderr[-4000:])


# -- mutations -------------------------------------------------------------------------------------


@dataclass
class Mutation:
    path: str  # repo-relative
    lineno: int
    kind: str
    before: str  # source text of the mutated span
    after: str
    original: str  # whole file
    mutated: str  # whole file

    @property
    def key(self) -> str:
        raw = f"{self.path}:{self.lineno}:{self.kind}:{self.before}->{self.after}"
        return hashlib.sha1(raw.encode()).hexdigest()[:8]


_CMP_FLIP = {
    ast.Lt: ast.LtE,
    ast.LtE: ast.Lt,
    ast.Gt: ast.GtE,
    ast.GtE: ast.Gt,
    ast.Eq: ast.NotEq,
    ast.NotEq: ast.Eq,
    ast.Is: ast.IsNot,
    ast.IsNot: ast.Is,
    ast.In: ast.NotIn,
    ast.NotIn: ast.In,
}
_CMP_TEXT = {
    ast.Lt: "<",
    ast.LtE: "<=",
    ast.Gt: ">",
    ast.GtE: ">=",
    ast.Eq: "==",
    ast.NotEq: "!=",
    ast.Is: "is",
    ast.IsNot: "is not",
    ast.In: "in",
    ast.NotIn: "not in",
}
_CMP_RE = {
    ast.Lt: r"(?<![<>=!])<(?![<=])",
    ast.LtE: r"<=",
    ast.Gt: r"(?<![<>=!-])>(?![>=])",
    ast.GtE: r">=",
    ast.Eq: r"==",
    ast.NotEq: r"!=",
    ast.Is: r"\bis\b",
    ast.IsNot: r"\bis\s+not\b",
    ast.In: r"\bin\b",
    ast.NotIn: r"\bnot\s+in\b",
}


def source_files(repo: Path) -> list[str]:
    """Repo-relative paths of the Python modules that may be mutated (tests and setup excluded)."""
    out = []
    for path in sorted(repo.rglob("*.py")):
        rel = path.relative_to(repo).as_posix()
        if any(part in _SKIP_DIRS or part.startswith(".") for part in rel.split("/")[:-1]):
            continue
        if is_test_suite_file(rel) or rel in ("setup.py", "noxfile.py", "fabfile.py") or rel.startswith("docs/"):
            continue
        out.append(rel)
    return out


def test_files(repo: Path) -> list[str]:
    out = []
    for path in sorted(repo.rglob("*.py")):
        rel = path.relative_to(repo).as_posix()
        if any(part in _SKIP_DIRS or part.startswith(".") for part in rel.split("/")[:-1]):
            continue
        if is_test_suite_file(rel):
            out.append(rel)
    return out


def _function_nodes(tree: ast.AST) -> Iterator[ast.AST]:
    """Every node inside a function body (each once, even for nested functions)."""
    seen: set[int] = set()
    for fn in ast.walk(tree):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for stmt in fn.body:
                for node in ast.walk(stmt):
                    if id(node) not in seen:
                        seen.add(id(node))
                        yield node


def _docstring_ids(tree: ast.AST) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Module)):
            body = getattr(node, "body", [])
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                ids.add(id(body[0].value))
    return ids


def _replace_in_gap(src: SourceText, start: int, end: int, pattern: str, new: str) -> tuple[int, int, str] | None:
    gap = src.text[start:end]
    matches = list(re.finditer(pattern, gap))
    if len(matches) != 1:
        return None
    m = matches[0]
    return start + m.start(), start + m.end(), new


def _is_str_like(node: ast.AST) -> bool:
    return isinstance(node, ast.JoinedStr) or (isinstance(node, ast.Constant) and isinstance(node.value, (str, bytes)))


def find_mutations(repo: Path, rel: str) -> list[Mutation]:
    """Every single-point mutation of the functions in one module."""
    text = (repo / rel).read_text(encoding="utf-8")
    try:
        tree = pyparse.parse(text)
    except SyntaxError:
        return []
    src = SourceText(text)
    docstrings = _docstring_ids(tree)
    edits: list[tuple[str, int, int, int, str]] = []  # kind, lineno, start, end, new text

    for node in _function_nodes(tree):
        if isinstance(node, ast.Compare):
            left = node.left
            for op, right in zip(node.ops, node.comparators):
                flip = _CMP_FLIP.get(type(op))
                if flip is not None:
                    hit = _replace_in_gap(
                        src, src.span(left)[1], src.span(right)[0], _CMP_RE[type(op)], _CMP_TEXT[flip]
                    )
                    if hit:
                        edits.append(("flip_comparison", node.lineno, *hit))
                left = right
        elif isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub)):
            if _is_str_like(node.left) or _is_str_like(node.right):
                continue
            old, new = ("+", "-") if isinstance(node.op, ast.Add) else ("-", "+")
            pattern = r"\+" if old == "+" else r"-"
            hit = _replace_in_gap(src, src.span(node.left)[1], src.span(node.right)[0], pattern, new)
            if hit:
                edits.append(("swap_plus_minus", node.lineno, *hit))
        elif isinstance(node, ast.AugAssign) and isinstance(node.op, (ast.Add, ast.Sub)):
            if _is_str_like(node.value):
                continue
            new = "-=" if isinstance(node.op, ast.Add) else "+="
            hit = _replace_in_gap(src, src.span(node.target)[1], src.span(node.value)[0], r"[+-]=", new)
            if hit:
                edits.append(("swap_plus_minus", node.lineno, *hit))
        elif isinstance(node, ast.BoolOp):
            old, new = ("and", "or") if isinstance(node.op, ast.And) else ("or", "and")
            for a, b in zip(node.values, node.values[1:]):
                hit = _replace_in_gap(src, src.span(a)[1], src.span(b)[0], rf"\b{old}\b", new)
                if hit:
                    edits.append(("swap_and_or", node.lineno, *hit))
        elif isinstance(node, ast.If):
            start, end = src.span(node.test)
            if isinstance(node.test, ast.UnaryOp) and isinstance(node.test.op, ast.Not):
                inner_start, inner_end = src.span(node.test.operand)
                new = text[inner_start:inner_end]
                if "\n" in new:
                    new = f"({new})"
            else:
                new = f"not ({text[start:end]})"
            edits.append(("negate_if", node.lineno, start, end, new))
        elif isinstance(node, ast.Return) and node.value is not None:
            if isinstance(node.value, ast.Constant) and node.value.value is None:
                continue
            start, end = src.span(node)
            edits.append(("drop_return_value", node.lineno, start, end, "return"))
        elif (
            isinstance(node, ast.Constant)
            and type(node.value) is int
            and id(node) not in docstrings
            and abs(node.value) <= 10_000
        ):
            start, end = src.span(node)
            edits.append(("off_by_one", node.lineno, start, end, str(node.value + 1)))
            if node.value > 0:
                edits.append(("off_by_one", node.lineno, start, end, str(node.value - 1)))

    judge = ModuleEdits(text, tree)
    return [
        Mutation(rel, lineno, kind, text[start:end], new, text, text[:start] + new + text[end:])
        for kind, lineno, start, end, new in edits
        if judge.changes_tree(start, end, new)
    ]


def reverse_diff(m: Mutation) -> str:
    """The gold patch: a git-style diff turning the mutated file back into the original."""
    a = m.mutated.splitlines(keepends=True)
    b = m.original.splitlines(keepends=True)
    out = [f"diff --git a/{m.path} b/{m.path}\n"]
    for line in difflib.unified_diff(a, b, fromfile=f"a/{m.path}", tofile=f"b/{m.path}", n=3):
        if not line.endswith("\n"):
            line += "\n\\ No newline at end of file\n"
        out.append(line)
    return "".join(out)


# -- synthesis -------------------------------------------------------------------------------------


def _slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", name).strip("-") or "repo"


def problem_statement(repo_name: str, run: TestRun, f2p: list[str]) -> str:
    lines = [f"Some tests of `{repo_name}` fail.", ""]
    for nodeid in f2p[:3]:
        outcome = run.outcomes.get(nodeid, "failed")
        msg = run.messages.get(nodeid, "").strip()
        verb = "fails" if outcome == "failed" else "errors" if outcome == "error" else f"is {outcome}"
        if msg:
            lines += [f"`{nodeid}` {verb}:", "", "```", msg, "```", ""]
        else:
            lines += [f"`{nodeid}` {verb}.", ""]
    if len(f2p) > 3:
        lines += ["Also failing: " + ", ".join(f"`{t}`" for t in f2p[3:]) + ".", ""]
    lines.append(
        "The other tests pass. Find the bug in the code and fix it so that these tests pass; do not change the tests."
    )
    return "\n".join(lines)


def _interleave(mutations: list[Mutation], rng: random.Random) -> list[Mutation]:
    """Shuffled, then round-robin over mutation kinds so that the first attempts are varied."""
    rng.shuffle(mutations)
    by_kind: dict[str, list[Mutation]] = {}
    for m in mutations:
        by_kind.setdefault(m.kind, []).append(m)
    kinds = list(by_kind)
    rng.shuffle(kinds)
    out = []
    while any(by_kind.values()):
        for k in kinds:
            if by_kind[k]:
                out.append(by_kind[k].pop())
    return out


def synthesize(
    repo: Path | str,
    out: Path | str,
    max_tasks: int = 10,
    seed: int = 0,
    backend=None,
    timeout: float | None = None,
    max_attempts: int | None = None,
    tier: Tier = "trivial",
    on_event: Callable[[str], None] | None = None,
) -> list[Task]:
    """Write up to ``max_tasks`` synthesized tasks for ``repo`` to ``out`` (JSONL) and ``out``.d/.

    ``timeout``: per test run (default: 5x the baseline run, at least 30 s). ``max_attempts``: how
    many mutations to try at most (default ``5 * max_tasks + 10``). Raises TaskError for bad input.
    """
    say = on_event or (lambda _msg: None)
    inputs = _check_inputs(Path(repo).expanduser(), Path(out).expanduser(), max_tasks)
    repo, out = inputs.repo, inputs.out
    if backend is None:
        from legorl.sandbox.bwrap import BwrapBackend

        backend = BwrapBackend()
    baseline = _baseline(backend, repo, timeout, say)
    rng = random.Random(seed)
    candidates = _interleave([m for rel in inputs.modules for m in find_mutations(repo, rel)], rng)
    if not candidates:
        raise TaskError(f"{repo}: found nothing to mutate inside functions")
    attempts = max_attempts or 5 * max_tasks + 10

    out_dir = out.parent / f"{out.name}.d"
    if out_dir.exists():
        shutil.rmtree(out_dir)
    out_dir.mkdir(parents=True)
    job = _SynthJob(
        repo=repo,
        out=out,
        out_dir=out_dir,
        backend=backend,
        baseline=baseline,
        run_timeout=timeout or max(30.0, 5 * baseline.duration_s),
        tests=test_files(repo),
        slug=_slug(repo.name),
        tier=tier,
        seed=seed,
        say=say,
    )
    kept: list[_Kept] = []
    used_lines: set[tuple[str, int]] = set()
    tried = 0
    for m in candidates:
        if len(kept) >= max_tasks or tried >= attempts:
            break
        if (m.path, m.lineno) in used_lines:
            continue
        tried += 1
        one = _try_mutation(job, m)
        if one is not None:
            kept.append(one)
            used_lines.add((m.path, m.lineno))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("".join(json.dumps(k.record) + "\n" for k in kept), encoding="utf-8")
    return [k.task for k in kept]


@dataclass(frozen=True)
class _Inputs:
    """The checked arguments of :func:`synthesize`: the resolved repository, the output file, the
    modules to mutate."""

    repo: Path
    out: Path
    modules: list[str]


def _check_inputs(repo: Path, out: Path, max_tasks: int) -> _Inputs:
    if not repo.exists():
        raise TaskError(f"{repo}: no such directory")
    if not repo.is_dir():
        raise TaskError(f"{repo}: not a directory (give the root of a Python repository)")
    repo = repo.resolve()
    if max_tasks < 1:
        raise TaskError("--max must be at least 1")
    if out.suffix.lower() != ".jsonl":
        raise TaskError(f"{out}: the output file must end in .jsonl")
    modules = source_files(repo)
    if not modules:
        raise TaskError(f"{repo}: no Python modules to mutate (tests and setup.py are not mutated)")
    return _Inputs(repo, out, modules)


def _baseline(backend, repo: Path, timeout: float | None, say: Callable[[str], None]) -> TestRun:
    """The unmutated repository's test run; TaskError unless some tests run and all of them pass."""
    say(f"baseline: running the tests of {repo}")
    try:
        baseline = run_tests(backend, repo, timeout=timeout or 600)
    except LegoRLError as exc:
        raise TaskError(f"{repo}: cannot run the tests in a sandbox: {exc}") from None
    if baseline.timed_out:
        raise TaskError(f"{repo}: the test suite ran past {timeout or 600:g}s before any mutation")
    if not baseline.outcomes and baseline.exit_code is not None:
        raise TaskError(
            f"{repo}: pytest found no tests or crashed (exit {baseline.exit_code}):\n{baseline.log[-1500:]}"
        )
    broken = sorted(t for t, v in baseline.outcomes.items() if v in ("failed", "error")) + baseline.unmapped
    if broken or baseline.exit_code != 0:
        raise TaskError(
            f"{repo}: the tests must pass before mutation, but {len(broken)} fail "
            f"(exit {baseline.exit_code}): {', '.join(broken[:10]) or baseline.log[-1500:]}"
        )
    if not baseline.passed:
        raise TaskError(f"{repo}: no test passes (all skipped?)")
    say(f"baseline: {len(baseline.passed)} tests pass in {baseline.duration_s:.1f}s")
    return baseline


@dataclass(frozen=True)
class _SynthJob:
    """What trying one mutation needs: the repository, its baseline run, where tasks are written."""

    repo: Path
    out: Path
    out_dir: Path
    backend: object
    baseline: TestRun
    run_timeout: float
    tests: list[str]
    slug: str
    tier: Tier
    seed: int
    say: Callable[[str], None]


@dataclass(frozen=True)
class _Kept:
    """A mutation that became a task: the task (its source the materialized copy) and its JSONL record."""

    task: Task
    record: dict


def _try_mutation(job: _SynthJob, m: Mutation) -> _Kept | None:
    """Run the tests on the mutated repository; a task when some passing tests now fail and the
    reverse diff applies to the materialized copy, else None (the reason told to ``job.say``)."""
    baseline, say = job.baseline, job.say
    run = run_tests(job.backend, job.repo, edits={m.path: m.mutated}, timeout=job.run_timeout)
    where = f"{m.path}:{m.lineno} {m.kind} ({m.before!r} -> {m.after!r})"
    if run.timed_out or not run.outcomes:
        say(f"skip {where}: {'timed out' if run.timed_out else 'no test report'}")
        return None
    if run.unmapped or set(run.outcomes) != set(baseline.outcomes):
        say(f"skip {where}: tests not collected the same way (collection error)")
        return None
    f2p = [t for t in baseline.outcomes if t in baseline.passed and run.outcomes.get(t) != "passed"]
    p2p = [t for t in baseline.outcomes if t in baseline.passed and run.outcomes.get(t) == "passed"]
    if not f2p:
        say(f"skip {where}: no test notices it")
        return None
    iid = f"synth__{job.slug}-{m.key}"
    task_dir = job.out_dir / iid
    shutil.copytree(job.repo, task_dir, ignore=_COPY_IGNORE)
    (task_dir / m.path).write_text(m.mutated, encoding="utf-8")
    patch = reverse_diff(m)
    check = subprocess.run(["git", "apply", "--check", "-"], input=patch, text=True, cwd=task_dir, capture_output=True)
    if check.returncode != 0:
        shutil.rmtree(task_dir)
        say(f"skip {where}: reverse diff does not apply: {check.stderr.strip()}")
        return None
    record = {
        "instance_id": iid,
        "repo": f"local/{job.repo.name}",
        "base_commit": "",
        "problem_statement": problem_statement(job.repo.name, run, f2p),
        "hints_text": "",
        "patch": patch,
        "test_patch": "",
        "FAIL_TO_PASS": f2p,
        "PASS_TO_PASS": p2p,
        "tier": job.tier,
        "source_dir": f"{job.out_dir.name}/{iid}",
        "test_command": "python -m pytest",
        "test_files": job.tests,
        "synth": {"path": m.path, "line": m.lineno, "kind": m.kind, "seed": job.seed},
    }
    task = Task.parse(record, origin=str(job.out))
    say(f"keep {iid}: {where}; {len(f2p)} failing, {len(p2p)} still passing")
    return _Kept(task.model_copy(update={"source_dir": task_dir.resolve()}), record)
