"""The filesystem a bubblewrap sandbox sees: built from an allowlist, never from the host's ``/``.

:func:`host_view` computes (once per interpreter, re-checked at most every ``_RECHECK_S`` seconds
with a handful of ``stat`` calls) the bwrap arguments of the part of the view every sandbox shares:

* ``/usr/{bin,sbin,lib,lib32,lib64,libx32,libexec,include}`` read-only, and the ``/bin``, ``/sbin``,
  ``/lib*`` links (or binds on a host without merged ``/usr``). Nothing else of ``/usr``: no
  ``/usr/src``, no ``/usr/etc`` (Debian's node keeps its global ``npmrc`` there), no ``/usr/local``
  (an empty directory inside: on a host it holds locally installed programs, site-packages and
  data trees), and the distribution's Python packages (``/usr/lib/python3/dist-packages``) masked
  unless the sandbox's own interpreter uses them.
* ``/usr/share`` rebuilt from :data:`SHARE_ALLOW` (CA certificates, time zones, terminfo, git's
  templates, perl's modules, file's magic) as a cached hard-link farm (a copy where links are not
  possible), so it costs one mount instead of one per entry; the rest of ``/usr/share`` (docs,
  locales, whatever a host put there) is absent.
* a synthetic ``/etc`` (generated into the cache): ``passwd``/``group`` with only root, the sandbox
  user (``agent``, uid :data:`~legorl.sandbox.base.SANDBOX_UID`) and nobody; ``hosts`` with
  localhost; ``nsswitch.conf`` (files only, so no DNS); no ``resolv.conf``; the host's public
  ``ld.so.cache``/``ld.so.conf``, ``alternatives`` links, ``ssl/certs`` (materialised),
  ``ssl/openssl.cnf``, ``protocols``, ``services``, ``mime.types``, ``localtime``, ``os-release``.
  Nothing secret: no ``shadow``/``gshadow``, no ssh or TLS private keys, no ``sudoers``, no
  ``pip.conf``/``npmrc``/``gitconfig``, no host users.
* the interpreter the sandbox uses (``BwrapBackend.python``): its prefix (the project's venv) and its
  base prefix (e.g. ``/root/.pyenv/versions/3.11.7``), bound at their own paths, with the
  site-packages it uses: the venv's, and the base prefix's, which ``python -S`` (the grader's
  hardened runner) resolves through ``sysconfig``. Other interpreters' site-packages
  (``/usr/lib/python3/dist-packages``, ``/usr/local/lib/python3*``) are not visible;
* LEGO-RL's own code: the package's ``src`` tree (and the checkout's ``tests`` helpers) read-only,
  with the built-in task suites (gold patches) masked. Nothing else of the checkout: not ``.git``
  (the history holds the suites), not ``scripts``, ``runs`` or other outputs.
* every directory created only to hold those mount points (``/root``, ``/root/.pyenv``, ``/work``,
  ...) is execute-only (mode 0111): paths resolve, listings fail.

Everything else of the host is simply not there: no ``/root`` or other homes, no ``/var`` (but a
``/var/tmp`` link to the private ``/tmp``), ``/srv``, ``/mnt``, ``/media``, ``/opt`` (but the
harness layers mounted there), ``/boot``, data trees such as ``/work``, other checkouts, the image
cache, other sandboxes. ``/sys`` is not mounted (programs fall back to ``/proc``).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import site
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from legorl.errors import SandboxError
from legorl.sandbox.base import SANDBOX_GID, SANDBOX_HOME, SANDBOX_UID, SANDBOX_USER
from legorl.settings import legorl_home

BUILTIN_SUITES_DIR = Path(__file__).resolve().parent.parent / "tasks" / "suites"
PACKAGE_DIR = Path(__file__).resolve().parent.parent  # .../legorl

ROOT_LINKS = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")
USR_ALLOW = ("bin", "sbin", "lib", "lib32", "lib64", "libx32", "libexec", "include")
# /usr/share entries tools need at run time (git templates, perl modules for git's perl commands,
# time zones, terminal descriptions, CA certificates, file(1)'s magic).
SHARE_ALLOW = ("ca-certificates", "git-core", "misc", "file", "perl", "perl5", "tabset", "terminfo", "zoneinfo")
# Distribution site-packages hidden unless the sandbox's interpreter uses them.
DIST_SITE_DIRS = ("/usr/lib/python3/dist-packages",)
# Public system files copied into the synthetic /etc (when the host has them).
ETC_COPY = (
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "alternatives",
    "ssl/openssl.cnf",
    "protocols",
    "services",
    "mime.types",
    "locale.alias",
    "debian_version",
    "magic",
    "magic.mime",
)
ETC_LINKS = ("os-release", "localtime")
_RECHECK_S = 10.0


def is_under(path: Path | str, parent: Path | str) -> bool:
    path, parent = str(path), str(parent).rstrip("/") or "/"
    return parent == "/" or path == parent or path.startswith(parent + "/")


# ------------------------------------------------------------------------------------ interpreter
@dataclass(frozen=True)
class Interpreter:
    executable: str
    prefixes: tuple[str, ...]  # directories to bind (prefix, base prefix, the real binary's prefix)
    bin_dir: str  # put first on PATH inside (python, python3, pip, pytest of this interpreter)
    sites: tuple[str, ...]  # site-packages the interpreter uses, with ``site`` or without (``-S``)


_INTERP_CODE = (
    "import json, os, site, sys, sysconfig; "
    "print(json.dumps([sys.prefix, sys.base_prefix, os.path.realpath(sys.executable), site.getsitepackages(), "
    "[sysconfig.get_paths(vars={'base': sys.base_prefix, 'platbase': sys.base_prefix})[k] for k in ('purelib', 'platlib')]]))"
)
_interp_memo: dict[str, Interpreter] = {}


def interpreter(python: str) -> Interpreter:
    """What of ``python`` must be visible inside (memoised per path)."""
    hit = _interp_memo.get(python)
    if hit is not None:
        return hit
    if os.path.abspath(python) == os.path.abspath(sys.executable):
        import sysconfig

        base_paths = sysconfig.get_paths(vars={"base": sys.base_prefix, "platbase": sys.base_prefix})
        info: list[Any] = [
            sys.prefix,
            sys.base_prefix,
            os.path.realpath(sys.executable),
            site.getsitepackages(),
            [base_paths["purelib"], base_paths["platlib"]],
        ]
    else:
        try:
            res = subprocess.run(
                [python, "-I", "-c", _INTERP_CODE],
                capture_output=True,
                text=True,
                timeout=60,
                env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
            )
            info = json.loads(res.stdout)
        except (OSError, ValueError, subprocess.SubprocessError) as exc:
            raise SandboxError(f"cannot inspect the sandbox interpreter {python}: {exc}") from None
    # ``base_sites``: where ``python -S`` (no ``site``: a venv's prefix is then its base's) finds
    # packages, as the grader's hardened runner does (legorl.grading.defenses): used too.
    prefix, base, real, sites, base_sites = info
    prefixes: list[str] = []
    for p in (prefix, base, str(Path(real).parent.parent)):
        p = os.path.realpath(p)
        if p not in prefixes:
            prefixes.append(p)
    used = list(dict.fromkeys(os.path.realpath(s) for s in [*sites, *base_sites]))
    out = Interpreter(os.path.abspath(python), tuple(prefixes), str(Path(os.path.abspath(python)).parent), tuple(used))
    _interp_memo[python] = out
    return out


# -------------------------------------------------------------------------------- generated trees
_ETC_PASSWD = (
    f"root:x:0:0:root:/root:/usr/sbin/nologin\n"
    f"{SANDBOX_USER}:x:{SANDBOX_UID}:{SANDBOX_GID}:LEGO-RL sandbox:{SANDBOX_HOME}:/bin/bash\n"
    "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"
)
_ETC_GROUP = f"root:x:0:\n{SANDBOX_USER}:x:{SANDBOX_GID}:\nnogroup:x:65534:\n"
_ETC_FILES = {
    "passwd": _ETC_PASSWD,
    "group": _ETC_GROUP,
    "hosts": "127.0.0.1\tlocalhost sandbox\n::1\tlocalhost ip6-localhost ip6-loopback\n",
    "hostname": "sandbox\n",
    "nsswitch.conf": (
        "passwd: files\ngroup: files\nshadow: files\nhosts: files\nnetworks: files\n"
        "protocols: files\nservices: files\nethers: files\nrpc: files\n"
    ),
    "shells": "/bin/sh\n/bin/bash\n/usr/bin/sh\n/usr/bin/bash\n",
}


def _stat_key(paths: list[str]) -> str:
    h = hashlib.sha256()
    for p in paths:
        try:
            st = os.lstat(p)
            h.update(f"{p}\0{st.st_mode}\0{st.st_size}\0{st.st_mtime_ns}\0{st.st_ino}\n".encode())
        except OSError:
            h.update(f"{p}\0-\n".encode())
    return h.hexdigest()[:16]


def _etc_sources() -> list[str]:
    return [f"/etc/{n}" for n in (*ETC_COPY, *ETC_LINKS)] + ["/etc/ssl/certs", "/etc/ssl/certs/ca-certificates.crt"]


def _share_sources() -> list[str]:
    return ["/var/lib/dpkg/status", "/usr/share", *(f"/usr/share/{n}" for n in SHARE_ALLOW)]


def _copy_entry(src: Path, dst: Path, link: bool) -> None:
    """Copy a file/dir/symlink tree; regular files hard-linked when ``link`` (falls back to a copy)."""
    if src.is_symlink():
        os.symlink(os.readlink(src), dst)
    elif src.is_dir():
        dst.mkdir()
        with contextlib.suppress(OSError):
            os.chmod(dst, 0o755)
        for entry in sorted(os.listdir(src)):
            _copy_entry(src / entry, dst / entry, link)
    elif src.is_file():
        if link:
            try:
                os.link(src, dst)
                return
            except OSError:
                pass
        shutil.copyfile(src, dst)
        os.chmod(dst, 0o644 if not os.access(src, os.X_OK) else 0o755)


def _build_etc(dest: Path) -> None:
    dest.mkdir(parents=True)
    for name, text in _ETC_FILES.items():
        (dest / name).write_text(text)
    for name in ETC_COPY:
        src = Path("/etc") / name
        if not (src.exists() or src.is_symlink()):
            continue
        (dest / name).parent.mkdir(parents=True, exist_ok=True)
        _copy_entry(src, dest / name, link=False)
    for name in ETC_LINKS:
        src = Path("/etc") / name
        if src.is_symlink():
            os.symlink(os.readlink(src), dest / name)
        elif src.is_file():
            shutil.copyfile(src, dest / name)
    if not (dest / "localtime").exists() and not (dest / "localtime").is_symlink():
        os.symlink("/usr/share/zoneinfo/Etc/UTC", dest / "localtime")
    os.symlink("../proc/self/mounts", dest / "mtab")
    # CA certificates, materialised: links within the directory stay links, others become files.
    certs_src, certs = Path("/etc/ssl/certs"), dest / "ssl" / "certs"
    certs.mkdir(parents=True, exist_ok=True)
    if certs_src.is_dir():
        for entry in sorted(os.listdir(certs_src)):
            src = certs_src / entry
            try:
                if src.is_symlink() and "/" not in os.readlink(src):
                    os.symlink(os.readlink(src), certs / entry)
                elif src.is_file():
                    shutil.copyfile(src, certs / entry)
            except OSError:
                continue
    for p in [dest, *dest.rglob("*")]:
        if p.is_dir() and not p.is_symlink():
            os.chmod(p, 0o755)


def _build_share(dest: Path) -> None:
    dest.mkdir(parents=True)
    for name in SHARE_ALLOW:
        src = Path("/usr/share") / name
        if src.exists() or src.is_symlink():
            _copy_entry(src, dest / name, link=True)
    os.chmod(dest, 0o755)


def _cached_tree(kind: str, key: str, build) -> Path:
    """``<LEGORL_HOME>/view/<kind>-<key>``, built once (atomically: a temp dir renamed into place)."""
    root = legorl_home() / "view"
    final = root / f"{kind}-{key}"
    if final.is_dir():
        return final
    root.mkdir(parents=True, exist_ok=True)
    tmp = root / f".tmp-{kind}-{uuid.uuid4().hex[:8]}"
    try:
        build(tmp / "d")
        try:
            os.rename(tmp / "d", final)
        except OSError:
            if not final.is_dir():
                raise
    except OSError as exc:
        raise SandboxError(f"cannot build the sandbox's {kind} tree under {root}: {exc}") from exc
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    for old in root.glob(f"{kind}-*"):  # superseded versions, once no recent process can still use them
        with contextlib.suppress(OSError):
            if old != final and time.time() - old.stat().st_mtime > 3600:
                shutil.rmtree(old, ignore_errors=True)
    return final


# ------------------------------------------------------------------------------------------ view
@dataclass
class HostView:
    """The shared part of a sandbox's view: bwrap arguments, ``roots`` visible inside (for the
    monitor), ``masked`` paths under those roots that are hidden, ``binds`` (inside paths of
    read-only binds: mount points for layers may not lie in them)."""

    system_args: list[str]  # /usr, /etc, /dev, /proc, /tmp: before the sandbox's home
    tree_args: list[str]  # the interpreter, LEGO-RL's code, the masks: after it
    roots: tuple[str, ...]
    masked: tuple[str, ...]
    binds: tuple[str, ...]
    interpreter: Interpreter
    tools: tuple[str, ...] = ()  # the interpreter's and LEGO-RL's directories (tree binds)
    trees: tuple[str, ...] = ()  # the cached host directories it binds (must still exist)
    key: str = ""
    checked: float = field(default=0.0)


def project_trees() -> list[Path]:
    """LEGO-RL's code as the sandbox needs it: the package's ``src`` tree and the checkout's ``tests``
    (harness tests run helper programs from there), or the installed package directory."""
    src = PACKAGE_DIR.parent
    if src.name == "src" and (src.parent / "pyproject.toml").is_file():
        out = [src]
        if (src.parent / "tests").is_dir():
            out.append(src.parent / "tests")
        return out
    return [PACKAGE_DIR]


def _only_links(d: Path, most: int = 8) -> list[tuple[str, str]] | None:
    """(name, target) of a directory's entries when they are all symlinks (and few), else None."""
    try:
        entries = sorted(os.listdir(d))
        if len(entries) > most or not all(os.path.islink(d / e) for e in entries):
            return None
        return [(e, os.readlink(d / e)) for e in entries]
    except OSError:
        return None


def _ancestors(paths: list[str]) -> list[str]:
    """Directories that exist inside only to hold ``paths`` (outermost first), below ``/``."""
    out: list[str] = []
    for p in paths:
        parts = Path(p).parts[1:-1]
        for i in range(1, len(parts) + 1):
            a = "/" + "/".join(parts[:i])
            if a not in out:
                out.append(a)
    return sorted(out, key=lambda a: (a.count("/"), a))


def _build_view(python: str, hide: tuple[str, ...], perms: bool = True) -> HostView:
    interp = interpreter(python)
    args: list[str] = []
    roots: list[str] = []
    binds: list[str] = []
    masked: list[str] = []
    for name in ROOT_LINKS:
        host = Path("/") / name
        if host.is_symlink():
            args += ["--symlink", os.readlink(host), str(host)]
            roots.append(str(host))
        elif host.is_dir():
            args += ["--ro-bind", str(host), str(host)]
            roots.append(str(host))
            binds.append(str(host))
    for name in USR_ALLOW:
        host = Path("/usr") / name
        if host.is_symlink():
            args += ["--symlink", os.readlink(host), str(host)]
        elif host.is_dir():
            links = _only_links(host)
            if links is not None:  # e.g. /usr/lib64 holding just the dynamic loader's link: no mount
                args += ["--dir", str(host)]
                for entry, target in links:
                    args += ["--symlink", target, str(host / entry)]
            else:
                args += ["--ro-bind", str(host), str(host)]
                binds.append(str(host))
        else:
            continue
        roots.append(str(host))
    share = _cached_tree("share", _stat_key(_share_sources()), _build_share)
    args += ["--ro-bind", str(share), "/usr/share", "--dir", "/usr/local"]
    roots += ["/usr/share", "/usr/local"]
    binds.append("/usr/share")
    etc = _cached_tree("etc", _stat_key(_etc_sources()), _build_etc)
    args += ["--ro-bind", str(etc), "/etc"]
    roots.append("/etc")
    binds.append("/etc")
    for d in DIST_SITE_DIRS:
        if os.path.isdir(d) and d not in interp.sites:
            masked.append(d)

    # Private /dev, /proc and /tmp first: binds below /tmp (a checkout in /tmp) must land on the tmpfs.
    args += ["--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp", "--symlink", "../tmp", "/var/tmp"]
    roots += ["/dev", "/proc", "/tmp", "/var/tmp"]
    system_args, args = args, []

    # The interpreter and LEGO-RL's code, at their host paths.
    wanted: list[str] = []
    for p in interp.prefixes:
        if p in ("/", "/usr"):
            continue  # the system's interpreter: already visible through /usr/bin and /usr/lib
        if p == "/usr/local":
            wanted += ["/usr/local/bin", "/usr/local/lib"]
        else:
            wanted.append(p)
    wanted += [*interp.sites, *(str(t) for t in project_trees())]
    tree_binds: list[str] = []
    for p in wanted:
        if not os.path.isdir(p) or any(is_under(p, r) for r in binds + tree_binds):
            continue
        tree_binds = [b for b in tree_binds if not is_under(b, p)] + [p]
    for a in _ancestors(tree_binds):
        if a not in roots and not any(is_under(a, r) for r in binds + tree_binds):
            args += [*(["--perms", "0111"] if perms else []), "--dir", a]  # traversable, not listable
    for p in tree_binds:
        args += ["--ro-bind", p, p]
        roots.append(p)
        binds.append(p)
    for p in [str(BUILTIN_SUITES_DIR), *hide]:
        rp = os.path.realpath(p)
        if os.path.isdir(rp) and any(is_under(rp, b) for b in binds) and not any(is_under(rp, m) for m in masked):
            masked.append(rp)
    for m in masked:
        args += [*(["--perms", "0555"] if perms else []), "--tmpfs", m]
    return HostView(
        system_args, args, tuple(roots), tuple(masked), tuple(binds), interp, tuple(tree_binds), (str(share), str(etc))
    )


_view_memo: dict[tuple, HostView] = {}
_view_lock = threading.Lock()


def _view_key() -> str:
    return _stat_key(
        [
            "/",
            "/usr",
            *(f"/usr/{n}" for n in USR_ALLOW),
            *(f"/{n}" for n in ROOT_LINKS),
            *_share_sources(),
            *_etc_sources(),
        ]
    )


def host_view(python: str, hide: tuple[str, ...] = (), perms: bool = True) -> HostView:
    """The shared view for sandboxes whose interpreter is ``python`` (cached; rebuilt when the host's
    system files it copies change, checked at most every few seconds). ``perms``: bwrap supports
    ``--perms`` (0.5 and later)."""
    memo_key = (python, tuple(hide), str(legorl_home()), perms)
    now = time.monotonic()
    with _view_lock:
        view = _view_memo.get(memo_key)
        if view is not None and all(os.path.isdir(t) for t in view.trees):
            if now - view.checked < _RECHECK_S:
                return view
            key = _view_key()
            if view.key == key:
                view.checked = now
                return view
        key = _view_key()
        view = _build_view(python, tuple(hide), perms)
        view.key, view.checked = key, now
        _view_memo[memo_key] = view
        return view


__all__ = [
    "HostView",
    "Interpreter",
    "host_view",
    "interpreter",
    "is_under",
    "project_trees",
    "BUILTIN_SUITES_DIR",
    "SHARE_ALLOW",
    "USR_ALLOW",
]
