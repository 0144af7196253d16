"""What the miner mines: a local git repository, a git bundle, or a released sdist on PyPI.

Every source becomes one git repository of the miner's own under
``$LEGORL_HOME/tasks/mining/git/<owner__name>-<hash of the origin>`` (refreshed on each run, never
checked out), and a head commit:

* **a local repository** (a directory with ``.git``, or a bare one): its ``HEAD`` (or ``ref``) is
  fetched; the repository name comes from ``--repo``, else its ``origin`` remote's URL, else
  ``local/<directory name>``;
* **a git bundle** (``owner__name.bundle``, the format of ``../shared/data/mining``): every branch
  and tag; the head is the bundle's ``HEAD``, else ``main``/``master``, else its only branch; the
  repository name is the file name's ``owner__name``;
* **``pypi:NAME==VERSION``**: ``pip download --no-binary :all:`` of the sdist (cached under
  ``$LEGORL_HOME/tasks/mining/pypi``), unpacked and committed as one commit dated by the newest file
  in it (so the same sdist is the same commit, and packages resolve as they were on its day). The
  repository name is the GitHub (or GitLab) project its metadata links to, else ``pypi/NAME``. An
  sdist without tests is an error: there is nothing to validate a task with.

Only the commits method needs history; an sdist has a single commit.
"""

from __future__ import annotations

import contextlib
import email.parser
import fcntl
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tarfile
import uuid
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

from legorl.errors import TaskError
from legorl.rules import is_test_module
from legorl.sandbox.git import export_commit, git_argv, host_git_env
from legorl.settings import legorl_home

SourceKind = Literal["git", "bundle", "pypi"]
_PYPI = re.compile(r"^pypi:([A-Za-z0-9][A-Za-z0-9._-]*)==([A-Za-z0-9][A-Za-z0-9.+!_-]*)$")
_FORGE = re.compile(r"(?:github\.com|gitlab\.com)[/:]([A-Za-z0-9_.-]+)/([A-Za-z0-9_.-]+)")
_GIT_TIMEOUT_S = 900


@dataclass(frozen=True)
class MiningSource:
    label: str  # how records name the source: "bundle:pallets__click.bundle", "pypi:click==8.1.7", "git:click"
    repo: str  # owner/name
    git_dir: Path  # the miner's repository (a work tree is never checked out)
    head: str  # the commit mined from
    kind: SourceKind

    @property
    def has_history(self) -> bool:
        return bool(run_git(["rev-list", "--max-count=2", self.head], self.git_dir).split()[1:])


def mining_root() -> Path:
    """Everything the miner caches: ``$LEGORL_HOME/tasks/mining``."""
    return legorl_home() / "tasks" / "mining"


def run_git(args: list[str], cwd: Path, *, stdin: bytes | None = None, env: dict[str, str] | None = None) -> str:
    """``git args`` in ``cwd`` (LEGO-RL's fixed git configuration); TaskError with git's words on failure."""
    try:
        res = subprocess.run(
            git_argv(*args),
            cwd=cwd,
            env=env or host_git_env(cwd),
            input=stdin,
            capture_output=True,
            timeout=_GIT_TIMEOUT_S,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        raise TaskError(f"git {args[0]} in {cwd}: {exc}") from None
    if res.returncode != 0:
        raise TaskError(f"git {args[0]} in {cwd} failed: {' '.join(res.stderr.decode('utf-8', 'replace').split())}")
    return res.stdout.decode("utf-8", "replace")


def export_tree(git_dir: Path, commit: str, dest: Path) -> None:
    """Write the tree of ``commit`` into ``dest`` (created; no ``.git``)."""
    dest.mkdir(parents=True)
    why = export_commit(git_dir, commit, dest)
    if why is not None:
        raise TaskError(f"cannot export {commit[:12]} of {git_dir.name}: {why}")


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _work_repo(repo: str, origin: str) -> Path:
    key = hashlib.sha256(origin.encode()).hexdigest()[:10]
    path = mining_root() / "git" / f"{repo.replace('/', '__')}-{key}"
    if not (path / ".git").is_dir():
        tmp = path.with_name(f".tmp-{path.name}-{uuid.uuid4().hex[:6]}")
        tmp.mkdir(parents=True)
        try:
            run_git(["init", "-q"], tmp)
            os.rename(tmp, path)
        except OSError:
            if not (path / ".git").is_dir():
                raise
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return path


def repo_from_url(url: str) -> str | None:
    """``owner/name`` of a GitHub or GitLab URL (https or ssh), None for anything else."""
    m = _FORGE.search(url)
    if m is None:
        return None
    name = m.group(2).removesuffix(".git")
    return f"{m.group(1)}/{name}" if name else None


def open_source(spec: str, *, repo: str | None = None, ref: str | None = None) -> MiningSource:
    """The :class:`MiningSource` of ``spec`` (a directory, a ``.bundle`` file or ``pypi:NAME==VERSION``),
    fetched into the miner's repository. ``repo``: the repository's ``owner/name`` (overrides what
    the source says); ``ref``: the commit or branch to mine from (default: the source's head)."""
    if spec.startswith("pypi:"):
        m = _PYPI.match(spec)
        if m is None:
            raise TaskError(f"source {spec!r}: write a PyPI release as pypi:NAME==VERSION")
        return _pypi_source(m.group(1), m.group(2), repo)
    path = Path(spec).expanduser()
    if path.is_file():
        return _bundle_source(path.resolve(), repo, ref)
    if path.is_dir():
        return _git_source(path.resolve(), repo, ref)
    raise TaskError(f"source {spec!r}: not a git repository, a git bundle nor pypi:NAME==VERSION")


def _bundle_source(bundle: Path, repo: str | None, ref: str | None) -> MiningSource:
    heads = {}
    for line in run_git(["bundle", "list-heads", str(bundle)], bundle.parent).splitlines():
        sha, _, name = line.partition(" ")
        heads[name.strip()] = sha.strip()
    if not heads:
        raise TaskError(f"{bundle}: not a git bundle with any branch")
    stem = bundle.name.removesuffix(".bundle")
    name = repo or (stem.replace("__", "/", 1) if "__" in stem else f"local/{stem}")
    work = _work_repo(name, f"bundle {bundle} {bundle.stat().st_size}")
    with _locked(work.with_suffix(".lock")):
        run_git(["fetch", "-q", "--no-tags", str(bundle), "+refs/heads/*:refs/mined/heads/*"], work)
    if ref:
        head = _resolve(work, ref, bundle.name)
    else:
        pick = next((heads[h] for h in ("HEAD", "refs/heads/main", "refs/heads/master") if h in heads), None)
        branches = [sha for h, sha in heads.items() if h.startswith("refs/heads/")]
        if pick is None and len(branches) != 1:
            raise TaskError(f"{bundle}: no HEAD, main or master and {len(branches)} branches: name one with --ref")
        head = pick or branches[0]
    return MiningSource(f"bundle:{bundle.name}", name, work, head, "bundle")


def _git_source(path: Path, repo: str | None, ref: str | None) -> MiningSource:
    if not ((path / ".git").exists() or (path / "HEAD").is_file()):
        raise TaskError(f"{path}: not a git repository (no .git)")
    name = repo
    if name is None:
        try:
            name = repo_from_url(run_git(["config", "--get", "remote.origin.url"], path).strip())
        except TaskError:
            name = None
    name = name or f"local/{path.name}"
    work = _work_repo(name, f"git {path}")
    with _locked(work.with_suffix(".lock")):
        run_git(["fetch", "-q", "--no-tags", str(path), f"+{ref or 'HEAD'}:refs/mined/head"], work)
    head = _resolve(work, "refs/mined/head", str(path))
    return MiningSource(f"git:{path.name}", name, work, head, "git")


def _resolve(work: Path, ref: str, where: str) -> str:
    try:
        return run_git(["rev-parse", "--verify", f"{ref}^{{commit}}"], work).strip()
    except TaskError:
        raise TaskError(f"{where}: no commit {ref!r}") from None


# -- PyPI ------------------------------------------------------------------------------------------


def _download_sdist(name: str, version: str) -> Path:
    cache = mining_root() / "pypi" / f"{name.lower()}-{version}"
    found = sorted(p for p in cache.glob("*") if p.suffix in (".gz", ".zip", ".bz2", ".tgz")) if cache.is_dir() else []
    if found:
        return found[0]
    tmp = cache.with_name(f".tmp-{cache.name}-{uuid.uuid4().hex[:6]}")
    tmp.mkdir(parents=True)
    try:
        res = subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--no-deps",
                "--no-binary",
                ":all:",
                "--disable-pip-version-check",
            ]
            + ["-q", "-d", str(tmp), f"{name}=={version}"],
            capture_output=True,
            text=True,
            timeout=900,
        )
        if res.returncode != 0:
            why = " ".join((res.stderr or res.stdout).split())[-800:]
            raise TaskError(f"pypi:{name}=={version}: pip download of the sdist failed: {why}")
        files = sorted(tmp.iterdir())
        if not files:
            raise TaskError(f"pypi:{name}=={version}: pip downloaded no sdist")
        shutil.rmtree(cache, ignore_errors=True)
        os.rename(tmp, cache)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return cache / files[0].name


def _unpack(archive: Path, dest: Path) -> datetime:
    """Unpack an sdist's single top directory into ``dest``; the newest file time in it."""
    dest.mkdir(parents=True)
    scratch = dest.with_name(dest.name + ".x")
    newest = 0.0
    try:
        if archive.suffix == ".zip":
            with zipfile.ZipFile(archive) as zf:
                zf.extractall(scratch)
                newest = max((datetime(*i.date_time, tzinfo=UTC).timestamp() for i in zf.infolist()), default=0)
        else:
            with tarfile.open(archive) as tf:
                members = tf.getmembers()
                tf.extractall(scratch, filter="data")
                newest = max((float(m.mtime) for m in members if m.isfile()), default=0)
        tops = list(scratch.iterdir())
        top = tops[0] if len(tops) == 1 and tops[0].is_dir() else scratch
        for child in top.iterdir():
            os.rename(child, dest / child.name)
    except (OSError, tarfile.TarError, zipfile.BadZipFile) as exc:
        raise TaskError(f"{archive.name}: cannot unpack the sdist: {exc}") from None
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return datetime.fromtimestamp(newest or 946684800, UTC)


def metadata_repo(pkg_info: str) -> str | None:
    """The ``owner/name`` an sdist's ``PKG-INFO`` links to (a project URL or its home page)."""
    meta = email.parser.Parser().parsestr(pkg_info)
    urls = [u.split(",", 1)[-1].strip() for u in meta.get_all("Project-URL") or []]
    urls += [meta.get("Home-page") or "", meta.get("Download-URL") or ""]
    return next((r for r in map(repo_from_url, urls) if r), None)


def _pypi_source(name: str, version: str, repo: str | None) -> MiningSource:
    archive = _download_sdist(name, version)
    label = f"pypi:{name}=={version}"
    work = _work_repo(f"pypi/{name.lower()}", f"{label} {hashlib.sha256(archive.read_bytes()).hexdigest()}")
    with _locked(work.with_suffix(".lock")):
        try:
            head = run_git(["rev-parse", "--verify", "refs/mined/sdist^{commit}"], work).strip()
        except TaskError:
            head = _commit_sdist(archive, work, label)
    try:
        linked = metadata_repo(run_git(["show", f"{head}:PKG-INFO"], work))
    except TaskError:
        linked = None
    tree_repo = repo or linked or f"pypi/{name.lower()}"
    files = run_git(["ls-tree", "-r", "--name-only", head], work).splitlines()
    if not any(is_test_module(f) for f in files):
        raise TaskError(f"{label}: the sdist carries no tests (no test_*.py, *_test.py or tests/ module)")
    return MiningSource(label, tree_repo, work, head, "pypi")


def _commit_sdist(archive: Path, work: Path, label: str) -> str:
    tree = work / ".git" / f"legorl-unpack-{uuid.uuid4().hex[:6]}"
    try:
        when = _unpack(archive, tree)
        stamp = when.strftime("%Y-%m-%dT%H:%M:%SZ")
        env = {**host_git_env(work), "GIT_AUTHOR_DATE": stamp, "GIT_COMMITTER_DATE": stamp}
        git_env = {**env, "GIT_WORK_TREE": str(tree), "GIT_DIR": str(work / ".git")}
        run_git(["add", "-A", "-f", "."], tree, env=git_env)
        run_git(["commit", "-q", "--no-verify", "-m", label], tree, env=git_env)
        head = run_git(["rev-parse", "HEAD"], tree, env=git_env).strip()
        run_git(["update-ref", "refs/mined/sdist", head], work)
        run_git(["read-tree", "--empty"], work)  # the index stays empty: nothing is ever checked out here
        return head
    finally:
        shutil.rmtree(tree, ignore_errors=True)
