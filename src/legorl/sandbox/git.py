"""Git as LEGO-RL runs it: one fixed configuration, on the host and inside sandboxes.

Every git LEGO-RL starts (building an instance layer, diffing a workspace, applying a patch in the
grader, checking a sandbox's history, authoring a task) runs as :func:`git_argv` builds it, with
:data:`GIT_CONFIG` on its command line, and, on the host, in :func:`host_git_env`:

* no hooks (``core.hooksPath=/dev/null``) and no fsmonitor: git never starts a program of the
  repository's choosing (an agent controls the ``.git/config`` of its workspace, and a task source
  may come from anywhere);
* no system or global configuration (``GIT_CONFIG_NOSYSTEM``, ``GIT_CONFIG_GLOBAL=/dev/null``, and
  ``HOME`` is the repository on the host): a user's settings cannot change what a diff or a commit is;
* a fixed identity, no signing and fixed dates: an instance layer's commit depends on its content only;
* no line-ending conversion, no automatic gc, ``main`` as the first branch, and any owner accepted
  (``safe.directory=*``: a sandbox's files belong to another uid than the one running git);
* on the host, no repository discovery above the directory git runs in (``GIT_CEILING_DIRECTORIES``):
  a tree without ``.git`` is never taken for part of a checkout around it.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import tempfile
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING

from legorl.errors import WorkspaceDiffError

if TYPE_CHECKING:  # legorl.sandbox.base uses workspace_diff
    from legorl.sandbox.base import Sandbox

GIT_CONFIG: tuple[str, ...] = (
    "-c",
    "core.hooksPath=/dev/null",
    "-c",
    "core.fsmonitor=false",
    "-c",
    "user.name=legorl",
    "-c",
    "user.email=legorl@localhost",
    "-c",
    "commit.gpgsign=false",
    "-c",
    "safe.directory=*",
    "-c",
    "core.autocrlf=false",
    "-c",
    "init.defaultBranch=main",
    "-c",
    "gc.auto=0",
)
GIT_ENV: Mapping[str, str] = MappingProxyType(
    {
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": "/dev/null",
        "GIT_TERMINAL_PROMPT": "0",
        "GIT_AUTHOR_DATE": "2000-01-01T00:00:00Z",
        "GIT_COMMITTER_DATE": "2000-01-01T00:00:00Z",
    }
)
# Largest workspace diff read back from a sandbox; a larger one is an error, never a cut patch.
DIFF_LIMIT = 64 * 1024 * 1024


def git_argv(*args: str) -> list[str]:
    """``git`` with :data:`GIT_CONFIG` and then ``args``."""
    return ["git", *GIT_CONFIG, *args]


def host_git_env(cwd: Path | str) -> dict[str, str]:
    """The whole environment of a git run on the host in ``cwd``: the caller's ``PATH``, ``HOME`` set
    to ``cwd`` and :data:`GIT_ENV`; git looks for a repository in ``cwd`` only."""
    cwd = Path(cwd)
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(cwd),
        "GIT_CEILING_DIRECTORIES": str(cwd.parent),
        **GIT_ENV,
    }


# Overruled for every path of an export: projects mark their tests (or more) export-ignore to slim their
# release archives, but a task's tree is a checkout, tests included (SWE-bench clones and checks out).
# The rest stays what git archive does: checkout's eol/ident conversions, and export-subst, which
# writes the commit's version into versioneer/setuptools-scm files that a tree without history needs.
# $GIT_DIR/info/attributes outranks every .gitattributes in the tree.
EXPORT_ATTRIBUTES = "* -export-ignore\n"


def _git_out(cwd: Path, *args: str) -> tuple[int, str]:
    res = subprocess.run(git_argv(*args), cwd=cwd, env=host_git_env(cwd), capture_output=True, timeout=120)
    out = res.stdout if res.returncode == 0 else res.stderr
    return res.returncode, " ".join(out.decode("utf-8", "replace").split())


def _export_view(git_dir: Path, ref: str, view: Path) -> tuple[str | None, str]:
    """A bare clone of ``git_dir`` at ``view`` that shares its objects (``--shared``: nothing copied but
    the refs, which export-subst's ``%(describe)`` reads) under :data:`EXPORT_ATTRIBUTES`: (the
    commit ``ref`` names, None and why when it cannot)."""
    rc, commit = _git_out(git_dir, "rev-parse", "--verify", "--end-of-options", f"{ref}^{{commit}}")
    if rc != 0:
        return None, f"no commit {ref}: {commit}"
    rc, common = _git_out(git_dir, "rev-parse", "--path-format=absolute", "--git-common-dir")
    if rc != 0:
        return None, common
    rc, out = _git_out(view.parent, "clone", "-q", "--bare", "--shared", common, str(view))
    if rc != 0:
        return None, out
    (view / "info").mkdir(exist_ok=True)
    (view / "info" / "attributes").write_text(EXPORT_ATTRIBUTES)
    return commit, ""


def export_commit(git_dir: Path, ref: str, dest: Path, *, timeout: float = 600) -> str | None:
    """Write the tree of ``ref`` in the repository ``git_dir`` into the existing directory ``dest``
    (``git archive | tar -x``, streamed; no ``.git``, files owned by the caller), every file of the
    commit whatever the tree's ``.gitattributes`` say (:data:`EXPORT_ATTRIBUTES`; ``git_dir`` is not
    changed). None when it worked, else what git or tar said (each caller raises
    its own error with it)."""
    with tempfile.TemporaryDirectory(prefix="legorl-export-") as tmp:
        view = Path(tmp) / "view.git"
        commit, why = _export_view(git_dir, ref, view)
        if commit is None:
            return why
        archive = subprocess.Popen(
            git_argv("archive", "--format=tar", commit),
            cwd=view,
            env=host_git_env(view),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        try:
            untar = subprocess.run(
                ["tar", "-x", "--no-same-owner", "-C", str(dest)],
                stdin=archive.stdout,
                capture_output=True,
                timeout=timeout,
            )
        except subprocess.TimeoutExpired:
            archive.kill()
            untar = None
        finally:
            if archive.stdout is not None:
                archive.stdout.close()
            err = archive.stderr.read().decode("utf-8", "replace") if archive.stderr is not None else ""
            rc = archive.wait(timeout=60)
    if untar is None:
        return f"git archive {ref} | tar -x: no end after {timeout:.0f} s"
    if rc != 0 or untar.returncode != 0:
        return " ".join((err or untar.stderr.decode("utf-8", "replace")).split()) or f"exit {rc}/{untar.returncode}"
    return None


def workspace_diff(sandbox: Sandbox, base_commit: str) -> str:
    """``git add -A`` + ``git diff --cached --binary <base_commit>`` of the sandbox's workspace, run
    *inside* the sandbox, so git never reads an agent-controlled ``.git/config`` on the host.
    :class:`WorkspaceDiffError` when git fails on the workspace or the diff exceeds :data:`DIFF_LIMIT`."""
    git = shlex.join(git_argv())
    script = (
        f"{git} add -A >/dev/null && {git} diff --cached --binary --no-ext-diff --no-textconv --no-color "
        f"{shlex.quote(base_commit)} --"
    )
    res = sandbox.exec(script, timeout=300, env=GIT_ENV, max_output_bytes=DIFF_LIMIT)
    if res.timed_out or res.exit_code != 0:
        raise WorkspaceDiffError(
            f"git diff failed in sandbox {sandbox.name} (exit {res.exit_code}): {res.stderr.strip()[-2000:]}"
        )
    if res.truncated:
        raise WorkspaceDiffError(f"diff of sandbox {sandbox.name} exceeds {DIFF_LIMIT} bytes")
    return res.stdout


__all__ = ["DIFF_LIMIT", "GIT_CONFIG", "GIT_ENV", "export_commit", "git_argv", "host_git_env", "workspace_diff"]
