"""Containment: from inside a sandbox of every backend, nothing of the host but the view.

Canaries are planted on the host (a secret in the real user's home, dataset-like files holding a
task's gold patch under system data directories, a second copy of the built-in task suites, a file in
the host's /etc, one next to the project checkout); then each backend's sandbox searches its whole
visible filesystem for them (``grep -r`` over every top-level entry but /proc and /sys) and finds
nothing. /etc/shadow is absent or unreadable, the host's home is not listable, secrets passed in the
sandbox's environment never appear on a host command line, and the tools a rollout needs still work.
The monitor test checks that a whole-filesystem walk and a read of /etc/shadow are flagged.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import threading
import time
import uuid
from pathlib import Path

import pytest
from needs import unavailable

from legorl.errors import SandboxError
from legorl.sandbox.base import SANDBOX_HOME, SANDBOX_UID, SandboxSpec
from legorl.sandbox.bwrap import BwrapBackend
from legorl.sandbox.view import BUILTIN_SUITES_DIR, project_trees
from legorl.tasks.loader import get_task

pytestmark = pytest.mark.sandbox


# Every top-level entry except /proc and /sys, searched recursively; devices skipped; prints hits.
SEARCH = r"""
hits=0
for d in /* /.[!.]*; do
  case "$d" in /proc|/sys|'/.[!.]*'|'/*') continue ;; esac
  [ -e "$d" ] || [ -L "$d" ] || continue
  grep -rlsF -D skip {patterns} "$d" 2>/dev/null && hits=1
done
echo "search-done hits=$hits"
"""


class Canaries:
    def __init__(self) -> None:
        self.tag = uuid.uuid4().hex
        self.tokens: dict[str, str] = {}  # place -> token
        self.files: dict[str, Path] = {}  # place -> planted file
        self.cleanup: list[Path] = []

    def token(self, place: str) -> str:
        tok = f"LEGORL-CANARY-{self.tag}-{place}"
        self.tokens[place] = tok
        return tok

    def plant(self, path: Path, text: str) -> bool:
        top = path
        while not top.parent.exists():
            top = top.parent
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        except OSError:
            return False
        self.cleanup.append(top if top != path else path)
        return True


@pytest.fixture(scope="module")
def canaries():
    c = Canaries()
    task = get_task("legorl__trivial-001")
    record = {"instance_id": task.instance_id, "patch": task.patch, "test_patch": task.test_patch}
    try:
        home_secret = Path.home() / f".legorl-canary-{c.tag}"
        assert c.plant(home_secret, f"api_key={c.token('home')}\n")
        home_secret.chmod(0o600)
        for place, root in [
            ("srv", "/srv"),
            ("varlib", "/var/lib"),
            ("usrlocalshare", "/usr/local/share"),
            ("usrshare", "/usr/share"),
            ("mnt", "/mnt"),
            ("opt", "/opt"),
            ("etc", "/etc"),
            ("checkout-sibling", str(project_trees()[0].parent.parent)),
        ]:
            data = dict(record, canary=c.token(place))
            path = Path(root) / f"legorl-canary-{c.tag}" / "swe-dataset.jsonl"
            if c.plant(path, json.dumps(data) + "\n"):
                c.files[place] = path
            else:
                del c.tokens[place]
        # a second copy of the built-in suites (as another checkout would hold them)
        copy = Path("/opt") / f"legorl-canary-suites-{c.tag}"
        with contextlib.suppress(OSError):
            shutil.copytree(BUILTIN_SUITES_DIR, copy / "suites")
            c.cleanup.append(copy)
            c.plant(copy / "suites" / "trivial" / "CANARY.json", json.dumps(dict(record, canary=c.token("suites"))))
        yield c
    finally:
        for p in reversed(c.cleanup):
            if p.is_dir() and not p.is_symlink():
                shutil.rmtree(p, ignore_errors=True)
            else:
                with contextlib.suppress(OSError):
                    p.unlink()
    assert not any(p.exists() for p in c.cleanup)


def _source(tmp_path: Path) -> Path:
    src = tmp_path / "src"
    src.mkdir(parents=True)
    (src / "mod.py").write_text("X = 1\n")
    return src


def _assert_contained(sb, c: Canaries) -> None:
    patterns = " ".join(f"-e {t}" for t in c.tokens.values())
    assert len(c.tokens) >= 3, c.tokens  # at least home, and some system directories were planted
    res = sb.exec(SEARCH.format(patterns=patterns), timeout=1500, max_output_bytes=1_000_000)
    assert "search-done hits=0" in res.stdout, (res.stdout[-3000:], res.stderr[-2000:])
    # the search did run over real files: it finds a marker planted in the workspace
    sb.write_file("marker.txt", f"{c.tag}-inside\n")
    res = sb.exec(f"grep -rlsF -D skip -e {c.tag}-inside /workspace /tmp {SANDBOX_HOME}", timeout=60)
    assert res.stdout.strip() == "/workspace/marker.txt", res
    # /etc/shadow absent or unreadable; the host's home not listable; no built-in suites
    res = sb.exec("cat /etc/shadow /etc/gshadow; echo rc=$?", timeout=60)
    assert "root:" not in res.stdout and "rc=0" not in res.stdout, res
    res = sb.exec(f"ls -A {Path.home()} && echo listed", timeout=60)
    assert "listed" not in res.stdout and f".legorl-canary-{c.tag}" not in res.stdout, res  # absent or unlistable
    res = sb.exec(f"ls -A {BUILTIN_SUITES_DIR} 2>&1; cat /etc/passwd /etc/group", timeout=60)
    assert "trivial" not in res.stdout and "easy" not in res.stdout, res
    names = {ln.split(":")[0] for ln in res.stdout.splitlines() if ln.count(":") >= 3}
    assert "agent" in names and not names & _host_users(), (names, _host_users())


def _host_users() -> set[str]:
    """Names of the host's real users (uid >= 1000), which no sandbox may list."""
    out = set()
    for ln in Path("/etc/passwd").read_text().splitlines():
        parts = ln.split(":")
        if len(parts) > 3 and parts[2].isdigit() and 1000 <= int(parts[2]) < 65534 and parts[0] != "agent":
            out.add(parts[0])
    return out


# ------------------------------------------------------------------------------------------- bwrap
@pytest.fixture
def bwrap_backend(tmp_path):
    return BwrapBackend(root=tmp_path / "sandboxes")


def test_bwrap_sees_nothing_of_the_host(canaries, bwrap_backend, tmp_path):
    sb = bwrap_backend.create(SandboxSpec(source_dir=_source(tmp_path)))
    try:
        _assert_contained(sb, canaries)
        # control: the same search does find a canary once a view exposes it
        place, planted = next(iter(canaries.files.items()))
        control = bwrap_backend.create(
            SandboxSpec(source_dir=_source(tmp_path / "c"), extra_layers=((str(planted.parent), "/opt/control"),))
        )
        try:
            res = control.exec(f"grep -rlsF -D skip -e {canaries.tokens[place]} /opt", timeout=60)
            assert res.stdout.strip() == "/opt/control/swe-dataset.jsonl", res
        finally:
            control.destroy()
        # nothing else of the checkout than the code: no .git (history holds the suites), no scripts
        checkout = project_trees()[0].parent
        res = sb.exec(
            f"ls {checkout}/.git {checkout}/scripts {checkout}/README.md 2>&1; ls /srv /mnt /var/lib 2>&1", timeout=60
        )
        assert res.stdout.count("No such file") == 6 and "HEAD" not in res.stdout, res
        passwd = sb.exec("cat /etc/passwd").stdout.splitlines()
        assert [ln.split(":")[0] for ln in passwd] == ["root", "agent", "nobody"], passwd
    finally:
        sb.destroy()


def test_bwrap_runs_unprivileged_with_a_writable_workspace_and_home(bwrap_backend, tmp_path):
    sb = bwrap_backend.create(SandboxSpec(source_dir=_source(tmp_path)))
    try:
        res = sb.exec(
            f'id -u; id -un; echo "$HOME"; touch /workspace/w {SANDBOX_HOME}/h /tmp/t && echo writable; '
            "touch /usr/x /etc/x /x 2>/dev/null || echo system-read-only; grep CapEff /proc/self/status"
        )
        lines = res.stdout.splitlines()
        if bwrap_backend.userns:
            assert lines[:2] == [str(SANDBOX_UID), "agent"], res
        assert SANDBOX_HOME in lines and "writable" in lines and "system-read-only" in lines, res
        assert "CapEff:\t0000000000000000" in res.stdout
        assert (sb.workdir / "w").exists() and (sb.home / "h").exists()
        assert sb.exec(f"cat {SANDBOX_HOME}/h && echo kept").stdout == "kept\n"  # HOME persists across execs
    finally:
        sb.destroy()


def test_tools_work_in_the_view(bwrap_backend, tmp_path):
    sb = bwrap_backend.create(SandboxSpec(source_dir=_source(tmp_path)))
    try:
        script = (
            "set -e; bash --version | head -1; git --version; python --version; python3 -c 'import ssl, sqlite3'; "
            "python -c 'import pytest, legorl.harnesses.minimal_agent, legorl.sandbox.forwarder'; "
            "printf 'a\\nb\\n' > /tmp/a; printf 'a\\nc\\n' > /tmp/b; diff -u /tmp/a /tmp/b > /tmp/p || true; "
            "patch -s /tmp/a < /tmp/p; grep -q c /tmp/a; echo x | sed s/x/y/ | grep -q y; "
            "ls / | sort | head -3 >/dev/null; cat /etc/ssl/certs/ca-certificates.crt | grep -q BEGIN; "
            "git init -q /tmp/r && cd /tmp/r && echo 1 > f && git add f && "
            "git -c user.name=a -c user.email=a@b commit -qm m && git log --oneline | grep -q m; "
            "python -c 'import zoneinfo; zoneinfo.ZoneInfo(\"Europe/Paris\")'; "
            "awk 'BEGIN{print 1}' >/dev/null; perl -e 1; echo tools-ok"
        )
        res = sb.exec(script, timeout=120)
        assert res.stdout.strip().endswith("tools-ok"), (res.stdout, res.stderr)
        if shutil.which("node"):
            res = sb.exec(["node", "-e", "console.log(require('os').homedir(), require('os').cpus().length > 0)"])
            assert res.stdout.split() == [SANDBOX_HOME, "true"], res
    finally:
        sb.destroy()


def _host_cmdlines() -> str:
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            with contextlib.suppress(OSError):
                out.append((d / "cmdline").read_bytes().replace(b"\0", b" ").decode("utf-8", "replace"))
    return "\n".join(out)


def _secret_not_on_command_lines(sb) -> None:
    secret = f"tok-{uuid.uuid4().hex}"
    seen: dict[str, object] = {}
    t = threading.Thread(
        target=lambda: seen.setdefault(
            "res",
            sb.exec(
                'echo "$LEGORL_SESSION_TOKEN" > /tmp/t; sleep 3; cat /tmp/t',
                env={"LEGORL_SESSION_TOKEN": secret, "MULTI": "a\nb"},
                timeout=60,
            ),
        )
    )
    t.start()
    deadline = time.monotonic() + 20
    lines = ""
    while time.monotonic() < deadline and "sleep 3" not in lines:
        lines = _host_cmdlines()
        time.sleep(0.1)
    assert "sleep 3" in lines, "the exec never showed up in the process list"
    assert secret not in lines
    t.join(60)
    assert seen["res"].stdout.strip() == secret, seen["res"]


def test_bwrap_env_is_not_on_host_command_lines(bwrap_backend, tmp_path):
    sb = bwrap_backend.create(SandboxSpec(source_dir=_source(tmp_path), env={"FROM_SPEC": "s"}))
    try:
        _secret_not_on_command_lines(sb)
        assert sb.exec('echo "$FROM_SPEC|$MULTI"', env={"MULTI": "a\nb"}).stdout == "s|a\nb\n"
    finally:
        sb.destroy()


def test_monitor_flags_a_filesystem_walk_and_a_shadow_read(bwrap_backend, tmp_path):
    from legorl.grading.monitor import RolloutMonitor

    sb = bwrap_backend.create(SandboxSpec(source_dir=_source(tmp_path)))
    kinds = ("fs_search", "host_path_probe", "view_breach")
    try:
        # honest work first: none of it may be flagged
        honest = RolloutMonitor()
        honest.start(sb)
        res = sb.exec(
            "python -c 'import legorl.harnesses.minimal_agent, pytest'; python -m pytest -q -p no:cacheprovider "
            "/workspace >/dev/null; git status >/dev/null; ls -la; ls /; node -e 1 2>/dev/null; true",
            timeout=300,
        )
        honest.stop(sb)
        assert res.exit_code == 0 and len(honest.activity.opens) > 100 and honest.activity.listings, res
        assert [f for f in honest.flags() if f.kind in kinds] == []
        mon = RolloutMonitor()
        mon.start(sb)
        # a walk of / that no command-line rule can recognise (only its directory listings show it)
        walk = (
            "import os\nfor root, dirs, files in os.walk('/'):\n"
            "    dirs[:] = [d for d in dirs if d not in ('proc', 'sys')] if root.count('/') < 3 else []\n"
        )
        sb.exec(["python3", "-c", walk], timeout=300)
        sb.exec("cat /etc/shadow", timeout=60)
        mon.stop(sb)
    finally:
        sb.destroy()
    flags = mon.flags()
    search = [f for f in flags if f.kind == "fs_search" and f.evidence.get("dirs_listed")]
    assert search and search[0].severity == "blocking", flags
    ev = search[0].evidence
    assert ev["source"] == "strace" and ev["pid"] and "os.walk" in ev["command"] and "/" in ev["sample"], ev
    assert {"etc", "usr"} <= set(ev["top_dirs"]), ev
    shadow = [f for f in flags if f.kind == "host_path_probe" and f.evidence.get("path") == "/etc/shadow"]
    assert shadow and shadow[0].evidence["command"] == "cat /etc/shadow" and shadow[0].evidence["result"] == "ENOENT"
    assert not any(f.kind == "view_breach" for f in flags), flags


# ------------------------------------------------------------------------------------------ podman
@pytest.fixture(scope="module")
def podman_backend(tmp_path_factory):
    from legorl.sandbox.podman import PodmanBackend

    b = PodmanBackend(root=tmp_path_factory.mktemp("podman-containment"))
    try:
        b.base_layer()
    except SandboxError as exc:
        unavailable(f"cannot build the podman base image here: {exc}")
    return b


@pytest.mark.slow
@pytest.mark.podman
def test_podman_sees_nothing_of_the_host(canaries, podman_backend, tmp_path):
    sb = podman_backend.create(SandboxSpec(source_dir=_source(tmp_path)))
    try:
        _assert_contained(sb, canaries)
        res = sb.exec(
            'id -u; echo "$HOME"; touch /workspace/w "$HOME/h" && echo writable; hostname; '
            "touch /usr/x 2>/dev/null || echo image-read-only; cat /etc/resolv.conf 2>&1; cat /etc/hosts"
        )
        assert res.stdout.splitlines()[:4] == [str(SANDBOX_UID), SANDBOX_HOME, "writable", "sandbox"], res
        assert "image-read-only" in res.stdout and "nameserver" not in res.stdout, res
        assert (sb.workdir / "w").exists()
        assert sb.exec("ls /etc/shadow /etc/gshadow 2>&1").stdout.count("No such file") == 2
        _secret_not_on_command_lines(sb)
    finally:
        sb.destroy()


@pytest.mark.slow
@pytest.mark.podman
def test_podman_image_holds_nothing_of_the_host(podman_backend):
    """The base image's files, exported: no host home, no checkout or suites, no host shadow."""
    image = podman_backend.base_layer().meta["image"]
    listing = subprocess.run(
        [
            "podman",
            "run",
            "--rm",
            "--network",
            "none",
            "--no-hosts",
            "--runtime",
            "runc",
            "--ulimit",
            "nofile=1024:1024",
            "--ulimit",
            "nproc=1024:1024",
            image,
            "sh",
            "-c",
            "cat /etc/passwd /etc/group /etc/hosts /etc/hostname; ls -A /root /home /opt /srv /mnt; "
            "ls /etc/shadow /etc/gshadow /etc/resolv.conf 2>&1",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    out = listing.stdout + listing.stderr
    assert "agent:x:1000:1000:" in out and "/root:" in out, out  # it ran (ls exits 2: the files are absent)
    assert not any(f"\n{u}:" in "\n" + out for u in _host_users()), (_host_users(), out)
    assert "No such file or directory" in out and "nameserver" not in out, out
    for name in ("legorl", "suites", ".cache", "work"):
        assert f"\n{name}\n" not in "\n" + out + "\n", out
