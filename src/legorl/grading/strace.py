"""strace logs: the one parser of the host-side trace ``BwrapSandbox`` writes (``strace -f -y
--pidns-translation``, see :func:`legorl.sandbox.bwrap.strace_argv`).

* :func:`parse_strace` — one :class:`TraceEvent` per syscall, calls another thread interrupted
  (``<unfinished ...>`` / ``<... resumed>``) joined, calls that never resumed (the process was killed
  in them) kept with an unknown result;
* :func:`parse_connect` / :func:`connects_from_trace` — every ``connect``: family, address, port or
  Unix path (:class:`Connect`), with one loopback rule (:func:`legorl.rules.is_loopback`:
  ``127.0.0.0/8``, ``::1``, ``::ffff:127.x``); :func:`foreign_connects` — those that are neither the
  gateway nor a Unix socket;
* :func:`activity_from_trace` — what the sandbox's own processes did (:class:`SandboxActivity`):
  commands, workspace writes, non-loopback connects, opens, directory listings, the process tree.

A leaf module: imports only the standard library and :mod:`legorl.rules`.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from legorl.rules import WORKSPACE, is_loopback

WORKSPACE_PREFIX = WORKSPACE + "/"

_LINE = re.compile(r"^(\d+)\s+(\w+)\((.*)\)\s+=\s+(-?\d+|\?)(.*)$")
_STR = re.compile(r'"((?:[^"\\]|\\.)*)"')


@dataclass
class TraceEvent:
    """One syscall: ``args`` as strace printed them, ``ret`` the result and what follows it (``-y``
    paths, errno text); ``ok`` when it returned without an error ("?" — no return — is not ok)."""

    pid: int
    syscall: str
    args: str
    ok: bool
    ret: str = ""


_UNFINISHED = re.compile(r"^(\d+)\s+(.*?)\s*<unfinished \.\.\.>$")
_RESUMED = re.compile(r"^(\d+)\s+<\.\.\. \w+ resumed>\s?(.*)$")
_CALL = re.compile(r"^(\w+)\((.*?),?$")  # the first half of an unfinished call: "connect(3, {...}"
# Lines strace writes that are no syscall: signals, exits, unresumed halves of a call.
_NOT_A_CALL = re.compile(r"^\d+\s+(\+\+\+|---|<\.\.\. )")


def _parse(text: str) -> tuple[list[TraceEvent], list[str]]:
    """(events, lines that are no syscall strace could have written: a log cut mid-line)."""
    events: list[TraceEvent] = []
    unparsed: list[str] = []
    pending: dict[str, str] = {}  # pid -> first half of a call another thread interrupted
    for line in text.splitlines():
        u = _UNFINISHED.match(line)
        if u:
            pending[u.group(1)] = u.group(2)
            continue
        r = _RESUMED.match(line)
        if r and r.group(1) in pending:
            line = f"{r.group(1)} {pending.pop(r.group(1))}{r.group(2)}"
        m = _LINE.match(line)
        if not m:
            if line.strip() and not _NOT_A_CALL.match(line):
                unparsed.append(line)
            continue
        pid, call, args, ret, tail = m.groups()
        events.append(TraceEvent(int(pid), call, args, ret != "?" and not ret.startswith("-"), ret + tail))
    # A call that never resumed: its process died inside it. It was still attempted (a connect, an open).
    for pid, first in pending.items():
        m = _CALL.match(first)
        if m:
            events.append(TraceEvent(int(pid), m.group(1), m.group(2), False, "?"))
    return events, unparsed


def parse_strace(text: str) -> list[TraceEvent]:
    """Every syscall of an ``strace -f`` log, in order (split calls joined; unresumed ones last, failed)."""
    return _parse(text)[0]


def c_unescape(s: str) -> str:
    """The text of a C-escaped string strace printed (``\\n``, ``\\303\\251``); unchanged if it is not one."""
    try:
        return s.encode("latin-1", "backslashreplace").decode("unicode_escape")
    except (UnicodeDecodeError, ValueError):
        return s


def resolved_path(args: str, ret: str = "") -> str | None:
    """The path a traced file syscall touched, as seen inside the sandbox (``-y`` decodes fds)."""
    m = re.search(r"=\s*\d+<([^>]*)>", ret)  # openat(...) = 3</workspace/x>
    if m:
        return m.group(1)
    dirfd = re.match(r"(?:AT_FDCWD|\d+)<([^>]*)>,\s*", args)
    strings = _STR.findall(args)
    if not strings:
        return None
    path = c_unescape(strings[0])
    if not path.startswith("/") and dirfd:
        path = dirfd.group(1).rstrip("/") + "/" + path
    return path


@dataclass
class SandboxActivity:
    """What the sandbox saw: commands started (pid, argv), workspace writes (pid, op, path), connects,
    every open of a path by the sandbox's processes (pid, path, succeeded, errno) and every directory
    they listed (pid, dir)."""

    execs: list[tuple[int, list[str]]] = field(default_factory=list)
    writes: list[tuple[int, str, str]] = field(default_factory=list)
    connects: list[tuple[int, str]] = field(default_factory=list)
    mechanism: list[str] = field(default_factory=list)
    opens: list[tuple[int, str, bool, str, int]] = field(default_factory=list)  # + the event's index
    listings: list[tuple[int, str, int]] = field(default_factory=list)
    parents: dict[int, int] = field(default_factory=dict)  # child pid -> parent pid (clone results)
    exec_index: list[int] = field(default_factory=list)  # trace index of each of ``execs``
    born_at: dict[int, int] = field(default_factory=dict)  # child pid -> trace index of its clone

    def command_of(self, pid: int, index: int | None = None) -> str:
        """The command ``pid`` was running at trace event ``index`` (default: its last), or the one of
        its nearest ancestor that started one."""
        seen: set[int] = set()
        while pid and pid not in seen:
            seen.add(pid)
            for i in range(len(self.execs) - 1, -1, -1):
                p, argv = self.execs[i]
                at = self.exec_index[i] if i < len(self.exec_index) else -1
                if p == pid and (index is None or at <= index):
                    return shlex.join(argv)[:300]
            index = self.born_at.get(pid, index)  # the parent's command when it cloned this one
            pid = self.parents.get(pid, 0)
        return ""


_WRITE_FLAGS = re.compile(r"O_WRONLY|O_RDWR|O_CREAT|O_TRUNC|O_APPEND")


_WRAPPER_PROGS = ("bwrap", "strace", "prlimit")
_CLONES = ("clone", "clone3", "fork", "vfork")


def _inside_checker(events: list[TraceEvent]) -> tuple[Callable[[int, int], bool], dict[int, tuple[int, int]]]:
    """``inside(pid, index)``: whether event ``index`` of ``pid`` belongs to the sandbox's own processes:
    ``pid`` had exec'd a program other than bwrap/strace/prlimit by then, or was cloned by such a
    process. (bwrap's own set-up, before it execs the command, opens host paths: not the sandbox's.)"""
    since: dict[int, int] = {}
    born: dict[int, tuple[int, int]] = {}  # child -> (parent, index of the clone's return)
    for i, ev in enumerate(events):
        if ev.syscall in ("execve", "execveat") and ev.ok and ev.pid not in since:
            strings = _STR.findall(ev.args)
            prog = c_unescape(strings[0]) if strings else ""
            if os.path.basename(prog) not in _WRAPPER_PROGS:
                since[ev.pid] = i
        elif ev.syscall in _CLONES and ev.ok and ev.ret.split()[0].isdigit():
            host = re.search(r"/\* (\d+) in strace's PID NS \*/", ev.ret)  # strace --pidns-translation
            born.setdefault(int(host.group(1)) if host else int(ev.ret.split()[0]), (ev.pid, i))
    memo: dict[int, bool] = {}  # pid -> was its parent inside when it cloned it

    def inside(pid: int, index: int, depth: int = 0) -> bool:
        if pid in since and index >= since[pid]:
            return True
        if pid not in born or depth > 200:
            return False
        if pid not in memo:
            parent, at = born[pid]
            memo[pid] = inside(parent, at, depth + 1)
        return memo[pid]

    return inside, born


def activity_from_trace(text: str) -> SandboxActivity:
    act = SandboxActivity(mechanism=["strace"])
    events = parse_strace(text)
    inside, born = _inside_checker(events)
    act.parents = {c: p for c, (p, _) in born.items()}
    act.born_at = {c: i for c, (_, i) in born.items()}
    listed: set[tuple[int, str]] = set()
    for index, ev in enumerate(events):
        if ev.syscall in ("execve", "execveat"):
            argv_m = re.search(r"\[(.*?)\](?:,\s*0x|,\s*\[|\s*/\*|$)", ev.args)
            argv = [c_unescape(s) for s in _STR.findall(argv_m.group(1))] if argv_m else []
            prog = c_unescape(_STR.findall(ev.args)[0]) if _STR.findall(ev.args) else ""
            if os.path.basename(prog) in _WRAPPER_PROGS:
                continue
            if ev.ok:
                act.execs.append((ev.pid, argv or [prog]))
                act.exec_index.append(index)
            continue
        if ev.syscall == "getdents64":
            d = re.match(r"\d+<([^>]*)>", ev.args)
            if d and ev.ok and inside(ev.pid, index) and (ev.pid, d.group(1)) not in listed:
                listed.add((ev.pid, d.group(1)))
                act.listings.append((ev.pid, d.group(1), index))
            continue
        if ev.syscall == "connect":
            conn = parse_connect(ev)
            if conn.inet and not conn.loopback:
                act.connects.append((ev.pid, conn.address))
            continue
        if ev.syscall in ("open", "openat", "openat2", "creat") and inside(ev.pid, index):
            target = resolved_path(ev.args, ev.ret)
            if target:
                err = re.match(r"-1 (E[A-Z0-9]+)", ev.ret)
                act.opens.append(
                    (
                        ev.pid,
                        os.path.normpath(target) if target.startswith("/") else target,
                        ev.ok,
                        err.group(1) if err else "",
                        index,
                    )
                )
        if ev.syscall in ("open", "openat", "openat2", "creat"):
            if ev.syscall != "creat" and not _WRITE_FLAGS.search(ev.args):
                continue
            if not ev.ok:
                continue
            op = "write"
        elif ev.syscall in ("unlink", "unlinkat"):
            op = "unlink"
        elif ev.syscall.startswith("rename") or ev.syscall.startswith("link") or ev.syscall.startswith("symlink"):
            op = ev.syscall.rstrip("at2").rstrip("at") or ev.syscall
            strings = _STR.findall(ev.args)
            dirfds = re.findall(r"(?:AT_FDCWD|\d+)<([^>]*)>", ev.args)
            if ev.ok and len(strings) >= 2:
                dst = c_unescape(strings[-1])
                if not dst.startswith("/") and dirfds:
                    dst = dirfds[-1].rstrip("/") + "/" + dst
                src = c_unescape(strings[0])
                if not src.startswith("/") and dirfds:
                    src = dirfds[0].rstrip("/") + "/" + src
                for path in (src, dst):
                    if path.startswith(WORKSPACE_PREFIX):
                        act.writes.append((ev.pid, op, path))
            continue
        elif ev.syscall == "truncate":
            op = "write"
        else:
            continue
        if not ev.ok:
            continue
        written = resolved_path(ev.args, ev.ret)
        if written and written.startswith(WORKSPACE_PREFIX):
            act.writes.append((ev.pid, op, written))
    return act


# ------------------------------------------------------------------------------------ connects
_SOCKADDR = re.compile(r"\{(sa_family=[^}]*)\}")
_INET_ADDR = re.compile(r'inet_addr\("([^"]+)"\)|inet_pton\(AF_INET6?,\s*"([^"]+)"')
_PORT = re.compile(r"sin6?_port=htons\((\d+)\)")
_SUN_PATH = re.compile(r'sun_path=(@?"(?:[^"\\]|\\.)*"|[^,}]*)')
INET_FAMILIES = ("AF_INET", "AF_INET6")


@dataclass(frozen=True)
class Connect:
    """One ``connect`` call: ``family`` is ``""`` when strace's line could not be read (``raw`` has it)."""

    pid: int
    family: str
    host: str = ""  # AF_INET/AF_INET6: the address ("?" when unreadable)
    port: str = ""  # AF_INET/AF_INET6: the port ("?" when unreadable)
    path: str = ""  # AF_UNIX: sun_path as strace shows it (quoted; "@" for the abstract namespace)
    ok: bool = False
    raw: str = ""

    @property
    def inet(self) -> bool:
        return self.family in INET_FAMILIES

    @property
    def loopback(self) -> bool:
        return self.inet and is_loopback(self.host)

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def __str__(self) -> str:
        """``AF_INET 127.0.0.1:8000``, ``AF_INET6 ::1:8000``, ``AF_UNIX "/run/x.sock"``, ``UNPARSED <line>``."""
        if not self.family:
            return "UNPARSED " + self.raw[:200]
        if self.inet:
            return f"{self.family} {self.address}"
        if self.family == "AF_UNIX":
            return f"AF_UNIX {self.path}"
        return self.family


def parse_connect(ev: TraceEvent) -> Connect:
    """The target of a ``connect`` event."""
    m = _SOCKADDR.search(ev.args)
    if not m:
        return Connect(ev.pid, "", ok=ev.ok, raw=f"{ev.pid} {ev.syscall}({ev.args}) = {ev.ret}")
    sockaddr = m.group(1)
    family = sockaddr.split(",", 1)[0].split("=", 1)[1].strip()
    if family in INET_FAMILIES:
        ip, port = _INET_ADDR.search(sockaddr), _PORT.search(sockaddr)
        host = (ip.group(1) or ip.group(2)) if ip else "?"
        return Connect(ev.pid, family, host=host, port=port.group(1) if port else "?", ok=ev.ok)
    if family == "AF_UNIX":
        p = _SUN_PATH.search(sockaddr)
        return Connect(ev.pid, family, path=p.group(1) if p else "", ok=ev.ok)
    return Connect(ev.pid, family, ok=ev.ok)


def parse_connects(text: str) -> list[Connect]:
    """Every ``connect`` in an strace log, attempted or done; a line that mentions one but cannot be
    read is kept as an unparsed :class:`Connect` (never silently dropped)."""
    events, unparsed = _parse(text)
    out = [parse_connect(ev) for ev in events if ev.syscall == "connect"]
    out += [Connect(0, "", raw=line.strip()) for line in unparsed if re.search(r"\bconnect\(", line)]
    return out


def connects_from_trace(text: str) -> list[str]:
    """Every ``connect`` target in an strace log as text (:meth:`Connect.__str__`)."""
    return [str(c) for c in parse_connects(text)]


def foreign_connects(connects: Iterable[str], gateway_port: int) -> list[str]:
    """The connects (text form) to anything but the gateway (a loopback address at ``gateway_port``)
    or a Unix socket: unparsed ones and other families included."""
    out = []
    for c in connects:
        family, _, address = c.partition(" ")
        if family == "AF_UNIX":
            continue
        if family in INET_FAMILIES:
            host, _, port = address.rpartition(":")
            if is_loopback(host) and port == str(gateway_port):
                continue
        out.append(c)
    return out
