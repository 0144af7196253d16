"""What every engine served over HTTP shares — vLLM (:mod:`legorl.engines.vllm`) and SGLang
(:mod:`legorl.engines.sglang`) — so that a backend is only its wire format.

* **Requests**: each generation carries its own request id. Cancelling the awaiting task closes the
  connection and also posts the backend's abort for that id (shielded from the cancellation), so the
  sequence stops taking a batch slot even behind a proxy that keeps the connection.
* **Streaming** (backends with ``streams_tokens``): with ``on_tokens`` the request streams and each
  chunk's token ids reach the sink as the server sends them; the result is the same as unstreamed.
  A stream that breaks after tokens went out is not retried (the client has them): EngineError.
* **Retries** with exponential backoff and jitter on 429, 5xx and connection errors; another 4xx is
  the request's own fault and is raised at once (:class:`InvalidRequestError`,
  :class:`ContextLengthError`). Retries exhausted: :class:`EngineError` naming the last cause (the
  rollout records it as an environment failure, never as a zero reward).
* **Replica pool with session affinity**: a prompt goes to the replica its first
  :data:`AFFINITY_TOKENS` tokens hash to, so every turn of one agent conversation (same system prompt
  and task) reaches the replica whose prefix cache holds its history; a failing replica hands its
  requests to the next one.
* **Servers we started** (:class:`EngineServer`): one that dies fails the generations in it with its
  exit code and log, and is started again (same port) with the weights and version it had; requests
  wait for the restart instead of failing fast.
* **Weight sync by disk**: the trainer's state dict, put back into the checkpoint's names and layout
  (:func:`checkpoint_layout`: MoE experts per expert), is written as safetensors under
  ``weights_dir``; each replica then loads it by the backend's own route (``weight_sync="reload"``)
  or is started again from a model directory holding it (``"restart"``). A result reports the weight
  version in force when it finished, as the embedded engine does.
* **Adapter sync** (backends with ``adapter_sync``, engines built with ``serves_adapters``): a LoRA
  adapter (:class:`~legorl.models.lora.LoraAdapter`) is written as PEFT's adapter directory under
  ``weights_dir/v<version>`` (a few MB instead of the model) and each replica swaps it in by the
  backend's own route (:meth:`HTTPEngine._load_adapter`), paused as a weight sync is; from the first
  adapter sync on, every request names the adapter. A restarted server loads the current adapter.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import random
import shutil
import time
import uuid
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

import httpx

from legorl.engines.base import EngineHealth, GenerationResult, SamplingParams, TokenSink
from legorl.errors import ContextLengthError, EngineError, EngineOverloadedError, InvalidRequestError

if TYPE_CHECKING:
    from legorl.models.lora import LoraAdapter

log = logging.getLogger(__name__)

__all__ = [
    "AFFINITY_TOKENS",
    "EngineServer",
    "HTTPEngine",
    "checkpoint_layout",
    "meta_skeleton",
    "request_error",
    "save_weights",
]

AFFINITY_TOKENS = 256  # the prompt prefix that picks a replica: system prompt + task, typically
RETRY_STATUS = frozenset({429, 500, 502, 503, 504})


class EngineServer(Protocol):
    """A server process an engine started (and stops with it): :class:`legorl.engines.vllm_server.VLLMServer`."""

    model: Path

    @property
    def base_url(self) -> str: ...

    @property
    def started(self) -> bool:
        """It was started once (a dead server is one that was started and is no longer running)."""
        ...

    def start(self, timeout_s: float = ...) -> object: ...

    def stop(self, grace_s: float = ...) -> None: ...

    def running(self) -> bool: ...

    def exit_detail(self) -> str: ...


def save_weights(state_dict: Mapping[str, object], directory: Path) -> Path:
    """Write ``state_dict`` as ``directory/model.safetensors``, every name included. Tensors that share
    storage (tied embeddings) are written as copies: safetensors refuses shared storage, and vLLM's
    in-place reload must see ``lm_head.weight`` itself. Without it vLLM 0.32 reloads
    ``embed_tokens`` and puts the *old* tied head back (``ParallelLMHead: Failed to load weights``):
    the engine then samples from a model the trainer does not have (mean |Δ logprob| 0.05-0.07 after a
    5% change of the embeddings, against 5e-6 with the head written)."""
    import torch
    from safetensors.torch import save_file

    directory.mkdir(parents=True, exist_ok=True)
    seen: set[int] = set()
    tensors: dict[str, torch.Tensor] = {}
    for name, value in state_dict.items():
        if not isinstance(value, torch.Tensor):
            raise EngineError(f"weight {name!r} is not a tensor ({type(value).__name__})")
        key = value.untyped_storage().data_ptr()
        tensor = value.detach().to("cpu").contiguous()
        tensors[name] = tensor.clone() if key in seen else tensor
        seen.add(key)
    path = directory / "model.safetensors"
    save_file(tensors, str(path))
    return path


def checkpoint_layout(state_dict: Mapping[str, object], skeleton: Any) -> dict[str, object]:
    """``state_dict`` (a transformers module's own names and layout) as the model's checkpoint files
    hold it, which is what the servers load: transformers' own reverse of its load-time conversions,
    e.g. a Qwen3-MoE layer's fused ``experts.gate_up_proj`` split back into per-expert ``gate_proj``
    and ``up_proj``. ``skeleton``: the model on the meta device (only its conversion mapping is read).
    A model without conversions (Llama) comes back unchanged."""
    from transformers.core_model_loading import revert_weight_conversion

    return dict(revert_weight_conversion(skeleton, dict(state_dict)))  # type: ignore[arg-type]


def meta_skeleton(model_dir: Path) -> Any:
    """The model of ``model_dir`` on the meta device: its structure, no memory."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(str(model_dir), local_files_only=True)
    with torch.device("meta"):
        return AutoModelForCausalLM.from_config(config)  # type: ignore[no-untyped-call]


def _is_weights_file(name: str) -> bool:
    """The old weights (one file, shards or their index) must not sit beside the new ones."""
    return name.endswith((".safetensors", ".bin", ".pt", ".pth", ".index.json"))


def request_error(label: str, status: int, text: str) -> EngineError:
    """The error for a refused request (a status outside :data:`RETRY_STATUS`)."""
    low = text.lower()
    too_long = ("maximum context length", "max_model_len", "too long", "context length", "longer than")
    if status == 400 and any(s in low for s in too_long):
        return ContextLengthError(f"{label}: {text[:500]}")
    if 400 <= status < 500:
        return InvalidRequestError(f"{label} refused the request (HTTP {status}): {text[:500]}")
    return EngineError(f"{label}: HTTP {status}: {text[:500]}")


class HTTPEngine:
    """An :class:`~legorl.engines.base.Engine` served by HTTP servers at ``base_urls``; a backend
    subclass supplies its wire format (the hooks at the end).

    ``servers``: the processes this engine started (stopped with it); ``weights_dir``: where weight
    syncs are written (only the newest is kept); ``model_dir``: the served model's directory, whose
    config says how the trainer's state dict maps onto checkpoint names (None: it is used as is);
    ``work_dir``: removed on close (weights, server logs) unless a server died, whose log then stays."""

    label: ClassVar[str] = "engine"  # the backend's name in messages
    generate_path: ClassVar[str] = ""

    def __init__(
        self,
        base_urls: Sequence[str],
        *,
        model_name: str,
        tokenizer: Any,
        max_context: int,
        weights_dir: str | Path,
        servers: Sequence[EngineServer] = (),
        model_dir: str | Path | None = None,
        work_dir: str | Path | None = None,
        retries: int = 4,
        backoff_s: float = 0.5,
        request_timeout_s: float = 600.0,
        transport: httpx.AsyncBaseTransport | None = None,
        ignore_eos: bool = False,
        weight_sync: str = "reload",
        seeded_sampling: bool = True,
        serves_adapters: bool = False,
    ):
        if not base_urls:
            raise EngineError(f"a {self.label} engine needs at least one server URL")
        self.base_urls = [u.rstrip("/") for u in base_urls]
        self.model_name = model_name
        self.tokenizer = tokenizer
        self.max_context = max_context
        self.weights_dir = Path(weights_dir)
        self.servers = list(servers)
        self.work_dir = Path(work_dir) if work_dir is not None else None
        self.model_dir = Path(model_dir) if model_dir is not None else None
        self._skeleton: Any = None
        self.retries = retries
        self.backoff_s = backoff_s
        self._client = httpx.AsyncClient(
            timeout=httpx.Timeout(request_timeout_s, connect=10.0), transport=transport, trust_env=False
        )
        self._version = 0
        self._active = 0
        self._last_error = ""
        self._sync_lock = asyncio.Lock()
        self._reviving: dict[str, asyncio.Future[None]] = {}
        self.ignore_eos = ignore_eos  # benchmarks: every request runs to max_tokens
        self.seeded_sampling = (
            seeded_sampling  # False: the servers fail on seeded requests (engines.base.honours_seeds)
        )
        if weight_sync not in ("reload", "restart"):
            raise EngineError(f"weight_sync must be 'reload' or 'restart', got {weight_sync!r}")
        if weight_sync == "restart" and (model_dir is None or {s.base_url for s in self.servers} < set(self.base_urls)):
            raise EngineError("weight_sync 'restart' needs model_dir and servers this engine started for every URL")
        self.weight_sync = weight_sync
        if serves_adapters and not self.adapter_sync:
            raise EngineError(f"the {self.label} engine does not sync LoRA adapters")
        # the servers take LoRA adapters: update_adapter swaps them (else the trainer sends merged weights)
        self.serves_adapters = serves_adapters
        self._adapter_dir: Path | None = None  # the adapter every request names (None: the base model)
        self.stats: dict[str, float] = {"requests": 0, "retries": 0, "aborts": 0, "weight_syncs": 0, "restarts": 0}

    # ------------------------------------------------------------------ Engine

    @property
    def weight_version(self) -> int:
        return self._version

    def replica_order(self, prompt_token_ids: Sequence[int]) -> list[str]:
        """The replicas to try, the affine one first."""
        prefix = ",".join(map(str, prompt_token_ids[:AFFINITY_TOKENS])).encode()
        first = int.from_bytes(hashlib.blake2b(prefix, digest_size=8).digest(), "big") % len(self.base_urls)
        return self.base_urls[first:] + self.base_urls[:first]

    streams_tokens: ClassVar[bool] = False  # a backend whose _read_stream parses its token stream sets it

    async def generate(
        self, prompt_token_ids: list[int], sampling: SamplingParams, *, on_tokens: TokenSink | None = None
    ) -> GenerationResult:
        if not prompt_token_ids:
            raise InvalidRequestError("the prompt has no tokens")
        if len(prompt_token_ids) >= self.max_context:
            raise ContextLengthError(
                f"the prompt has {len(prompt_token_ids)} tokens; the engine's context is {self.max_context}"
            )
        if len(prompt_token_ids) + sampling.max_tokens > self.max_context:  # cap, as the embedded engine does
            sampling = replace(sampling, max_tokens=max(1, self.max_context - len(prompt_token_ids)))
        request_id = f"legorl-{uuid.uuid4().hex}"
        body = self._body(prompt_token_ids, sampling, request_id)
        streamed = [0]  # tokens handed to on_tokens: once any left, a failure can no longer be retried
        sink: TokenSink | None = None
        if on_tokens is not None and self.streams_tokens:
            body = self._stream_body(body)

            def sink(ids: list[int]) -> None:
                streamed[0] += len(ids)
                on_tokens(ids)

        self._active += 1
        self.stats["requests"] += 1
        t0 = time.perf_counter()
        url = ""
        try:
            for attempt, url in enumerate(self._attempts(prompt_token_ids)):
                reviving = self._reviving.get(url)
                if reviving is not None:  # a restart is under way: wait for it rather than fail fast
                    await asyncio.shield(reviving)
                try:
                    status, payload, text = await self._send(url, body, sink)
                except httpx.TransportError as e:
                    cause = f"{url}: {type(e).__name__}: {e}"
                    server = self._server_at(url)
                    if server is not None and not server.running():
                        # our server died (with this request in it): this generation is lost; the pool
                        # starts the server again for the next ones
                        self._last_error = cause = f"{url}: the {self.label} server died ({server.exit_detail()})"
                        self._revive(server)
                        raise EngineError(cause) from e
                else:
                    if status == 200:
                        result = self._result(payload, len(prompt_token_ids), time.perf_counter() - t0)
                        self._last_error = ""  # healthy again
                        return result
                    cause = f"{url}: HTTP {status}: {text[:500]}"
                    if status not in RETRY_STATUS:
                        raise request_error(self.label, status, text)
                self._last_error = cause
                if streamed[0]:  # the client has these tokens already: a retry would sample others
                    raise EngineError(f"{self.label} stream broke after {streamed[0]} tokens: {cause}")
                if attempt >= self.retries:
                    if "HTTP 429" in cause:
                        raise EngineOverloadedError(
                            f"{self.label} stayed overloaded after {attempt + 1} tries: {cause}"
                        )
                    raise EngineError(f"{self.label} failed after {attempt + 1} tries: {cause}")
                self.stats["retries"] += 1
                delay = self.backoff_s * 2**attempt * (0.5 + random.random())
                log.warning(
                    "%s request %s failed (%s); retry %d in %.1fs", self.label, request_id, cause, attempt + 1, delay
                )
                await asyncio.sleep(delay)
            raise AssertionError("unreachable")
        except asyncio.CancelledError:
            if url:
                self.stats["aborts"] += 1
                # shielded: the abort must go out although this task is being cancelled
                await asyncio.shield(self._abort_quietly(url, request_id))
            raise
        finally:
            self._active -= 1

    async def _send(self, url: str, body: dict[str, Any], sink: TokenSink | None) -> tuple[int, Any, str]:
        """One generate request -> (HTTP status, the JSON payload when 200, the body text otherwise).
        With ``sink`` the request streams: each chunk's tokens reach the sink as they arrive, and the
        payload is the streamed chunks put back into the non-streamed shape (:meth:`_read_stream`)."""
        if sink is None:
            response = await self._client.post(f"{url}{self.generate_path}", json=body)
            if response.status_code != 200:
                return response.status_code, None, response.text
            return 200, response.json(), ""
        async with self._client.stream("POST", f"{url}{self.generate_path}", json=body) as response:
            if response.status_code != 200:
                return response.status_code, None, (await response.aread()).decode("utf-8", "replace")
            return 200, await self._read_stream(response.aiter_lines(), sink), ""

    def _server_at(self, url: str) -> EngineServer | None:
        return next((s for s in self.servers if s.base_url == url), None)

    def _revive(self, server: EngineServer) -> None:
        """Start a dead server again (same port), with the weights and version it had."""
        if server.base_url in self._reviving:
            return

        async def revive() -> None:
            try:
                await asyncio.to_thread(server.start)
                if self._adapter_dir is not None:
                    await self._load_adapter(server.base_url, self._adapter_dir, self._version)
                elif self._version and self.weight_sync == "reload":
                    await self._load(server.base_url, self.weights_dir / f"v{self._version:06d}", self._version)
                elif self._version:  # it started from the newest weights' directory
                    await self._set_version(server.base_url, self._version)
                self.stats["restarts"] += 1
                log.warning("%s server %s restarted (weights v%d)", self.label, server.base_url, self._version)
            except Exception as e:  # the next request reports the dead server again
                log.error("%s server %s did not restart: %s", self.label, server.base_url, e)
            finally:
                self._reviving.pop(server.base_url, None)

        self._reviving[server.base_url] = asyncio.ensure_future(revive())

    def _attempts(self, prompt_token_ids: Sequence[int]) -> Iterator[str]:
        order = self.replica_order(prompt_token_ids)
        for attempt in range(self.retries + 1):
            yield order[attempt % len(order)]

    async def _abort_quietly(self, url: str, request_id: str) -> None:
        with contextlib.suppress(httpx.HTTPError, EngineError):
            await self._abort(url, request_id)

    def parse_version(self, value: object) -> int:
        """A served version as an int: ours are decimal strings; a server we never synced names its
        weights ``"default"`` (or nothing): the weights it loaded, our version 0 until a sync."""
        try:
            return int(str(value))
        except ValueError:
            return self._version

    async def update_weights(self, state_dict: Mapping[str, object], version: int | None = None) -> int:
        async with self._sync_lock:
            new = self._version + 1 if version is None else int(version)
            target = self.weights_dir / f"v{new:06d}"
            await asyncio.to_thread(self._save, state_dict, target)
            for url in self.base_urls:
                if self.weight_sync == "reload":
                    await self._load(url, target, new)
                else:
                    await self._restart(url, target, new)
            self._version = new
            self.stats["weight_syncs"] += 1
            for old in self.weights_dir.glob("v*"):  # the servers hold the weights now
                if old != target:
                    shutil.rmtree(old, ignore_errors=True)
            return new

    async def update_adapter(self, adapter: LoraAdapter, version: int | None = None) -> int:
        """Swap the servers' LoRA adapter for ``adapter`` (written under ``weights_dir``), named
        ``version``; requests from then on (and those in flight, after the swap) run with it."""
        if not self.serves_adapters:
            raise EngineError(f"the {self.label} servers were started without LoRA support (serves_adapters)")
        async with self._sync_lock:
            new = self._version + 1 if version is None else int(version)
            target = self.weights_dir / f"v{new:06d}"
            base = str(self.model_dir) if self.model_dir is not None else self.model_name
            await asyncio.to_thread(adapter.save, target, base)
            for url in self.base_urls:
                await self._load_adapter(url, target, new)
            self._version, self._adapter_dir = new, target
            self.stats["weight_syncs"] += 1
            self.stats["adapter_bytes"] = float(adapter.nbytes)
            for old in self.weights_dir.glob("v*"):
                if old != target:
                    shutil.rmtree(old, ignore_errors=True)
            return new

    def _save(self, state_dict: Mapping[str, object], target: Path) -> None:
        if self.model_dir is not None:  # the trainer's module layout -> the checkpoint's
            if self._skeleton is None:
                self._skeleton = meta_skeleton(self.model_dir)
            state_dict = checkpoint_layout(state_dict, self._skeleton)
        save_weights(state_dict, target)
        if self.model_dir is not None and (self.weight_sync == "restart" or self.whole_model_dir):
            # a whole model directory: what a server starts or reloads from (config, tokenizer, weights)
            for f in self.model_dir.iterdir():
                if f.is_file() and not f.name.startswith(".") and not _is_weights_file(f.name):
                    shutil.copy2(f, target / f.name)

    async def _restart(self, url: str, target: Path, version: int) -> None:
        """Stop the server at ``url``, start it from ``target`` (same port), name the weights ``version``."""
        server = self._server_at(url)
        if server is None:
            raise EngineError(f"weight_sync 'restart' needs servers this engine started; {url} is not one")
        await asyncio.to_thread(server.stop)
        server.model = target
        await asyncio.to_thread(server.start)
        self.stats["restarts"] += 1
        await self._set_version(url, version)

    async def set_version(self, version: int) -> None:
        """Name the weights the servers hold now (a fresh server: version 0)."""
        for url in self.base_urls:
            await self._set_version(url, version)
        self._version = version

    async def _post(self, url: str, path: str, **kwargs: Any) -> httpx.Response:
        try:
            response = await self._client.post(f"{url}{path}", **kwargs)
        except httpx.TransportError as e:
            raise EngineError(f"{self.label} {url}{path}: {type(e).__name__}: {e}") from e
        if response.status_code != 200:
            raise EngineError(f"{self.label} {url}{path}: HTTP {response.status_code}: {response.text[:500]}")
        return response

    def health(self) -> EngineHealth:
        """From what the engine knows, without a network call: the gateway answers ``/health`` from
        its event loop, which a probe of a hung server would stall. Not ok while a server we started
        is dead or restarting, or while the last request failed (until one succeeds)."""
        problems = [f"{s.base_url}: server process exited ({s.exit_detail()})" for s in self.servers if not s.running()]
        problems += [f"{url}: restarting" for url in self._reviving]
        if self._last_error:
            problems.append(f"last request failed: {self._last_error}")
        return EngineHealth(
            ok=not problems,
            model=self.model_name,
            weight_version=self._version,
            active_requests=self._active,
            detail="; ".join(dict.fromkeys(problems)),
        )

    async def close(self) -> None:
        for revive in list(self._reviving.values()):
            revive.cancel()
        try:
            await self._client.aclose()
        finally:
            died = any(s.started and not s.running() for s in self.servers)
            for server in self.servers:
                await asyncio.to_thread(server.stop)
            if self.work_dir is not None:
                shutil.rmtree(self.work_dir / "weights" if died else self.work_dir, ignore_errors=True)

    # ------------------------------------------------------------------ the backend's wire format

    def optional_sampling(self, sampling: SamplingParams, seed_key: str) -> dict[str, Any]:
        """The sampling fields sent only when set: the seed (under the backend's name), stop token ids,
        and ``ignore_eos`` (benchmarks)."""
        params: dict[str, Any] = {}
        if sampling.seed is not None:
            params[seed_key] = sampling.seed
        if sampling.stop_token_ids:
            params["stop_token_ids"] = list(sampling.stop_token_ids)
        if self.ignore_eos:
            params["ignore_eos"] = True
        return params

    whole_model_dir: ClassVar[bool] = False  # a reload reads a model directory, not the weights file alone
    adapter_sync: ClassVar[bool] = False  # the backend implements _load_adapter

    def _body(self, prompt_token_ids: list[int], sampling: SamplingParams, request_id: str) -> dict[str, Any]:
        """The generate request's JSON body."""
        raise NotImplementedError

    def _stream_body(self, body: dict[str, Any]) -> dict[str, Any]:
        """The same request, streamed (only for backends with ``streams_tokens``)."""
        raise NotImplementedError

    async def _read_stream(self, lines: AsyncIterator[str], sink: TokenSink) -> Any:
        """Read a streamed answer's lines, hand each chunk's new tokens to ``sink``, and return the
        whole answer in the shape :meth:`_result` reads. An error the server reports inside the
        stream raises :class:`EngineError`."""
        raise NotImplementedError

    def _result(self, payload: dict[str, Any], prompt_tokens: int, elapsed: float) -> GenerationResult:
        """A 200 answer of the generate route as a result."""
        raise NotImplementedError

    async def _abort(self, url: str, request_id: str) -> None:
        """Stop ``request_id`` on the server at ``url``."""
        raise NotImplementedError

    async def _load(self, url: str, weights: Path, version: int) -> None:
        """Pause ``url`` (requests in flight are kept), load ``weights`` in place, name them ``version``, resume."""
        raise NotImplementedError

    async def _set_version(self, url: str, version: int) -> None:
        """Name the weights the server at ``url`` holds ``version`` (requests in flight go on)."""
        raise NotImplementedError

    async def _load_adapter(self, url: str, adapter_dir: Path, version: int) -> None:
        """Pause ``url``, swap in the LoRA adapter of ``adapter_dir`` (PEFT's format), name it
        ``version``, resume (backends with ``adapter_sync``)."""
        raise NotImplementedError
