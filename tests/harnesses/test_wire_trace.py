"""The native-harness tests' wire trace (wire_trace.py) on the real gateway app: a streamed Responses
call is recorded whole, in order, ending with ``response.completed``; a run's evidence says how long
the client stayed silent before it was killed."""

from __future__ import annotations

import httpx
import pytest
from wire_trace import Wire, WireTrace

from legorl.engines.scripted import ScriptedEngine
from legorl.gateway.app import Gateway
from legorl.gateway.renderer import ChatTemplateRenderer, load_smollm2_gguf_tokenizer


@pytest.fixture(scope="module")
def tok():
    return load_smollm2_gguf_tokenizer()


async def test_a_streamed_response_is_recorded_whole_and_a_silent_client_is_measured(tok):
    gw = Gateway(ScriptedEngine(tok, lambda prompt: "Hello there."), ChatTemplateRenderer(tok), model_name="m")
    wire = Wire()
    gw.app.add_middleware(WireTrace, sink=wire)
    token = gw.open_session("r-wire")
    transport = httpx.ASGITransport(app=gw.app)
    async with httpx.AsyncClient(transport=transport, base_url="http://gw") as client:
        body = {"model": "m", "input": "hi", "stream": True}
        r = await client.post("/v1/responses", json=body, headers={"Authorization": f"Bearer {token}"})
        assert r.status_code == 200
        await client.get("/health")
    [call] = wire.model_calls()
    assert call.delivered and call.status == 200 and call.error is None
    assert call.events[0] == "response.created" and call.final_event() == "response.completed"
    assert "response.output_text.delta" in call.events and wire.all_delivered()
    assert len(wire.exchanges) == 2  # /health is traced but is no model call
    ended = wire.last_end()
    assert ended is not None
    ev = wire.evidence(killed_at=ended + 42.0, t0=call.received_at)
    assert ev["model_calls"] == 1 and ev["all_delivered"] and ev["idle_before_kill_s"] == 42.0
    assert "delivered (response.completed)" in ev["calls"][0]
