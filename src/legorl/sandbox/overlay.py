"""Copy-on-write workspaces through overlayfs: a sandbox's workspace is the read-only instance layer
as ``lowerdir`` plus a private ``upperdir``, mounted on the host (root only).

Creating one is a few ``mkdir`` s and one ``mount(2)`` whatever the repository's size, where a copy
costs an ``open`` per file (tens of ms for 60 files on a slow disk, seconds for a SWE-bench
repository). The merged directory is an ordinary path on the host, so reading, writing and diffing
the workspace work unchanged. The instance layer must stay in the cache while it is mounted: the
sandbox keeps its lease until it is destroyed. Where the mount is refused (not root, no overlayfs,
a lower filesystem overlay cannot stack on) the caller falls back to a copy.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os
from pathlib import Path

_MNT_DETACH = 2


@functools.cache
def _lib() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("c")
    return ctypes.CDLL(name, use_errno=True) if name else None


def mount_overlay(lower: Path, upper: Path, work: Path, target: Path) -> bool:
    """Mount ``lower`` + ``upper`` at ``target`` (all three dirs are created); False if refused."""
    lib = _lib()
    if lib is None or os.geteuid() != 0:
        return False
    for d in (upper, work, target):
        d.mkdir(parents=True, exist_ok=True)
    opts = f"lowerdir={lower},upperdir={upper},workdir={work}"
    if any(c in str(p) for p in (lower, upper, work) for c in ",:\\"):
        return False  # overlayfs option syntax cannot carry these characters
    for extra in (",redirect_dir=on", ""):  # renaming a directory of the lower layer needs redirect_dir
        if lib.mount(b"overlay", str(target).encode(), b"overlay", 0, (opts + extra).encode()) == 0:
            return True
    return False


def unmount(target: Path) -> None:
    """Detach the overlay at ``target`` (lazily: a process still inside cannot keep it busy)."""
    lib = _lib()
    if lib is not None:
        lib.umount2(str(target).encode(), _MNT_DETACH)


def is_mounted(target: Path) -> bool:
    return os.path.ismount(target)
