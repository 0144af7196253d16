"""Environment image cache: base → env → instance layers, content-addressed, LRU-bounded (docs/architecture.md, "Sandboxes").

Layers
------
* **base**: the OS a sandbox runs on. For bwrap it is an allowlisted view of the host's system
  directories (:mod:`legorl.sandbox.view`: ``/usr``'s programs and libraries, a rebuilt ``/usr/share``,
  a synthetic ``/etc``; the layer holds only metadata: the recipe names the host OS release so that an
  OS upgrade changes the key); for podman it is an image built from a debootstrap rootfs (its ``/etc``
  scrubbed of host files and password hashes) and ``podman import``-ed as ``legorl/base:<key>`` (the
  layer records the image name; the rootfs itself lives in podman's storage).
* **env**: what the task's environment needs on top of base: ``pip install --target
  <layer>/site-packages <requirements>`` plus setup commands run in the layer directory. Empty for
  stdlib tasks (the layer is then an empty directory). Sandboxes see it read-only at
  ``/run/legorl/env`` with ``PYTHONPATH``/``PATH`` pointing into it.
* **instance**: the task's repository at its base commit, as a fresh git repository whose history is
  cut to exactly one commit (no remotes, tags, reflog, packed history or other objects: ``git log
  --all`` shows only the base), after the instance's setup commands ran in it.

Keys: ``sha256`` of the canonical JSON of the recipe *and the parent's key*, so a changed base
rebuilds every env and instance above it. The instance key covers the repository content: the git
tree id of ``base_commit`` when the source is a git repository and a commit is named, otherwise a
hash of every file's path, mode and bytes (memoised per process on a stat fingerprint).

On disk, under ``$LEGORL_HOME/images`` (or ``ImageCache(root=...)``)::

    <kind>/<key>/meta.json      recipe, parent, size, build seconds; its mtime is the last use
    <kind>/<key>/data/          the layer's content
    locks/<kind>-<key>.lock     flock: one builder per layer; evictors take it non-blocking
    leases/<kind>-<key>/<pid>-<id>   "in use" marks (a dead pid's lease does not count)
    tmp/                        layers being built; renamed into place atomically when complete

Concurrency: every process or thread that wants a layer takes its lock; the first builds into
``tmp/`` and renames, the others wait on the lock and then find it built (one build). Eviction
(``max_bytes``, default ``$LEGORL_IMAGE_CACHE_BYTES`` or 20 GiB) removes the least recently used
layers that are not pinned, not leased and not locked, until the total fits.

Trust: recipes (requirements, setup commands) are trusted like a Dockerfile. Env setup commands run
on the host in the layer directory; instance setup commands run through the backend's runner
(inside a sandbox for bwrap and podman) with the repository at ``/workspace``.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import importlib.util
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Protocol

from legorl.errors import ImageBuildError, ImageDiskFullError, SandboxError  # re-exported
from legorl.sandbox.git import export_commit, git_argv, host_git_env
from legorl.sandbox.hostfs import force_rmtree
from legorl.settings import legorl_home, settings

KINDS = ("base", "env", "instance", "harness")  # harness: agent programs (legorl.harnesses.install)
_SKIP_NAMES = {"__pycache__", ".pytest_cache", ".git"}
_SKIP_SUFFIXES = (".pyc",)


# ------------------------------------------------------------------------------------------- errors
# ImageBuildError, ImageDiskFullError: defined in legorl.errors (the error tree), imported above.


def _is_enospc(exc: BaseException | None) -> bool:
    seen = 0
    while exc is not None and seen < 10:
        if isinstance(exc, OSError) and exc.errno == errno.ENOSPC:
            return True
        if isinstance(exc, shutil.Error) and any("No space left" in str(a) for a in exc.args):
            return True
        if isinstance(exc, ImageDiskFullError) or "No space left on device" in str(exc):
            return True
        exc = exc.__cause__ or exc.__context__
        seen += 1
    return False


def run_step(
    step: str,
    argv: list[str] | str,
    *,
    cwd: Path,
    env: Mapping[str, str] | None = None,
    timeout: float = 3600,
    stdin: bytes | None = None,
) -> str:
    """Run one build step; on failure raise :class:`ImageBuildError` naming the step with its output."""
    cmd = ["bash", "-c", argv] if isinstance(argv, str) else argv
    try:
        proc = subprocess.run(
            cmd,
            cwd=cwd,
            env=dict(env) if env is not None else None,
            input=stdin,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired as exc:
        out = (exc.stdout or b"").decode("utf-8", "replace")
        raise ImageBuildError(f"timed out after {timeout:.0f}s", step=step, output=out) from exc
    except OSError as exc:
        raise ImageBuildError(f"cannot run: {exc}", step=step) from exc
    out = proc.stdout.decode("utf-8", "replace")
    if proc.returncode != 0:
        cls = ImageDiskFullError if "No space left on device" in out else ImageBuildError
        raise cls(f"exited with status {proc.returncode}", step=step, output=out)
    return out


def git(args: list[str], cwd: Path, step: str | None = None) -> str:
    """One git build step in ``cwd`` (see :mod:`legorl.sandbox.git`)."""
    return run_step(step or f"git {args[0]}", git_argv(*args), cwd=cwd, env=host_git_env(cwd), timeout=600)


# ------------------------------------------------------------------------------------------ recipes
def recipe_key(kind: str, recipe: Mapping[str, Any], parent: str = "") -> str:
    blob = json.dumps({"kind": kind, "parent": parent, "recipe": recipe}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:24]


def host_os_release() -> str:
    try:
        text = Path("/etc/os-release").read_text()
    except OSError:
        return "unknown"
    fields = dict(line.split("=", 1) for line in text.splitlines() if "=" in line)
    return f"{fields.get('ID', '?').strip(chr(34))}-{fields.get('VERSION_ID', '?').strip(chr(34))}"


@dataclass(frozen=True)
class BaseRecipe:
    """``backend`` + OS recipe. For bwrap ``os`` is ``host:<id-version>``; for podman a debootstrap
    suite/variant/packages/mirror (``image`` set instead means: use this existing image as is)."""

    backend: str = "bwrap"
    os: str = ""
    variant: str = "minbase"
    packages: tuple[str, ...] = ()
    mirror: str = ""
    image: str = ""
    build: str = ""  # version of the build procedure (e.g. the podman image's /etc scrub); "" = none

    def key(self) -> str:
        fields = asdict(self)
        if not fields["build"]:
            fields.pop("build")  # keys of recipes without one stay what they were
        return recipe_key("base", fields)


def bwrap_base_recipe() -> BaseRecipe:
    return BaseRecipe(backend="bwrap", os=f"host:{host_os_release()}", variant="", packages=())


@dataclass(frozen=True)
class EnvRecipe:
    """python version + requirements (``pip install --target``) + setup commands (run in the layer).

    The fields after ``pip_args`` describe environments of real repositories (SWE-bench's specs, see
    :mod:`legorl.tasks.swebench_env`); left empty they leave the key of a recipe what it was:

    ``interpreter``: host path of the interpreter that builds the layer and runs inside the sandbox
    (e.g. a pyenv ``python3.9``); ``""`` = this process's (or ``python<version>`` on ``PATH``).
    ``optional``: requirements installed when the index has them; one it has no distribution of
    is dropped and recorded in the layer's ``meta.json`` (``dropped``), the rest installed.
    ``project``: a source tree whose *dependencies* (with ``project_extras``) are installed, not the
    project itself (its distributions are removed: its code comes from the workspace), after
    ``project_prepare`` ran in a scratch copy of it. ``pip_env``: variables for those pip runs.
    ``python_path``: paths inside the sandbox put before the layer on ``PYTHONPATH`` (the
    repository's import root, e.g. ``/workspace/src``). ``build_requirements``: what building the
    project in place needs (``setuptools_scm``…), installed within the pins of ``requirements``.
    ``index_date`` (``YYYY-MM-DD``): resolve as the index was that day (``uv pip install
    --exclude-newer``), so that a layer built today holds what it held when its tests were recorded
    (a newer Pygments renders HTML differently and fails Sphinx's tests).
    """

    python: str = f"{sys.version_info.major}.{sys.version_info.minor}"
    requirements: tuple[str, ...] = ()
    setup: tuple[str, ...] = ()
    pip_args: tuple[str, ...] = ()  # e.g. ("--no-index", "--find-links", "/wheels")
    interpreter: str = ""
    optional: tuple[str, ...] = ()
    project: str = ""
    project_extras: tuple[str, ...] = ()
    project_prepare: tuple[str, ...] = ()
    pip_env: tuple[tuple[str, str], ...] = ()
    python_path: tuple[str, ...] = ()
    build_requirements: tuple[str, ...] = ()
    index_date: str = ""

    @property
    def empty(self) -> bool:
        return not self.requirements and not self.setup and not self.optional and not self.project

    def key(self, base_key: str) -> str:
        fields = {k: v for k, v in asdict(self).items() if v or k in _ENV_RECIPE_V1}
        return recipe_key("env", fields, base_key)


_ENV_RECIPE_V1 = ("python", "requirements", "setup", "pip_args")  # always in the key (older layers keep theirs)


@dataclass(frozen=True)
class InstanceRecipe:
    source_dir: Path
    base_commit: str = ""
    setup: tuple[str, ...] = ()

    def content_id(self) -> str:
        return source_content_id(Path(self.source_dir), self.base_commit)

    def key(self, env_key: str) -> str:
        return recipe_key(
            "instance",
            {"content": self.content_id(), "base_commit": self.base_commit, "setup": list(self.setup)},
            env_key,
        )


def _walk_files(root: Path) -> Iterator[tuple[str, os.stat_result, str]]:
    """(relative posix path, lstat, full path) of every entry under ``root``, skipping caches."""
    stack = [(str(root), "")]
    while stack:
        d, rel_dir = stack.pop()
        try:
            with os.scandir(d) as it:
                entries = sorted(it, key=lambda e: e.name)
        except OSError as exc:
            raise SandboxError(f"cannot read {d}: {exc}") from exc
        for e in entries:
            name = e.name
            if name in _SKIP_NAMES or name.endswith(_SKIP_SUFFIXES):
                continue
            st = e.stat(follow_symlinks=False)
            rel = f"{rel_dir}/{name}" if rel_dir else name
            if stat.S_ISDIR(st.st_mode):
                stack.append((e.path, rel))
            yield rel, st, e.path


_content_memo: dict[tuple[str, str], tuple[str, str]] = {}
_memo_lock = threading.Lock()


def source_content_id(source: Path, base_commit: str = "") -> str:
    """A content id for the repository: the git tree of ``base_commit`` or a hash of the files."""
    source = Path(source)
    if not source.is_dir():
        raise SandboxError(f"sandbox source_dir {source} is not a directory")
    if base_commit and (source / ".git").exists():
        tree = git(["rev-parse", f"{base_commit}^{{tree}}"], source, step=f"resolve base commit {base_commit}")
        return "git-tree:" + tree.strip()
    fp = hashlib.sha256()
    items = list(_walk_files(source))
    for rel, st, _ in items:
        fp.update(f"{rel}\0{st.st_mode}\0{st.st_size}\0{st.st_mtime_ns}\0{st.st_ino}\n".encode())
    fingerprint = fp.hexdigest()
    memo_key = (str(source.resolve()), base_commit)
    with _memo_lock:
        hit = _content_memo.get(memo_key)
    if hit and hit[0] == fingerprint:
        return hit[1]
    h = hashlib.sha256()
    for rel, st, p in items:
        if stat.S_ISDIR(st.st_mode):
            h.update(f"D {rel}\n".encode())
        elif stat.S_ISLNK(st.st_mode):
            h.update(f"L {rel} {os.readlink(p)}\n".encode())
        elif stat.S_ISREG(st.st_mode):
            h.update(f"F {rel} {1 if st.st_mode & 0o111 else 0} {st.st_size}\n".encode())
            with open(p, "rb") as f:
                for chunk in iter(lambda: f.read(1 << 20), b""):
                    h.update(chunk)
    cid = "files:" + h.hexdigest()
    with _memo_lock:
        _content_memo[memo_key] = (fingerprint, cid)
    return cid


def _copy_ignore(directory: str, names: list[str]) -> set[str]:
    return {n for n in names if n in _SKIP_NAMES or n.endswith(_SKIP_SUFFIXES)}


def copy_tree(src: Path, dest: Path) -> None:
    """Copy the instance's source tree (without .git and caches). Indirection point for tests."""
    shutil.copytree(src, dest, symlinks=True, ignore=_copy_ignore)


def build_instance_tree(
    recipe: InstanceRecipe, dest: Path, run_setup: Callable[[Path, str], tuple[int, str]] | None = None
) -> dict[str, Any]:
    """Make ``dest`` the repository at its base commit, with history cut to one commit."""
    source = Path(recipe.source_dir)
    if recipe.base_commit and (source / ".git").exists():
        dest.mkdir(parents=True)
        why = export_commit(source, recipe.base_commit, dest)
        if why is not None:
            raise ImageBuildError("git archive | tar -x failed", step=f"export {recipe.base_commit}", output=why)
    else:
        try:
            copy_tree(source, dest)
        except (OSError, shutil.Error) as exc:
            cls = ImageDiskFullError if _is_enospc(exc) else ImageBuildError
            raise cls(f"cannot copy {source}: {exc}", step="copy source") from exc
    for i, cmd in enumerate(recipe.setup):
        if run_setup is None:
            out = run_step(f"setup[{i}]: {cmd}", cmd, cwd=dest)
        else:
            rc, out = run_setup(dest, cmd)
            if rc != 0:
                raise ImageBuildError(f"exited with status {rc}", step=f"setup[{i}]: {cmd}", output=out)
    git(["init", "-q"], dest)
    git(["add", "-A"], dest)
    git(["commit", "-q", "--allow-empty", "--no-verify", "-m", "legorl base"], dest, step="git commit base")
    # History cut: one commit, no remotes/tags (fresh repo), no reflog, nothing unreachable.
    shutil.rmtree(dest / ".git" / "logs", ignore_errors=True)
    git(["gc", "-q", "--prune=now"], dest)
    shutil.rmtree(dest / ".git" / "logs", ignore_errors=True)
    # Fewer directories = faster per-sandbox copies; git recreates these on demand.
    for empty in ("hooks", "branches", "info", "description", "refs/tags", "objects/info"):
        force_rmtree(dest / ".git" / empty)
    commit = git(["rev-parse", "HEAD"], dest).strip()
    return {"commit": commit}


def env_interpreter(recipe: EnvRecipe) -> str:
    """The host interpreter that builds ``recipe``'s layer (and runs in sandboxes over it)."""
    if recipe.interpreter:
        if not os.access(recipe.interpreter, os.X_OK):
            raise ImageBuildError(f"interpreter {recipe.interpreter} does not exist", step="find python")
        return recipe.interpreter
    if recipe.python == f"{sys.version_info.major}.{sys.version_info.minor}":
        return sys.executable
    found = shutil.which(f"python{recipe.python}")
    if not found:
        raise ImageBuildError(f"python {recipe.python} not found on the host", step="find python")
    return found


# pip's (and uv's) words for "the index has no distribution of this requirement"
_NO_DISTRIBUTION = re.compile(
    r"([^\s(;,]+) was not found in the package registry"  # uv
    r"|(?:No matching distribution found for|Could not find a version that satisfies the requirement) ([^\s(;]+)"
)


def requirement_name(requirement: str) -> str:
    """The canonical project name of a requirement string (``"Jinja2>=2.3"`` → ``"jinja2"``)."""
    name = re.split(r"[\s<>=!~\[;@(]", requirement.strip(), maxsplit=1)[0]
    return re.sub(r"[-_.]+", "-", name).lower()


def _pip_install_dropping(
    pip: list[str],
    step: str,
    required: list[str],
    optional: list[str],
    cwd: Path,
    env: Mapping[str, str],
    one_by_one: bool = False,
) -> list[str]:
    """``pip install`` ``required`` and ``optional``; an optional requirement the index has no
    distribution of is dropped and the install retried. Returns the dropped ones. With
    ``one_by_one`` (only where pip installs into an environment, which keeps what earlier runs
    installed), an install that fails otherwise (a source build, a conflict) is redone one optional
    requirement at a time, dropping each that fails."""
    optional = list(optional)
    dropped: list[str] = []
    while required or optional:
        try:
            run_step(step, [*pip, *required, *optional], cwd=cwd, env=env, timeout=1800)
            return dropped
        except ImageBuildError as exc:
            missing = {requirement_name(a or b) for a, b in _NO_DISTRIBUTION.findall(exc.output or "")}
            gone = [o for o in optional if requirement_name(o) in missing]
            if not gone:
                if not one_by_one or not optional:
                    raise
                break
            optional = [o for o in optional if o not in gone]
            dropped += gone
    else:
        return dropped  # nothing left to install
    if required:
        run_step(step, [*pip, *required], cwd=cwd, env=env, timeout=1800)
    for req in optional:
        try:
            run_step(f"{step}: {req}", [*pip, req], cwd=cwd, env=env, timeout=900)
        except ImageBuildError:
            dropped.append(req)
    return dropped


_LOCAL_DISTS = (
    "import importlib.metadata as m, json; print(json.dumps(sorted({d.metadata['Name'] for d in m.distributions()"
    " if 'dir_info' in (d.read_text('direct_url.json') or '')})))"
)


def _build_project_env(recipe: EnvRecipe, dest: Path) -> dict[str, Any]:
    """A virtual environment in ``dest/venv`` installed as SWE-bench installs one: the optional
    package list, then the (pinned) requirements, then the build requirements (within those pins),
    then the project's dependencies with pip's usual semantics (what is installed and satisfies
    them stays, a conflict is resolved the project's way), then the project itself uninstalled.
    ``dest/site-packages`` links to its site-packages."""
    py = env_interpreter(recipe)
    pip_env = {**os.environ, **dict(recipe.pip_env)}
    run_step("venv", [py, "-m", "venv", str(dest / "venv")], cwd=dest)
    vpy = str(dest / "venv" / "bin" / "python")
    if recipe.index_date:
        if importlib.util.find_spec("uv") is None:
            raise ImageBuildError("resolving as of a date needs uv: pip install uv", step="find uv")
        pip = [sys.executable, "-m", "uv", "pip", "install", "--python", vpy, "--exclude-newer", recipe.index_date]
    else:
        pip = [vpy, "-m", "pip", "install", "--no-input", "--disable-pip-version-check"]
    pip += recipe.pip_args
    meta: dict[str, Any] = {}
    # SWE-bench's order: the package list, then its pinned pip packages (which win a conflict)
    if recipe.optional:
        dropped = _pip_install_dropping(
            pip, "pip install packages", [], list(recipe.optional), dest, pip_env, one_by_one=True
        )
        if dropped:
            meta["dropped"] = dropped  # optional requirements that would not install (recorded)
    if recipe.requirements:
        run_step("pip install pinned", [*pip, *recipe.requirements], cwd=dest, env=pip_env)
    if recipe.build_requirements:
        constraints = dest.parent / "pins.txt"  # a build tool must not move a pinned package
        constraints.write_text("".join(f"{r}\n" for r in recipe.requirements if "==" in r))
        run_step(
            "pip install build requirements",
            [*pip, "-c", str(constraints), *recipe.build_requirements],
            cwd=dest,
            env=pip_env,
        )
        constraints.unlink()
    scratch = dest.parent / "project"  # the prepare steps (e.g. SWE-bench's `sed` fixes) must not touch the tree
    copy_tree(Path(recipe.project), scratch)
    for i, cmd in enumerate(recipe.project_prepare):
        run_step(f"project prepare[{i}]: {cmd}", cmd, cwd=scratch)
    extras = f"[{','.join(recipe.project_extras)}]" if recipe.project_extras else ""
    run_step("pip install project", [*pip, f"{scratch}{extras}"], cwd=dest, env=pip_env)
    # the project is the distribution installed from a local directory (PEP 610's dir_info)
    own = json.loads(run_step("find project", [vpy, "-c", _LOCAL_DISTS], cwd=dest))
    if own:  # its code is the workspace's, never a copy in the layer
        run_step("pip uninstall project", [vpy, "-m", "pip", "uninstall", "-y", *own], cwd=dest)
    meta["project"] = own
    force_rmtree(scratch)
    sites = sorted((dest / "venv" / "lib").glob("python*/site-packages"))
    if not sites:
        raise ImageBuildError("the virtual environment has no site-packages", step="venv")
    (dest / "site-packages").symlink_to(sites[0].relative_to(dest))
    return meta


def build_env_dir(recipe: EnvRecipe, dest: Path) -> dict[str, Any]:
    dest.mkdir(parents=True)
    meta: dict[str, Any] = {}
    site = dest / "site-packages"
    if recipe.project:
        meta = _build_project_env(recipe, dest)
    elif recipe.requirements or recipe.optional:
        py = env_interpreter(recipe)
        pip = [py, "-m", "pip", "install", "--no-input", "--disable-pip-version-check", "--target", str(site)]
        pip_env = {**os.environ, **dict(recipe.pip_env)}
        dropped = _pip_install_dropping(
            [*pip, *recipe.pip_args], "pip install", list(recipe.requirements), list(recipe.optional), dest, pip_env
        )
        if dropped:
            meta["dropped"] = dropped
    for i, cmd in enumerate(recipe.setup):
        run_step(
            f"setup[{i}]: {cmd}",
            cmd,
            cwd=dest,
            env={**os.environ, "LEGORL_ENV_DIR": str(dest), "PYTHONPATH": str(site)},
        )
    return meta


# -------------------------------------------------------------------------------------------- cache
@dataclass
class Layer:
    kind: str
    key: str
    root: Path  # <cache>/<kind>/<key>
    meta: dict[str, Any]
    lease: Lease | None = None

    @property
    def path(self) -> Path:
        return self.root / "data"

    @property
    def size_bytes(self) -> int:
        return int(self.meta.get("bytes", 0))

    def release(self) -> None:
        """Release the lease this layer was returned with, if any (idempotent)."""
        if self.lease is not None:
            self.lease.release()


@dataclass
class CacheStats:
    hits: int = 0
    misses: int = 0
    builds: int = 0
    build_failures: int = 0
    build_seconds: float = 0.0
    evictions: int = 0
    evicted_bytes: int = 0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class Lease:
    """Marks a layer in use (by this pid) until :meth:`release`; eviction skips leased layers."""

    def __init__(self, path: Path):
        self.path = path

    def release(self) -> None:
        with contextlib.suppress(OSError):
            self.path.unlink()

    def __enter__(self) -> Lease:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def dir_bytes(path: Path) -> int:
    """Disk bytes of ``path``. A file hard-linked from outside (uv links installed files to its own
    cache, hence to the other layers that install them) counts its share, links here / ``st_nlink``:
    summed over the layers, the cache's total is the disk it really uses."""
    total = 0
    linked: dict[int, list[int]] = {}  # inode -> [bytes, links seen here, st_nlink]
    for dirpath, dirnames, filenames in os.walk(path):
        for name in filenames + dirnames:
            with contextlib.suppress(OSError):
                st = os.lstat(os.path.join(dirpath, name))
                size = st.st_blocks * 512 if st.st_blocks else st.st_size
                if st.st_nlink > 1 and not stat.S_ISDIR(st.st_mode):
                    linked.setdefault(st.st_ino, [size, 0, st.st_nlink])[1] += 1
                else:
                    total += size
    return total + sum(size * min(seen, nlink) // nlink for size, seen, nlink in linked.values())


@contextlib.contextmanager
def _flock(path: Path, blocking: bool = True) -> Iterator[bool]:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
        except BlockingIOError:
            yield False
            return
        yield True
    finally:
        os.close(fd)  # closing releases the lock


class LayerBuilder(Protocol):
    """What :meth:`ImageCache.prewarm` needs of a backend (bwrap and podman have it)."""

    def prepare_layers(self, recipe: InstanceRecipe, env: EnvRecipe | None = None) -> Layer: ...


class PrewarmHandle:
    """Background pre-warm of many layers: ``wait()``, ``done()``, ``errors``, ``cancel()``."""

    def __init__(self, futures: dict[str, Future], pool: ThreadPoolExecutor):
        self.futures = futures
        self._pool = pool

    def done(self) -> bool:
        return all(f.done() for f in self.futures.values())

    def wait(self, timeout: float | None = None) -> dict[str, Layer | BaseException]:
        deadline = None if timeout is None else time.monotonic() + timeout
        out: dict[str, Layer | BaseException] = {}
        for name, fut in self.futures.items():
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                out[name] = fut.result(timeout=left)
            except BaseException as exc:  # reported per task
                if isinstance(exc, TimeoutError) and not fut.done():
                    raise
                out[name] = exc
        self._pool.shutdown(wait=False)
        return out

    @property
    def errors(self) -> dict[str, BaseException]:
        return {n: exc for n, f in self.futures.items() if f.done() and (exc := f.exception()) is not None}

    def cancel(self) -> None:
        for f in self.futures.values():
            f.cancel()
        self._pool.shutdown(wait=False, cancel_futures=True)


class ImageCache:
    """Content-addressed layer store with an LRU bound in bytes. Thread- and process-safe."""

    def __init__(self, root: Path | None = None, max_bytes: int | None = None):
        if root is None or max_bytes is None:
            machine = settings()
            root = machine.legorl_home / "images" if root is None else root
            max_bytes = machine.image_cache_bytes if max_bytes is None else max_bytes
        self.root = Path(root)
        self.max_bytes = int(max_bytes)
        self.stats = CacheStats()
        self._stats_lock = threading.Lock()
        for sub in (*KINDS, "locks", "leases", "tmp"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)

    # -- generic --------------------------------------------------------------------------------
    def _lock_path(self, kind: str, key: str) -> Path:
        return self.root / "locks" / f"{kind}-{key}.lock"

    def _lease_dir(self, kind: str, key: str) -> Path:
        return self.root / "leases" / f"{kind}-{key}"

    def _load(self, kind: str, key: str) -> Layer | None:
        root = self.root / kind / key
        try:
            meta = json.loads((root / "meta.json").read_text())
        except (OSError, ValueError):
            return None
        return Layer(kind, key, root, meta)

    def _bump(self, **kw: float) -> None:
        with self._stats_lock:
            for k, v in kw.items():
                setattr(self.stats, k, getattr(self.stats, k) + v)

    def _new_lease(self, kind: str, key: str) -> Lease:
        d = self._lease_dir(kind, key)
        d.mkdir(parents=True, exist_ok=True)
        p = d / f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
        p.touch()
        return Lease(p)

    def leased(self, kind: str, key: str) -> bool:
        d = self._lease_dir(kind, key)
        try:
            names = os.listdir(d)
        except FileNotFoundError:
            return False
        live = False
        for n in names:
            try:
                pid = int(n.split("-", 1)[0])
            except ValueError:
                continue
            if _pid_alive(pid):
                live = True
            else:
                with contextlib.suppress(OSError):
                    (d / n).unlink()
        return live

    def get(self, kind: str, key: str) -> Layer | None:
        return self._load(kind, key)

    def get_or_build(
        self,
        kind: str,
        key: str,
        recipe: Mapping[str, Any],
        build: Callable[[Path], Mapping[str, Any] | None],
        *,
        parent: str = "",
        lease: bool = False,
    ) -> Layer:
        """Return the layer ``kind/key``, building it with ``build(data_dir)`` if absent.

        ``build`` must create ``data_dir`` and may return extra metadata. Exactly one builder runs
        per key (file lock); a failed build leaves nothing behind and raises :class:`ImageBuildError`
        (:class:`ImageDiskFullError` on ENOSPC). ``lease=True`` returns the layer leased (in use).
        """
        if kind not in KINDS:
            raise ValueError(f"unknown layer kind {kind!r}")
        final = self.root / kind / key
        with _flock(self._lock_path(kind, key)):
            layer = self._load(kind, key)
            if layer is not None:
                with contextlib.suppress(OSError):
                    os.utime(final / "meta.json")
                if lease:
                    layer.lease = self._new_lease(kind, key)
                self._bump(hits=1)
                return layer
            self._bump(misses=1)
            # a build of this layer that was killed (no chance to clean up) left its directory: we
            # hold the layer's lock, so no live builder owns one
            for stale in (self.root / "tmp").glob(f"{kind}-{key}-*"):
                force_rmtree(stale)
            tmp = self.root / "tmp" / f"{kind}-{key}-{uuid.uuid4().hex[:8]}"
            tmp.mkdir(parents=True)
            t0 = time.monotonic()
            try:
                extra = dict(build(tmp / "data") or {})
                if not (tmp / "data").exists():
                    (tmp / "data").mkdir()
                seconds = time.monotonic() - t0
                size = int(extra.pop("bytes", 0)) or dir_bytes(tmp / "data")
                meta = {
                    "kind": kind,
                    "key": key,
                    "parent": parent,
                    "recipe": dict(recipe),
                    "bytes": size,
                    "build_seconds": round(seconds, 3),
                    "created": time.time(),
                    **extra,
                }
                (tmp / "meta.json").write_text(json.dumps(meta, indent=1, sort_keys=True, default=str))
                if final.exists():  # a stale half-layer without meta.json (crashed old version)
                    force_rmtree(final)
                os.rename(tmp, final)
            except BaseException as exc:
                force_rmtree(tmp)
                self._bump(build_failures=1)
                if isinstance(exc, ImageDiskFullError):
                    raise ImageDiskFullError(
                        exc.message + "; the partial layer was removed",
                        kind=kind,
                        key=key,
                        step=exc.step,
                        output=exc.output,
                    ) from exc
                if _is_enospc(exc):
                    raise ImageDiskFullError(
                        "disk full (ENOSPC) while building; the partial layer was removed",
                        kind=kind,
                        key=key,
                        step=getattr(exc, "step", "build"),
                        output=getattr(exc, "output", "") or str(exc),
                    ) from exc
                if isinstance(exc, ImageBuildError):
                    raise ImageBuildError(exc.message, kind=kind, key=key, step=exc.step, output=exc.output) from exc
                if isinstance(exc, Exception):
                    raise ImageBuildError(f"build failed: {exc!r}", kind=kind, key=key, step="build") from exc
                raise
            self._bump(builds=1, build_seconds=seconds)
            layer = Layer(kind, key, final, meta)
            if lease:
                layer.lease = self._new_lease(kind, key)
        self.enforce_bound(protect={(kind, key)})
        return layer

    def remove(self, kind: str, key: str) -> bool:
        with _flock(self._lock_path(kind, key), blocking=False) as got:
            if not got or self.leased(kind, key):
                return False
            return self._evict_locked(kind, key)

    def _evict_locked(self, kind: str, key: str) -> bool:
        layer = self._load(kind, key)
        final = self.root / kind / key
        if not final.exists():
            return False
        trash = self.root / "tmp" / f"trash-{kind}-{key}-{uuid.uuid4().hex[:6]}"
        os.rename(final, trash)
        force_rmtree(trash)
        if layer is not None:
            cmd = layer.meta.get("evict_cmd")
            if cmd:
                with contextlib.suppress(OSError, subprocess.SubprocessError):
                    subprocess.run(cmd, capture_output=True, timeout=120)
            self._bump(evictions=1, evicted_bytes=layer.size_bytes)
        return True

    def pin(self, kind: str, key: str, pinned: bool = True) -> None:
        marker = self.root / kind / key / "pinned"
        if pinned:
            marker.touch()
        else:
            with contextlib.suppress(FileNotFoundError):
                marker.unlink()

    def layers(self) -> list[dict[str, Any]]:
        out = []
        for kind in KINDS:
            for d in sorted((self.root / kind).iterdir()):
                layer = self._load(kind, d.name)
                if layer is None:
                    continue
                with contextlib.suppress(OSError):
                    last = (d / "meta.json").stat().st_mtime
                out.append(
                    {
                        "kind": kind,
                        "key": d.name,
                        "bytes": layer.size_bytes,
                        "last_used": last,
                        "pinned": (d / "pinned").exists(),
                        "in_use": self.leased(kind, d.name),
                        "parent": layer.meta.get("parent", ""),
                        "build_seconds": layer.meta.get("build_seconds"),
                        "image": layer.meta.get("image", ""),
                    }
                )
        return out

    def total_bytes(self) -> int:
        return sum(layer["bytes"] for layer in self.layers())

    def enforce_bound(
        self, max_bytes: int | None = None, protect: Iterable[tuple[str, str]] = ()
    ) -> list[tuple[str, str]]:
        """Evict least-recently-used unpinned, unleased, unlocked layers until the total fits."""
        bound = self.max_bytes if max_bytes is None else max_bytes
        protect = set(protect)
        evicted: list[tuple[str, str]] = []
        with _flock(self.root / "locks" / "gc.lock"):
            layers = self.layers()
            total = sum(x["bytes"] for x in layers)
            if total <= bound:
                return evicted
            for x in sorted(layers, key=lambda x: x["last_used"]):
                if total <= bound:
                    break
                ident = (x["kind"], x["key"])
                if x["pinned"] or x["in_use"] or ident in protect:
                    continue
                with _flock(self._lock_path(*ident), blocking=False) as got:
                    if not got or self.leased(*ident):
                        continue
                    if self._evict_locked(*ident):
                        total -= x["bytes"]
                        evicted.append(ident)
        return evicted

    def prune(self, max_bytes: int | None = None, everything: bool = False) -> list[tuple[str, str]]:
        """Evict down to ``max_bytes`` (default: the cache's bound); ``everything``: all unused."""
        removed = self.enforce_bound(0 if everything else max_bytes)
        for stale in (self.root / "tmp").iterdir():  # builds that crashed mid-way
            if time.time() - stale.stat().st_mtime > 3600:
                force_rmtree(stale)
        return removed

    # -- typed layers ---------------------------------------------------------------------------
    def base(
        self, recipe: BaseRecipe, build: Callable[[Path], Mapping[str, Any] | None] | None = None, lease: bool = False
    ) -> Layer:
        return self.get_or_build("base", recipe.key(), asdict(recipe), build or (lambda d: d.mkdir()), lease=lease)

    def env(self, recipe: EnvRecipe, base: Layer, lease: bool = False) -> Layer:
        return self.get_or_build(
            "env",
            recipe.key(base.key),
            asdict(recipe),
            lambda d: build_env_dir(recipe, d),
            parent=base.key,
            lease=lease,
        )

    def instance(
        self,
        recipe: InstanceRecipe,
        env: Layer,
        lease: bool = False,
        run_setup: Callable[[Path, str], tuple[int, str]] | None = None,
    ) -> Layer:
        rec = {"source_dir": str(recipe.source_dir), "base_commit": recipe.base_commit, "setup": list(recipe.setup)}
        return self.get_or_build(
            "instance",
            recipe.key(env.key),
            rec,
            lambda d: build_instance_tree(recipe, d, run_setup),
            parent=env.key,
            lease=lease,
        )

    def prewarm(
        self, tasks: Iterable[Any], backend: LayerBuilder, env: EnvRecipe | None = None, workers: int = 4
    ) -> PrewarmHandle:
        """Build the layers of ``tasks`` (Task records with ``source_dir``, InstanceRecipes, or
        ``(name, InstanceRecipe, EnvRecipe)`` for a task with its own environment) in a background
        thread pool; returns a handle at once. ``backend`` builds them (its base layer
        decides the rest), normally one whose cache is this one."""
        pool = ThreadPoolExecutor(max_workers=max(1, workers), thread_name_prefix="legorl-prewarm")
        futures: dict[str, Future] = {}
        for t in tasks:
            layer_env = env
            if isinstance(t, tuple):  # (name, InstanceRecipe, EnvRecipe): a task's own environment
                name, recipe, layer_env = t
            elif isinstance(t, InstanceRecipe):
                name, recipe = str(t.source_dir), t
            else:
                name = getattr(t, "instance_id", str(t))
                if getattr(t, "source_dir", None) is None:
                    fut: Future = Future()
                    fut.set_exception(SandboxError(f"task {name} has no source_dir to build an image from"))
                    futures[name] = fut
                    continue
                recipe = InstanceRecipe(Path(t.source_dir), getattr(t, "base_commit", "") or "")
            futures[name] = pool.submit(backend.prepare_layers, recipe, layer_env)
        return PrewarmHandle(futures, pool)


_default_caches: dict[str, ImageCache] = {}
_default_lock = threading.Lock()


def default_cache() -> ImageCache:
    """One shared cache per ``$LEGORL_HOME`` in this process."""
    home = legorl_home()
    with _default_lock:
        cache = _default_caches.get(str(home))
        if cache is None:
            cache = _default_caches[str(home)] = ImageCache(home / "images")
        return cache


class ImageCacheUser:
    """Mixin of the backends: :attr:`cache` is the :class:`ImageCache` they were given (``_cache``),
    else the shared one of ``$LEGORL_HOME``, opened on first use (constructing a backend touches no disk)."""

    _cache: ImageCache | None = None

    @property
    def cache(self) -> ImageCache:
        if self._cache is None:
            self._cache = default_cache()
        return self._cache


def spec_recipes(spec: Any) -> tuple[InstanceRecipe, EnvRecipe]:
    """The instance and env recipes a :class:`SandboxSpec` asks for."""
    inst = InstanceRecipe(
        Path(spec.source_dir), getattr(spec, "base_commit", "") or "", tuple(getattr(spec, "setup_commands", ()) or ())
    )
    env = getattr(spec, "env_recipe", None) or EnvRecipe()
    return inst, env


__all__ = [
    "BaseRecipe",
    "CacheStats",
    "EnvRecipe",
    "ImageBuildError",
    "ImageCache",
    "ImageDiskFullError",
    "ImageCacheUser",
    "InstanceRecipe",
    "Layer",
    "LayerBuilder",
    "Lease",
    "PrewarmHandle",
    "bwrap_base_recipe",
    "default_cache",
    "recipe_key",
    "requirement_name",
    "source_content_id",
    "spec_recipes",
]
