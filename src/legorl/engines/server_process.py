"""Inference servers we start ourselves (vLLM, SGLang): the process, its readiness (``/health``
answers 200 once the model is loaded), its log, stop and kill. The backend's command line lives in
its own module (:mod:`legorl.engines.vllm_server`, :mod:`legorl.engines.sglang`). Servers listen on
127.0.0.1 only."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

import httpx
import psutil

from legorl.errors import EngineError

__all__ = ["ServerProcess", "free_port", "say", "wait_port_free"]


def say(message: str) -> None:
    """A progress line on stderr: building a venv or loading a server takes a minute or more."""
    print(message, file=sys.stderr, flush=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_port_free(port: int, timeout_s: float = 30.0) -> None:
    """Wait until 127.0.0.1:``port`` can be listened on again. A killed server's worker processes
    inherit its listening socket and die a moment after it: a restart on the same port before then
    fails with "address already in use"."""
    deadline = time.monotonic() + timeout_s
    while True:
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the servers bind
            try:
                s.bind(("127.0.0.1", port))
                return
            except OSError as e:
                if time.monotonic() >= deadline:
                    raise EngineError(f"port {port} is still in use after {timeout_s:.0f}s: {e}") from e
        time.sleep(0.2)


@dataclass
class ServerProcess:
    """One inference server process serving ``model`` on 127.0.0.1:``port``, started by ``python``;
    a backend subclass says its command line and variables. Its output goes to ``log_path``, whose
    tail is quoted when it fails to start or dies."""

    model: Path
    python: Path
    log_path: Path
    port: int = 0
    dtype: str = "float32"
    max_model_len: int = 2048
    extra_args: tuple[str, ...] = ()  # more of the server's own options
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    label: ClassVar[str] = "inference"

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def started(self) -> bool:
        return self.process is not None

    def environment(self) -> dict[str, str]:
        """Variables on top of ours (offline, no telemetry): the backend's own."""
        raise NotImplementedError

    def command(self) -> list[str]:
        raise NotImplementedError

    def serving_args(self) -> list[str]:
        """The options vLLM and SGLang spell alike: the served name, loopback address and port, dtype."""
        return [
            "--served-model-name",
            self.model.name,
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--dtype",
            self.dtype,
        ]

    def start(self, timeout_s: float = 600.0) -> ServerProcess:
        """Start the process and wait until ``/health`` answers 200 (the model is loaded)."""
        if self.port:
            wait_port_free(self.port)  # a restart: the last process's children may still hold it
        else:
            self.port = free_port()
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "DO_NOT_TRACK": "1"}
        env.update(self.environment())
        env.pop("VIRTUAL_ENV", None)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as out:
            # its own session: stop() ends the server's worker processes (vLLM's engine core) with it
            self.process = subprocess.Popen(
                self.command(), stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True
            )
        say(
            f"starting a {self.label} server for {self.model.name} on {self.base_url} (about a minute; log {self.log_path})"
        )
        t0 = time.monotonic()
        deadline = t0 + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise EngineError(f"the {self.label} server exited while starting ({self.exit_detail()})")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{self.base_url}/health", timeout=2.0, trust_env=False).status_code == 200:
                    say(f"{self.label} server on {self.base_url} ready in {time.monotonic() - t0:.0f}s")
                    return self
            time.sleep(1.0)
        self.stop()
        raise EngineError(f"the {self.label} server was not ready after {timeout_s:.0f}s ({self.exit_detail()})")

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def exit_detail(self) -> str:
        code = None if self.process is None else self.process.poll()
        return f"exit code {code}; log {self.log_path}: ...{self.log_tail()}"

    def log_tail(self, chars: int = 1500) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def kill(self) -> None:
        """SIGKILL the server's process group now (fault injection: a crashed engine)."""
        if self.process is not None and self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
            self._wait_group_gone()

    def _wait_group_gone(self, timeout_s: float = 10.0) -> None:
        """Wait (bounded) until no process of the server's group is left: its workers die a moment
        after the server and hold its port and memory until then."""
        if self.process is None:
            return
        group = self.process.pid
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            alive = []
            for proc in psutil.process_iter(["status"]):
                with contextlib.suppress(psutil.Error, OSError):
                    # a zombie holds nothing (and may wait long for a reaper)
                    if os.getpgid(proc.pid) == group and proc.info["status"] != psutil.STATUS_ZOMBIE:
                        alive.append(proc.pid)
            if not alive:
                return
            time.sleep(0.1)

    def stop(self, grace_s: float = 20.0) -> None:
        """SIGTERM the server's process group (the server and its engine core), SIGKILL after
        ``grace_s``."""
        p = self.process
        if p is None or p.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(p.pid, signal.SIGTERM)
        try:
            p.wait(grace_s)
        except subprocess.TimeoutExpired:
            self.kill()
        with contextlib.suppress(ProcessLookupError):  # children that outlived their parent
            os.killpg(p.pid, signal.SIGKILL)
