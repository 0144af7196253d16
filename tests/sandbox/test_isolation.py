"""Isolation of bwrap sandboxes: network, other sandboxes' files, host dirs, pids and memory limits."""

from __future__ import annotations

import os
import shutil
import socket
import socketserver
import threading
import uuid
from pathlib import Path

import pytest

from legorl.sandbox.base import SandboxSpec
from legorl.sandbox.bwrap import BwrapBackend
from legorl.sandbox.images import ImageCache
from legorl.settings import legorl_home

pytestmark = pytest.mark.sandbox

# Bounded fork bomb: keeps forking children that sleep, up to 5000, and reports how far it got.
FORK_BOMB = (
    "import os, sys, time\n"
    "n = 0\n"
    "try:\n"
    "    for _ in range(5000):\n"
    "        if os.fork() == 0:\n"
    "            time.sleep(5); os._exit(0)\n"
    "        n += 1\n"
    "except OSError as exc:\n"
    "    print('forked', n, 'then', exc.errno); sys.exit(3)\n"
    "print('forked', n)\n"
)
# Memory hog: 4 GiB in touched 64 MiB chunks.
MEMORY_HOG = "chunks = []\nfor i in range(64):\n    chunks.append(bytearray(64 << 20))\nprint('allocated 4 GiB')\n"


class _Echo(socketserver.BaseRequestHandler):
    def handle(self):
        self.request.sendall(b"gateway:" + self.request.recv(100))


class _UnixServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True


@pytest.fixture
def home_backend(tmp_path: Path):
    # Sandboxes and cache under $LEGORL_HOME (outside /tmp): not part of any sandbox's view.
    root = legorl_home() / "test-isolation" / uuid.uuid4().hex[:8]
    cache = ImageCache(root / "images")
    yield BwrapBackend(root=root / "sandboxes", cache=cache)
    shutil.rmtree(root, ignore_errors=True)
    try:
        root.parent.rmdir()
    except OSError:
        pass


@pytest.fixture
def source(tmp_path: Path) -> Path:
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.py").write_text("A = 1\n")
    return src


def test_only_the_gateway_port_is_reachable(home_backend, source, tmp_path):
    sock = tmp_path / "gw.sock"
    server = _UnixServer(str(sock), _Echo)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    host_srv = socket.socket()
    host_srv.bind(("127.0.0.1", 0))
    host_srv.listen()
    host_port = host_srv.getsockname()[1]
    sb = home_backend.create(SandboxSpec(source_dir=source, gateway_socket=sock, gateway_port=8765))
    try:
        probe = (
            "import socket\n"
            "s = socket.create_connection(('127.0.0.1', 8765), timeout=5); s.sendall(b'hi'); print(s.recv(100))\n"
            f"for addr in [('127.0.0.1', {host_port}), ('127.0.0.1', 8766), ('8.8.8.8', 53), ('1.1.1.1', 443),"
            " ('10.0.0.1', 80), ('::1', 22)]:\n"
            "    try:\n"
            "        socket.create_connection(addr, timeout=3); print('REACHED', addr)\n"
            "    except OSError as e:\n"
            "        print('blocked', addr[0], addr[1])\n"
            "try:\n"
            "    socket.getaddrinfo('deb.debian.org', 80); print('REACHED dns')\n"
            "except OSError:\n"
            "    print('blocked dns')\n"
        )
        res = sb.exec(["python3", "-c", probe], timeout=60)
        assert res.exit_code == 0, res.stderr
        assert "b'gateway:hi'" in res.stdout
        assert "REACHED" not in res.stdout and res.stdout.count("blocked") == 7, res.stdout
    finally:
        sb.destroy()
        server.shutdown()
        server.server_close()
        host_srv.close()


def test_cannot_read_other_sandboxes_caches_or_host_run_dir(home_backend, source):
    a = home_backend.create(SandboxSpec(source_dir=source))
    b = home_backend.create(SandboxSpec(source_dir=source))
    try:
        a.write_file("secret.txt", "TOP-SECRET")
        targets = [
            str(a.workdir / "secret.txt"),
            str(home_backend.root),
            str(home_backend.cache.root),
            str(legorl_home()),
            "/run",
        ]
        script = "; ".join(f"ls -A {t} 2>&1; cat {t}/* 2>&1" for t in targets)
        # and try to remove the masks (root keeps capabilities in bwrap unless dropped)
        script += (
            f"; umount {home_backend.root} 2>&1; umount {legorl_home()} 2>&1; "
            f"cat {a.workdir}/secret.txt 2>&1; grep CapEff /proc/self/status; "
            "echo x > /sys/fs/cgroup/pids/cgroup.procs 2>&1; touch /usr/evil 2>&1"
        )
        res = b.exec(script, timeout=60)
        assert "TOP-SECRET" not in res.stdout + res.stderr
        assert "CapEff:\t0000000000000000" in res.stdout
        assert not Path("/usr/evil").exists()
        # a's own view still works
        assert a.exec("cat secret.txt").stdout == "TOP-SECRET"
    finally:
        a.destroy()
        b.destroy()


def test_fork_bomb_is_stopped_and_reported(home_backend, source):
    sb = home_backend.create(SandboxSpec(source_dir=source, max_pids=128))
    try:
        res = sb.exec(["python3", "-c", FORK_BOMB], timeout=60)
        assert not res.timed_out
        if sb.cgroup is None and os.geteuid() == 0:
            pytest.skip("no writable cgroup here: RLIMIT_NPROC does not bind root; use podman --pids-limit")
        assert res.exit_code == 3, (res.stdout, res.stderr)
        forked = int(res.stdout.split()[1])
        assert forked < 128
        assert "pids limit (128)" in res.cause
        # the sandbox is usable again once the bomb's children are gone (pid namespace died with it)
        assert sb.exec("echo ok").stdout == "ok\n"
    finally:
        sb.destroy()


def test_memory_hog_is_stopped_and_reported(home_backend, source):
    sb = home_backend.create(SandboxSpec(source_dir=source, memory_mb=512))
    try:
        res = sb.exec(["python3", "-c", MEMORY_HOG], timeout=60)
        assert not res.timed_out and res.exit_code != 0
        assert "allocated" not in res.stdout
        assert "MemoryError" in res.stderr or res.killed_by_signal == 9
        assert "memory limit (512 MiB" in res.cause
    finally:
        sb.destroy()


def test_memory_cgroup_catches_what_rlimit_misses(home_backend, source):
    """Shared anonymous memory is not counted by RLIMIT_DATA; the cgroup still stops it."""
    sb = home_backend.create(SandboxSpec(source_dir=source, memory_mb=256))
    if sb.cgroup is None or "memory" not in sb.cgroup.dirs and "v2" not in sb.cgroup.dirs:
        sb.destroy()
        pytest.skip("no memory cgroup here")
    try:
        hog = "import mmap\nm = mmap.mmap(-1, 1 << 30)\nfor i in range(0, 1 << 30, 4096): m[i] = 1\nprint('done')\n"
        res = sb.exec(["python3", "-c", hog], timeout=60)
        assert res.killed_by_signal == 9 and "done" not in res.stdout
        assert "OOM-killed" in res.cause
    finally:
        sb.destroy()
