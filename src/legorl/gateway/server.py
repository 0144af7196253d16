"""Serve a :class:`Gateway` with uvicorn on 127.0.0.1:<port> and a Unix socket at the same time.

Sandboxes have no network; they reach the gateway through the Unix socket (bind-mounted into the
sandbox, with a TCP->Unix forwarder inside). The TCP listener binds 127.0.0.1, unless ``host``
names another address: Ray rollout workers on other nodes (``executor.gateway_host``, a private
network; docs/scale-out.md).

Inside a running event loop::

    async with GatewayServer(gw, port=0, uds="/run/x/gw.sock") as srv:
        srv.base_url      # "http://127.0.0.1:<port>/v1"
        srv.uds_path      # the socket path

Engine, gateway and server are built together by :func:`legorl.loop.stack.open_gateway_stack`
(training loop, ``legorl rollout``, ``legorl gateway``: :func:`legorl.loop.stack.serve_gateway`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import stat
from collections.abc import Generator
from pathlib import Path
from typing import Any

import uvicorn

from legorl.gateway.app import Gateway

log = logging.getLogger(__name__)

LOOPBACK = "127.0.0.1"


class _EmbeddedServer(uvicorn.Server):
    """uvicorn.Server that leaves the host program's signal handlers alone."""

    def __init__(self, config: uvicorn.Config, *, capture: bool):
        super().__init__(config)
        self._capture = capture

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        if self._capture:
            with super().capture_signals():
                yield
        else:
            yield


class GatewayServer:
    def __init__(
        self,
        gateway: Gateway,
        *,
        port: int | None = 0,
        uds: str | os.PathLike[str] | None = None,
        log_level: str = "warning",
        host: str = LOOPBACK,
    ):
        if port is None and uds is None:
            raise ValueError("need a TCP port (0 = any free one) and/or a Unix socket path")
        self.gateway = gateway
        self.host = host
        self.requested_port = port
        self.uds_path: Path | None = Path(uds) if uds is not None else None
        self.log_level = log_level
        self.port: int | None = None
        self._server: _EmbeddedServer | None = None
        self._task: asyncio.Task[None] | None = None
        self._sockets: list[socket.socket] = []

    # -- addresses ---------------------------------------------------------------------------
    @property
    def base_url(self) -> str:
        """OpenAI-style base URL (with /v1) on TCP."""
        if self.port is None:
            raise RuntimeError("server has no TCP listener (not started, or UDS only)")
        return f"http://{self.host}:{self.port}/v1"

    @property
    def uds(self) -> str | None:
        """The Unix socket path as a string (what sandboxes bind-mount)."""
        return str(self.uds_path) if self.uds_path is not None else None

    @property
    def root_url(self) -> str:
        """Base URL without /v1 (Anthropic-style clients: ANTHROPIC_BASE_URL)."""
        return self.base_url[: -len("/v1")]

    # -- sockets -----------------------------------------------------------------------------
    def _bind(self) -> list[socket.socket]:
        socks: list[socket.socket] = []
        try:
            if self.requested_port is not None:
                s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                # accepted sockets inherit it: without it uvicorn's separate header/body writes on a
                # socket it did not create meet the client's delayed ACK (+40 ms per response)
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                s.bind((self.host, int(self.requested_port)))
                s.listen(2048)
                s.setblocking(False)
                self.port = s.getsockname()[1]
                socks.append(s)
            if self.uds_path is not None:
                p = self.uds_path
                p.parent.mkdir(parents=True, exist_ok=True)
                if p.exists() or p.is_symlink():
                    if not stat.S_ISSOCK(p.lstat().st_mode):
                        raise FileExistsError(f"{p} exists and is not a socket")
                    p.unlink()
                u = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                u.bind(str(p))
                os.chmod(p, 0o666)  # sandboxes run under other uids
                u.listen(2048)
                u.setblocking(False)
                socks.append(u)
        except BaseException:
            for s in socks:
                s.close()
            raise
        return socks

    def _config(self) -> uvicorn.Config:
        return uvicorn.Config(
            self.gateway.app,
            log_level=self.log_level,
            lifespan="off",
            access_log=False,
            timeout_graceful_shutdown=5,
            timeout_keep_alive=30,
        )

    # -- async context manager ---------------------------------------------------------------
    async def start(self) -> GatewayServer:
        if self._task is not None:
            raise RuntimeError("already started")
        self._sockets = self._bind()
        self._server = _EmbeddedServer(self._config(), capture=False)
        self._task = asyncio.create_task(self._server.serve(sockets=self._sockets), name="legorl-gateway")
        while not self._server.started:
            if self._task.done():
                self._task.result()  # raise the startup error
                raise RuntimeError("gateway server exited during startup")
            await asyncio.sleep(0.01)
        return self

    async def stop(self) -> None:
        if self._server is None or self._task is None:
            return
        self._server.should_exit = True
        try:
            await self._task
        finally:
            self._task = None
            for s in self._sockets:
                s.close()
            self._sockets = []
            if self.uds_path is not None:
                with contextlib.suppress(FileNotFoundError):
                    self.uds_path.unlink()

    async def __aenter__(self) -> GatewayServer:
        return await self.start()

    async def __aexit__(self, *exc: Any) -> None:
        await self.stop()
