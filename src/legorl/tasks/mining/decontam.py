"""Decontamination: no mined task may touch what a SWE-bench instance is about.

Rules, against every instance of every SWE-bench suite on this machine (Verified and Lite, from the
SWE-bench data directory, :mod:`legorl.tasks.swebench`) of the *same repository* (``owner/name``,
case ignored):

1. **function**: a mined task whose gold or test patch edits a function (file + qualified name)
   that the instance's gold or test patch edits is excluded;
2. **fix commit**: a mined commit that makes the same change as the instance's gold patch
   (:func:`legorl.tasks.mining.patches.diff_key`), or whose parent is the instance's base commit and
   which edits a file the gold patch edits, is excluded: it *is* the instance's fix (SWE-bench's
   records carry no fix commit id, so the commit is recognised by what it does and where it starts).

An instance's functions are read from its files at its base commit, taken from the mined
repository itself when it has that commit, else from SWE-bench's shipped bundles
(``repos/owner__name.bundle``); with neither, from the names its hunks carry (git's hunk headers
and the ``def``/``class`` lines it touches), and rule 1 then matches any function of the same file
whose qualified name holds such a name. Each exclusion carries its reason, the instance and how the
instance's functions were known (``tree`` or ``hunk headers``).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path

from legorl.errors import TaskError
from legorl.tasks.mining.functions import MODULE_SCOPE
from legorl.tasks.mining.patches import diff_key, edited_functions, edited_lines, hunk_names, post_images
from legorl.tasks.mining.sources import run_git


@dataclass(frozen=True)
class InstanceEdits:
    instance_id: str
    repo: str
    base_commit: str
    functions: frozenset[tuple[str, str]]  # (file, qualified name): from the base tree
    names: frozenset[tuple[str, str]]  # (file, bare name): from hunk headers, when no tree
    gold_files: frozenset[str]
    gold_key: str
    known_from: str  # "tree" | "hunk headers"


class Decontaminator:
    """The rules above for one mining run; instances are read once per repository."""

    def __init__(self, swebench_dir: Path | None = None) -> None:
        from legorl.settings import settings

        self.swebench_dir = Path(swebench_dir) if swebench_dir is not None else settings().swebench_dir
        self._records: list | None = None
        self._by_repo: dict[str, list[InstanceEdits]] = {}
        self._lock = threading.Lock()
        self.suites_read: list[str] = []

    @property
    def available(self) -> bool:
        return bool(self._all_records())

    def _all_records(self) -> list:
        if self._records is None:
            from legorl.tasks.loader import read_record_file
            from legorl.tasks.swebench import SUITES

            records = []
            for suite in SUITES.values():
                path = self.swebench_dir / suite.file
                if path.is_file():
                    records += read_record_file(path)
                    self.suites_read.append(suite.name)
            self._records = records
        return self._records

    def instances(self, repo: str, git_dir: Path | None = None) -> list[InstanceEdits]:
        """The instances of ``repo`` with what they edit (``git_dir``: the mined repository, which
        may hold their base commits)."""
        key = repo.lower()
        with self._lock:
            if key not in self._by_repo:
                tasks = [t for t in self._all_records() if t.repo.lower() == key]
                self._by_repo[key] = [self._edits(t, git_dir) for t in tasks]
            return self._by_repo[key]

    def _edits(self, task, git_dir: Path | None) -> InstanceEdits:  # a Task
        reader = self._reader(task.repo, task.base_commit, git_dir)
        both = task.patch + ("\n" if not task.patch.endswith("\n") else "") + task.test_patch
        functions = edited_functions(both, reader, post_images(both, reader)) if reader is not None else set()
        return InstanceEdits(
            task.instance_id,
            task.repo,
            task.base_commit,
            frozenset(f for f in functions if f[1] != MODULE_SCOPE),
            frozenset() if reader is not None else frozenset(hunk_names(both)),
            frozenset(e.path for e in edited_lines(task.patch)),
            diff_key(task.patch),
            "tree" if reader is not None else "hunk headers",
        )

    def _reader(self, repo: str, commit: str, git_dir: Path | None):  # path -> text | None
        """A reader of files at ``commit``, from the mined repository or SWE-bench's bundle; None
        when neither has the commit."""
        where: tuple[Path, str] | None = None
        if git_dir is not None and commit:
            try:
                run_git(["cat-file", "-e", f"{commit}^{{commit}}"], git_dir)
                where = (git_dir, commit)
            except TaskError:
                where = None
        if where is None:
            from legorl.tasks.swebench import BundleRepos

            bundles = BundleRepos(self.swebench_dir / "repos")
            try:
                if commit and bundles.unavailable(repo, commit) is None:
                    where = (bundles.mirror(repo), f"refs/tags/base/{commit}")
            except TaskError:
                where = None
        if where is None:
            return None
        cwd, rev = where

        def read(path: str) -> str | None:
            try:
                return run_git(["show", f"{rev}:{path}"], cwd)
            except TaskError:
                return None

        return read

    def function_conflict(
        self, repo: str, git_dir: Path | None, touched: set[tuple[str, str]]
    ) -> tuple[str, str] | None:
        """(instance id, reason) when a touched ``(file, qualified name)`` is an instance's; else None."""
        for inst in self.instances(repo, git_dir):
            hit = sorted(touched & inst.functions)
            if hit:
                path, name = hit[0]
                return inst.instance_id, (
                    f"edits {path}::{name}, which {inst.instance_id}'s gold or test patch edits (known from its tree)"
                )
            for path, name in sorted(touched):
                coarse = {n for p, n in inst.names if p == path}
                parts = set(name.replace(".<locals>.", ".").split("."))
                if coarse & parts:
                    return inst.instance_id, (
                        f"edits {path}::{name}, and {inst.instance_id}'s patches touch "
                        f"{', '.join(sorted(coarse & parts))} in that file (known from its hunk headers)"
                    )
        return None

    def fix_commit(self, repo: str, git_dir: Path | None, parent: str, gold_patch: str) -> tuple[str, str] | None:
        """(instance id, reason) when the mined commit (parent, gold patch) is an instance's fix."""
        key = diff_key(gold_patch)
        files = {e.path for e in edited_lines(gold_patch)}
        for inst in self.instances(repo, git_dir):
            if key == inst.gold_key:
                return inst.instance_id, f"makes the same change as {inst.instance_id}'s gold patch"
            if parent == inst.base_commit and files & inst.gold_files:
                return inst.instance_id, (
                    f"is {inst.instance_id}'s fix: its parent is the instance's base commit and it edits "
                    f"{', '.join(sorted(files & inst.gold_files))}"
                )
        return None
