"""TCP → Unix-socket forwarder that runs inside a sandbox (stdlib only).

    python -m legorl.sandbox.forwarder --socket /run/legorl/gateway.sock --port 8000 -- CMD...

Binds ``127.0.0.1:PORT`` first, then runs ``CMD`` as a child (inheriting stdio), pipes bytes both
ways between each TCP connection and a fresh connection to the Unix socket, forwards
SIGTERM/SIGINT/SIGHUP to the child and exits with the child's exit code (128+N if it died of signal
N). Without ``CMD`` it serves until killed. The sandbox backend runs this file by path with
``python -I -S`` so it needs nothing but the standard library.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while True:
            data = await reader.read(65536)
            if not data:
                break
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        try:
            if writer.can_write_eof():
                writer.write_eof()
        except (ConnectionError, OSError, RuntimeError):
            pass


async def _handle(socket_path: str, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
    try:
        up_r, up_w = await asyncio.open_unix_connection(socket_path)
    except OSError as exc:
        print(f"legorl-forwarder: cannot reach {socket_path}: {exc}", file=sys.stderr, flush=True)
        client_w.close()
        return
    try:
        await asyncio.gather(_pipe(client_r, up_w), _pipe(up_r, client_w))
    except asyncio.CancelledError:
        # the child exited with this connection still open: the forwarder is ending. Returning keeps
        # Python 3.11's start_server from printing the cancelled handler's traceback into the
        # harness's log, where it would push the harness's own last words out of the log's tail.
        pass
    finally:
        for w in (up_w, client_w):
            try:
                w.close()
            except (ConnectionError, OSError, RuntimeError):
                pass


async def serve(socket_path: str, port: int, cmd: list[str], host: str = "127.0.0.1") -> int:
    server = await asyncio.start_server(lambda r, w: _handle(socket_path, r, w), host, port)
    if not cmd:
        async with server:
            await server.serve_forever()
        return 0
    loop = asyncio.get_running_loop()
    # Handlers go in before the child starts: a signal that arrives while it is being spawned is
    # held and delivered as soon as it exists, instead of killing the forwarder by default action.
    proc: asyncio.subprocess.Process | None = None
    held: list[int] = []

    def _forward(sig: int) -> None:
        if proc is None:
            held.append(sig)
            return
        try:
            proc.send_signal(sig)
        except ProcessLookupError:
            pass

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        loop.add_signal_handler(sig, _forward, sig)
    try:
        proc = await asyncio.create_subprocess_exec(*cmd)
    except OSError as exc:
        print(f"legorl-forwarder: cannot run {cmd[0]!r}: {exc}", file=sys.stderr, flush=True)
        server.close()
        return 127 if isinstance(exc, FileNotFoundError) else 126
    for held_sig in held:
        _forward(held_sig)
    rc = await proc.wait()
    server.close()
    return rc if rc >= 0 else 128 - rc


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="legorl.sandbox.forwarder", description=__doc__.splitlines()[0])
    parser.add_argument("--socket", required=True, help="Unix socket to forward to")
    parser.add_argument("--port", type=int, required=True, help="TCP port to listen on")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("cmd", nargs=argparse.REMAINDER, help="-- command to run as a child")
    args = parser.parse_args(argv)
    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    try:
        return asyncio.run(serve(args.socket, args.port, cmd, args.host))
    except OSError as exc:
        print(f"legorl-forwarder: cannot listen on {args.host}:{args.port}: {exc}", file=sys.stderr)
        return 125
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
