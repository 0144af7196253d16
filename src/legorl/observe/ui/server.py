"""``legorl ui RUN_DIR...``: the run UI served on 127.0.0.1 behind an access token.

The token is printed in the URL (``http://127.0.0.1:PORT/?token=...``); the first page loaded with
it sets an HttpOnly, SameSite=Strict cookie so that links, assets and the event stream need not
carry it. Any request without the right token (query, cookie or ``Authorization: Bearer``) gets
401. Live updates: one server-sent event stream per open page (``/api/run/NAME/events``) that
pushes new rollout rows (already filtered as the page is), new metrics rows and the run summary;
the server checks the run store for them twice a second — pages themselves are never polled.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import secrets
import time
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from typing import Any

from fastapi import FastAPI, HTTPException, Request
from fastapi.responses import HTMLResponse, PlainTextResponse, Response, StreamingResponse

from legorl.errors import RunDirError
from legorl.observe.rundata import RunData
from legorl.observe.ui.pages import STATIC, Links, Pages, parse_filters, store_filters

COOKIE = "legorl_ui"
EVENT_INTERVAL_S = 0.5
log = logging.getLogger(__name__)
_TYPES = {".js": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8"}


def open_runs(run_dirs: Sequence[str | Path]) -> dict[str, RunData]:
    """Run name (its directory's name; made unique with a suffix) → RunData."""
    runs: dict[str, RunData] = {}
    for d in run_dirs:
        data = RunData(d)
        name, i = data.name, 2
        while name in runs:
            name, i = f"{data.name}-{i}", i + 1
        runs[name] = data
    return runs


def create_app(runs: dict[str, RunData], token: str) -> FastAPI:
    app = FastAPI(title="LEGO-RL run UI", docs_url=None, redoc_url=None, openapi_url=None)
    pages = Pages(runs)
    links = Links()

    @app.middleware("http")
    async def require_token(request: Request, call_next: Callable[[Request], Any]) -> Response:
        given = request.query_params.get("token")
        auth = request.headers.get("authorization", "")
        candidates = [given, request.cookies.get(COOKIE), auth[7:] if auth.lower().startswith("bearer ") else None]
        if not any(c is not None and hmac.compare_digest(c.encode(), token.encode()) for c in candidates):
            return PlainTextResponse(
                "401: a valid access token is required (open the URL `legorl ui` printed)", status_code=401
            )
        response: Response = await call_next(request)
        if given is not None:
            response.set_cookie(COOKIE, token, httponly=True, samesite="strict")
        return response

    @app.exception_handler(RunDirError)
    async def damaged(request: Request, exc: RunDirError) -> PlainTextResponse:
        # a run store damaged after the UI opened it: say which file, not a bare "Internal Server Error"
        return PlainTextResponse(f"500: {exc}", status_code=500)

    def run_or_404(name: str) -> RunData:
        if name not in runs:
            raise HTTPException(404, f"no run {name!r}")
        return runs[name]

    async def html(fn: Callable[[], str | None]) -> HTMLResponse:
        out = await asyncio.to_thread(fn)
        if out is None:
            raise HTTPException(404, "not found")
        return HTMLResponse(out)

    @app.get("/", response_class=HTMLResponse)
    async def home() -> HTMLResponse:
        return await html(lambda: pages.home(links))

    @app.get("/run/{name}/", response_class=HTMLResponse)
    async def overview(name: str) -> HTMLResponse:
        run_or_404(name)
        return await html(lambda: pages.overview(name, links))

    @app.get("/run/{name}/grid", response_class=HTMLResponse)
    async def grid(name: str) -> HTMLResponse:
        run_or_404(name)
        return await html(lambda: pages.grid(name, links))

    @app.get("/run/{name}/rollouts", response_class=HTMLResponse)
    async def rollouts(name: str, request: Request, page: int = 0) -> HTMLResponse:
        run_or_404(name)
        filters = parse_filters(request.query_params.get)
        return await html(lambda: pages.rollouts(name, links, filters, page=max(page, 0)))

    @app.get("/run/{name}/rollout/{rollout_id}", response_class=HTMLResponse)
    async def trajectory(name: str, rollout_id: str) -> HTMLResponse:
        run_or_404(name)
        return await html(lambda: pages.trajectory(name, links, rollout_id))

    @app.get("/run/{name}/compare", response_class=HTMLResponse)
    async def compare_rollouts(name: str, a: str, b: str) -> HTMLResponse:
        run_or_404(name)
        return await html(lambda: pages.compare_rollouts(name, links, a.strip(), b.strip()))

    @app.get("/compare", response_class=HTMLResponse)
    async def compare_runs(request: Request) -> HTMLResponse:
        names = [n for n in request.query_params.get("runs", "").split(",") if n] or list(runs)
        return await html(lambda: pages.compare_runs(names, links))

    @app.get("/static/{asset}")
    async def static(asset: str) -> Response:
        path = STATIC / asset
        if "/" in asset or path.suffix not in _TYPES or not path.is_file():
            raise HTTPException(404, "no such asset")
        return Response(path.read_bytes(), media_type=_TYPES[path.suffix])

    @app.get("/api/run/{name}/events")
    async def events(name: str, request: Request, after: int = 0, metrics: int = -1) -> StreamingResponse:
        run = run_or_404(name)
        query = store_filters(parse_filters(request.query_params.get))
        return StreamingResponse(
            _event_stream(pages, links, name, run, request, query, after, metrics),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-store"},
        )

    return app


def _sse(event: str, data: Any) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data, default=str)}\n\n".encode()


async def _event_stream(
    pages: Pages,
    links: Links,
    name: str,
    run: RunData,
    request: Request,
    query: dict[str, Any],
    after: int,
    metrics_seen: int,
) -> AsyncIterator[bytes]:
    yield b"retry: 2000\n\n"
    try:
        async for chunk in _events(pages, links, name, run, request, query, after, metrics_seen):
            yield chunk
    except RunDirError as exc:  # the store was damaged while the page was open: end the stream, say why
        log.warning("run UI: %s", exc)


async def _events(
    pages: Pages,
    links: Links,
    name: str,
    run: RunData,
    request: Request,
    query: dict[str, Any],
    after: int,
    metrics_seen: int,
) -> AsyncIterator[bytes]:
    summary_key: Any = None
    while not await request.is_disconnected():
        rows = await asyncio.to_thread(run.rollouts, **query, after_row=after, limit=200, newest_first=False)
        for row in rows:
            after = max(after, int(row["row"]))
            yield _sse("rollout", {"row": row, "html": pages.rollout_row(name, links, row)})
        metrics = await asyncio.to_thread(run.metrics)
        if metrics_seen >= 0:
            for m in metrics[metrics_seen:]:
                yield _sse("metrics", m)
        metrics_seen = len(metrics)
        if rows or summary_key is None or summary_key != metrics_seen:
            summary = await asyncio.to_thread(run.summary)
            html = pages.env.get_template("_summary.html").render(summary=summary)
            yield _sse("summary", {"summary": summary.as_dict(), "html": html})
            summary_key = metrics_seen
        await asyncio.sleep(EVENT_INTERVAL_S)


def new_token() -> str:
    return secrets.token_urlsafe(24)


class BackgroundUI:
    """The UI served from a background thread (``legorl train --ui``, tests, ``legorl bench ui``)::

    with BackgroundUI([run_dir]) as ui:
        ui.url        # http://127.0.0.1:PORT/?token=...
    """

    def __init__(self, run_dirs: Sequence[str | Path], *, port: int = 0, token: str | None = None) -> None:
        self.run_dirs = list(run_dirs)
        self.port = port
        self.token = token or new_token()
        self.runs: dict[str, RunData] = {}
        self._server: Any = None
        self._thread: Any = None

    @property
    def origin(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        return f"{self.origin}/?token={self.token}"

    def __enter__(self) -> BackgroundUI:
        import socket
        import threading

        import uvicorn

        self.runs = open_runs(self.run_dirs)
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", self.port))
        self.port = sock.getsockname()[1]
        self._server = uvicorn.Server(
            uvicorn.Config(create_app(self.runs, self.token), log_level="warning", lifespan="off")
        )
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [sock]}, daemon=True, name="legorl-ui"
        )
        self._thread.start()
        deadline = time.monotonic() + 30
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the UI server did not start")
            time.sleep(0.02)
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.should_exit = True
        self._server.force_exit = True  # open event streams never end on their own
        self._thread.join(timeout=10)
        for r in self.runs.values():
            r.close()


def serve(
    run_dirs: Sequence[str | Path],
    *,
    port: int = 8765,
    token: str | None = None,
    print_fn: Callable[[str], Any] = print,
    log_level: str = "warning",
) -> None:
    """Serve the UI of ``run_dirs`` on 127.0.0.1:``port`` (0: any free port) until interrupted."""
    import socket

    import uvicorn

    runs = open_runs(run_dirs)
    token = token or new_token()
    app = create_app(runs, token)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    print_fn(f"LEGO-RL UI for {', '.join(runs)}: http://127.0.0.1:{sock.getsockname()[1]}/?token={token}")
    config = uvicorn.Config(app, log_level=log_level, lifespan="off")  # no startup hooks; a forced exit stays quiet
    try:
        uvicorn.Server(config).run(sockets=[sock])
    finally:
        for r in runs.values():
            r.close()


__all__ = ["BackgroundUI", "COOKIE", "create_app", "new_token", "open_runs", "serve"]
