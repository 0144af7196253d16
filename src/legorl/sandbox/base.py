"""The sandbox interface: a place where a harness or a grader runs commands on one repo copy.

Backends (bubblewrap, podman/docker) implement :class:`SandboxBackend` and :class:`Sandbox`. Inside
every sandbox the repository is at ``/workspace`` and there is no network; the gateway, when
attached, is reachable as ``http://127.0.0.1:<port>`` through a bind-mounted Unix socket and a
forwarder (the rest of what an exec sees inside: :mod:`legorl.sandbox.inside`).
:class:`HostWorkspaceSandbox` is what the backends whose workspace is a host directory share.
"""

from __future__ import annotations

import abc
import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, Self, runtime_checkable

from legorl.errors import SandboxError
from legorl.sandbox.git import workspace_diff

WORKSPACE = "/workspace"
# The sandbox's own user and home. Every backend runs commands with ``HOME=SANDBOX_HOME``, a writable
# directory private to the sandbox (kept across its execs, removed with it) that holds nothing of the
# host; harnesses may put generated config there (or point HOME elsewhere, e.g. /tmp, per exec).
SANDBOX_HOME = "/home/agent"
SANDBOX_USER = "agent"
SANDBOX_UID = 1000  # bwrap: the uid/gid inside its user namespace (see legorl.sandbox.bwrap)
SANDBOX_GID = 1000


@dataclass
class ExecResult:
    exit_code: int
    stdout: str
    stderr: str
    duration_s: float
    timed_out: bool = False
    truncated: bool = False
    killed_by_signal: int | None = None
    cause: str = ""  # why it ended abnormally: "timeout after 5.0s", "pids limit (256) reached", ...
    killed_from_outside: bool = False  # the sandbox itself (not a process inside it) was killed


@dataclass(frozen=True)
class SandboxSpec:
    """What to build a sandbox from.

    source_dir: a directory holding the repository (copied, never modified).
    gateway_socket: a Unix socket of the gateway to expose inside as 127.0.0.1:gateway_port.
    base_commit: when ``source_dir`` is a git repository, the commit to start from (else its files).
    setup_commands: run in the repository before the base commit is recorded (instance layer).
    env_recipe: a :class:`legorl.sandbox.images.EnvRecipe` (requirements, setup) or None (stdlib).
    image: container backends only: run this image instead of the cached base image.
    extra_layers: read-only (host path, mount point) pairs, e.g. harness layers.
    The history of the sandbox's repository is always cut to one commit (see sandbox/images.py).
    """

    source_dir: Path
    gateway_socket: Path | None = None
    gateway_port: int = 8000
    memory_mb: int = 2048
    max_pids: int = 256
    env: Mapping[str, str] = field(default_factory=dict)
    base_commit: str = ""
    setup_commands: tuple[str, ...] = ()
    env_recipe: object | None = None
    image: str | None = None
    # Read-only layers mounted inside: (host path, mount point), e.g. a harness layer at
    # /opt/legorl-harness (see legorl.harnesses.install); the hiding masks still apply over them.
    extra_layers: tuple[tuple[str, str], ...] = ()


@runtime_checkable
class Sandbox(Protocol):
    name: str
    workdir: Path  # host path of the writable repository copy

    def exec(
        self,
        cmd: list[str] | str,
        timeout: float = 60.0,
        env: Mapping[str, str] | None = None,
        cwd: str = WORKSPACE,
        max_output_bytes: int = 200_000,
        stdin: str | None = None,
    ) -> ExecResult: ...

    def read_file(self, path: str) -> str: ...

    def read_bytes(self, path: str) -> bytes: ...

    def write_file(self, path: str, content: str) -> None: ...

    def write_bytes(self, path: str, data: bytes) -> None: ...

    def diff(self) -> str:
        """Unified diff of the workspace against the repo state it was created from."""

    def destroy(self) -> None: ...


@runtime_checkable
class SandboxBackend(Protocol):
    name: str

    def create(self, spec: SandboxSpec) -> Sandbox: ...


class HostWorkspaceSandbox(abc.ABC):
    """What the sandboxes whose ``/workspace`` is a host directory (bwrap, podman) share:
    ``read_file``/``write_file`` on the host copy, confined to it (no ``..`` or symlink escapes);
    :meth:`diff` by git *inside* the sandbox (:func:`legorl.sandbox.git.workspace_diff`); use as a
    context manager that destroys the sandbox on exit."""

    name: str
    workdir: Path
    base_commit: str  # the instance layer's commit the workspace started from
    _destroyed: bool

    @abc.abstractmethod
    def exec(
        self,
        cmd: list[str] | str,
        timeout: float = 60.0,
        env: Mapping[str, str] | None = None,
        cwd: str = WORKSPACE,
        max_output_bytes: int = 200_000,
        stdin: str | None = None,
    ) -> ExecResult: ...

    @abc.abstractmethod
    def destroy(self) -> None: ...

    def diff(self) -> str:
        """The workspace's changes since :attr:`base_commit`, as a binary git diff."""
        return workspace_diff(self, self.base_commit)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.destroy()

    def _host_path(self, path: str) -> Path:
        if self._destroyed:
            raise SandboxError(f"sandbox {self.name} was destroyed")
        rel = path
        if rel == WORKSPACE or rel.startswith(WORKSPACE + "/"):
            rel = rel[len(WORKSPACE) :]
        elif rel.startswith("/"):
            raise SandboxError(f"path {path!r} is outside {WORKSPACE}")
        rel = rel.lstrip("/")
        if not rel:
            raise SandboxError(f"path {path!r} names the workspace itself, not a file")
        root = self.workdir.resolve()
        target = (root / rel).resolve()
        if not target.is_relative_to(root) or target == root:
            raise SandboxError(f"path {path!r} escapes {WORKSPACE}")
        return target

    def read_file(self, path: str) -> str:
        target = self._host_path(path)
        try:
            return target.read_text(encoding="utf-8", errors="replace")
        except FileNotFoundError:
            raise FileNotFoundError(f"{path}: no such file in sandbox {self.name}") from None

    def read_bytes(self, path: str) -> bytes:
        """A workspace file's exact bytes (``read_file`` decodes, replacing what is not UTF-8)."""
        target = self._host_path(path)
        try:
            return target.read_bytes()
        except FileNotFoundError:
            raise FileNotFoundError(f"{path}: no such file in sandbox {self.name}") from None

    def write_file(self, path: str, content: str) -> None:
        self.write_bytes(path, content.encode("utf-8"))

    def write_bytes(self, path: str, data: bytes) -> None:
        target = self._host_path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        if not target.parent.resolve().is_relative_to(self.workdir.resolve()):  # a parent became a link
            raise SandboxError(f"path {path!r} escapes {WORKSPACE}")
        # a new file, never a rewrite in place: what `git apply` (and an editor's save) leaves. A file the
        # grader writes back must stat like one the patch tool wrote (a fresh inode, not the base
        # layer's), or code under test could tell a twin run from the main run (docs/reward-integrity.md)
        mode = 0o644  # a new file's, whatever the umask (git's "new file mode 100644")
        if target.is_symlink() or target.is_file():
            if not target.is_symlink():
                mode = stat.S_IMODE(target.stat().st_mode)  # what it was: git apply keeps it too
            target.unlink()
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            os.fchmod(fd, mode)
            with os.fdopen(fd, "wb", closefd=False) as fh:
                fh.write(data)
        finally:
            os.close(fd)
