"""A disk quota per sandbox (``sandbox.disk_mb``): what a sandbox writes to the host's disk is bounded,
and a write past the bound fails with ``ENOSPC`` inside the sandbox — the agent's outcome, never the
host's disk filling up.

How, by what the machine allows (chosen per sandbox, at :meth:`DiskQuota.mount`):

* **root** (and a loop device): the sandbox's host directory (``<root>/sb-…``: its workspace — the
  overlay's upper layer, or the copy — and its home) is a file system of its own: a sparse ext4 image
  (no journal, nothing reserved for root) loop-mounted there, ``nosuid,nodev``. The image holds about
  ``disk_mb`` MiB of data plus ext4's own metadata; it takes disk space only as it fills, and
  :meth:`DiskQuota.release` (sandbox destroy) unmounts it and deletes it. Images live in
  ``<root>/.quota``; each is a sparse copy of a template formatted once per size
  (``template-<MiB>.img``: a few MiB of metadata), so creating one costs that copy and a ``mount``. ext4 project quotas would need the host file
  system mounted with ``prjquota``; a tmpfs would bound the disk by spending RAM instead.
* **otherwise** (no root, no loop device): no file system can be mounted for it, so each file a
  sandbox process writes is capped at ``disk_mb`` (``RLIMIT_FSIZE``: ``EFBIG``, or ``SIGXFSZ`` for a
  program that does not ignore it); the total is not bounded. Said once in the log.

In both cases ``/tmp`` (bwrap: a fresh tmpfs per exec, in memory) gets ``--size`` ``disk_mb``.
:meth:`DiskQuota.full` lets an exec say why it failed (``ExecResult.cause``: "disk quota … full").
"""

from __future__ import annotations

import errno
import logging
import os
import shutil
import subprocess
import uuid
from dataclasses import dataclass
from pathlib import Path

from legorl.sandbox.overlay import is_mounted, unmount

MIB = 1024 * 1024
FULL_BELOW_BYTES = MIB  # a quota with less left than this counts as full (ext4 keeps a few blocks)
_ENV = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8"}
log = logging.getLogger(__name__)
_warned: set[str] = set()


def image_mb(limit_mb: int) -> int:
    """The image size that holds about ``limit_mb`` MiB of files (ext4's inode tables and bitmaps take
    the rest: ~8% of a small file system, a few MiB of a large one)."""
    return limit_mb + min(limit_mb // 8, 64) + 2


def _warn_once(key: str, message: str) -> None:
    if key not in _warned:
        _warned.add(key)
        log.warning(message)


def _run(argv: list[str]) -> None:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, env=_ENV)
    if done.returncode != 0:
        raise OSError(f"{Path(argv[0]).name}: {done.stderr.strip()[-300:]}")


def _format(mkfs: str, image: Path, size_mb: int) -> None:
    """A sparse image of ``size_mb`` MiB holding an empty ext4 (no journal, nothing reserved for root)."""
    with open(image, "wb") as f:
        f.truncate(size_mb * MIB)  # sparse: disk is spent as the sandbox writes
    _run([mkfs, "-q", "-F", "-m", "0", "-O", "^has_journal", "-E", "lazy_itable_init=1,nodiscard", str(image)])


def _template(mkfs: str, images_dir: Path, size_mb: int) -> Path:
    """The formatted empty image of ``size_mb`` MiB that sandboxes copy (made once: formatting costs
    tens to hundreds of ms, copying its few MiB of metadata a few)."""
    template = images_dir / f"template-{size_mb}.img"
    if not template.exists():
        tmp = images_dir / f".template-{size_mb}-{os.getpid()}-{uuid.uuid4().hex[:6]}.img"
        try:
            _format(mkfs, tmp, size_mb)
            os.replace(tmp, template)  # whoever finishes first: the same empty file system
        finally:
            tmp.unlink(missing_ok=True)
    return template


def _sparse_copy(src: Path, dst: Path) -> None:
    """Copy ``src``'s data extents into a new sparse ``dst`` of the same size (holes stay holes)."""
    with open(src, "rb") as fin, open(dst, "wb") as fout:
        end = os.fstat(fin.fileno()).st_size
        fout.truncate(end)
        offset = 0
        while offset < end:
            try:
                data = os.lseek(fin.fileno(), offset, os.SEEK_DATA)
            except OSError as exc:
                if exc.errno == errno.ENXIO:  # no data past offset
                    break
                raise
            hole = os.lseek(fin.fileno(), data, os.SEEK_HOLE)
            while data < hole:
                n = os.copy_file_range(fin.fileno(), fout.fileno(), hole - data, data, data)
                if n == 0:
                    raise OSError(f"short copy of {src} at {data}")
                data += n
            offset = hole


@dataclass
class DiskQuota:
    """A loop-mounted ext4 image at ``mount_point`` holding a sandbox's writable tree."""

    mount_point: Path
    image: Path
    limit_mb: int

    @classmethod
    def mount(cls, mount_point: Path, limit_mb: int, images_dir: Path, extra_mb: int = 0) -> DiskQuota | None:
        """Mount a fresh file system of ``limit_mb`` (+ ``extra_mb``: room for a workspace copy) MiB at
        ``mount_point`` (an empty directory); None where this machine cannot (then the caller falls back
        to ``RLIMIT_FSIZE``, see the module doc)."""
        if os.geteuid() != 0:
            _warn_once("root", "sandbox.disk_mb: not root, so no file system per sandbox: files are capped one by one")
            return None
        mkfs, mount = shutil.which("mkfs.ext4", path=_ENV["PATH"]), shutil.which("mount", path=_ENV["PATH"])
        if mkfs is None or mount is None:
            _warn_once("tools", "sandbox.disk_mb: mkfs.ext4 or mount missing: files are capped one by one")
            return None
        images_dir.mkdir(parents=True, exist_ok=True)
        image = images_dir / f"{mount_point.name}.img"
        try:
            if extra_mb:  # a size of its own (a copied workspace's): formatted for this sandbox
                _format(mkfs, image, image_mb(limit_mb + extra_mb))
            else:  # the common case: a copy of the formatted empty file system of this size
                _sparse_copy(_template(mkfs, images_dir, image_mb(limit_mb)), image)
            _run([mount, "-o", "loop,nosuid,nodev", str(image), str(mount_point)])
        except (OSError, subprocess.SubprocessError) as exc:
            if is_mounted(mount_point):
                unmount(mount_point)
            image.unlink(missing_ok=True)
            _warn_once(
                "mount", f"sandbox.disk_mb: cannot mount a file system per sandbox ({exc}): files are capped one by one"
            )
            return None
        return cls(mount_point, image, limit_mb)

    def free_bytes(self) -> int:
        st = os.statvfs(self.mount_point)
        return st.f_bavail * st.f_frsize

    def full(self) -> bool:
        """Whether the sandbox has (all but) used its quota."""
        try:
            return self.free_bytes() < FULL_BELOW_BYTES
        except OSError:
            return False

    def release(self) -> None:
        """Unmount (lazily: a process still inside cannot keep it busy; the loop device goes with the last
        reference) and delete the image. Idempotent."""
        if is_mounted(self.mount_point):
            unmount(self.mount_point)
        self.image.unlink(missing_ok=True)


__all__ = ["FULL_BELOW_BYTES", "MIB", "DiskQuota", "image_mb"]
