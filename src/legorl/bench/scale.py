"""``legorl bench scale``: how many rollouts per second the training process (the coordinator) can
serve to Ray rollout workers, with a zero-cost engine, at 1, 4, 16 and 64 simulated workers on a
local Ray cluster; and where it stops growing.

What a simulated rollout does is what a real one asks of the coordinator, without sandboxes or a
model: the worker opens the session over the gateway's control routes, makes ``calls`` chat
completions through its relay socket (the conversation growing each turn, as an agent's does), reads
the session's Turns, builds the training samples, closes the session and returns the ``Rollout``
record through Ray; the coordinator appends it to the run store. The engine answers instantly
(:class:`~legorl.bench.gateway.ZeroCostEngine`), so every second measured is coordination:
gateway request handling and token alignment, session control, Ray's dispatch and result transfer,
the store. A simulated worker is one stream of rollouts back to back; they are hosted by up to
``processes`` Ray actors (64 real worker processes would not fit a laptop), each with its own relay.

Result keys (:data:`legorl.bench.schema.RESULT_KEYS` ``"scale"``): ``engine``, ``cpu_count``,
``processes``, ``calls_per_rollout``, ``window_s``, ``workers`` (the worker counts measured),
``rollouts_per_s``, ``gateway_calls_per_s``, ``rollout_p50_ms``, ``coordinator_cpu_ms_per_rollout``
(the training process's CPU time per rollout: where its cost grows), each a map from worker count;
``saturates_at_workers``: the first count whose throughput is under 1.1x the previous one's (null:
still growing at the largest).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

WORKER_COUNTS = (1, 4, 16, 64)


class SimulatedRolloutHost:
    """A Ray actor hosting simulated rollout workers: a relay to the gateway and its control API."""

    def __init__(self, gateway_url: str, secret: str) -> None:
        self.gateway_url, self.secret = gateway_url, secret

    async def start(self) -> int:
        import httpx

        from legorl.gateway.control import RemoteGateway
        from legorl.gateway.relay import Relay

        where = urlsplit(self.gateway_url)
        self.dir = Path(tempfile.mkdtemp(prefix="legorl-s-", dir="/tmp"))
        self.relay = await Relay(self.dir / "gw.sock", where.hostname or "127.0.0.1", where.port or 80).start()
        self.remote = RemoteGateway(self.gateway_url, self.secret)
        transport = httpx.AsyncHTTPTransport(uds=str(self.relay.socket_path))
        self.client = httpx.AsyncClient(transport=transport, base_url="http://gateway", timeout=60, trust_env=False)
        return os.getpid()

    async def rollout(self, rollout_id: str, token: str, calls: int) -> Any:
        from legorl.trajectory.builder import build_samples
        from legorl.trajectory.records import Rollout

        await asyncio.to_thread(self.remote.open_session, rollout_id, token=token)
        messages: list[dict[str, str]] = [
            {"role": "system", "content": "You are a coding agent. " * 20},
            {"role": "user", "content": "Fix the failing test in the repository."},
        ]
        headers = {"Authorization": f"Bearer {token}"}
        for turn in range(calls):
            r = await self.client.post(
                "/v1/chat/completions", json={"model": "zero", "messages": messages}, headers=headers
            )
            r.raise_for_status()
            reply = r.json()["choices"][0]["message"]["content"]
            messages += [{"role": "assistant", "content": reply}, {"role": "user", "content": f"output {turn}"}]
        turns = await asyncio.to_thread(self.remote.session_turns, token)
        await asyncio.to_thread(self.remote.close_session, token)
        return Rollout(
            rollout_id=rollout_id,
            session_id=rollout_id,
            task_id="simulated",
            harness="simulated",
            sandbox="none",
            samples=build_samples(turns, rollout_id),
        )

    async def stop(self) -> None:
        await self.client.aclose()
        await self.relay.stop()
        self.remote.close()
        shutil.rmtree(self.dir, ignore_errors=True)


def run_scale_bench(
    out: Path,
    workers: tuple[int, ...] = WORKER_COUNTS,
    calls: int = 4,
    window_s: float = 6.0,
    processes: int = 4,
    num_cpus: int | None = None,
) -> dict[str, Any]:
    return asyncio.run(_bench(out, workers, calls, window_s, processes, num_cpus))


async def _bench(
    out: Path, workers: tuple[int, ...], calls: int, window_s: float, processes: int, num_cpus: int | None
) -> dict[str, Any]:
    import psutil
    import ray

    from legorl.bench.gateway import zero_engine_for
    from legorl.cluster import start_local_ray
    from legorl.config import EngineConfig
    from legorl.engines.server_process import say
    from legorl.gateway.control import enable_control, new_control_secret
    from legorl.gateway.renderer import load_smollm2_gguf_tokenizer
    from legorl.gateway.sessions import new_token
    from legorl.loop.rollout import new_rollout_id
    from legorl.loop.stack import open_gateway_stack

    tok = load_smollm2_gguf_tokenizer()
    shutil.rmtree(out, ignore_errors=True)
    me = psutil.Process()
    result: dict[str, Any] = {
        "engine": "zero-cost",
        "cpu_count": os.cpu_count(),
        "processes": processes,
        "calls_per_rollout": calls,
        "window_s": window_s,
        "workers": list(workers),
        "rollouts_per_s": {},
        "gateway_calls_per_s": {},
        "rollout_p50_ms": {},
        "coordinator_cpu_ms_per_rollout": {},
    }
    async with open_gateway_stack(
        EngineConfig(),
        engine_instance=zero_engine_for(tok, 24),
        tokenizer=tok,
        model_name="zero",
        run_dir=out / "run",
        unix_socket=False,
    ) as stack:
        secret = new_control_secret()
        enable_control(stack.gateway, secret)
        store = stack.run_store()
        start_local_ray(num_cpus, 256)
        hosts: list[Any] = []
        try:
            actor = ray.remote(SimulatedRolloutHost).options(num_cpus=0)
            hosts = [actor.remote(stack.server.root_url, secret) for _ in range(processes)]
            await asyncio.gather(*[h.start.remote() for h in hosts])
            say(f"bench scale: {processes} worker processes on a local Ray cluster; {calls} calls per rollout")
            for n in workers:
                latencies: list[float] = []
                deadline = time.monotonic() + window_s

                async def worker(i: int, until: float = deadline, lat: list[float] = latencies) -> int:
                    done = 0
                    while time.monotonic() < until:
                        t0 = time.monotonic()
                        rollout = await hosts[i % len(hosts)].rollout.remote(new_rollout_id(), new_token(), calls)
                        store.append_rollout(rollout)
                        lat.append(time.monotonic() - t0)
                        done += 1
                    return done

                cpu0, t0 = sum(me.cpu_times()[:2]), time.monotonic()
                done = sum(await asyncio.gather(*[worker(i) for i in range(n)]))
                wall, cpu = time.monotonic() - t0, sum(me.cpu_times()[:2]) - cpu0
                key = str(n)
                result["rollouts_per_s"][key] = round(done / wall, 2)
                result["gateway_calls_per_s"][key] = round(done * calls / wall, 1)
                result["rollout_p50_ms"][key] = round(1000 * statistics.median(latencies), 1) if latencies else None
                result["coordinator_cpu_ms_per_rollout"][key] = round(1000 * cpu / max(done, 1), 2)
                say(
                    f"  {n:>3} workers: {done / wall:7.1f} rollouts/s, p50 {result['rollout_p50_ms'][key]} ms, "
                    f"coordinator CPU {result['coordinator_cpu_ms_per_rollout'][key]} ms/rollout"
                )
        finally:
            await asyncio.gather(*[h.stop.remote() for h in hosts], return_exceptions=True)
            for h in hosts:
                ray.kill(h)
            ray.shutdown()
    rates = [result["rollouts_per_s"][str(n)] for n in workers]
    result["saturates_at_workers"] = next(
        (workers[i] for i in range(1, len(workers)) if rates[i] < 1.1 * rates[i - 1]), None
    )
    return result
