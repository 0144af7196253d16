"""Podman backend: create/exec/diff/destroy, no network, gateway forwarder, pids/memory limits.

The first run builds the base image (debootstrap + podman import, ~2 min, needs the Debian mirror);
later runs find it in the image cache ($LEGORL_HOME/images) and podman's storage.
"""

from __future__ import annotations

import socketserver
import subprocess
import threading
import time
from pathlib import Path

import pytest
from needs import unavailable

from legorl.errors import SandboxError
from legorl.sandbox.base import Sandbox, SandboxBackend, SandboxSpec
from legorl.sandbox.podman import PodmanBackend, swebench_image_name

pytestmark = [
    pytest.mark.podman,
    pytest.mark.slow,
]


@pytest.fixture(scope="module")
def backend(tmp_path_factory) -> PodmanBackend:
    b = PodmanBackend(root=tmp_path_factory.mktemp("podman-sandboxes"))
    try:
        b.base_layer()
    except SandboxError as exc:  # e.g. no Debian mirror reachable: say why, precisely
        unavailable(f"cannot build the podman base image here: {exc}")
    return b


@pytest.fixture
def source(tmp_path: Path) -> Path:
    src = tmp_path / "src"
    (src / "pkg").mkdir(parents=True)
    (src / "pkg" / "mod.py").write_text("X = 1\n")
    (src / "old.txt").write_text("old\n")
    return src


class _Echo(socketserver.BaseRequestHandler):
    def handle(self):
        self.request.sendall(b"gateway:" + self.request.recv(100))


class _UnixServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True


def test_swebench_image_name():
    assert swebench_image_name("django__django-11099") == "swebench/sweb.eval.x86_64.django_1776_django-11099:latest"


def test_create_exec_diff_destroy(backend, source):
    assert isinstance(backend, SandboxBackend) and backend.name == "podman"
    sb = backend.create(SandboxSpec(source_dir=source))
    assert isinstance(sb, Sandbox)
    try:
        res = sb.exec("python3 -c 'import pytest, sys; print(sys.version_info[:2])'; git --version; pwd")
        assert res.exit_code == 0 and "/workspace" in res.stdout, res.stderr
        assert sb.exec("git log --all --oneline | wc -l").stdout.strip() == "1"
        res = sb.exec("echo out; echo err >&2; exit 3")
        assert (res.exit_code, res.stdout, res.stderr) == (3, "out\n", "err\n")
        assert sb.exec("cat", stdin="piped").stdout == "piped"
        sb.exec("echo 'X = 2' > pkg/mod.py && rm old.txt && echo new > new.txt")
        diff = sb.diff()
        assert "+X = 2" in diff and "deleted file mode" in diff and "+new" in diff
        assert (source / "old.txt").exists()
        res = sb.exec("sleep 30", timeout=1)
        assert res.timed_out and "timeout" in res.cause
        assert sb.exec("echo alive").stdout == "alive\n"
    finally:
        sb.destroy()
    out = subprocess.run(["podman", "ps", "-a", "--format", "{{.Names}}"], capture_output=True, text=True).stdout
    assert sb.name not in out and not sb.sandbox_dir.exists()
    with pytest.raises(SandboxError):
        sb.exec("true")


def test_no_network_but_gateway_forwarder(backend, source, tmp_path):
    sock = tmp_path / "gw.sock"
    server = _UnixServer(str(sock), _Echo)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    with pytest.raises(SandboxError, match="not writable by the sandbox user"):
        backend.create(SandboxSpec(source_dir=source, gateway_socket=sock, gateway_port=8123))
    sock.chmod(0o666)  # as the gateway does: commands run as uid 1000
    sb = backend.create(SandboxSpec(source_dir=source, gateway_socket=sock, gateway_port=8123))
    try:
        probe = (
            "import socket\n"
            "s = socket.create_connection(('127.0.0.1', 8123), timeout=5); s.sendall(b'hi'); print(s.recv(100))\n"
            "for addr in [('127.0.0.1', 8124), ('8.8.8.8', 53), ('10.0.0.1', 80)]:\n"
            "    try:\n"
            "        socket.create_connection(addr, timeout=3); print('REACHED', addr)\n"
            "    except OSError:\n"
            "        print('blocked')\n"
            "try:\n"
            "    socket.getaddrinfo('deb.debian.org', 80); print('REACHED dns')\n"
            "except OSError:\n"
            "    print('blocked')\n"
        )
        res = sb.exec(["python3", "-c", probe], timeout=60)
        assert "b'gateway:hi'" in res.stdout, (res.stdout, res.stderr)
        assert "REACHED" not in res.stdout and res.stdout.count("blocked") == 4
    finally:
        sb.destroy()
        server.shutdown()
        server.server_close()


def test_pids_and_memory_limits(backend, source, tmp_path, monkeypatch):
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)  # conmon marks an OOM-killed exec with an `oom` file in its cwd: never ours
    sb = backend.create(SandboxSpec(source_dir=source, max_pids=64, memory_mb=256))
    try:
        bomb = (
            "import os, sys, time\nn = 0\ntry:\n    for _ in range(5000):\n        if os.fork() == 0:\n"
            "            time.sleep(2); os._exit(0)\n        n += 1\nexcept OSError as e:\n"
            "    print('forked', n); sys.exit(3)\n"
        )
        res = sb.exec(["python3", "-c", bomb], timeout=60)
        assert res.exit_code == 3 and int(res.stdout.split()[1]) < 64, (res.stdout, res.stderr)
        try:  # while the bomb's children live, no exec can start: a typed error, not a hang
            sb.exec("true", timeout=10)
        except SandboxError as exc:
            assert "pids" in str(exc)
        time.sleep(3)  # the children exit and the container's init reaps them
        hog = "chunks = [bytearray(64 << 20) for _ in range(64)]\nprint('allocated')\n"
        t0 = time.monotonic()
        res = sb.exec(["python3", "-c", hog], timeout=60)
        assert "allocated" not in res.stdout and res.exit_code != 0 and time.monotonic() - t0 < 60
        assert res.killed_by_signal == 9 or "MemoryError" in res.stderr
    finally:
        sb.destroy()
    assert list(cwd.iterdir()) == []
