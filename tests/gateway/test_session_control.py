"""The gateway's session control over HTTP (what Ray rollout workers use), the Unix-socket relay
their sandboxes reach it through, and per-session sampling seeds."""

from __future__ import annotations

import asyncio
import dataclasses

import httpx
import pytest
from gw_helpers import FakeEngine, LiveServer

from legorl.errors import GatewayError
from legorl.gateway.control import CONTROL_HEADER, RemoteGateway, enable_control, new_control_secret
from legorl.gateway.relay import Relay
from legorl.gateway.sessions import SessionBudget


class SeedRecordingEngine(FakeEngine):
    """A test double that also records each call's sampling seed."""

    def __init__(self, tokenizer, replies=None):
        super().__init__(tokenizer, replies)
        self.seeds: list[int | None] = []

    async def generate(self, prompt_token_ids, sampling):
        self.seeds.append(sampling.seed)
        return await super().generate(prompt_token_ids, sampling)


@pytest.fixture
def live(smol_tok, tmp_path):
    server = LiveServer(SeedRecordingEngine(smol_tok), smol_tok, tmp_path / "run")
    secret = new_control_secret()
    enable_control(server.gw, secret)
    yield server, secret
    server.close()


def _chat(live_server, token: str, text: str = "hi", seed: int | None = None) -> dict:
    body = {"model": "fake", "messages": [{"role": "user", "content": text}], "max_tokens": 8}
    if seed is not None:
        body["seed"] = seed
    r = httpx.post(
        f"{live_server.srv.base_url}/chat/completions",
        json=body,
        headers={"Authorization": f"Bearer {token}"},
        timeout=30,
        trust_env=False,
    )
    r.raise_for_status()
    return r.json()


def test_control_routes_answer_404_without_the_secret(live):
    server, secret = live
    token = server.gw.open_session("r-own")
    root = server.srv.root_url
    attempts = [
        ("POST", "/legorl/sessions", {"rollout_id": "r-x"}),
        ("GET", f"/legorl/sessions/{token}/turns", None),
        ("GET", f"/legorl/sessions/{token}/report", None),
        ("DELETE", f"/legorl/sessions/{token}", None),
    ]
    for headers in ({}, {CONTROL_HEADER: ""}, {CONTROL_HEADER: "x" * 64}, {"Authorization": f"Bearer {token}"}):
        for method, path, body in attempts:
            r = httpx.request(method, root + path, json=body, headers=headers, trust_env=False)
            # what any unknown route answers, in the dialect's shape: nothing says the route exists
            assert r.status_code == 404 and r.json()["error"]["code"] == "not_found", (method, path, r.text)
    assert server.gw.session(token) is not None and len(server.gw.sessions) == 1  # nothing opened or closed
    with pytest.raises(ValueError):
        enable_control(server.gw, "short")


def test_a_remote_gateway_opens_reads_and_closes_sessions_like_the_gateway(live):
    server, secret = live
    remote = RemoteGateway(server.srv.root_url, secret)
    try:
        budget = SessionBudget(max_turns=1, turn_slack=0, max_total_tokens=100)
        token = remote.open_session("r-remote", token="legorl-" + "a" * 48, budget=budget, seed=7)
        assert token == "legorl-" + "a" * 48 and remote.session_id(token) == server.gw.session_id(token) == "r-remote"
        _chat(server, token)
        refused = httpx.post(
            f"{server.srv.base_url}/chat/completions",
            json={"model": "fake", "messages": [{"role": "user", "content": "again"}]},
            headers={"Authorization": f"Bearer {token}"},
            trust_env=False,
        )
        assert refused.status_code in (403, 429)  # the budget the remote side gave is enforced
        mine = [t.model_dump(mode="json") for t in server.gw.session_turns(token)]
        assert [t.model_dump(mode="json") for t in remote.session_turns(token)] == mine and len(mine) == 2
        report = remote.session_report(token)
        assert dataclasses.asdict(report) == dataclasses.asdict(server.gw.session_report(token))
        assert report.exhausted and report.budget["max_turns"] == 1
        assert [t.model_dump(mode="json") for t in remote.close_session(token)] == mine
        with pytest.raises(KeyError):
            remote.session_turns(token)
        with pytest.raises(KeyError):
            remote.session_report(token)
        with pytest.raises(GatewayError, match="HTTP 400"):
            remote.open_session("")
        with pytest.raises(GatewayError, match="HTTP 404"):  # the wrong secret: the route does not exist
            RemoteGateway(server.srv.root_url, "y" * 64).open_session("r-y")
    finally:
        remote.close()


def test_a_session_seed_fixes_every_calls_seed_whatever_the_request_asks(live):
    server, _ = live
    engine = server.stack.engine
    a = server.gw.open_session("r-a", seed=11)
    b = server.gw.open_session("r-b", seed=11)  # another rollout with the same seed
    c = server.gw.open_session("r-c", seed=12)
    free = server.gw.open_session("r-free")
    for token, asked in ((a, None), (a, 5), (b, 99), (b, None), (c, None), (free, 5), (free, None)):
        _chat(server, token, seed=asked)
    seeds = engine.seeds
    session = server.gw.session(a)
    assert seeds[:2] == [session.call_seed(0), session.call_seed(1)]  # the request's seed 5 is overridden
    assert seeds[0] != seeds[1]  # each call its own
    assert seeds[2:4] == seeds[:2]  # same session seed, same turn -> same seed
    assert seeds[4] not in seeds[:4]
    assert seeds[5:] == [5, None]  # a session without a seed: the request's own
    # an engine that cannot take seeds (vLLM's CPU build dies on seeded requests in a batch) gets none
    engine.seeded_sampling = False
    for token, asked in ((a, None), (free, 5)):
        _chat(server, token, seed=asked)
    assert seeds[7:] == [None, None]


async def test_the_relay_carries_requests_and_streams_to_the_gateway(live, tmp_path):
    server, _ = live
    token = server.gw.open_session("r-relay")
    body = {
        "model": "fake",
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": 8,
        "stream": True,
    }
    headers = {"Authorization": f"Bearer {token}"}
    async with Relay(tmp_path / "gw.sock", "127.0.0.1", server.srv.port):
        transport = httpx.AsyncHTTPTransport(uds=str(tmp_path / "gw.sock"))
        async with httpx.AsyncClient(transport=transport, base_url="http://gateway", trust_env=False) as c:
            assert (await c.get("/health")).json()["ok"]
            chunks = []
            async with c.stream("POST", "/v1/chat/completions", json=body, headers=headers) as r:
                assert r.status_code == 200
                chunks = [line async for line in r.aiter_lines() if line.startswith("data:")]
            assert chunks[-1] == "data: [DONE]" and len(chunks) >= 3
            # many connections at once, each answered
            many = await asyncio.gather(*[c.get("/v1/models") for _ in range(20)])
            assert all(r.status_code == 200 for r in many)
    assert not (tmp_path / "gw.sock").exists()
    assert len(server.gw.session_turns(token)) == 1
