"""Bubblewrap sandbox backend: :class:`BwrapBackend` creates :class:`BwrapSandbox` es.

Each sandbox's ``/workspace`` is a private copy-on-write view of the cached instance layer
(:mod:`legorl.sandbox.images`; overlayfs as root, a copy otherwise); every ``exec`` starts a fresh
``bwrap``. Invariants a caller relies on: the filesystem is an allowlist (:mod:`legorl.sandbox.view`),
never the host's ``/`` minus masks; commands run as ``agent`` (:data:`~legorl.sandbox.base.SANDBOX_UID`)
with every namespace unshared (no network but ``lo``), every capability dropped and the environment
rebuilt from the spec (never on a host command line); ``timeout``, ``max_output_bytes``, memory, pids
and disk limits hold, and ``ExecResult.cause`` names the limit hit. With ``spec.gateway_socket`` the
gateway is reachable at ``127.0.0.1:<spec.gateway_port>`` inside (:mod:`legorl.sandbox.forwarder`).
``BwrapSandbox.start_trace`` and ``view_paths`` serve the monitor (:mod:`legorl.grading.monitor`).

Design (the view table, user namespaces, how each limit is enforced): docs/sandbox.md#bwrap
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Mapping
from pathlib import Path

from legorl.errors import SandboxError
from legorl.sandbox.base import (
    SANDBOX_GID,
    SANDBOX_HOME,
    SANDBOX_UID,
    WORKSPACE,
    ExecResult,
    HostWorkspaceSandbox,
    SandboxSpec,
)
from legorl.sandbox.cgroup import JOIN_FAILED, SandboxCgroup
from legorl.sandbox.hostfs import copy_workspace, discard
from legorl.sandbox.hostproc import kill_group, require_program, run_captured, signal_name
from legorl.sandbox.images import (
    EnvRecipe,
    ImageCache,
    ImageCacheUser,
    InstanceRecipe,
    Layer,
    Lease,
    bwrap_base_recipe,
    spec_recipes,
)
from legorl.sandbox.inside import (
    ENV_INSIDE,
    FORWARDER_PATH,
    GATEWAY_SOCKET_INSIDE,
    SYSTEM_PATH,
    exec_env,
    inner_command,
    inside_cwd,
)
from legorl.sandbox.overlay import is_mounted, mount_overlay, unmount
from legorl.sandbox.quota import MIB, DiskQuota
from legorl.sandbox.view import HostView, host_view, is_under
from legorl.settings import legorl_home, settings

# The environment of the host-side processes of an exec (cgroup shim, prlimit, strace, bwrap): none
# of the sandbox's variables (they reach the sandbox through bwrap's --args memfd only).
_HOST_ENV = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8"}


TRACED_SYSCALLS = (
    "execve,execveat,open,openat,openat2,creat,unlink,unlinkat,rename,renameat,renameat2,"
    "link,linkat,symlink,symlinkat,truncate,connect,getdents64,clone,clone3,fork,vfork"
)


def die_with_caller_argv() -> list[str]:
    """Prefix that kills an exec's host-side chain when the process that started it dies, however it
    dies (SIGKILL, SIGTERM without cleanup): ``setpriv --pdeathsig KILL``, kept across the execs of
    the cgroup shim, prlimit and strace. bwrap's own ``--die-with-parent`` covers only its parent,
    and under ``strace -f`` that parent is strace: without this, a killed run left strace, bwrap and
    the harness running, orphaned. Empty where util-linux's setpriv is missing."""
    setpriv = shutil.which("setpriv")
    return [setpriv, "--pdeathsig", "KILL", "--"] if setpriv else []


def strace_argv(path: Path) -> list[str]:
    """Host-side tracer for one exec: follows forks, decodes fds to paths (``-y``), appends to ``path``.
    ``getdents64`` (directory listings) lets the monitor see walks of the whole filesystem; the clone
    results (translated to host pids: the sandbox has its own PID namespace) tell it which processes
    are the sandbox's (children of its command) and which bwrap's."""
    return [
        shutil.which("strace") or "strace",
        "-f",
        "-qq",
        "--seccomp-bpf",
        "--pidns-translation",
        "-y",
        "-s",
        "512",
        "-e",
        f"trace={TRACED_SYSCALLS}",
        "-e",
        "signal=none",
        "-A",
        "-o",
        str(path),
    ]


def extra_layer_args(layers, binds: tuple[str, ...] | list[str] = ()) -> list[str]:
    """bwrap arguments mounting read-only layers ``(host path, mount point)`` (``SandboxSpec.extra_layers``).

    The sandbox's root is bwrap's own tmpfs, so a mount point need not exist on the host (``/opt`` holds
    just the layers inside). It may not shadow a sandbox mount: ``/proc``, ``/dev``, ``/workspace``,
    ``/tmp``, ``/run``, ``/etc``, the home, nor lie inside (or over) a read-only bind of the view (``binds``),
    unless it is a host directory bound at its own path that the view already shows there.
    """
    argv: list[str] = []
    for host, mount in layers:
        m = Path(mount)
        if not m.is_absolute() or m == Path("/") or ".." in m.parts:
            raise SandboxError(f"extra layer mount point {mount!r} must be an absolute path below /")
        if m.parts[1] in ("proc", "dev", "workspace") or str(m) in ("/tmp", "/run", "/etc", "/home", SANDBOX_HOME):
            raise SandboxError(f"extra layer mount point {mount!r} would shadow a sandbox mount")
        clash = next((b for b in binds if is_under(m, b) or is_under(b, m)), None)
        if (
            clash is not None
            and str(m) == os.path.realpath(host)
            and is_under(m, clash)
            and os.path.realpath(clash) == clash
        ):
            continue  # already visible at this very path (e.g. an interpreter prefix the view binds)
        if clash is not None:
            raise SandboxError(f"extra layer mount point {mount!r} would shadow a sandbox mount ({clash})")
        if not Path(host).is_dir():
            raise SandboxError(f"extra layer {host} (for {mount}) is not a directory")
        argv += ["--ro-bind", str(host), str(m)]
    return argv


def sized_tmp(system_args: list[str], disk_mb: int | None, bwrap_version: tuple[int, ...]) -> list[str]:
    """The view's system mounts with ``/tmp``'s tmpfs limited to ``disk_mb`` MiB (bwrap's ``--size``,
    0.8 and later; unchanged without a quota or on an older bwrap)."""
    if disk_mb is None or bwrap_version < (0, 8):
        return list(system_args)
    out: list[str] = []
    for i, arg in enumerate(system_args):
        if arg == "--tmpfs" and system_args[i + 1 : i + 2] == ["/tmp"]:
            out += ["--size", str(disk_mb * MIB)]
        out.append(arg)
    return out


def args_memfd(args: list[str]) -> int:
    """A memfd holding ``args`` NUL-separated, for ``bwrap --args FD`` (the caller closes it)."""
    fd = os.memfd_create("legorl-bwrap-args", os.MFD_CLOEXEC)
    try:
        data = b"".join(a.encode("utf-8", "surrogateescape") + b"\0" for a in args)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.lseek(fd, 0, os.SEEK_SET)
    except BaseException:
        os.close(fd)
        raise
    return fd


class BwrapSandbox(HostWorkspaceSandbox):
    """One repository copy; every :meth:`exec` runs in a fresh bubblewrap container over it."""

    def __init__(
        self,
        backend: BwrapBackend,
        spec: SandboxSpec,
        sandbox_dir: Path,
        base_commit: str,
        env_layer: Layer | None = None,
        cgroup: SandboxCgroup | None = None,
        python: str | None = None,
        quota: DiskQuota | None = None,
        disk_mb: int | None = None,
    ):
        self.backend = backend
        self.spec = spec
        # the interpreter inside: the env recipe's (e.g. the pyenv version a SWE-bench spec names)
        # or the backend's; its prefixes join the view and its bin leads PATH
        self.python = python or backend.python
        self.name = sandbox_dir.name
        self.sandbox_dir = sandbox_dir
        self.workdir = sandbox_dir / "workspace"
        self.home = sandbox_dir / "home"  # HOME inside (SANDBOX_HOME): private, kept across execs
        self.home.mkdir(exist_ok=True)
        self.base_commit = base_commit
        self.env_layer = env_layer  # leased while the sandbox lives
        self.cgroup = cgroup
        self.quota = quota  # the file system holding sandbox_dir (sandbox.disk_mb, when root)
        self.disk_mb = disk_mb  # its disk quota (legorl.sandbox.quota); None: none (image builds)
        self.instance_lease: Lease | None = None  # held while an overlay workspace mounts the instance layer
        self._destroyed = False
        # When set (see start_trace), every exec runs bwrap under a host-side ``strace -f`` writing
        # here: the tracer lives outside the sandbox's PID namespace, so nothing inside can see,
        # kill or detach it (used by legorl.grading.monitor during a rollout).
        self.trace_path: Path | None = None

    # -- command line ---------------------------------------------------------------------------
    def bwrap_options(self, cwd: str, env: Mapping[str, str]) -> list[str]:
        """Every bwrap option of one exec (the view, the mounts, the environment): handed to bwrap
        through a memfd (``--args``), never on a command line."""
        backend = self.backend
        view = backend.view(self.python)
        opts = ["--unshare-all", "--die-with-parent", "--new-session"]
        if backend.userns:
            opts += ["--unshare-user", "--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_GID)]
        opts += ["--hostname", "sandbox"]
        if os.geteuid() == 0:
            opts += ["--cap-drop", "ALL"]  # root keeps every capability in bwrap otherwise
        opts += sized_tmp(view.system_args, self.disk_mb, _bwrap_version(backend.bwrap))
        opts += ["--bind", str(self.home), SANDBOX_HOME]
        opts += view.tree_args
        opts += extra_layer_args(self.spec.extra_layers, view.binds)
        opts += ["--bind", str(self.workdir), WORKSPACE]
        if self.spec.gateway_socket is not None:
            opts += ["--dir", "/run/legorl", "--bind", str(self.spec.gateway_socket), GATEWAY_SOCKET_INSIDE]
        if self.env_layer is not None:
            opts += ["--ro-bind", str(self.env_layer.path), ENV_INSIDE]
        opts += ["--remount-ro", "/", "--chdir", cwd, "--clearenv"]
        for key, value in env.items():
            opts += ["--setenv", key, value]
        return opts

    def bwrap_argv(self, cwd: str, env: Mapping[str, str]) -> list[str]:
        """The equivalent command line (for debugging: :meth:`exec` passes the options by memfd)."""
        return [self.backend.bwrap, *self.bwrap_options(cwd, env)]

    def view_paths(self) -> dict[str, list[str]]:
        """What this sandbox can see: ``roots`` (paths inside under which things are visible),
        ``masked`` (paths under those roots that are hidden) and ``tools`` (the interpreter's, LEGO-RL's
        and the layers' directories, which programs list as they import). Used by the rollout monitor."""
        view = self.backend.view(self.python)
        layers = [m for _, m in self.spec.extra_layers] + ([ENV_INSIDE] if self.env_layer is not None else [])
        roots = [*view.roots, SANDBOX_HOME, WORKSPACE, *layers]
        if self.spec.gateway_socket is not None:
            roots.append(GATEWAY_SOCKET_INSIDE)
        return {"roots": roots, "masked": list(view.masked), "tools": [*view.tools, *layers]}

    def _env(self, extra: Mapping[str, str] | None) -> dict[str, str]:
        path = SYSTEM_PATH
        bin_dir = self.backend.view(self.python).interpreter.bin_dir
        if bin_dir not in SYSTEM_PATH.split(":"):
            path = f"{bin_dir}:{path}"  # python, python3, pytest of the sandbox's interpreter first
        return exec_env(
            self.spec, extra, env_layer=self.env_layer is not None, path=path, lang=os.environ.get("LANG", "C.UTF-8")
        )

    def _limits_prefix(self) -> list[str]:
        prefix = die_with_caller_argv()
        if self.cgroup is not None:
            prefix += self.cgroup.join_prefix()
        if self.backend.prlimit:
            data = self.spec.memory_mb * 1024 * 1024
            prefix += [
                self.backend.prlimit,
                f"--data={data}:{data}",
                f"--nproc={self.spec.max_pids}:{self.spec.max_pids}",
                "--core=0:0",
            ]
            if self.disk_mb is not None and self.quota is None:  # no file system of its own: cap each file
                size = self.disk_mb * MIB
                prefix.append(f"--fsize={size}:{size}")
            prefix.append("--")
        if self.trace_path is not None:
            prefix += [*strace_argv(self.trace_path), "--"]
        return prefix

    def start_trace(self, path: Path) -> bool:
        """Trace process starts, file writes and connects of every later exec into ``path`` (appended).
        False when strace is not installed (the caller falls back to other evidence)."""
        if shutil.which("strace") is None:
            return False
        self.trace_path = Path(path)
        return True

    def stop_trace(self) -> None:
        self.trace_path = None

    # -- Sandbox protocol ------------------------------------------------------------------------
    def exec(
        self,
        cmd: list[str] | str,
        timeout: float = 60.0,
        env: Mapping[str, str] | None = None,
        cwd: str = WORKSPACE,
        max_output_bytes: int = 200_000,
        stdin: str | None = None,
    ) -> ExecResult:
        if self._destroyed:
            raise SandboxError(f"sandbox {self.name} was destroyed")
        inner = inner_command(cmd, self.spec, python=self.python, forwarder=str(FORWARDER_PATH))
        fd = args_memfd(self.bwrap_options(inside_cwd(cwd), self._env(env)))
        before = self.cgroup.counters() if self.cgroup is not None else (0, 0)
        try:
            run = run_captured(
                [*self._limits_prefix(), self.backend.bwrap, "--args", str(fd), "--", *inner],
                env=_HOST_ENV,
                timeout=timeout,
                max_output_bytes=max_output_bytes,
                stdin=stdin,
                pass_fds=(fd,),
                stop=kill_group,
            )
        except OSError as exc:
            raise SandboxError(f"cannot start bwrap: {exc}") from None
        finally:
            os.close(fd)
        rc, killed, timed_out, stderr = run.exit_code, run.signal, run.timed_out, run.stderr
        outside_kill = run.died_of_signal and not timed_out  # bwrap itself (not a process inside) was killed
        if rc == 1 and stderr.startswith("bwrap:") and not timed_out:
            raise SandboxError(f"bwrap failed to set up sandbox {self.name}: {stderr.strip()}")
        if rc == JOIN_FAILED and self.cgroup is not None and "cgroup.procs" in stderr and not timed_out:
            raise SandboxError(f"cannot place sandbox {self.name} in its cgroup: {stderr.strip()[-500:]}")
        causes = []
        if timed_out:
            causes.append(f"timeout after {timeout:.1f}s")
        if self.cgroup is not None:
            after = self.cgroup.counters()
            if after[0] > before[0]:
                causes.append(f"pids limit ({self.spec.max_pids}) reached")
            if after[1] > before[1]:
                causes.append(f"memory limit ({self.spec.memory_mb} MiB): OOM-killed")
        if self.quota is not None and self.quota.full():
            causes.append(f"disk quota ({self.quota.limit_mb} MiB) full")
        if "MemoryError" in stderr[-4000:] and not any("memory" in c for c in causes):
            causes.append(f"memory limit ({self.spec.memory_mb} MiB data rlimit): MemoryError")
        if outside_kill:
            causes.append(f"sandbox killed from outside by signal {killed}")
        elif killed and not timed_out:
            name = signal_name(killed)
            causes.append(f"killed by signal {killed}" + (f" ({name})" if name != str(killed) else ""))
        return ExecResult(
            exit_code=rc,
            stdout=run.stdout,
            stderr=stderr,
            duration_s=run.duration_s,
            timed_out=timed_out,
            truncated=run.truncated,
            killed_by_signal=killed,
            cause="; ".join(causes),
            killed_from_outside=outside_kill,
        )

    def destroy(self) -> None:
        self._destroyed = True
        if self.cgroup is not None:
            self.cgroup.remove()
            self.cgroup = None
        if is_mounted(self.workdir):  # an overlay workspace (see legorl.sandbox.overlay)
            unmount(self.workdir)
        if self.instance_lease is not None:
            self.instance_lease.release()
            self.instance_lease = None
        if self.env_layer is not None:
            self.env_layer.release()
        if self.quota is not None:  # after the overlay inside it
            self.quota.release()
            self.quota = None
        if self.sandbox_dir.exists():
            discard(self.sandbox_dir)

    def __repr__(self) -> str:
        return f"BwrapSandbox({self.name!r}, workdir={str(self.workdir)!r})"


_userns_memo: dict[str, bool] = {}
_version_memo: dict[str, tuple[int, ...]] = {}


def _bwrap_version(bwrap: str) -> tuple[int, ...]:
    if bwrap not in _version_memo:
        try:
            out = subprocess.run([bwrap, "--version"], capture_output=True, text=True, timeout=30, env=_HOST_ENV).stdout
            _version_memo[bwrap] = tuple(int(x) for x in out.split()[-1].split(".")[:3])
        except (OSError, ValueError, IndexError, subprocess.SubprocessError):
            _version_memo[bwrap] = (0, 0)
    return _version_memo[bwrap]


def _userns_works(bwrap: str) -> bool:
    if not settings().bwrap_userns:
        return False
    if bwrap not in _userns_memo:
        try:
            res = subprocess.run(
                [
                    bwrap,
                    "--unshare-user",
                    "--uid",
                    str(SANDBOX_UID),
                    "--gid",
                    str(SANDBOX_GID),
                    "--ro-bind",
                    "/",
                    "/",
                    "--",
                    "/bin/true",
                ],
                capture_output=True,
                timeout=30,
                env=_HOST_ENV,
            )
            _userns_memo[bwrap] = res.returncode == 0
        except (OSError, subprocess.SubprocessError):
            _userns_memo[bwrap] = False
    return _userns_memo[bwrap]


class BwrapBackend(ImageCacheUser):
    """Creates :class:`BwrapSandbox` es under ``root``.

    ``hide``: host paths masked inside every sandbox when they lie under a directory of the view (as
    are the sandboxes root, ``$LEGORL_HOME``, the cache and the built-in task suites); anything not in
    the view is absent anyway.
    ``python``: the interpreter inside (gateway forwarder, graders; its prefixes are part of the view
    and its ``bin`` leads ``PATH``; default: this process's).
    ``userns``: run as uid 1000 in a user namespace (default: when bwrap can create one here).
    ``cache``: the :class:`~legorl.sandbox.images.ImageCache` (default: ``$LEGORL_HOME/images``).
    ``cgroups``: per-sandbox pids/memory cgroups when possible (root); ``False`` uses rlimits only.
    ``overlay``: workspaces as overlayfs mounts over the instance layer when possible (root; see
    :mod:`legorl.sandbox.overlay`); ``False`` always copies.
    ``disk_mb``: each sandbox's disk quota in MiB (:mod:`legorl.sandbox.quota`); None: none.
    """

    name = "bwrap"

    def __init__(
        self,
        root: Path | None = None,
        hide: list[Path] | tuple[Path, ...] = (),
        python: str | None = None,
        cache: ImageCache | None = None,
        cgroups: bool = True,
        userns: bool | None = None,
        overlay: bool = True,
        disk_mb: int | None = None,
    ):
        self.root = Path(root) if root is not None else legorl_home() / "sandboxes"
        self.hide = [Path(p) for p in hide]
        self.python = python or sys.executable
        self.prlimit = shutil.which("prlimit")
        self._bwrap: str | None = None
        self._cache = cache
        self.cgroups = cgroups
        self._userns = userns
        self.overlay = overlay
        self.disk_mb = disk_mb

    @property
    def bwrap(self) -> str:
        if self._bwrap is None:
            self._bwrap = require_program(
                "bwrap", "`apt-get install -y bubblewrap` (Debian/Ubuntu) or `dnf install bubblewrap`"
            )
        return self._bwrap

    @property
    def userns(self) -> bool:
        """Whether sandboxes run as uid 1000 in their own user namespace (probed once per bwrap)."""
        if self._userns is None:
            self._userns = _userns_works(self.bwrap)
        return self._userns

    def view(self, python: str | None = None) -> HostView:
        """The shared, cached part of the view of every sandbox whose interpreter is ``python``
        (default: :attr:`python`; see :mod:`legorl.sandbox.view`)."""
        hide = [legorl_home(), self.root, *self.hide]
        if self._cache is not None:
            hide.append(self._cache.root)
        return host_view(python or self.python, tuple(str(p) for p in hide), perms=_bwrap_version(self.bwrap) >= (0, 5))

    # -- images ---------------------------------------------------------------------------------
    def _run_setup(self, repo: Path, cmd: str, env_layer: Layer | None, env: EnvRecipe) -> tuple[int, str]:
        """Run an instance setup command inside a sandbox whose /workspace is ``repo``."""
        holder = repo.parent / f"setup-{uuid.uuid4().hex[:6]}"
        holder.mkdir()
        try:
            spec = SandboxSpec(source_dir=repo, env_recipe=env)
            sb = BwrapSandbox(self, spec, holder, "", env_layer=env_layer, python=env.interpreter or None)
            sb.workdir = repo
            res = sb.exec(cmd, timeout=3600, max_output_bytes=1_000_000)
            return res.exit_code, res.stdout + res.stderr
        finally:
            shutil.rmtree(holder, ignore_errors=True)

    def prepare_layers(
        self, recipe: InstanceRecipe, env: EnvRecipe | None = None, lease: bool = False, env_lease: bool = False
    ) -> Layer:
        """Base → env → instance layers for ``recipe`` (built on a miss); returns the instance layer.
        With ``env_lease`` the env layer is leased and attached as ``layer.meta['_env_layer']``."""
        env = env or EnvRecipe()
        base = self.cache.base(bwrap_base_recipe())
        env_layer = self.cache.env(env, base, lease=env_lease)
        mount = None if env.empty else env_layer
        try:
            inst = self.cache.instance(
                recipe, env_layer, lease=lease, run_setup=lambda repo, cmd: self._run_setup(repo, cmd, mount, env)
            )
        except BaseException:
            env_layer.release()
            raise
        inst.meta = {**inst.meta, "_env_layer": env_layer}
        return inst

    def create(self, spec: SandboxSpec) -> BwrapSandbox:
        """A sandbox over a copy of the cached instance layer of ``spec`` (built on a cache miss)."""
        self.bwrap  # noqa: B018 - fail early with install advice
        source = Path(spec.source_dir)
        if not source.is_dir():
            raise SandboxError(f"sandbox source_dir {source} is not a directory")
        if spec.gateway_socket is not None and not Path(spec.gateway_socket).exists():
            raise SandboxError(f"gateway socket {spec.gateway_socket} does not exist")
        self.root.mkdir(parents=True, exist_ok=True)
        legorl_home().mkdir(parents=True, exist_ok=True)  # must exist on the host to be masked
        inst_recipe, env_recipe = spec_recipes(spec)
        inst = self.prepare_layers(inst_recipe, env_recipe, lease=True, env_lease=not env_recipe.empty)
        env_layer: Layer | None = inst.meta["_env_layer"] if not env_recipe.empty else None
        sandbox_dir = self.root / f"sb-{uuid.uuid4().hex[:12]}"
        cgroup = None
        inst_lease = None
        quota = None
        try:
            sandbox_dir.mkdir()
            if self.disk_mb is not None:  # the sandbox's whole writable tree on a file system of that size
                quota = DiskQuota.mount(sandbox_dir, self.disk_mb, self.root / ".quota")
            workspace = sandbox_dir / "workspace"
            # overlay when we may mount (root): constant cost; else a copy. The overlay's lower layer
            # stays leased (never evicted) until the sandbox is destroyed.
            if self.overlay and mount_overlay(inst.path, sandbox_dir / "upper", sandbox_dir / "ovl-work", workspace):
                inst_lease = inst.lease
            else:
                try:
                    if quota is not None and self.disk_mb is not None:  # the copy is not the sandbox's writing
                        quota.release()
                        quota = DiskQuota.mount(
                            sandbox_dir, self.disk_mb, self.root / ".quota", extra_mb=-(-inst.size_bytes // MIB)
                        )
                    copy_workspace(inst.path, workspace)
                finally:
                    inst.release()
            if self.cgroups:
                cgroup = SandboxCgroup.create(sandbox_dir.name, spec.max_pids, spec.memory_mb)
        except BaseException as exc:
            if is_mounted(sandbox_dir / "workspace"):
                unmount(sandbox_dir / "workspace")
            if inst_lease is not None:
                inst_lease.release()
            if quota is not None:
                quota.release()
            shutil.rmtree(sandbox_dir, ignore_errors=True)
            if env_layer is not None:
                env_layer.release()
            if isinstance(exc, SandboxError):
                raise
            if isinstance(exc, OSError):
                raise SandboxError(f"cannot create a sandbox from {source}: {exc}") from exc
            raise
        sb = BwrapSandbox(
            self,
            spec,
            sandbox_dir,
            inst.meta["commit"],
            env_layer=env_layer,
            cgroup=cgroup,
            python=env_recipe.interpreter or None,
            quota=quota,
            disk_mb=self.disk_mb,
        )
        sb.instance_lease = inst_lease
        return sb
