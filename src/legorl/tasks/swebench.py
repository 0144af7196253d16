"""SWE-bench suites by name, with each instance's repository tree from a git bundle or a clone.

Suites (:data:`SUITES`): ``swebench-verified`` (``SWE-bench_Verified-test.parquet``; an evaluation
set, so ``eval_only``) and ``swebench-lite-dev`` (``SWE-bench_Lite-dev.parquet``), read from the
SWE-bench data directory (``LEGORL_SWEBENCH_DIR``; :func:`legorl.settings.Settings.swebench_dir`).

Where an instance's tree comes from is a :class:`RepoSource`:

* :class:`BundleRepos` (the default: ``<data dir>/repos``): one ``owner__name.bundle`` per
  repository, holding one parentless commit per instance tagged ``base/<upstream sha>``;
* :class:`GitRepos` (``--repos-dir``): a directory of clones or mirrors (``owner__name``,
  ``owner__name.git`` or ``owner/name``), or a URL prefix such as ``https://github.com`` for users
  with the network (the repository is cloned once, bare).

Either way the repository is fetched once into a bare mirror under
``$LEGORL_HOME/swebench/git/``, and an instance's tree is ``git archive`` of its ``base_commit``,
written once under ``$LEGORL_HOME/tasks/sources/swebench/`` (temporary directory, then rename, so a
concurrent loader never sees half a tree). The tree has no history, so no future commit can leak
into a rollout; the instance layer then keeps it as a single commit, like every task's.

An instance whose repository or commit is not available is *unavailable*, with the reason
(:func:`instance_status`); loading a suite returns only the available ones, and naming an
unavailable instance explicitly is an error that says why.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import uuid
from abc import ABC, abstractmethod
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Protocol, runtime_checkable

from legorl.diffs import touched_paths
from legorl.errors import TaskError
from legorl.rules import SYMPY_RUNNER_FILES, is_test_support
from legorl.sandbox.git import export_commit, git_argv, host_git_env
from legorl.settings import legorl_home, settings
from legorl.tasks.model import Task, TaskEnvironment

__all__ = [
    "SUITES",
    "BundleRepos",
    "GitRepos",
    "commit_tree",
    "is_pytest_id",
    "names_repository_file",
    "InstanceStatus",
    "RepoSource",
    "SwebenchSuite",
    "default_repo_source",
    "instance_status",
    "is_swebench_suite",
    "load_swebench_suite",
    "read_records",
    "repo_key",
    "suite_file",
]


@dataclass(frozen=True)
class SwebenchSuite:
    name: str
    file: str  # parquet file in the SWE-bench data directory
    eval_only: bool  # an evaluation set: training on it needs an explicit override


SUITES: dict[str, SwebenchSuite] = {
    s.name: s
    for s in (
        SwebenchSuite("swebench-verified", "SWE-bench_Verified-test.parquet", eval_only=True),
        SwebenchSuite("swebench-lite-dev", "SWE-bench_Lite-dev.parquet", eval_only=False),
    )
}
_SHA = re.compile(r"^[0-9a-f]{40}$")
_GIT_TIMEOUT_S = 600  # a first clone of a large repository over the network


def is_swebench_suite(name: object) -> bool:
    return isinstance(name, str) and name in SUITES


def repo_key(repo: str) -> str:
    """``owner/name`` → ``owner__name`` (SWE-bench's own spelling in instance ids and image names)."""
    return repo.replace("/", "__")


def _git(args: list[str], cwd: Path, what: str, stdout: int | None = subprocess.PIPE) -> str:
    try:
        res = subprocess.run(
            git_argv(*args),
            cwd=cwd,
            env=host_git_env(cwd),
            stdout=stdout,
            stderr=subprocess.PIPE,
            timeout=_GIT_TIMEOUT_S,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        raise TaskError(f"{what}: cannot run git: {exc}") from None
    if res.returncode != 0:
        raise TaskError(f"{what}: git {args[0]} failed: {' '.join(res.stderr.decode('utf-8', 'replace').split())}")
    return res.stdout.decode("utf-8", "replace") if res.stdout is not None else ""


@runtime_checkable
class RepoSource(Protocol):
    """Where repository trees come from."""

    def describe(self) -> str: ...

    def unavailable(self, repo: str, commit: str) -> str | None:
        """Why ``commit`` of ``repo`` cannot be had (None: it can)."""

    def export(self, repo: str, commit: str, dest: Path) -> None:
        """Write the tree of ``commit`` into the empty directory ``dest`` (no ``.git``)."""


class _MirroredRepos(ABC):
    """Shared by both sources: one bare mirror per repository under ``$LEGORL_HOME/swebench/git``,
    filled by :meth:`_fill`, and ``git archive`` out of it."""

    def _mirror_root(self) -> Path:
        return legorl_home() / "swebench" / "git"

    @abstractmethod
    def _fill(self, repo: str, mirror: Path) -> None:
        """Fetch what the source holds of ``repo`` into the empty bare repository ``mirror``."""

    def _fingerprint(self, repo: str) -> str:
        """Changes when the origin changes, so the mirror is refreshed (empty: never)."""
        return ""

    def mirror(self, repo: str) -> Path:
        """The bare mirror of ``repo``, built (atomically) when missing or stale."""
        root = self._mirror_root()
        mirror = root / f"{repo_key(repo)}.git"
        stamp = mirror / "legorl-origin"
        fingerprint = self._fingerprint(repo)
        if mirror.is_dir() and (not fingerprint or (stamp.is_file() and stamp.read_text() == fingerprint)):
            return mirror
        root.mkdir(parents=True, exist_ok=True)
        tmp = root / f".tmp-{mirror.name}-{uuid.uuid4().hex[:8]}"
        try:
            _git(["init", "-q", "--bare", str(tmp)], root, f"mirror of {repo}")
            self._fill(repo, tmp)
            (tmp / "legorl-origin").write_text(fingerprint)
            old = root / f".old-{mirror.name}-{uuid.uuid4().hex[:8]}"
            if mirror.is_dir():
                os.rename(mirror, old)
            os.rename(tmp, mirror)
            shutil.rmtree(old, ignore_errors=True)
        except OSError as exc:
            raise TaskError(f"cannot build the git mirror of {repo} in {root}: {exc}") from None
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        return mirror

    def _ref(self, repo: str, commit: str) -> str:
        return f"refs/tags/base/{commit}"

    def export(self, repo: str, commit: str, dest: Path) -> None:
        why = export_commit(self.mirror(repo), self._ref(repo, commit), dest, timeout=_GIT_TIMEOUT_S)
        if why is not None:
            raise TaskError(f"{repo} at {commit}: cannot export the tree: {why}")


class BundleRepos(_MirroredRepos):
    """``owner__name.bundle`` files in ``directory``: a parentless commit per instance, tagged
    ``base/<upstream sha>`` (the format of ``../shared/data/swebench/repos``)."""

    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory)

    def describe(self) -> str:
        return f"git bundles in {self.directory}"

    def _bundle(self, repo: str) -> Path:
        return self.directory / f"{repo_key(repo)}.bundle"

    def _fingerprint(self, repo: str) -> str:
        st = self._bundle(repo).stat()
        return f"bundle {st.st_size} {st.st_mtime_ns}"

    def _fill(self, repo: str, mirror: Path) -> None:
        _git(["fetch", "-q", str(self._bundle(repo)), "refs/tags/base/*:refs/tags/base/*"], mirror, f"bundle of {repo}")

    def unavailable(self, repo: str, commit: str) -> str | None:
        if not self._bundle(repo).is_file():
            return f"repository {repo} is not shipped ({self._bundle(repo).name} not in {self.directory})"
        if commit not in _tags(self, repo, self._fingerprint(repo)):
            return f"{self._bundle(repo).name} has no tag base/{commit}"
        return None


class GitRepos(_MirroredRepos):
    """Clones or mirrors in a directory (``owner__name``, ``owner__name.git`` or ``owner/name``), or a
    URL prefix (``https://github.com``: ``<prefix>/owner/name``). The repository is cloned once, bare;
    a commit the clone lacks makes the instance unavailable."""

    def __init__(self, location: str | Path) -> None:
        self.location = str(location)

    def describe(self) -> str:
        return f"git repositories at {self.location}"

    def _is_url(self) -> bool:
        return "://" in self.location or self.location.startswith("git@")

    def _origin(self, repo: str) -> str | None:
        if self._is_url():
            return f"{self.location.rstrip('/')}/{repo}"
        base = Path(self.location).expanduser()
        for candidate in (base / repo_key(repo), base / f"{repo_key(repo)}.git", base / repo):
            if candidate.is_dir():
                return str(candidate.resolve())
        return None

    def _fingerprint(self, repo: str) -> str:
        return f"git {self._origin(repo)}"

    def _fill(self, repo: str, mirror: Path) -> None:
        origin = self._origin(repo)
        if origin is None:
            raise TaskError(f"no clone of {repo} in {self.location}")
        _git(["fetch", "-q", origin, "+refs/heads/*:refs/heads/*", "+refs/tags/*:refs/tags/*"], mirror, f"{origin}")

    def _ref(self, repo: str, commit: str) -> str:
        return commit

    def unavailable(self, repo: str, commit: str) -> str | None:
        if self._origin(repo) is None:
            return f"no clone of {repo} in {self.location}"
        mirror = self.mirror(repo)
        for attempt in range(2):
            try:
                _git(["cat-file", "-e", f"{commit}^{{commit}}"], mirror, repo)
                return None
            except TaskError:
                if attempt == 0:  # the clone may have gained commits since the mirror was made
                    self._fill(repo, mirror)
        return f"the clone of {repo} at {self._origin(repo)} lacks commit {commit}"


@cache
def _tags_cached(mirror: str, fingerprint: str) -> frozenset[str]:
    out = _git(["for-each-ref", "--format=%(refname)", "refs/tags/base/"], Path(mirror), mirror)
    return frozenset(line.rsplit("/", 1)[-1] for line in out.split())


def _tags(source: BundleRepos, repo: str, fingerprint: str) -> frozenset[str]:
    """The ``base/<sha>`` tags of a bundle's mirror (read once per bundle version)."""
    return _tags_cached(str(source.mirror(repo)), fingerprint)


def default_repo_source(repos_dir: str | Path | None = None) -> RepoSource:
    """``repos_dir`` (a directory of clones, or a URL prefix) or, by default, the bundles in the
    SWE-bench data directory."""
    if repos_dir:
        return GitRepos(repos_dir)
    return BundleRepos(settings().swebench_dir / "repos")


def suite_file(suite: str) -> Path:
    """The parquet file of a SWE-bench suite (it may not exist on this machine)."""
    return settings().swebench_dir / SUITES[suite].file


def read_records(suite: str) -> list[Task]:
    """Every record of a SWE-bench suite, parsed (no tree materialised)."""
    from legorl.tasks.loader import read_record_file

    spec = SUITES[suite]
    path = suite_file(suite)
    if not path.is_file():
        raise TaskError(
            f"suite {suite}: {path} not found (set LEGORL_SWEBENCH_DIR to the directory holding {spec.file})"
        )
    return read_record_file(path)


@dataclass(frozen=True)
class InstanceStatus:
    instance_id: str
    repo: str
    version: str
    reason: str | None  # None: available

    @property
    def available(self) -> bool:
        return self.reason is None


def instance_status(tasks: Iterable[Task], source: RepoSource) -> list[InstanceStatus]:
    out = []
    for t in tasks:
        if not _SHA.match(t.base_commit):
            reason: str | None = f"field 'base_commit': {t.base_commit!r} is not a 40-hex commit id"
        else:
            reason = source.unavailable(t.repo, t.base_commit)
        out.append(InstanceStatus(t.instance_id, t.repo, t.version, reason))
    return out


def commit_tree(task: Task, commit: str, source: RepoSource, name: str) -> Path:
    """The history-free tree of ``task.repo`` at ``commit``, written once under
    ``$LEGORL_HOME/tasks/sources/swebench/<name>``."""
    from legorl.tasks.loader import tree_once

    def fill(tmp: Path) -> None:
        tmp.mkdir()
        try:
            source.export(task.repo, commit, tmp)
        except TaskError as exc:
            raise TaskError(f"instance {task.instance_id}: {exc}") from None

    return tree_once(legorl_home() / "tasks" / "sources" / "swebench", name, fill)


def instance_tree(task: Task, source: RepoSource) -> Path:
    """The history-free tree of ``task`` at its base commit."""
    return commit_tree(task, task.base_commit, source, f"{task.instance_id[:80]}-{task.base_commit[:12]}")


def load_swebench_suite(
    suite: str,
    *,
    repos: Iterable[str] = (),
    instances: Iterable[str] = (),
    source: RepoSource | None = None,
) -> list[Task]:
    """The available instances of ``suite`` (after the ``repos``/``instances`` filters), each with
    ``source_dir`` set to its tree. An instance named in ``instances`` that is unknown or unavailable
    is an error naming it and the reason; unavailable instances a filter merely matches are skipped
    (:func:`instance_status` lists them)."""
    from legorl.tasks.loader import filter_tasks

    source = source or default_repo_source()
    wanted = list(instances)
    tasks = filter_tasks(read_records(suite), repos=repos, instances=wanted, origin=suite)
    status = {s.instance_id: s for s in instance_status(tasks, source)}
    named_unavailable = [f"{i}: {status[i].reason}" for i in wanted if not status[i].available]
    if named_unavailable:
        raise TaskError(f"suite {suite}: unavailable instances: " + "; ".join(named_unavailable))
    out = []
    for t in tasks:
        if status[t.instance_id].available:
            tree = instance_tree(t, source)
            env = _environment(t, source, tree)
            update: dict[str, object] = {"source_dir": tree, "tier": "swebench", "environment": env}
            if env.runner == "pytest":
                # the parser also reads the reports of pytest runs *inside* tests (pytester): ids of
                # files that exist in neither the tree nor the test patch name no test of the repository
                added = set(touched_paths(t.test_patch))
                update |= {
                    k: [i for i in getattr(t, k) if is_pytest_id(i) and names_repository_file(i, tree, added)]
                    for k in ("FAIL_TO_PASS", "PASS_TO_PASS")
                }
            support = [str(p.relative_to(tree)) for p in tree.glob("*/testing/**/*.py")]
            support += [str(p.relative_to(tree)) for p in tree.glob("src/*/testing/**/*.py")]
            if env.runner == "sympy":  # its runner is test infrastructure: protected like the tests
                support += [f for f in SYMPY_RUNNER_FILES if (tree / f).is_file()]
            # a package's own test support (sphinx/testing/) is protected like the tests
            update["test_files"] = [
                *t.test_files,
                *sorted(f for f in support if is_test_support(f) or f in SYMPY_RUNNER_FILES),
            ]
            out.append(t.model_copy(update=update))
    return out


def is_pytest_id(test: str) -> bool:
    """A pytest node id (``path.py::name``, or a module); SWE-bench's lists also hold artifacts of
    its log parser (``[100%]``), which name no test and are left out."""
    return "::" in test or test.endswith(".py")


def names_repository_file(test: str, tree: Path, added: set[str]) -> bool:
    """The test id's file exists in ``tree`` or among the ``added`` paths of the test patch."""
    path = test.split("::", 1)[0]
    return path in added or (tree / path).is_file()


def _environment(task: Task, source: RepoSource, tree: Path) -> TaskEnvironment:
    """The instance's environment; one that cannot be described here (no interpreter for its
    version, no spec) is kept as unsupported on every backend, with the cause, so that grading it is an
    environment failure that says why, never a run with the wrong interpreter."""
    from legorl.tasks.swebench_env import task_environment

    try:
        return task_environment(task, source, tree)
    except TaskError as exc:
        return TaskEnvironment(python="", interpreter="", unsupported={"all": str(exc)})
