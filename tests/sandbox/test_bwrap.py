"""Bubblewrap sandbox: exec, limits, diff, isolation, gateway forwarding."""

from __future__ import annotations

import contextlib
import http.server
import os
import shutil
import signal
import socket
import socketserver
import statistics
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import psutil
import pytest

from legorl.errors import SandboxError
from legorl.sandbox.base import SANDBOX_HOME, Sandbox, SandboxBackend, SandboxSpec
from legorl.sandbox.bwrap import BwrapBackend
from legorl.settings import legorl_home

pytestmark = pytest.mark.sandbox

needs_bwrap = pytest.mark.sandbox


@pytest.fixture
def source(tmp_path: Path) -> Path:
    src = tmp_path / "src"
    (src / "pkg").mkdir(parents=True)
    (src / "pkg" / "mod.py").write_text("X = 1\n")
    (src / "README.md").write_text("hello\n")
    (src / "old.txt").write_text("to be deleted\n")
    return src


@pytest.fixture
def backend():
    # A root outside /tmp (not a fresh tmpfs inside): the isolation test checks it is not in the view.
    root = legorl_home() / "test-sandboxes" / uuid.uuid4().hex[:8]
    yield BwrapBackend(root=root)
    shutil.rmtree(root, ignore_errors=True)
    try:
        root.parent.rmdir()
    except OSError:
        pass


@pytest.fixture
def sandbox(backend: BwrapBackend, source: Path):
    sb = backend.create(SandboxSpec(source_dir=source))
    yield sb
    sb.destroy()


def test_missing_bwrap_says_install(monkeypatch, source):
    monkeypatch.setattr(shutil, "which", lambda name: None)
    with pytest.raises(SandboxError, match="bubblewrap"):
        BwrapBackend(root=source.parent / "r").create(SandboxSpec(source_dir=source))


@needs_bwrap
def test_protocols_and_exec(sandbox, backend, source):
    assert isinstance(backend, SandboxBackend) and backend.name == "bwrap"
    assert isinstance(sandbox, Sandbox)
    res = sandbox.exec(["cat", "README.md"])
    assert (res.exit_code, res.stdout, res.timed_out, res.truncated) == (0, "hello\n", False, False)
    res = sandbox.exec("echo out; echo err >&2; exit 3")
    assert (res.exit_code, res.stdout, res.stderr) == (3, "out\n", "err\n")
    assert sandbox.exec("cat", stdin="piped").stdout == "piped"
    # the source is copied, never modified
    sandbox.exec("echo changed > README.md")
    assert (source / "README.md").read_text() == "hello\n"
    assert (sandbox.workdir / "README.md").read_text() == "changed\n"


@needs_bwrap
def test_env_and_cwd(backend, source, monkeypatch):
    monkeypatch.setenv("LEGORL_SECRET_TEST", "leak")
    sb = backend.create(SandboxSpec(source_dir=source, env={"FROM_SPEC": "s"}))
    try:
        res = sb.exec("env", env={"FROM_CALL": "c"})
        env = dict(line.split("=", 1) for line in res.stdout.splitlines() if "=" in line)
        assert env["HOME"] == SANDBOX_HOME and env["FROM_SPEC"] == "s" and env["FROM_CALL"] == "c"
        assert "PATH" in env and "LEGORL_SECRET_TEST" not in env
        assert sb.exec("pwd").stdout.strip() == "/workspace"
        assert sb.exec("pwd", cwd="/workspace/pkg").stdout.strip() == "/workspace/pkg"
        assert sb.exec("pwd", cwd="pkg").stdout.strip() == "/workspace/pkg"
        # the root filesystem is read-only, /tmp is private and writable
        assert sb.exec("touch /usr/legorl-x").exit_code != 0
        assert sb.exec("touch /tmp/x && echo ok").stdout == "ok\n"
    finally:
        sb.destroy()


@needs_bwrap
def test_timeout_kills_everything(sandbox):
    t0 = time.monotonic()
    res = sandbox.exec("(sleep 60; echo late > /workspace/late.txt) & sleep 60", timeout=1)
    assert res.timed_out and res.exit_code != 0
    assert time.monotonic() - t0 < 10
    time.sleep(0.3)
    assert not (sandbox.workdir / "late.txt").exists()


@needs_bwrap
def test_output_cap(sandbox):
    res = sandbox.exec("head -c 5000000 /dev/zero | tr '\\0' x", max_output_bytes=1000)
    assert res.truncated and len(res.stdout) == 1000 and res.exit_code == 0


@needs_bwrap
def test_diff_new_modified_deleted(sandbox):
    assert sandbox.diff() == ""
    sandbox.write_file("pkg/mod.py", "X = 2\n")
    sandbox.write_file("/workspace/pkg/new.py", "Y = 3\n")
    sandbox.exec("rm old.txt")
    diff = sandbox.diff()
    assert "diff --git a/pkg/mod.py b/pkg/mod.py" in diff and "+X = 2" in diff
    assert "new file mode" in diff and "+Y = 3" in diff
    assert "deleted file mode" in diff and "-to be deleted" in diff
    # committing inside does not hide changes: the diff is against the recorded base commit
    sandbox.exec("git -c user.name=a -c user.email=a@a commit -qam sneaky")
    assert "+X = 2" in sandbox.diff()


@needs_bwrap
def test_read_write_confinement(sandbox):
    sandbox.write_file("a/b/c.txt", "deep")
    assert sandbox.read_file("a/b/c.txt") == "deep"
    assert sandbox.read_file("/workspace/a/b/c.txt") == "deep"
    for bad in ("../escape.txt", "/etc/passwd", "a/../../x", "/workspace/../etc/passwd"):
        with pytest.raises(SandboxError):
            sandbox.write_file(bad, "x")
        with pytest.raises(SandboxError):
            sandbox.read_file(bad)
    os.symlink("/etc", sandbox.workdir / "link")
    with pytest.raises(SandboxError):
        sandbox.read_file("link/passwd")
    with pytest.raises(FileNotFoundError):
        sandbox.read_file("nope.txt")


@needs_bwrap
def test_destroy_idempotent(backend, source):
    sb = backend.create(SandboxSpec(source_dir=source))
    sb.exec("mkdir -p ro && touch ro/f && chmod 500 ro")
    sb.destroy()
    sb.destroy()
    assert not sb.workdir.exists()
    with pytest.raises(SandboxError):
        sb.exec("true")


@needs_bwrap
def test_no_network(sandbox):
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen()
    port = srv.getsockname()[1]
    try:
        code = (
            "import socket,sys\n"
            "try:\n"
            f"    socket.create_connection(('127.0.0.1', {port}), timeout=3); print('connected')\n"
            "except OSError as e: print('refused', e)\n"
            "try:\n"
            "    socket.getaddrinfo('example.com', 80); print('resolved')\n"
            "except OSError as e: print('nodns', e)\n"
        )
        res = sandbox.exec([sys.executable, "-c", code], timeout=30)
        assert "refused" in res.stdout and "connected" not in res.stdout, res
        assert "nodns" in res.stdout and "resolved" not in res.stdout, res
        ifaces = sandbox.exec("cat /proc/net/dev").stdout
        assert [l.split(":")[0].strip() for l in ifaces.splitlines()[2:]] == ["lo"]
    finally:
        srv.close()


@needs_bwrap
def test_cannot_see_other_sandboxes_or_caches(backend, source, tmp_path):
    a = backend.create(SandboxSpec(source_dir=source))
    b = backend.create(SandboxSpec(source_dir=source))
    try:
        b.write_file("secret.txt", "b-secret")
        (tmp_path / "host-tmp.txt").write_text("host")
        res = a.exec(f"cat {b.workdir}/secret.txt; ls {backend.root}; ls {legorl_home()}; cat {tmp_path}/host-tmp.txt")
        assert "b-secret" not in res.stdout and b.name not in res.stdout and "host" not in res.stdout
        assert res.exit_code != 0
        # the built-in suites (gold patches) are masked, but legorl stays importable
        res = a.exec([sys.executable, "-c", "import legorl.tasks.loader as l; print(l.builtin_suites())"])
        assert res.exit_code == 0 and res.stdout.strip() == "[]", res
    finally:
        a.destroy()
        b.destroy()


class _UnixHTTPServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True


class _Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = f"gateway says hi to {self.path}".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self):
        data = self.rfile.read(int(self.headers["Content-Length"]))
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data[::-1])

    def address_string(self):
        return "unix"

    def log_message(self, *args):
        pass


@needs_bwrap
def test_gateway_forwarder(backend, source, tmp_path):
    sock = tmp_path / "gw.sock"
    server = _UnixHTTPServer(str(sock), _Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    sb = backend.create(SandboxSpec(source_dir=source, gateway_socket=sock, gateway_port=8123))
    try:
        code = (
            "import urllib.request as u\n"
            "print(u.urlopen('http://127.0.0.1:8123/v1/models', timeout=10).read().decode())\n"
            "print(u.urlopen(u.Request('http://127.0.0.1:8123/x', data=b'abc'), timeout=10).read().decode())\n"
        )
        res = sb.exec([sys.executable, "-c", code], timeout=60)
        assert res.exit_code == 0, res
        assert res.stdout.splitlines() == ["gateway says hi to /v1/models", "cba"]
        if shutil.which("curl"):
            res = sb.exec("curl -sS http://127.0.0.1:8123/curl", timeout=60)
            assert res.stdout == "gateway says hi to /curl", res
        # the forwarder passes the child's exit code through, and only the gateway is reachable
        assert sb.exec("exit 7").exit_code == 7
        res = sb.exec([sys.executable, "-c", "import socket; socket.getaddrinfo('example.com', 80)"])
        assert res.exit_code != 0
    finally:
        sb.destroy()
        server.shutdown()
        server.server_close()


@needs_bwrap
def test_exec_latency(sandbox):
    durations = []
    for _ in range(20):
        res = sandbox.exec(["true"])
        assert res.exit_code == 0
        durations.append(res.duration_s)
    p50 = statistics.median(durations)
    print(f"bwrap exec true p50 over 20: {p50 * 1000:.1f} ms")
    assert p50 < 1.0


def _catches(pid: int, sig: int) -> bool:
    """Has process ``pid`` installed a handler for ``sig`` (SigCgt in /proc/PID/status)?"""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    caught = next(int(line.split()[1], 16) for line in status.splitlines() if line.startswith("SigCgt:"))
    return bool(caught >> (sig - 1) & 1)


def _wait_until(pred, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.02)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_forwarder_module_on_host(tmp_path):
    """`python -m legorl.sandbox.forwarder` works standalone: forwards, passes exit codes and SIGTERM."""
    import subprocess

    sock = tmp_path / "gw.sock"
    server = _UnixHTTPServer(str(sock), _Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = _free_port()
    child = (
        f"import urllib.request as u, sys; "
        f"print(u.urlopen('http://127.0.0.1:{port}/m', timeout=10).read().decode()); sys.exit(5)"
    )
    fwd = [sys.executable, "-m", "legorl.sandbox.forwarder", "--socket", str(sock), "--port", str(port), "--"]
    try:
        res = subprocess.run([*fwd, sys.executable, "-c", child], capture_output=True, text=True, timeout=30)
        assert res.returncode == 5 and res.stdout == "gateway says hi to /m\n", res
        proc = subprocess.Popen([*fwd, "sleep", "30"])
        # terminate only once the forwarder catches SIGTERM: before that (a loaded machine can take
        # seconds to start Python) the default action kills it and nothing is forwarded
        _wait_until(lambda: _catches(proc.pid, signal.SIGTERM), timeout=60)
        proc.terminate()
        assert proc.wait(timeout=10) == 128 + 15
    finally:
        server.shutdown()
        server.server_close()


# the mark and the trace path come by the environment: the caller's own command line must not hold them
_KILLED_CALLER = """
import os
from legorl.sandbox.base import SandboxSpec
from legorl.sandbox.bwrap import BwrapBackend
sb = BwrapBackend(root=os.environ["ROOT"]).create(SandboxSpec(source_dir=os.environ["SOURCE"]))
sb.start_trace(os.environ["TRACE"])  # strace -f between this process and bwrap, as under the audit
sb.exec("sleep 300; echo " + os.environ["MARK"], timeout=600)
"""


def _processes_mentioning(*needles: str) -> list[psutil.Process]:
    found = []
    for p in psutil.process_iter(["cmdline"]):
        line = " ".join(p.info["cmdline"] or [])
        if any(n in line for n in needles):
            found.append(p)
    return found


@needs_bwrap
def test_a_killed_caller_takes_its_traced_exec_with_it(backend, source, tmp_path):
    """SIGKILL of the process that runs an exec (no cleanup can run) ends the exec's strace, bwrap and
    command too: a killed run leaves no sandbox running, orphaned."""
    mark, trace = uuid.uuid4().hex, str(tmp_path / "trace.log")
    env = os.environ | {"ROOT": str(backend.root), "SOURCE": str(source), "TRACE": trace, "MARK": mark}
    caller = subprocess.Popen([sys.executable, "-c", _KILLED_CALLER], env=env)
    try:
        # the command runs in the sandbox (its shell holds the mark), under strace (which holds the path)
        _wait_until(lambda: {"strace", "bwrap", "bash"} <= {p.name() for p in _processes_mentioning(mark, trace)}, 60)
        caller.kill()
        caller.wait(timeout=10)
        _wait_until(lambda: not _processes_mentioning(mark, trace), 15)
    finally:
        caller.kill()
        for p in _processes_mentioning(mark, trace):  # what this test started, should it fail
            with contextlib.suppress(psutil.Error):
                p.kill()
