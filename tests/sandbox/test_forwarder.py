"""The in-sandbox TCP → Unix-socket forwarder: its stderr is part of the harness's log, so ending
with a connection still open must leave nothing there."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
from pathlib import Path


def test_a_connection_left_open_when_the_child_exits_prints_no_traceback(tmp_path: Path):
    gateway = socket.socket(socket.AF_UNIX)
    gateway.bind(str(tmp_path / "gw.sock"))
    gateway.listen(1)
    held: list[object] = []  # the gateway side keeps the connection open
    threading.Thread(target=lambda: held.append(gateway.accept()), daemon=True).start()
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    child = (
        f"import socket, time; s = socket.create_connection(('127.0.0.1', {port})); s.sendall(b'x'); time.sleep(0.5)"
    )
    res = subprocess.run(
        [sys.executable, "-m", "legorl.sandbox.forwarder", "--socket", str(tmp_path / "gw.sock"), "--port", str(port)]
        + ["--", sys.executable, "-c", child],
        capture_output=True,
        text=True,
        timeout=60,
    )
    gateway.close()
    assert held, "the child's connection reached the gateway socket"
    assert res.returncode == 0 and res.stderr == "", res.stderr
