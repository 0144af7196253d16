"""Podman (or Docker) sandbox backend: the same protocol as bwrap, in OCI containers.

:class:`PodmanBackend` (``executable="podman"`` or ``"docker"``; ``image=`` for a published image,
:func:`swebench_image_name`) creates :class:`PodmanSandbox` es: one long-lived container per
sandbox, every :meth:`exec` an ``<exe> exec`` into it, as ``agent`` (uid 1000) with no network, a
read-only root, no capabilities and the spec's memory and pid limits. The view is the image plus
``/workspace``, ``/home/agent``, the forwarder, the env and harness layers and the gateway socket;
nothing else of the host. Unlike bwrap, background processes an exec leaves behind keep running
until a timeout's kill or destroy; an exec that cannot start raises :class:`SandboxError`. The
environment never appears on a host command line.

Design (run flags, the view, the debootstrap base image, SWE-bench images, timings):
docs/sandbox.md#podman
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import threading
import uuid
from collections.abc import Mapping
from pathlib import Path

from legorl.errors import SandboxError
from legorl.sandbox.base import (
    SANDBOX_GID,
    SANDBOX_HOME,
    SANDBOX_UID,
    SANDBOX_USER,
    WORKSPACE,
    ExecResult,
    HostWorkspaceSandbox,
    SandboxSpec,
)
from legorl.sandbox.hostfs import copy_workspace, discard
from legorl.sandbox.hostproc import Captured, kill_group, require_program, run_captured, signal_name
from legorl.sandbox.images import (
    BaseRecipe,
    EnvRecipe,
    ImageBuildError,
    ImageCache,
    ImageCacheUser,
    InstanceRecipe,
    Layer,
    run_step,
    spec_recipes,
)
from legorl.sandbox.inside import ENV_INSIDE, FORWARDER_PATH, GATEWAY_SOCKET_INSIDE, exec_env, inner_command, inside_cwd
from legorl.sandbox.quota import MIB, DiskQuota
from legorl.settings import legorl_home

__all__ = ["PodmanBackend", "PodmanSandbox", "podman_base_recipe", "swebench_image_name", "DEBIAN_MIRROR"]

FORWARDER_INSIDE = "/run/legorl/forwarder.py"
DEBIAN_MIRROR = "http://deb.debian.org/debian"
BASE_PACKAGES = ("python3", "python3-pytest", "git", "patch")
IMAGE_BUILD = "etc-scrub-1"  # bump when _scrub_rootfs changes (part of the base recipe key)
# Files of a debootstrap rootfs that come from the host or hold password hashes.
_SCRUB = (
    "etc/resolv.conf",
    "etc/hostname",
    "etc/shadow",
    "etc/shadow-",
    "etc/gshadow",
    "etc/gshadow-",
    "etc/passwd-",
    "etc/group-",
    "etc/machine-id",
    "var/lib/dbus/machine-id",
    "etc/apt/sources.list",
)


# pid 1 is the --init (catatonit), the keeper ``sleep infinity`` (root) wrote its pid to KEEPER_PID;
# everything else belongs to execs (uid 1000, which cannot signal root's processes anyway).
KEEPER_PID = "/run/legorl-keeper.pid"
_KEEPER = f"echo $$ > {KEEPER_PID} && exec sleep infinity"
_KILL_ALL = (
    f"k=$(cat {KEEPER_PID} 2>/dev/null); for p in /proc/[0-9]*; do p=${{p#/proc/}}; "
    '[ "$p" != 1 ] && [ "$p" != "$k" ] && [ "$p" != $$ ] && kill -9 "$p" 2>/dev/null; done; true'
)


def swebench_image_name(instance_id: str, arch: str = "x86_64", tag: str = "latest") -> str:
    return f"swebench/sweb.eval.{arch}.{instance_id.replace('__', '_1776_')}:{tag}"


def _apt_mirror() -> str:
    """The Debian mirror apt uses here (deb822 ``URIs:`` or one-line ``deb`` entries)."""
    files = [Path("/etc/apt/sources.list"), *sorted(Path("/etc/apt/sources.list.d").glob("*"))]
    for f in files:
        with contextlib.suppress(OSError):
            for line in f.read_text().splitlines():
                parts = line.split()
                if line.startswith("URIs:") and len(parts) > 1 and parts[1].rstrip("/").endswith("/debian"):
                    return parts[1]
                if parts[:1] == ["deb"] and len(parts) > 2 and parts[-2:-1] and "bookworm" in parts:
                    uri = next((p for p in parts[1:] if p.startswith("http")), "")
                    if uri.rstrip("/").endswith("/debian"):
                        return uri
    return DEBIAN_MIRROR


def podman_base_recipe(
    suite: str = "bookworm", packages: tuple[str, ...] = BASE_PACKAGES, mirror: str | None = None, image: str = ""
) -> BaseRecipe:
    return BaseRecipe(
        backend="oci",
        os=f"debian:{suite}",
        variant="minbase",
        packages=tuple(packages),
        mirror=mirror or _apt_mirror(),
        image=image,
        build=IMAGE_BUILD,
    )


def _scrub_rootfs(rootfs: Path) -> None:
    """Remove what of the host (and what password hashes) a debootstrap rootfs holds; add the sandbox
    user. Only the image's own Debian files remain."""
    for rel in _SCRUB:
        target = rootfs / rel
        if target.is_symlink() or target.is_file():
            target.unlink()
    (rootfs / "etc" / "hostname").write_text("sandbox\n")
    (rootfs / "etc" / "hosts").write_text("127.0.0.1\tlocalhost sandbox\n::1\tlocalhost ip6-localhost ip6-loopback\n")
    passwd = rootfs / "etc" / "passwd"
    lines = [ln for ln in passwd.read_text().splitlines() if not ln.startswith(f"{SANDBOX_USER}:")]
    lines.append(f"{SANDBOX_USER}:x:{SANDBOX_UID}:{SANDBOX_GID}:LEGO-RL sandbox:{SANDBOX_HOME}:/bin/bash")
    passwd.write_text("\n".join(lines) + "\n")
    group = rootfs / "etc" / "group"
    lines = [ln for ln in group.read_text().splitlines() if not ln.startswith(f"{SANDBOX_USER}:")]
    lines.append(f"{SANDBOX_USER}:x:{SANDBOX_GID}:")
    group.write_text("\n".join(lines) + "\n")
    (rootfs / SANDBOX_HOME.lstrip("/")).mkdir(parents=True, exist_ok=True)


def _remove_env_file(path: Path | None) -> None:
    if path is not None:
        with contextlib.suppress(OSError):
            path.unlink()


def _chown_tree(root: Path, uid: int, gid: int) -> None:
    os.lchown(root, uid, gid)
    for dirpath, dirnames, filenames in os.walk(root):
        for name in (*dirnames, *filenames):
            os.lchown(os.path.join(dirpath, name), uid, gid)


def _check_gateway_socket(path: Path | str) -> None:
    """SandboxError unless the gateway's socket exists and the sandbox user may write to it."""
    if not Path(path).exists():
        raise SandboxError(f"gateway socket {path} does not exist")
    st = os.stat(path)
    if not (
        st.st_mode & 0o002
        or (st.st_uid == SANDBOX_UID and st.st_mode & 0o200)
        or (st.st_gid == SANDBOX_GID and st.st_mode & 0o020)
    ):
        raise SandboxError(
            f"gateway socket {path} is not writable by the sandbox user "
            f"(uid {SANDBOX_UID}); the gateway creates it 0666 (chmod it so)"
        )


class PodmanSandbox(HostWorkspaceSandbox):
    def __init__(
        self,
        backend: PodmanBackend,
        spec: SandboxSpec,
        sandbox_dir: Path,
        container: str,
        base_commit: str,
        env_lease=None,
        quota: DiskQuota | None = None,
    ):
        self.backend = backend
        self.spec = spec
        self.sandbox_dir = sandbox_dir
        self.name = container
        self.workdir = sandbox_dir / "workspace"
        self.base_commit = base_commit
        self._env_lease = env_lease
        self.quota = quota  # the file system holding sandbox_dir (sandbox.disk_mb, when root)
        self._destroyed = False

    def _env(self, extra: Mapping[str, str] | None) -> dict[str, str]:
        return exec_env(self.spec, extra, env_layer=self._env_lease is not None)

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
        inner = inner_command(cmd, self.spec, python="python3", forwarder=FORWARDER_INSIDE)
        argv = [
            self.backend.exe,
            "exec",
            *(["-i"] if stdin is not None else []),
            "--workdir",
            inside_cwd(cwd),
            "--user",
            f"{SANDBOX_UID}:{SANDBOX_GID}",
        ]
        env_argv, env_file, proc_env = self._env_args(self._env(env))
        try:
            run = run_captured(
                [*argv, *env_argv, self.name, *inner],
                env=proc_env,
                timeout=timeout,
                max_output_bytes=max_output_bytes,
                stdin=stdin,
                stop=self._stop,
                cwd=self.sandbox_dir,  # as the container's (create): conmon may mark an OOM kill in its cwd
            )
        except OSError as exc:
            raise SandboxError(f"cannot run {self.backend.exe}: {exc}") from None
        finally:
            _remove_env_file(env_file)
        return self._result(run, timeout)

    def _env_args(self, env: Mapping[str, str]) -> tuple[list[str], Path | None, dict[str, str] | None]:
        """(podman arguments, env file to remove afterwards, podman's environment): values go to a
        private ``--env-file``, or (those with a newline) to podman's own environment as ``-e NAME``."""
        lines, by_name = [], {}
        for k, v in env.items():
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", k):
                raise SandboxError(f"invalid environment variable name {k!r}")
            if "\n" in v or "\r" in v or "\0" in v:
                by_name[k] = v.replace("\0", "")
            else:
                lines.append(f"{k}={v}\n")
        d = self.sandbox_dir / ".env"
        d.mkdir(mode=0o700, exist_ok=True)
        path = d / f"{uuid.uuid4().hex}.env"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8", errors="surrogateescape") as f:
            f.writelines(lines)
        argv = ["--env-file", str(path)]
        proc_env = None
        if by_name:
            proc_env = {**os.environ, **by_name}
            for k in by_name:
                argv += ["--env", k]
        return argv, path, proc_env

    def _stop(self, proc: subprocess.Popen) -> None:
        """End an exec: its processes in the container (the client's death does not), then the client."""
        self._kill_inside()
        kill_group(proc)

    def _result(self, run: Captured, timeout: float) -> ExecResult:
        rc, killed, stderr = run.exit_code, run.signal, run.stderr
        cause = ""
        if run.timed_out:
            cause = f"timeout after {timeout:.1f}s"
        elif (
            rc in (125, 126, 127, 255)
            and stderr.startswith("Error:")
            and (rc in (125, 255) or self.backend._state(self.name) != "running")
        ):
            state = self.backend._state(self.name)
            hint = (
                f" (are the sandbox's {self.spec.max_pids} pids in use by leftover processes?)"
                if "OCI runtime" in stderr and state == "running"
                else ""
            )
            raise SandboxError(
                f"{self.backend.exe} exec failed in sandbox {self.name} "
                f"(container state: {state or 'gone'}){hint}: {stderr.strip()[-2000:]}"
            )
        elif killed:
            cause = f"killed by signal {killed} ({signal_name(killed)})"
            if killed == signal.SIGKILL:
                cause += f"; memory limit {self.spec.memory_mb} MiB or an external kill"
        if self.quota is not None and self.quota.full():
            cause = "; ".join(c for c in (cause, f"disk quota ({self.quota.limit_mb} MiB) full") if c)
        return ExecResult(
            exit_code=rc,
            stdout=run.stdout,
            stderr=stderr,
            duration_s=run.duration_s,
            timed_out=run.timed_out,
            truncated=run.truncated,
            killed_by_signal=killed,
            cause=cause,
        )

    def _kill_inside(self) -> None:
        """Kill every process of the container's execs (the exec client's death does not), keeping
        its init and keeper so the container stays up."""
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            subprocess.run(
                [self.backend.exe, "exec", "--user", f"{SANDBOX_UID}:{SANDBOX_GID}", self.name, "sh", "-c", _KILL_ALL],
                capture_output=True,
                timeout=30,
                cwd=self.sandbox_dir,
            )

    def write_bytes(self, path: str, data: bytes) -> None:
        """Write on the host copy, then hand the file (and new parents) to the sandbox user."""
        target = self._host_path(path)
        missing = [p for p in [target.parent, *target.parent.parents] if not p.exists()]
        super().write_bytes(path, data)
        for p in [target, *missing]:
            if p.is_relative_to(self.workdir):
                with contextlib.suppress(OSError):
                    os.lchown(p, SANDBOX_UID, SANDBOX_GID)

    def destroy(self) -> None:
        if self._destroyed:
            return
        self._destroyed = True
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            subprocess.run(
                [self.backend.exe, "rm", "-f", "-t", "0", self.name],
                capture_output=True,
                timeout=120,
                cwd=self.sandbox_dir if self.sandbox_dir.is_dir() else None,
            )
        if self._env_lease is not None:
            self._env_lease.release()
        if self.quota is not None:
            self.quota.release()
            self.quota = None
        if self.sandbox_dir.exists():
            discard(self.sandbox_dir)


class PodmanBackend(ImageCacheUser):
    """``executable``: ``podman`` (default) or ``docker``. ``image``: use this image as base instead of
    the debootstrap one (e.g. a SWE-bench image). ``runtime``: OCI runtime flag (``None`` to omit)."""

    def __init__(
        self,
        root: Path | None = None,
        cache: ImageCache | None = None,
        executable: str = "podman",
        image: str | None = None,
        runtime: str | None = "runc",
        base_recipe: BaseRecipe | None = None,
        extra_run_args: tuple[str, ...] = (),
        disk_mb: int | None = None,
    ):
        self.executable = executable
        self.name = Path(executable).name
        self.python = "python3"  # the image's interpreter (graders and forwarders run with it)
        self.root = Path(root) if root is not None else legorl_home() / "sandboxes"
        self._cache = cache
        self.image = image
        self.runtime = runtime
        self.base_recipe = base_recipe or podman_base_recipe()
        self.extra_run_args = tuple(extra_run_args)
        self.disk_mb = disk_mb  # each sandbox's disk quota (legorl.sandbox.quota); None: none
        self._exe: str | None = None
        self._base_lock = threading.Lock()
        self._base_image: str | None = None

    @property
    def exe(self) -> str:
        if self._exe is None:
            packages = "podman runc uidmap" if self.name == "podman" else "docker.io"
            self._exe = require_program(self.executable, f"`apt-get install -y {packages}`")
        return self._exe

    def _state(self, name: str) -> str:
        res = subprocess.run(
            [self.exe, "inspect", "--format", "{{.State.Status}}", name], capture_output=True, text=True, timeout=60
        )
        return res.stdout.strip() if res.returncode == 0 else ""

    def image_exists(self, image: str) -> bool:
        res = subprocess.run(
            [self.exe, "image", "exists", image] if self.name == "podman" else [self.exe, "image", "inspect", image],
            capture_output=True,
            timeout=60,
        )
        return res.returncode == 0

    # -- images -----------------------------------------------------------------------------------
    def _build_base(self, data: Path, image: str) -> dict:
        recipe = self.base_recipe
        if not shutil.which("debootstrap"):
            raise ImageBuildError("debootstrap is not installed (apt-get install -y debootstrap)", step="debootstrap")
        rootfs = data.parent / "rootfs"
        suite = recipe.os.split(":", 1)[1]
        run_step(
            "debootstrap",
            [
                "debootstrap",
                f"--variant={recipe.variant}",
                f"--include={','.join(recipe.packages)}",
                suite,
                str(rootfs),
                recipe.mirror,
            ],
            cwd=data.parent,
            timeout=3600,
        )
        for junk in ("var/cache/apt/archives", "var/lib/apt/lists"):
            for p in (rootfs / junk).glob("*"):
                if p.is_file():
                    p.unlink()
        _scrub_rootfs(rootfs)
        tar = subprocess.Popen(["tar", "-C", str(rootfs), "--numeric-owner", "-c", "."], stdout=subprocess.PIPE)
        try:
            imp = subprocess.run(
                [self.exe, "import", "-", image], stdin=tar.stdout, capture_output=True, text=True, timeout=1800
            )
        finally:
            if tar.stdout is not None:
                tar.stdout.close()
            tar.wait()
        shutil.rmtree(rootfs, ignore_errors=True)
        if imp.returncode != 0 or tar.returncode != 0:
            raise ImageBuildError("import failed", step=f"{self.name} import", output=imp.stderr + imp.stdout)
        data.mkdir()
        size = subprocess.run(
            [self.exe, "image", "inspect", "--format", "{{.Size}}", image], capture_output=True, text=True, timeout=60
        ).stdout.strip()
        return {
            "image": image,
            "bytes": int(size) if size.isdigit() else 1,
            "evict_cmd": [self.exe, "rmi", "-f", image],
        }

    def base_layer(self) -> Layer:
        """The base image's layer (built by debootstrap + import when absent; skipped if the image exists)."""
        recipe = self.base_recipe
        if self.image:
            recipe = BaseRecipe(backend="oci", os="external", image=self.image)
            return self.cache.base(recipe, lambda d: {"image": self.image})
        image = f"legorl/base:{recipe.key()[:16]}"
        with self._base_lock:
            layer = self.cache.base(
                recipe,
                lambda d: {"image": image, "bytes": 1} if self.image_exists(image) else self._build_base(d, image),
            )
            if not self.image_exists(image):  # removed behind our back: rebuild
                self.cache.remove("base", recipe.key())
                layer = self.cache.base(recipe, lambda d: self._build_base(d, image))
            self._base_image = image
            return layer

    def prepare_layers(self, recipe: InstanceRecipe, env: EnvRecipe | None = None, lease: bool = False) -> Layer:
        base = self.base_layer()
        env_layer = self.cache.env(env or EnvRecipe(), base)
        return self.cache.instance(recipe, env_layer, lease=lease)

    # -- sandboxes --------------------------------------------------------------------------------
    def create(self, spec: SandboxSpec) -> PodmanSandbox:
        self.exe  # noqa: B018
        inst_recipe, env_recipe = spec_recipes(spec)
        if spec.gateway_socket is not None:
            _check_gateway_socket(spec.gateway_socket)
        base = self.base_layer()
        image = spec.image or str(base.meta["image"])
        env_layer = self.cache.env(env_recipe, base, lease=not env_recipe.empty)
        try:
            inst = self.cache.instance(inst_recipe, env_layer, lease=True)
        except BaseException:
            env_layer.release()
            raise
        self.root.mkdir(parents=True, exist_ok=True)
        cid = f"legorl-sb-{uuid.uuid4().hex[:12]}"
        sandbox_dir = self.root / cid
        sandbox_dir.mkdir()
        quota = None
        try:
            if self.disk_mb is not None:  # workspace and home on a file system of that size (plus the copy)
                extra = -(-inst.size_bytes // MIB)
                quota = DiskQuota.mount(sandbox_dir, self.disk_mb, self.root / ".quota", extra_mb=extra)
            try:
                copy_workspace(inst.path, sandbox_dir / "workspace")
            finally:
                inst.release()
            (sandbox_dir / "home").mkdir()
            for tree in ("workspace", "home"):  # writable by the sandbox user (execs run as uid 1000)
                _chown_tree(sandbox_dir / tree, SANDBOX_UID, SANDBOX_GID)
            env_path = None if env_recipe.empty else env_layer.path
            self._start_container(self._run_argv(spec, cid, sandbox_dir, image, env_path), cid, sandbox_dir)
        except BaseException as exc:
            with contextlib.suppress(OSError, subprocess.SubprocessError):
                subprocess.run([self.exe, "rm", "-f", "-t", "0", cid], capture_output=True, timeout=120)
            if quota is not None:
                quota.release()
            shutil.rmtree(sandbox_dir, ignore_errors=True)
            env_layer.release()
            if isinstance(exc, SandboxError):
                raise
            if isinstance(exc, (OSError, subprocess.SubprocessError)):
                raise SandboxError(f"cannot create {self.name} sandbox: {exc}") from exc
            raise
        return PodmanSandbox(self, spec, sandbox_dir, cid, inst.meta["commit"], env_layer.lease, quota=quota)

    def _run_argv(self, spec: SandboxSpec, cid: str, sandbox_dir: Path, image: str, env_path: Path | None) -> list[str]:
        """``podman run`` of the sandbox's container: no network, read-only root, no capabilities,
        the spec's memory and pid limits; the workspace, home, env layer and gateway socket mounted."""
        argv = [
            self.exe,
            "run",
            "-d",
            "--name",
            cid,
            "--hostname",
            "sandbox",
            "--network",
            "none",
            "--no-hosts",
            "--read-only",
            "--ulimit",
            "nofile=1024:1024",
            "--ulimit",
            "nproc=1024:1024",
            "--memory",
            f"{spec.memory_mb}m",
            "--memory-swap",
            f"{spec.memory_mb}m",
            "--pids-limit",
            str(spec.max_pids),
            "--cap-drop",
            "ALL",
            "--security-opt",
            "no-new-privileges",
            "--init",
            "-v",
            f"{sandbox_dir / 'workspace'}:{WORKSPACE}:rw",
            "-v",
            f"{sandbox_dir / 'home'}:{SANDBOX_HOME}:rw",
            "-v",
            f"{FORWARDER_PATH}:{FORWARDER_INSIDE}:ro",
            "--workdir",
            WORKSPACE,
        ]
        if self.runtime:
            argv[2:2] = ["--runtime", self.runtime]
        if self.disk_mb is not None:  # /tmp in memory, bounded like the disk
            argv += ["--tmpfs", f"/tmp:rw,nosuid,nodev,mode=1777,size={self.disk_mb}m"]
        if env_path is not None:
            argv += ["-v", f"{env_path}:{ENV_INSIDE}:ro"]
        for host, mount in getattr(spec, "extra_layers", ()) or ():  # harness layers, read-only
            argv += ["-v", f"{host}:{mount}:ro"]
        if spec.gateway_socket is not None:
            argv += ["-v", f"{Path(spec.gateway_socket).resolve()}:{GATEWAY_SOCKET_INSIDE}"]
        return [*argv, *self.extra_run_args, image, "sh", "-c", _KEEPER]

    def _start_container(self, argv: list[str], cid: str, sandbox_dir: Path) -> None:
        # the container's conmon inherits this cwd and marks an OOM kill there with an `oom` file
        res = subprocess.run(argv, capture_output=True, text=True, timeout=300, cwd=sandbox_dir)
        if res.returncode != 0:
            raise SandboxError(
                f"{self.name} run failed for sandbox {cid}: {(res.stderr or res.stdout).strip()[-2000:]}"
            )
