"""A closed gateway leaves nothing alive: its engine (and so the model) is freed with it."""

from __future__ import annotations

import gc
import weakref

from gw_helpers import InProcessGateway


def test_a_closed_gateway_and_its_engine_are_freed(smol_tok, tmp_path):
    live = InProcessGateway(smol_tok, tmp_path / "run")
    token = live.gw.open_session("r0")
    chat = live.post("chat", token, {"model": "m", "messages": [{"role": "user", "content": "hi"}]})
    assert chat.status_code == 200
    for path in ("/health", "/v1/models", "/v1/models/m", "/"):  # every route has served once
        assert live.loop.run_until_complete(live.http.get(path)).status_code == 200
    gateway, engine = weakref.ref(live.gw), weakref.ref(live.gw.engine)
    live.close()
    del live
    gc.collect()
    # FastAPI caches every endpoint callable process-wide: a route bound to the gateway would keep
    # it, and the model its engine holds, for the rest of the process
    assert gateway() is None and engine() is None
