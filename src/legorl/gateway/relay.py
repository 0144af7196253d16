"""A Unix socket that relays every connection to the gateway's TCP address.

Sandboxes reach the gateway only through a Unix socket bind-mounted into them (they have no
network). In the training process that socket is the gateway's own; a rollout worker on another
process or node serves one of these instead, on its own machine, so its sandboxes are set up
exactly the same way. Bytes are copied both ways unchanged (streams included).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from pathlib import Path

__all__ = ["Relay"]

_CHUNK = 64 * 1024


class Relay:
    """``async with Relay(socket_path, host, port):`` serves ``socket_path`` meanwhile."""

    def __init__(self, socket_path: str | Path, host: str, port: int) -> None:
        self.socket_path = Path(socket_path)
        self.host, self.port = host, port
        self._server: asyncio.AbstractServer | None = None
        self._pipes: set[asyncio.Task[None]] = set()

    async def start(self) -> Relay:
        self.socket_path.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileNotFoundError):
            self.socket_path.unlink()
        self._server = await asyncio.start_unix_server(self._serve, path=str(self.socket_path))
        os.chmod(self.socket_path, 0o666)  # sandboxes run under other uids
        return self

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            for pipe in list(self._pipes):
                pipe.cancel()
            await asyncio.gather(*self._pipes, return_exceptions=True)
            await self._server.wait_closed()
            self._server = None
        with contextlib.suppress(FileNotFoundError):
            self.socket_path.unlink()

    async def __aenter__(self) -> Relay:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def _serve(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        try:
            upstream_r, upstream_w = await asyncio.open_connection(self.host, self.port)
        except OSError:
            client_w.close()  # the client sees a closed connection, as with a gateway that is down
            return
        pipes = [
            asyncio.ensure_future(_copy(client_r, upstream_w)),
            asyncio.ensure_future(_copy(upstream_r, client_w)),
        ]
        self._pipes.update(pipes)
        try:
            await asyncio.gather(*pipes, return_exceptions=True)
        finally:
            self._pipes.difference_update(pipes)
            for w in (client_w, upstream_w):
                w.close()


async def _copy(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(_CHUNK):
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()  # half-close: the other direction may still be answering
    except (ConnectionError, OSError):
        writer.close()
