"""Bubblewrap sandbox backend (docs/architecture.md).

Each sandbox's workspace is a private, copy-on-write view of the cached *instance layer* built from
``spec.source_dir`` (see :mod:`legorl.sandbox.images`: the repository with its history cut to one
base commit) under ``root`` (default ``$LEGORL_HOME/sandboxes``). As root it is an overlayfs mount
over the layer (:mod:`legorl.sandbox.overlay`: constant cost whatever the repository's size);
otherwise a copy, ``cp -a --reflink=auto`` (in-process for small trees): clones on filesystems that
support them (btrfs, xfs), a full copy elsewhere (ext4). Hardlinks are deliberately not used: a
hardlinked file written in place would corrupt the cache. An env layer (``spec.env_recipe``) is bind-mounted read-only at ``/run/legorl/env``
with ``PYTHONPATH``/``PATH`` set. Every ``exec`` starts a fresh ``bwrap``.

The view: deny by default
-------------------------
The sandbox's filesystem is built from an allowlist on bwrap's own (read-only) tmpfs root, never from
the host's ``/`` (masking known paths cannot close a view that starts from everything: a second
checkout, a dataset under ``/srv``, the user's home with its tokens would stay readable). What is
visible, and why (the shared part is computed once and cached, see :mod:`legorl.sandbox.view`):

=============================  ==================================================================
``/usr/{bin,sbin,lib,lib64,``   the programs and libraries tools run from (read-only); ``/bin``,
``libexec,include}``            ``/sbin``, ``/lib*`` are the host's links. No ``/usr/src``,
                                ``/usr/etc``, ``/usr/games``; ``/usr/lib/python3/dist-packages``
                                masked (no site-packages outside the layers)
``/usr/share``                  only :data:`~legorl.sandbox.view.SHARE_ALLOW` (CA certificates,
                                zoneinfo, terminfo, git templates, perl modules, file's magic), as
                                a cached hard-link farm: one mount
``/usr/local``                  empty (on hosts it holds local programs, site-packages, data)
``/etc``                        synthetic (cached): passwd/group with root, ``agent`` and nobody;
                                hosts (localhost), nsswitch (files only: no DNS), no resolv.conf;
                                the public ld.so cache, alternatives links, CA certificates,
                                openssl.cnf, protocols, services, localtime, os-release. No
                                shadow/gshadow, ssh or TLS keys, sudoers, pip.conf, npmrc, gitconfig
the interpreter                 ``BwrapBackend.python``'s prefix (the venv) and base prefix (e.g.
                                ``/root/.pyenv/versions/3.11.7``) at their host paths, read-only,
                                with the site-packages it uses (the venv's; the base's, which
                                ``python -S``, the grader's runner, finds through ``sysconfig``).
                                ``PATH`` starts with its ``bin`` (``python``, ``pytest``)
LEGO-RL's code                  the checkout's ``src`` (and ``tests``, whose helpers harness tests
                                run inside) read-only, the built-in task suites masked; not
                                ``.git``, ``scripts`` or other files of the checkout
``/workspace``                  the sandbox's repository copy (read-write)
``/home/agent``                 ``HOME`` (:data:`~legorl.sandbox.base.SANDBOX_HOME`): a fresh
                                per-sandbox directory, kept across its execs, removed with it
``/tmp`` (``/var/tmp``)         private tmpfs per exec
``/dev``, ``/proc``             fresh (``--dev``, ``--proc`` of the sandbox's own PID namespace)
``/run/legorl``                 ``gateway.sock`` (the gateway's socket) and ``env`` (the env layer)
extra layers                    ``spec.extra_layers`` (harness layers, e.g. ``/opt/legorl-harness``)
=============================  ==================================================================

Directories that exist only to hold those mount points (``/root``, ``/root/.pyenv``, ``/work``...)
are execute-only: paths resolve, listings fail. Nothing else of the host exists inside: no
``/root`` or other homes, ``/var``, ``/srv``, ``/mnt``, ``/media``, ``/opt``, ``/boot``, ``/sys``,
no data trees or other checkouts, no image cache or other sandboxes. ``/proc/self/mountinfo`` still
names the host paths of the bound directories (names only; nothing under them is reachable).

User: commands run as uid/gid :data:`~legorl.sandbox.base.SANDBOX_UID` (``agent``) in a user
namespace (``--unshare-user --uid 1000``) that maps it to the uid that started bwrap. When that is
root, files the host's root owns appear as owned by ``agent`` inside, so the workspace copy stays
writable; that is also why nothing root-only may be in the view: inside, the allowlist, not file
permissions, is what keeps host files out. Where no user namespace can be created, bwrap runs
without one (as the calling uid). In both cases:

* every namespace is unshared (``--unshare-all``): no network except an unconnected ``lo``, own
  PIDs, IPC, UTS (hostname ``sandbox``); ``--die-with-parent`` and ``--new-session``;
* every capability is dropped (``--cap-drop ALL``; in a user namespace the mounts are also locked);
* the environment is cleared and rebuilt from ``PATH``/``LANG``/``HOME`` + ``spec.env`` + the
  caller's ``env``. Neither the environment (which holds e.g. the session token) nor the view is on
  a host command line: every bwrap option travels through a memfd (``bwrap --args FD``), so
  ``ps`` shows only ``bwrap --args 3 -- <command>``.

Limits: the wall-clock ``timeout`` kills the whole process group (the outer bwrap; the sandbox's
PID namespace dies with it); stdout and stderr are each capped at ``max_output_bytes`` (the rest is
drained and dropped). Memory and process counts: rlimits applied with ``prlimit`` (``RLIMIT_DATA`` =
``spec.memory_mb``, not ``RLIMIT_AS`` which breaks runtimes such as Node or the JVM; ``RLIMIT_NPROC``
= ``spec.max_pids``, which real root ignores) and, when the cgroup filesystem is writable (root on
cgroup v1 or a delegated v2 subtree), a per-sandbox cgroup with ``pids.max`` = ``spec.max_pids`` and
a memory limit of ``spec.memory_mb`` (no swap), nested under this process's own cgroup. Each exec
joins it before bwrap starts (a ``sh`` shim writes its pid to ``cgroup.procs``), so the limits hold
for root too; ``ExecResult.cause`` then says when the pids or memory limit was hit. Disk quotas and
CPU shares come later.

Gateway: when ``spec.gateway_socket`` is set, the socket is bind-mounted at
``/run/legorl/gateway.sock`` and each command is wrapped by :mod:`legorl.sandbox.forwarder`, which
listens on ``127.0.0.1:<spec.gateway_port>`` inside the sandbox and forwards to the socket.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import signal
import stat
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import IO, Mapping

from legorl.errors import SandboxError
from legorl.sandbox.base import (
    SANDBOX_GID,
    SANDBOX_HOME,
    SANDBOX_UID,
    WORKSPACE,
    ExecResult,
    SandboxSpec,
    WorkspaceFiles,
)
from legorl.sandbox.hostproc import wait_with_deadline
from legorl.sandbox.images import (
    EnvRecipe,
    ImageCache,
    InstanceRecipe,
    Layer,
    bwrap_base_recipe,
    default_cache,
    spec_recipes,
)
from legorl.sandbox.overlay import is_mounted, mount_overlay, unmount
from legorl.sandbox.view import (  # noqa: F401
    BUILTIN_SUITES_DIR,
    HostView,
    host_view,
    is_under,
    legorl_home,
)

GATEWAY_SOCKET_INSIDE = "/run/legorl/gateway.sock"
ENV_INSIDE = "/run/legorl/env"
FORWARDER_PATH = Path(__file__).resolve().with_name("forwarder.py")
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# The environment of the host-side processes of an exec (cgroup shim, prlimit, strace, bwrap): none
# of the sandbox's variables (they reach the sandbox through bwrap's --args memfd only).
_HOST_ENV = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8"}

# Fixed identity, no hooks, no system/global config: git never runs anything of the repo's choosing.
GIT_CONFIG = [
    "-c", "core.hooksPath=/dev/null",
    "-c", "user.name=legorl",
    "-c", "user.email=legorl@localhost",
    "-c", "commit.gpgsign=false",
    "-c", "core.fsmonitor=false",
    "-c", "safe.directory=*",
    "-c", "core.autocrlf=false",
    "-c", "init.defaultBranch=main",
]
_GIT_ENV = {
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": "/dev/null",
    "GIT_TERMINAL_PROMPT": "0",
    "GIT_AUTHOR_DATE": "2000-01-01T00:00:00Z",
    "GIT_COMMITTER_DATE": "2000-01-01T00:00:00Z",
}
_COPY_IGNORE = shutil.ignore_patterns("__pycache__", ".pytest_cache", "*.pyc")
_DIFF_LIMIT = 64 * 1024 * 1024


def _is_under(path: Path, parent: Path) -> bool:
    try:
        path.relative_to(parent)
        return True
    except ValueError:
        return False


def _host_git(args: list[str], cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(cwd), **_GIT_ENV}
    try:
        return subprocess.run(
            ["git", *GIT_CONFIG, *args], cwd=cwd, env=env, capture_output=True, text=True,
            timeout=timeout, check=True,
        )
    except FileNotFoundError:
        raise SandboxError("git is not installed on the host (apt-get install -y git)") from None
    except subprocess.CalledProcessError as exc:
        raise SandboxError(f"git {' '.join(args)} failed in {cwd}: {exc.stderr.strip()}") from None


def _drain(stream: IO[bytes], cap: int, out: list, flags: dict, key: str) -> None:
    size = 0
    try:
        while True:
            chunk = stream.read(65536)
            if not chunk:
                break
            if size < cap:
                keep = chunk[: cap - size]
                out.append(keep)
                size += len(keep)
                if len(keep) < len(chunk):
                    flags[key] = True
            else:
                flags[key] = True
    except (OSError, ValueError):
        pass
    finally:
        try:
            stream.close()
        except OSError:
            pass


def _feed(stream: IO[bytes], data: bytes) -> None:
    try:
        stream.write(data)
    except (BrokenPipeError, OSError, ValueError):
        pass
    finally:
        try:
            stream.close()
        except OSError:
            pass


_FICLONE = 0x40049409  # ioctl: reflink one file onto another (btrfs, xfs)
FAST_COPY_MAX_ENTRIES = 2000


def _copy_file(src: str, dst: str, st: os.stat_result) -> None:
    fin = os.open(src, os.O_RDONLY | os.O_CLOEXEC)
    try:
        fout = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, stat.S_IMODE(st.st_mode) | 0o200)
        try:
            try:
                import fcntl

                fcntl.ioctl(fout, _FICLONE, fin)  # a copy-on-write clone where the filesystem can
            except OSError:
                left = st.st_size
                while left > 0:
                    n = os.copy_file_range(fin, fout, left)
                    if n == 0:
                        break
                    left -= n
            os.fchmod(fout, stat.S_IMODE(st.st_mode))
            os.utime(fout, ns=(st.st_atime_ns, st.st_mtime_ns))
        finally:
            os.close(fout)
    finally:
        os.close(fin)


def _copy_tree_fast(src: str, dst: str, budget: list[int]) -> bool:
    """In-process ``cp -a`` of a small tree (regular files, directories, symlinks): no process to
    start, which dominates for the few dozen files of a typical task repository. False (a partial
    copy left behind) when the tree has more than ``budget`` entries or special files."""
    st = os.lstat(src)
    os.mkdir(dst, 0o700)
    with os.scandir(src) as it:
        entries = list(it)
    budget[0] -= len(entries)
    if budget[0] < 0:
        return False
    for e in entries:
        est = e.stat(follow_symlinks=False)
        target = os.path.join(dst, e.name)
        if stat.S_ISDIR(est.st_mode):
            if not _copy_tree_fast(e.path, target, budget):
                return False
        elif stat.S_ISLNK(est.st_mode):
            os.symlink(os.readlink(e.path), target)
            os.utime(target, ns=(est.st_atime_ns, est.st_mtime_ns), follow_symlinks=False)
        elif stat.S_ISREG(est.st_mode):
            _copy_file(e.path, target, est)
        else:
            return False  # fifos, devices: leave them to cp
    os.chmod(dst, stat.S_IMODE(st.st_mode))
    os.utime(dst, ns=(st.st_atime_ns, st.st_mtime_ns))
    return True


def copy_workspace(layer_dir: Path, dest: Path) -> None:
    """Copy-on-write view of an instance layer: a clone of each file where the filesystem supports it
    (btrfs, xfs), a plain copy otherwise (ext4); modes and times preserved. Trees of up to
    ``FAST_COPY_MAX_ENTRIES`` entries are copied in-process, larger ones by ``cp -a --reflink=auto``."""
    try:
        if _copy_tree_fast(str(layer_dir), str(dest), [FAST_COPY_MAX_ENTRIES]):
            return
        shutil.rmtree(dest, ignore_errors=True)
    except OSError as exc:
        shutil.rmtree(dest, ignore_errors=True)
        raise SandboxError(f"cannot copy image layer {layer_dir} into a sandbox: {exc}") from None
    try:
        subprocess.run(["cp", "-a", "--reflink=auto", "--", str(layer_dir), str(dest)], check=True,
                       capture_output=True, text=True, timeout=1800)
    except FileNotFoundError:
        shutil.copytree(layer_dir, dest, symlinks=True)
    except subprocess.CalledProcessError as exc:
        shutil.rmtree(dest, ignore_errors=True)
        raise SandboxError(f"cannot copy image layer {layer_dir} into a sandbox: {exc.stderr.strip()}") from None


TRACED_SYSCALLS = ("execve,execveat,open,openat,openat2,creat,unlink,unlinkat,rename,renameat,renameat2,"
                   "link,linkat,symlink,symlinkat,truncate,connect,getdents64,clone,clone3,fork,vfork")


def strace_argv(path: Path) -> list[str]:
    """Host-side tracer for one exec: follows forks, decodes fds to paths (``-y``), appends to ``path``.
    ``getdents64`` (directory listings) lets the monitor see walks of the whole filesystem; the clone
    results (translated to host pids: the sandbox has its own PID namespace) tell it which processes
    are the sandbox's (children of its command) and which bwrap's."""
    return [shutil.which("strace") or "strace", "-f", "-qq", "--seccomp-bpf", "--pidns-translation", "-y", "-s", "512",
            "-e", f"trace={TRACED_SYSCALLS}", "-e", "signal=none", "-A", "-o", str(path)]


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
        if clash is not None and str(m) == os.path.realpath(host) and is_under(m, clash) and \
                os.path.realpath(clash) == clash:
            continue  # already visible at this very path (e.g. an interpreter prefix the view binds)
        if clash is not None:
            raise SandboxError(f"extra layer mount point {mount!r} would shadow a sandbox mount ({clash})")
        if not Path(host).is_dir():
            raise SandboxError(f"extra layer {host} (for {mount}) is not a directory")
        argv += ["--ro-bind", str(host), str(m)]
    return argv


def args_memfd(args: list[str]) -> int:
    """A memfd holding ``args`` NUL-separated, for ``bwrap --args FD`` (the caller closes it)."""
    fd = os.memfd_create("legorl-bwrap-args", os.MFD_CLOEXEC)
    try:
        data = b"".join(a.encode("utf-8", "surrogateescape") + b"\0" for a in args)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.lseek(fd, 0, os.SEEK_SET)
    except BaseException:
        os.close(fd)
        raise
    return fd


_CGROUP_SHIM = 'for f in "$@"; do [ "$f" = -- ] && break; echo $$ > "$f" || exit 125; shift; done; shift; exec "$@"'


class SandboxCgroup:
    """A per-sandbox cgroup (v1 ``pids`` + ``memory`` controllers, or v2) under our own cgroup."""

    def __init__(self, dirs: dict[str, Path], max_pids: int, memory_bytes: int):
        self.dirs = dirs
        self.max_pids = max_pids
        self.memory_bytes = memory_bytes

    @classmethod
    def create(cls, name: str, max_pids: int, memory_mb: int) -> "SandboxCgroup | None":
        if os.geteuid() != 0 or os.environ.get("LEGORL_NO_CGROUPS"):
            return None
        try:
            own = {}
            for line in Path("/proc/self/cgroup").read_text().splitlines():
                _, ctrls, path = line.split(":", 2)
                for c in ctrls.split(","):
                    own[c] = path
        except OSError:
            return None
        memory_bytes = memory_mb * 1024 * 1024
        dirs: dict[str, Path] = {}
        try:
            if Path("/sys/fs/cgroup/pids/cgroup.procs").exists():  # v1
                for ctrl in ("pids", "memory"):
                    if ctrl not in own:
                        continue
                    d = Path("/sys/fs/cgroup", ctrl) / own[ctrl].lstrip("/") / "legorl" / name
                    d.mkdir(parents=True, exist_ok=True)
                    dirs[ctrl] = d
                if "pids" in dirs:
                    (dirs["pids"] / "pids.max").write_text(str(max_pids))
                if "memory" in dirs:
                    (dirs["memory"] / "memory.limit_in_bytes").write_text(str(memory_bytes))
                    with contextlib.suppress(OSError):
                        (dirs["memory"] / "memory.memsw.limit_in_bytes").write_text(str(memory_bytes))
            elif "" in own and Path("/sys/fs/cgroup/cgroup.controllers").exists():  # v2 (delegated)
                parent = Path("/sys/fs/cgroup") / own[""].lstrip("/") / "legorl"
                parent.mkdir(exist_ok=True)
                with contextlib.suppress(OSError):
                    (parent / "cgroup.subtree_control").write_text("+pids +memory")
                d = parent / name
                d.mkdir(exist_ok=True)
                dirs["v2"] = d
                (d / "pids.max").write_text(str(max_pids))
                (d / "memory.max").write_text(str(memory_bytes))
                with contextlib.suppress(OSError):
                    (d / "memory.swap.max").write_text("0")
        except OSError:
            cg = cls(dirs, max_pids, memory_bytes)
            cg.remove()
            return None
        return cls(dirs, max_pids, memory_bytes) if dirs else None

    @property
    def procs_files(self) -> list[str]:
        return [str(d / "cgroup.procs") for d in self.dirs.values()]

    def counters(self) -> tuple[int, int]:
        """(times the pids limit refused a fork, OOM kills)."""
        pids_hits = ooms = 0
        for key, d in self.dirs.items():
            for fname, field in (("pids.events", "max"), ("memory.oom_control", "oom_kill"),
                                 ("memory.events", "oom_kill")):
                with contextlib.suppress(OSError, ValueError):
                    for line in (d / fname).read_text().splitlines():
                        k, _, v = line.partition(" ")
                        if k == field:
                            if fname == "pids.events":
                                pids_hits += int(v)
                            else:
                                ooms += int(v)
        return pids_hits, ooms

    def kill_all(self) -> None:
        for d in self.dirs.values():
            with contextlib.suppress(OSError, ValueError):
                for pid in (d / "cgroup.procs").read_text().split():
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.kill(int(pid), signal.SIGKILL)

    def remove(self) -> None:
        for d in self.dirs.values():
            for _ in range(50):
                try:
                    d.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    self.kill_all()
                    time.sleep(0.02)


class BwrapSandbox(WorkspaceFiles):
    """One repository copy; every :meth:`exec` runs in a fresh bubblewrap container over it."""

    def __init__(self, backend: "BwrapBackend", spec: SandboxSpec, sandbox_dir: Path, base_commit: str,
                 env_layer: Layer | None = None, cgroup: SandboxCgroup | None = None):
        self.backend = backend
        self.spec = spec
        self.name = sandbox_dir.name
        self.sandbox_dir = sandbox_dir
        self.workdir = sandbox_dir / "workspace"
        self.home = sandbox_dir / "home"  # HOME inside (SANDBOX_HOME): private, kept across execs
        self.home.mkdir(exist_ok=True)
        self.base_commit = base_commit
        self.env_layer = env_layer  # leased while the sandbox lives
        self.cgroup = cgroup
        self.instance_lease = None  # held while an overlay workspace mounts the instance layer
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
        view = backend.view()
        opts = ["--unshare-all", "--die-with-parent", "--new-session"]
        if backend.userns:
            opts += ["--unshare-user", "--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_GID)]
        opts += ["--hostname", "sandbox"]
        if os.geteuid() == 0:
            opts += ["--cap-drop", "ALL"]  # root keeps every capability in bwrap otherwise
        opts += view.system_args
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
        view = self.backend.view()
        layers = [m for _, m in self.spec.extra_layers] + ([ENV_INSIDE] if self.env_layer is not None else [])
        roots = [*view.roots, SANDBOX_HOME, WORKSPACE, *layers]
        if self.spec.gateway_socket is not None:
            roots.append(GATEWAY_SOCKET_INSIDE)
        return {"roots": roots, "masked": list(view.masked), "tools": [*view.tools, *layers]}

    def _env(self, extra: Mapping[str, str] | None) -> dict[str, str]:
        path = SYSTEM_PATH
        bin_dir = self.backend.view().interpreter.bin_dir
        if bin_dir not in SYSTEM_PATH.split(":"):
            path = f"{bin_dir}:{path}"  # python, python3, pytest of the sandbox's interpreter first
        env = {"PATH": path, "HOME": SANDBOX_HOME, "LANG": os.environ.get("LANG", "C.UTF-8")}
        if self.env_layer is not None:
            env["PATH"] = f"{ENV_INSIDE}/bin:{env['PATH']}"
            env["PYTHONPATH"] = f"{ENV_INSIDE}/site-packages"
        env.update(self.spec.env)
        env.update(extra or {})
        return env

    def _limits_prefix(self) -> list[str]:
        prefix: list[str] = []
        if self.cgroup is not None:
            prefix = ["/bin/sh", "-c", _CGROUP_SHIM, "sh", *self.cgroup.procs_files, "--"]
        if self.backend.prlimit:
            data = self.spec.memory_mb * 1024 * 1024
            prefix += [self.backend.prlimit, f"--data={data}:{data}",
                       f"--nproc={self.spec.max_pids}:{self.spec.max_pids}", "--core=0:0", "--"]
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
        argv_inner = ["bash", "-c", cmd] if isinstance(cmd, str) else list(cmd)
        if not argv_inner:
            raise SandboxError("empty command")
        if not cwd.startswith("/"):
            cwd = f"{WORKSPACE}/{cwd}"
        if self.spec.gateway_socket is not None:
            argv_inner = [self.backend.python, "-I", "-S", str(FORWARDER_PATH),
                          "--socket", GATEWAY_SOCKET_INSIDE, "--port", str(self.spec.gateway_port),
                          "--", *argv_inner]
        fd = args_memfd(self.bwrap_options(cwd, self._env(env)))
        argv = self._limits_prefix() + [self.backend.bwrap, "--args", str(fd), "--", *argv_inner]

        before = self.cgroup.counters() if self.cgroup is not None else (0, 0)
        start = time.monotonic()
        try:
            proc = subprocess.Popen(
                argv, stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
                env=_HOST_ENV, pass_fds=(fd,),
            )
        except OSError as exc:
            raise SandboxError(f"cannot start bwrap: {exc}") from None
        finally:
            os.close(fd)
        out: list[bytes] = []
        err: list[bytes] = []
        flags: dict[str, bool] = {}
        threads = [
            threading.Thread(target=_drain, args=(proc.stdout, max_output_bytes, out, flags, "out"), daemon=True),
            threading.Thread(target=_drain, args=(proc.stderr, max_output_bytes, err, flags, "err"), daemon=True),
        ]
        if stdin is not None:
            threads.append(threading.Thread(target=_feed, args=(proc.stdin, stdin.encode()), daemon=True))
        for t in threads:
            t.start()
        try:
            timed_out = wait_with_deadline(proc, timeout, lambda: self._kill_group(proc))
        except BaseException:
            self._kill(proc)
            raise
        for t in threads:
            t.join(timeout=5)
        duration = time.monotonic() - start
        rc = proc.returncode
        killed = None
        outside_kill = False
        if rc < 0:
            killed = -rc
            rc = 128 + killed
            outside_kill = not timed_out  # bwrap itself (not a process inside) died of a signal
        elif 128 < rc <= 128 + 64:
            killed = rc - 128  # bwrap reports a signalled child as 128+signal, like a shell
        stderr = b"".join(err).decode("utf-8", "replace")
        if rc == 1 and stderr.startswith("bwrap:") and not timed_out:
            raise SandboxError(f"bwrap failed to set up sandbox {self.name}: {stderr.strip()}")
        if rc == 125 and self.cgroup is not None and "cgroup.procs" in stderr and not timed_out:
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
        if "MemoryError" in stderr[-4000:] and not any("memory" in c for c in causes):
            causes.append(f"memory limit ({self.spec.memory_mb} MiB data rlimit): MemoryError")
        if outside_kill:
            causes.append(f"sandbox killed from outside by signal {killed}")
        elif killed and not timed_out:
            try:
                causes.append(f"killed by signal {killed} ({signal.Signals(killed).name})")
            except ValueError:
                causes.append(f"killed by signal {killed}")
        return ExecResult(
            exit_code=rc,
            stdout=b"".join(out).decode("utf-8", "replace"),
            stderr=stderr,
            duration_s=duration,
            timed_out=timed_out,
            truncated=bool(flags),
            killed_by_signal=killed,
            cause="; ".join(causes),
            killed_from_outside=outside_kill,
        )

    @staticmethod
    def _kill_group(proc: subprocess.Popen) -> None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass

    @staticmethod
    def _kill(proc: subprocess.Popen) -> None:
        BwrapSandbox._kill_group(proc)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:  # pragma: no cover - the kernel did not reap in time
            pass

    def diff(self) -> str:
        """``git add -A`` + ``git diff --cached --binary <base>``, run *inside* the sandbox so git
        never reads an agent-controlled ``.git/config`` on the host."""
        git = ["git", *GIT_CONFIG]
        script = (
            f"{shlex.join(git)} add -A >/dev/null && "
            f"{shlex.join(git)} diff --cached --binary --no-ext-diff --no-textconv --no-color "
            f"{self.base_commit} --"
        )
        res = self.exec(script, timeout=300, env=_GIT_ENV, max_output_bytes=_DIFF_LIMIT)
        if res.timed_out or res.exit_code != 0:
            raise SandboxError(f"git diff failed in sandbox {self.name} (exit {res.exit_code}): "
                               f"{res.stderr.strip()[-2000:]}")
        if res.truncated:
            raise SandboxError(f"diff of sandbox {self.name} exceeds {_DIFF_LIMIT} bytes")
        return res.stdout

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
        if self.env_layer is not None and self.env_layer.lease is not None:
            self.env_layer.lease.release()
        if self.sandbox_dir.exists():
            _discard(self.sandbox_dir)

    def __enter__(self) -> "BwrapSandbox":
        return self

    def __exit__(self, *exc: object) -> None:
        self.destroy()

    def __repr__(self) -> str:
        return f"BwrapSandbox({self.name!r}, workdir={str(self.workdir)!r})"


def _discard(path: Path) -> None:
    """Remove a sandbox directory: renamed away at once (the path is gone when this returns), deleted
    by a background thread (directory removal costs ms per entry on slow/shared filesystems)."""
    trash = path.parent / ".trash"
    try:
        trash.mkdir(exist_ok=True)
        target = trash / f"{path.name}-{uuid.uuid4().hex[:6]}"
        os.rename(path, target)
    except OSError:
        shutil.rmtree(path, onerror=_force_remove)
        return
    threading.Thread(target=shutil.rmtree, args=(target,), kwargs={"onerror": _force_remove}, daemon=True).start()


def _force_remove(func, path, exc_info) -> None:  # noqa: ANN001 - shutil.rmtree callback
    try:
        parent = os.path.dirname(path)
        os.chmod(parent, os.stat(parent).st_mode | stat.S_IWUSR | stat.S_IXUSR | stat.S_IRUSR)
        if os.path.isdir(path) and not os.path.islink(path):
            os.chmod(path, stat.S_IRWXU)
            shutil.rmtree(path, ignore_errors=True)
        else:
            os.unlink(path)
    except OSError:
        pass


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
    if os.environ.get("LEGORL_BWRAP_USERNS", "1") == "0":
        return False
    if bwrap not in _userns_memo:
        try:
            res = subprocess.run([bwrap, "--unshare-user", "--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_GID),
                                  "--ro-bind", "/", "/", "--", "/bin/true"], capture_output=True, timeout=30,
                                 env=_HOST_ENV)
            _userns_memo[bwrap] = res.returncode == 0
        except (OSError, subprocess.SubprocessError):
            _userns_memo[bwrap] = False
    return _userns_memo[bwrap]


class BwrapBackend:
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
    """

    name = "bwrap"

    def __init__(self, root: Path | None = None, hide: list[Path] | tuple[Path, ...] = (),
                 python: str | None = None, cache: ImageCache | None = None, cgroups: bool = True,
                 userns: bool | None = None, overlay: bool = True):
        self.root = Path(root) if root is not None else legorl_home() / "sandboxes"
        self.hide = [Path(p) for p in hide]
        self.python = python or sys.executable
        self.prlimit = shutil.which("prlimit")
        self._bwrap: str | None = None
        self._cache = cache
        self.cgroups = cgroups
        self._userns = userns
        self.overlay = overlay

    @property
    def cache(self) -> ImageCache:
        if self._cache is None:
            self._cache = default_cache()
        return self._cache

    @property
    def bwrap(self) -> str:
        if self._bwrap is None:
            found = shutil.which("bwrap")
            if not found:
                raise SandboxError(
                    "bubblewrap (bwrap) is not installed; install it with "
                    "`apt-get install -y bubblewrap` (Debian/Ubuntu) or `dnf install bubblewrap`"
                )
            self._bwrap = found
        return self._bwrap

    @property
    def userns(self) -> bool:
        """Whether sandboxes run as uid 1000 in their own user namespace (probed once per bwrap)."""
        if self._userns is None:
            self._userns = _userns_works(self.bwrap)
        return self._userns

    def view(self) -> HostView:
        """The shared, cached part of every sandbox's view (see :mod:`legorl.sandbox.view`)."""
        hide = [legorl_home(), self.root, *self.hide]
        if self._cache is not None:
            hide.append(self._cache.root)
        return host_view(self.python, tuple(str(p) for p in hide), perms=_bwrap_version(self.bwrap) >= (0, 5))

    # -- images ---------------------------------------------------------------------------------
    def _run_setup(self, repo: Path, cmd: str, env_layer: Layer | None) -> tuple[int, str]:
        """Run an instance setup command inside a sandbox whose /workspace is ``repo``."""
        holder = repo.parent / f"setup-{uuid.uuid4().hex[:6]}"
        holder.mkdir()
        try:
            sb = BwrapSandbox(self, SandboxSpec(source_dir=repo), holder, "", env_layer=env_layer)
            sb.workdir = repo
            res = sb.exec(cmd, timeout=3600, max_output_bytes=1_000_000)
            return res.exit_code, res.stdout + res.stderr
        finally:
            shutil.rmtree(holder, ignore_errors=True)

    def prepare_layers(self, recipe: InstanceRecipe, env: EnvRecipe | None = None, lease: bool = False,
                       env_lease: bool = False) -> Layer:
        """Base → env → instance layers for ``recipe`` (built on a miss); returns the instance layer.
        With ``env_lease`` the env layer is leased and attached as ``layer.meta['_env_layer']``."""
        env = env or EnvRecipe()
        base = self.cache.base(bwrap_base_recipe())
        env_layer = self.cache.env(env, base, lease=env_lease)
        mount = None if env.empty else env_layer
        try:
            inst = self.cache.instance(recipe, env_layer, lease=lease,
                                       run_setup=lambda repo, cmd: self._run_setup(repo, cmd, mount))
        except BaseException:
            if env_layer.lease is not None:
                env_layer.lease.release()
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
        try:
            sandbox_dir.mkdir()
            workspace = sandbox_dir / "workspace"
            # overlay when we may mount (root): constant cost; else a copy. The overlay's lower layer
            # stays leased (never evicted) until the sandbox is destroyed.
            if self.overlay and mount_overlay(inst.path, sandbox_dir / "upper", sandbox_dir / "ovl-work", workspace):
                inst_lease = inst.lease
            else:
                try:
                    copy_workspace(inst.path, workspace)
                finally:
                    inst.lease.release()
            if self.cgroups:
                cgroup = SandboxCgroup.create(sandbox_dir.name, spec.max_pids, spec.memory_mb)
        except BaseException as exc:
            if is_mounted(sandbox_dir / "workspace"):
                unmount(sandbox_dir / "workspace")
            if inst_lease is not None:
                inst_lease.release()
            shutil.rmtree(sandbox_dir, ignore_errors=True)
            if env_layer is not None and env_layer.lease is not None:
                env_layer.lease.release()
            if isinstance(exc, SandboxError):
                raise
            if isinstance(exc, OSError):
                raise SandboxError(f"cannot create a sandbox from {source}: {exc}") from exc
            raise
        sb = BwrapSandbox(self, spec, sandbox_dir, inst.meta["commit"], env_layer=env_layer, cgroup=cgroup)
        sb.instance_lease = inst_lease
        return sb
