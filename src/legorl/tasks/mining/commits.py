"""Mined commits: history that changes code and tests together (SWE-Gym, R2E-Gym).

A commit is a candidate when it has one parent and its diff from that parent:

* changes at least one Python source file (``.py``/``.pyi`` that the grader's rules call source:
  :func:`legorl.grading.rules.classify_path`) and at least one test module;
* is text (no binary file), touches at most ``max_files`` source files and ``max_lines`` source
  lines (the bound of a task an agent can be asked to do).

Its **gold patch** is the source part; its **test patch** the test part (test modules, conftest
files, anything under a ``tests``/``test``/``testing`` directory); anything else it changes
(documentation, changelogs, packaging and CI files) is left out of both: the grader would not apply
it, and no test may need it (if one does, validation says so). Candidates come newest first.

Validation (in :mod:`legorl.tasks.mining.pipeline`) runs the test modules the test patch touches
twice on the parent's tree: with the test patch (*before*) and with both patches (*after*);
FAIL_TO_PASS = the tests passing after and not before, PASS_TO_PASS = those passing at both.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import date
from pathlib import Path

from legorl.rules import TEST_DIRS, PathKind, classify_path, is_test_module, is_test_suite_file
from legorl.tasks.mining.sources import run_git

_FIELD = "\x1e"
_ENTRY = "\x1d"


@dataclass(frozen=True)
class CommitCandidate:
    sha: str
    parent: str
    day: date
    subject: str
    source_files: tuple[str, ...]  # gold side
    test_side: tuple[str, ...]  # test patch side
    run_files: tuple[str, ...]  # test modules to run (touched, present after the commit)
    lines: int  # source lines changed


@dataclass
class CommitScan:
    candidates: list[CommitCandidate] = field(default_factory=list)
    skipped: dict[str, int] = field(default_factory=dict)  # reason -> commits

    def skip(self, reason: str) -> None:
        self.skipped[reason] = self.skipped.get(reason, 0) + 1


def is_test_side(path: str) -> bool:
    """A file of the repository's tests (module, conftest, data under a test directory)."""
    return is_test_suite_file(path) or any(part in TEST_DIRS for part in path.split("/")[:-1])


_NOT_SOURCE_DIRS = frozenset({"docs", "doc", "examples", "example", "benchmarks", "bench", "scripts", "tools", "ci"})
_NOT_SOURCE_FILES = frozenset({"setup.py", "noxfile.py", "fabfile.py", "tasks.py", "conf.py"})


def is_source_side(path: str) -> bool:
    """A Python file of the project's code (not its tests, docs, examples, build or CI scripts)."""
    parts = path.split("/")
    if parts[0] in _NOT_SOURCE_DIRS or parts[0].startswith(".") or (len(parts) == 1 and parts[0] in _NOT_SOURCE_FILES):
        return False
    return path.endswith((".py", ".pyi")) and classify_path(path) is PathKind.SOURCE and not is_test_side(path)


def is_collectable(path: str) -> bool:
    name = path.rsplit("/", 1)[-1]
    return is_test_module(path) and (name.startswith("test_") or name.endswith("_test.py"))


def scan_commits(git_dir: Path, head: str, *, max_files: int = 6, max_lines: int = 300) -> CommitScan:
    """The candidate commits reachable from ``head``, newest first, and why the others are not."""
    log = run_git(["log", "--no-renames", "--numstat", f"--format={_ENTRY}%H %P{_FIELD}%cs{_FIELD}%s", head], git_dir)
    scan = CommitScan()
    for shas, day, subject, numstat in _entries(log):
        parts = shas.split()
        if len(parts) != 2:
            scan.skip("root commit" if len(parts) == 1 else "merge")
            continue
        files: dict[str, int] = {}
        binary = False
        for line in numstat:
            added, removed, path = (line.split("\t", 2) + ["", "", ""])[:3]
            if added == "-" or removed == "-":
                binary = True
            else:
                files[path] = int(added) + int(removed)
        source = sorted(p for p in files if is_source_side(p))
        tests = sorted(p for p in files if is_test_side(p))
        if not source:
            scan.skip("no source change")
        elif not any(is_test_module(p) for p in tests):
            scan.skip("no test change")
        elif binary:
            scan.skip("binary files")
        elif len(source) > max_files:
            scan.skip(f"more than {max_files} source files")
        elif sum(files[p] for p in source) > max_lines:
            scan.skip(f"more than {max_lines} source lines")
        else:
            scan.candidates.append(
                CommitCandidate(
                    sha=parts[0],
                    parent=parts[1],
                    day=date.fromisoformat(day),
                    subject=subject,
                    source_files=tuple(source),
                    test_side=tuple(tests),
                    run_files=tuple(p for p in tests if is_collectable(p)),
                    lines=sum(files[p] for p in source),
                )
            )
    return scan


def _entries(log: str) -> list[tuple[str, str, str, list[str]]]:
    """(``sha parent...``, day, subject, numstat lines) per commit of the log."""
    out = []
    for entry in log.split(_ENTRY)[1:]:
        head, _, numstat = entry.partition("\n")
        fields = head.split(_FIELD, 2)
        if len(fields) == 3:
            lines = [ln for ln in numstat.splitlines() if ln.strip()]
            out.append((fields[0].strip(), fields[1].strip(), fields[2].strip(), lines))
    return out
