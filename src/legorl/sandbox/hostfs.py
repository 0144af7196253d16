"""The host-side trees of the sandbox backends: a workspace copied from an image layer, and removal of
trees the sandbox may have left unreadable.

* :func:`copy_workspace`: a copy-on-write view of an instance layer (a clone of each file where the
  filesystem supports it, btrfs and xfs; a plain copy elsewhere, ext4), modes and times kept. Small
  trees are copied in-process (no process to start, which dominates for the few dozen files of a
  typical task); larger ones by ``cp -a --reflink=auto``. Never hard links: a hard-linked file written
  in place would corrupt the cache.
* :func:`force_rmtree`: ``rm -rf`` that also removes what a sandbox made unwritable (``chmod 0`` on
  a directory), which ``shutil.rmtree`` alone gives up on.
* :func:`discard`: a sandbox directory gone at once (renamed into ``<parent>/.trash``), deleted by a
  background thread (directory removal costs milliseconds per entry on slow or shared filesystems).
  The trash is emptied before the process exits: :func:`empty_trash` runs at interpreter exit and
  waits for this process's removals (at most :data:`TRASH_EXIT_WAIT_S`), so a short command — one
  ``legorl grade`` — leaves no tree behind; what a killed process left (its pid, in the entry's name,
  is gone) is removed by the next :func:`discard` into that trash.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import logging
import os
import re
import shutil
import stat
import subprocess
import threading
import time
import uuid
from pathlib import Path

from legorl.errors import SandboxError

_FICLONE = 0x40049409  # ioctl: reflink one file onto another (btrfs, xfs)
FAST_COPY_MAX_ENTRIES = 2000
TRASH_EXIT_WAIT_S = 120.0  # how long the interpreter's exit waits for this process's removals
TRASH_NAME = ".trash"
_TRASH_OWNER = re.compile(r"-(\d+)-[0-9a-f]{6}$")  # <name>-<pid>-<random>: the process that discarded it

log = logging.getLogger(__name__)


def _copy_file(src: str, dst: str, st: os.stat_result) -> None:
    fin = os.open(src, os.O_RDONLY | os.O_CLOEXEC)
    try:
        fout = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, stat.S_IMODE(st.st_mode) | 0o200)
        try:
            try:
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
    """In-process ``cp -a`` of a small tree (regular files, directories, symlinks). False (a partial
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
    """Copy the layer ``layer_dir`` to ``dest`` (which must not exist); :class:`SandboxError` on failure
    (nothing left at ``dest``)."""
    try:
        if _copy_tree_fast(str(layer_dir), str(dest), [FAST_COPY_MAX_ENTRIES]):
            return
        force_rmtree(dest)
    except OSError as exc:
        force_rmtree(dest)
        raise SandboxError(f"cannot copy image layer {layer_dir} into a sandbox: {exc}") from None
    try:
        subprocess.run(
            ["cp", "-a", "--reflink=auto", "--", str(layer_dir), str(dest)],
            check=True,
            capture_output=True,
            text=True,
            timeout=1800,
        )
    except FileNotFoundError:
        shutil.copytree(layer_dir, dest, symlinks=True)
    except subprocess.CalledProcessError as exc:
        force_rmtree(dest)
        raise SandboxError(f"cannot copy image layer {layer_dir} into a sandbox: {exc.stderr.strip()}") from None


def force_rmtree(path: Path) -> None:
    """Remove ``path`` (a tree, a file or a link) as thoroughly as its owner can; missing is fine.

    Where ``shutil.rmtree`` cannot enter or empty a directory (a sandbox may ``chmod 0`` anything it
    owns, at any depth), the directory and its parent get their owner's ``rwx`` back and the removal
    is retried below it, once per path (so a directory that stays unreadable cannot loop)."""
    retried: set[str] = set()

    def retry(func, failed, exc_info) -> None:  # shutil.rmtree's onerror callback
        if failed in retried:
            return
        retried.add(failed)
        with contextlib.suppress(OSError):  # a parent we do not own may still let us remove the entry
            parent = os.path.dirname(failed)
            os.chmod(parent, os.stat(parent).st_mode | stat.S_IRWXU)
        with contextlib.suppress(OSError):
            if os.path.isdir(failed) and not os.path.islink(failed):
                os.chmod(failed, stat.S_IRWXU)
                shutil.rmtree(failed, onerror=retry)
            else:
                os.unlink(failed)

    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, onerror=retry)
    elif os.path.lexists(path):
        try:
            os.unlink(path)
        except OSError:
            retry(os.unlink, os.fspath(path), None)


class _Removals:
    """This process's background removals: started by :func:`discard`, waited for by :func:`empty_trash`."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.running: set[threading.Thread] = set()
        self.swept: set[str] = set()  # trash directories already searched for a dead process's trees
        self.hooked = False

    def start(self, target: Path) -> None:
        def remove() -> None:
            try:
                force_rmtree(target)
            finally:
                with self.lock:
                    self.running.discard(threading.current_thread())

        thread = threading.Thread(target=remove, name=f"trash:{target.name}", daemon=True)
        with self.lock:
            self.running.add(thread)
            if not self.hooked:  # registered on first use: later than the exit hooks of what imported us
                atexit.register(empty_trash)
                self.hooked = True
        thread.start()

    def first_visit(self, trash: Path) -> bool:
        with self.lock:
            if str(trash) in self.swept:
                return False
            self.swept.add(str(trash))
            return True


_removals = _Removals()


def _owner_gone(name: str) -> bool:
    """Whether the process that put this trash entry there has ended (an entry without an owner's pid
    was left by an older LEGO-RL: gone too)."""
    m = _TRASH_OWNER.search(name)
    if m is None:
        return True
    pid = int(m.group(1))
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, OverflowError):  # no such process (a number past any pid: an older name)
        return True
    except PermissionError:
        return False  # alive, someone else's
    return False


def discard(path: Path) -> None:
    """Remove a sandbox directory: renamed into ``<parent>/.trash`` at once (the path is gone when this
    returns), deleted there by a background thread that :func:`empty_trash` waits for at exit; removed
    in place where the rename fails. The first discard into a trash also removes what processes that
    ended before emptying it left there."""
    trash = path.parent / TRASH_NAME
    try:
        trash.mkdir(exist_ok=True)
        target = trash / f"{path.name}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        os.rename(path, target)
    except OSError:
        force_rmtree(path)
        return
    _removals.start(target)
    if _removals.first_visit(trash):
        with contextlib.suppress(OSError):
            for entry in os.scandir(trash):
                if _owner_gone(entry.name):
                    _removals.start(Path(entry.path))


def empty_trash(timeout: float = TRASH_EXIT_WAIT_S) -> int:
    """Wait until the trees this process discarded are deleted, at most ``timeout`` seconds (run at
    interpreter exit); returns how many removals were still running (their trees stay in the trash for
    the next process to remove)."""
    deadline = time.monotonic() + timeout
    while True:
        with _removals.lock:
            running = [t for t in _removals.running if t.is_alive()]
        if not running or time.monotonic() >= deadline:
            break
        running[0].join(max(0.0, deadline - time.monotonic()))
    if running:
        log.warning("%d sandbox tree(s) still being deleted at exit: left in the trash", len(running))
    return len(running)


__all__ = [
    "FAST_COPY_MAX_ENTRIES",
    "TRASH_EXIT_WAIT_S",
    "TRASH_NAME",
    "copy_workspace",
    "discard",
    "empty_trash",
    "force_rmtree",
]
