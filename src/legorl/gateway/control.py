"""Session control over HTTP, for rollout workers in other processes or on other nodes (the Ray
executor, :mod:`legorl.loop.ray_executor`).

In one process the loop calls the :class:`~legorl.gateway.app.Gateway` directly: open a session,
read its Turns and budget report, close it. A rollout worker elsewhere does the same through
:class:`RemoteGateway`, which has those methods and calls the routes :func:`enable_control` adds:

    POST   /legorl/sessions                 {"rollout_id", "token"?, "budget"?, "seed"?} -> {"token", "session_id"}
    GET    /legorl/sessions/{token}/turns   -> [Turn, ...]
    GET    /legorl/sessions/{token}/report  -> SessionReport
    DELETE /legorl/sessions/{token}         -> [Turn, ...] (the session is closed)

Every control request carries the run's control secret (header ``x-legorl-control``). The harnesses
reach the same server but never see the secret: without it these routes answer 404, as if they did
not exist, so a policy cannot read, open or close sessions (its own or others').
"""

from __future__ import annotations

import dataclasses
import hmac
import secrets
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import httpx
from fastapi import Request
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from legorl.errors import GatewayError
from legorl.gateway.sessions import SessionBudget, SessionReport
from legorl.trajectory.records import Turn

if TYPE_CHECKING:
    from legorl.gateway.app import Gateway

__all__ = ["CONTROL_HEADER", "RemoteGateway", "enable_control", "new_control_secret"]

CONTROL_HEADER = "x-legorl-control"
_PREFIX = "/legorl/sessions"


def new_control_secret() -> str:
    return secrets.token_hex(32)


def enable_control(gateway: Gateway, secret: str) -> None:
    """Serve the control routes on ``gateway``'s app, for requests that carry ``secret``."""
    if len(secret) < 32:
        raise ValueError("the control secret must have at least 32 characters")
    app = gateway.app
    app.state.control_secret = secret
    app.add_api_route(_PREFIX, _open, methods=["POST"], include_in_schema=False)
    app.add_api_route(_PREFIX + "/{token}/turns", _turns, methods=["GET"], include_in_schema=False)
    app.add_api_route(_PREFIX + "/{token}/report", _report, methods=["GET"], include_in_schema=False)
    app.add_api_route(_PREFIX + "/{token}", _close, methods=["DELETE"], include_in_schema=False)


def _authorized(request: Request) -> Gateway:
    """The gateway, for a request with the control secret; anything else is a plain 404."""
    expected = getattr(request.app.state, "control_secret", None)
    given = request.headers.get(CONTROL_HEADER, "")
    if not expected or not hmac.compare_digest(given.encode(), expected.encode()):
        raise StarletteHTTPException(404, "Not Found")  # what any unknown route answers
    gateway: Gateway = request.app.state.gateway
    return gateway


def _unknown(token: str) -> Response:
    return JSONResponse({"error": "unknown or closed session token"}, status_code=404)


async def _open(request: Request) -> Response:
    gateway = _authorized(request)
    body = await request.json()
    budget = SessionBudget(**body["budget"]) if body.get("budget") else None
    try:
        token = gateway.open_session(
            str(body.get("rollout_id", "")), token=body.get("token"), budget=budget, seed=body.get("seed")
        )
    except (ValueError, TypeError) as e:
        return JSONResponse({"error": str(e)}, status_code=400)
    return JSONResponse({"token": token, "session_id": gateway.sessions.session_id(token)})


def _read(request: Request, token: str, what: Callable[[Gateway], Any]) -> Response:
    """``what(gateway)`` as JSON, for an authorized request about an open session."""
    gateway = _authorized(request)
    try:
        return JSONResponse(what(gateway))
    except KeyError:
        return _unknown(token)


async def _turns(request: Request, token: str) -> Response:
    return _read(request, token, lambda g: [t.model_dump(mode="json") for t in g.session_turns(token)])


async def _report(request: Request, token: str) -> Response:
    return _read(request, token, lambda g: dataclasses.asdict(g.session_report(token)))


async def _close(request: Request, token: str) -> Response:
    gateway = _authorized(request)
    return JSONResponse([t.model_dump(mode="json") for t in gateway.close_session(token)])


class RemoteGateway:
    """The gateway's session API (what a rollout calls: :class:`legorl.loop.rollout.SessionHost`)
    over HTTP, from another process. ``url``: the gateway's base URL (``http://host:port``)."""

    def __init__(self, url: str, secret: str, timeout_s: float = 60.0) -> None:
        self.url = url.rstrip("/")
        self._client = httpx.Client(
            base_url=self.url, headers={CONTROL_HEADER: secret}, timeout=timeout_s, trust_env=False
        )
        self._session_ids: dict[str, str] = {}

    def _call(self, method: str, path: str, **kw: Any) -> Any:
        r = self._client.request(method, path, **kw)
        if r.status_code == 404 and "unknown or closed" in r.text:
            raise KeyError("unknown or closed session token")
        if r.status_code != 200:
            raise GatewayError(r.status_code, f"gateway control {method} {path}: HTTP {r.status_code}: {r.text[:300]}")
        return r.json()

    def open_session(
        self, rollout_id: str, *, token: str | None = None, budget: SessionBudget | None = None, seed: int | None = None
    ) -> str:
        body = {
            "rollout_id": rollout_id,
            "token": token,
            "budget": dataclasses.asdict(budget) if budget else None,
            "seed": seed,
        }
        got = self._call("POST", _PREFIX, json=body)
        self._session_ids[got["token"]] = got["session_id"]
        return str(got["token"])

    def session_id(self, token: str) -> str:
        try:
            return self._session_ids[token]
        except KeyError:
            raise KeyError("unknown or closed session token") from None

    def session_turns(self, token: str) -> list[Turn]:
        return [Turn.model_validate(t) for t in self._call("GET", f"{_PREFIX}/{token}/turns")]

    def session_report(self, token: str) -> SessionReport:
        return SessionReport(**self._call("GET", f"{_PREFIX}/{token}/report"))

    def close_session(self, token: str) -> list[Turn]:
        self._session_ids.pop(token, None)
        return [Turn.model_validate(t) for t in self._call("DELETE", f"{_PREFIX}/{token}")]

    def close(self) -> None:
        self._client.close()
