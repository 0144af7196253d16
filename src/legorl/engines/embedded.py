"""Embedded transformers engine: token-in / token-out generation inside this process.

How it works
------------
* One background worker thread owns the model and runs an *iteration-level* scheduler: at every
  step it (1) drops cancelled requests, (2) admits waiting requests (up to ``max_batch_size``
  rows): the batch gets a row for each, then each is prefilled on its own straight into its row
  (batch of one, no padding, chunked every ``prefill_chunk`` tokens; a prefix-cache hit prefills
  only the remainder) and its first token is sampled, (3) runs one decode step for every row
  of the batch at once and (4) retires finished rows.
* The running batch keeps, per layer, preallocated KV buffers ``[B, kv_heads, capacity, head_dim]``
  that grow geometrically (no per-step ``torch.cat``), never past what the rows can still
  generate. Rows are left-padded to a common width; each
  forward gets an explicit additive 4-D attention mask (pad columns masked) and explicit
  ``position_ids`` (a row's positions count only its real tokens), so padding never changes what a
  row computes (up to float rounding). When rows leave, all-padding columns are trimmed.
* Sampling, per row, in fp32: ``logits / T`` → top-k → top-p → ``log_softmax`` → one uniform draw
  from the request's own ``torch.Generator`` (seeded from ``SamplingParams.seed``, else random)
  inverted through the CDF. The returned logprob is that of the sampled token under exactly this
  filtered distribution. ``temperature == 0`` is greedy (argmax); its logprob is then taken from the
  *unscaled, unfiltered* distribution ``log_softmax(logits)``. Because every request consumes its
  own generator one draw per token, a seed reproduces the same tokens alone or in any batch (barring
  float-rounding ties in the logits).
* Prefix KV cache: an LRU bounded in tokens (``prefix_cache_tokens``) of KV rows (padding stripped)
  of prompts after prefill and of finished sequences. A new prompt that shares a prefix with a stored
  sequence reuses the longest common prefix (at most ``len(prompt) - 1`` tokens) and only prefills
  the rest; ``GenerationResult.cached_prompt_tokens`` reports how many. Cleared on weight updates.
* A trainer in this process may train the served module itself (:meth:`EmbeddedEngine.served_module`,
  :meth:`EmbeddedEngine.paused`: no step runs while it changes the weights); its weight sync then
  copies nothing.
* Weight updates take the step lock (the worker pauses between steps), copy tensors in place, bump
  the version and clear the prefix cache; a LoRA adapter update (:meth:`EmbeddedEngine.update_adapter`)
  the same, after injecting the adapter's layers into the module on the first one. Requests in flight continue with the new weights; their
  result reports the version in force when they finished.
* ``prompt + max_tokens`` beyond ``max_context`` caps ``max_tokens``; a prompt that alone fills the
  context raises :class:`ContextLengthError`.

The asyncio side (``generate``) only validates, enqueues and awaits a future the worker resolves
through ``loop.call_soon_threadsafe``; any loop may call it. With ``on_tokens`` each sampled token
is handed to that sink the same way, as soon as its step ends (true streaming; the result is
unchanged). ``torch.set_num_threads`` is left to the caller.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import operator
import random
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

import torch
from transformers.cache_utils import Cache, DynamicLayer

from legorl.engines.base import EngineHealth, FinishReason, GenerationResult, SamplingParams, TokenSink
from legorl.errors import (
    ContextLengthError,
    EngineError,
    EngineOverloadedError,
    InvalidRequestError,
    LegoRLError,
    ModelError,
)

if TYPE_CHECKING:
    from legorl.models.lora import LoraAdapter

log = logging.getLogger(__name__)

__all__ = ["EmbeddedEngine", "sample_token"]


# --------------------------------------------------------------------------- sampling


def sample_token(
    logits: torch.Tensor,
    temperature: float = 1.0,
    top_k: int = 0,
    top_p: float = 1.0,
    generator: torch.Generator | None = None,
) -> tuple[int, float]:
    """Sample one token from 1-D ``logits``; returns ``(token, logprob)``.

    The logprob is exact under the distribution sampled from (after temperature, top-k, top-p).
    ``temperature == 0``: greedy, logprob under the unscaled, unfiltered distribution.
    Top-k keeps ties with the k-th logit. Top-p keeps the smallest prefix of tokens (by descending
    probability) whose mass reaches ``top_p`` (always at least one token).
    """
    logits = logits.float()
    if temperature == 0:
        tok = int(torch.argmax(logits))
        return tok, float(torch.log_softmax(logits, dim=-1)[tok])
    x = logits / temperature if temperature != 1.0 else logits.clone()
    vocab = x.shape[-1]
    if 0 < top_k < vocab:
        kth = torch.topk(x, top_k).values[-1]
        x = x.masked_fill(x < kth, float("-inf"))
    if top_p < 1.0:
        sorted_x, order = torch.sort(x, descending=True)
        probs = torch.softmax(sorted_x, dim=-1)
        before = torch.cumsum(probs, dim=-1) - probs  # mass strictly before each token
        drop = before >= top_p
        drop[0] = False
        x[order[drop]] = float("-inf")
    logp = torch.log_softmax(x, dim=-1)
    cdf = torch.cumsum(logp.exp(), dim=-1)
    u = torch.rand((), generator=generator, dtype=torch.float64).item()
    tok = int(torch.searchsorted(cdf, torch.tensor([u * float(cdf[-1])], dtype=cdf.dtype), right=True)[0])
    tok = min(tok, vocab - 1)
    if not torch.isfinite(logp[tok]):  # float edge case at the top of the CDF
        tok = int(torch.argmax(logp))
    return tok, float(logp[tok])


# --------------------------------------------------------------------------- KV buffers


class _BufLayer(DynamicLayer):  # type: ignore[no-untyped-call]  # transformers' DynamicLayer is unannotated
    """A cache layer writing into a preallocated ``[B, H, cap, D]`` buffer (no torch.cat)."""

    def __init__(self, kbuf: torch.Tensor, vbuf: torch.Tensor, length: int):
        super().__init__()  # type: ignore[no-untyped-call]  # transformers' DynamicLayer is unannotated
        self.kbuf, self.vbuf, self.n = kbuf, vbuf, length
        self.dtype, self.device = kbuf.dtype, kbuf.device
        self.is_initialized = True
        self.keys, self.values = kbuf[:, :, :length], vbuf[:, :, :length]

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any
    ) -> tuple[torch.Tensor, torch.Tensor]:
        q = key_states.shape[-2]
        self.kbuf[:, :, self.n : self.n + q] = key_states
        self.vbuf[:, :, self.n : self.n + q] = value_states
        self.n += q
        self.keys, self.values = self.kbuf[:, :, : self.n], self.vbuf[:, :, : self.n]
        return self.keys, self.values

    def get_seq_length(self) -> int:
        return self.n


def _capacity(width: int, left: Iterable[int]) -> int:
    """KV columns to allocate for a batch ``width`` wide whose rows can still generate ``left``
    tokens each: room to grow geometrically, never more than that (a batch of short answers holds
    no unused half-width of KV)."""
    return width + max(1, min(max(64, width // 2), max(left, default=0)))


# --------------------------------------------------------------------------- prefix cache


@dataclass
class _PrefixEntry:
    tokens: torch.Tensor  # [L] long
    kv: list[tuple[torch.Tensor, torch.Tensor]]  # per layer [1, H, L, D]


class _PrefixCache:
    """LRU of KV rows keyed by token sequence, bounded in total tokens."""

    def __init__(self, max_tokens: int):
        self.max_tokens = max(0, int(max_tokens))
        self.entries: collections.OrderedDict[tuple[int, ...], _PrefixEntry] = collections.OrderedDict()
        self.total = 0
        self.hits = 0
        self.lookups = 0

    def clear(self) -> None:
        self.entries.clear()
        self.total = 0

    def lookup(self, prompt: torch.Tensor) -> tuple[_PrefixEntry | None, int]:
        """Longest common prefix with any entry, capped at ``len(prompt) - 1``."""
        self.lookups += 1
        limit = prompt.shape[0] - 1
        best, best_n, best_key = None, 0, None
        if limit <= 0:
            return None, 0
        for key, e in self.entries.items():
            m = min(limit, e.tokens.shape[0])
            if m <= best_n:
                continue
            neq = (e.tokens[:m] != prompt[:m]).nonzero()
            n = m if neq.numel() == 0 else int(neq[0, 0])
            if n > best_n:
                best, best_n, best_key = e, n, key
        if best_key is not None:
            self.entries.move_to_end(best_key)
            self.hits += 1
        return best, best_n

    def insert(self, tokens: list[int], kv: list[tuple[torch.Tensor, torch.Tensor]], copy: bool = False) -> None:
        """Keep ``kv`` for ``tokens`` (``copy``: a clone of it, made only if it is kept)."""
        n = len(tokens)
        if n == 0 or n > self.max_tokens:
            return
        key = tuple(tokens)
        if key in self.entries:
            self.entries.move_to_end(key)
            return
        t = torch.tensor(tokens, dtype=torch.long)
        # drop entries that are a prefix of the new one; skip if the new one is a prefix of another
        for k in list(self.entries):
            if len(k) <= n and key[: len(k)] == k:
                self.total -= len(k)
                del self.entries[k]
            elif len(k) > n and k[:n] == key:
                self.entries.move_to_end(k)
                return
        if copy:
            kv = [(k.clone(), v.clone()) for k, v in kv]
        self.entries[key] = _PrefixEntry(t, kv)
        self.total += n
        while self.total > self.max_tokens and self.entries:
            k, _ = self.entries.popitem(last=False)
            self.total -= len(k)


# --------------------------------------------------------------------------- requests


@dataclass
class _Request:
    prompt: list[int]
    sampling: SamplingParams
    max_tokens: int
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future[GenerationResult]
    generator: torch.Generator
    on_tokens: TokenSink | None = None
    submitted: float = field(default_factory=time.perf_counter)
    cancelled: bool = False


@dataclass
class _Row:
    req: _Request
    out: list[int] = field(default_factory=list)
    lps: list[float] = field(default_factory=list)
    kv_len: int = 0  # tokens whose KV is held (= position of the next input token)
    cached: int = 0
    t_admit: float = 0.0
    t_first: float = 0.0
    finish: FinishReason | None = None

    @property
    def next_token(self) -> int:
        return self.out[-1]

    @property
    def left(self) -> int:
        """Tokens it may still generate."""
        return self.req.max_tokens - len(self.out)


# --------------------------------------------------------------------------- engine


class EmbeddedEngine:
    """In-process transformers engine implementing :class:`legorl.engines.base.Engine`."""

    def __init__(
        self,
        model: Any,
        tokenizer: Any = None,
        *,
        model_name: str | None = None,
        max_batch_size: int = 16,
        prefix_cache_tokens: int = 16384,
        prefill_chunk: int = 1024,
        max_pending: int = 4096,
        max_context: int | None = None,
        eos_token_ids: Sequence[int] | None = None,
    ):
        self.model = model.eval()
        self.tokenizer = tokenizer
        cfg = model.config
        self.model_name = model_name or getattr(cfg, "_name_or_path", None) or type(model).__name__
        self.max_context = int(max_context) if max_context else int(getattr(cfg, "max_position_embeddings", 2048))
        self.vocab_size = int(model.get_input_embeddings().num_embeddings)
        self.max_batch_size = int(max_batch_size)
        self.prefill_chunk = int(prefill_chunk)
        self.max_pending = int(max_pending)
        p = next(model.parameters())
        self.device, self.dtype = p.device, p.dtype
        # tokens that always end a generation ("stop"); default: eos of config, generation config and
        # tokenizer. Pass ``eos_token_ids=()`` to only stop on SamplingParams.stop_token_ids (benchmarks).
        self.eos_ids = frozenset(eos_token_ids) if eos_token_ids is not None else self._eos_ids(model, tokenizer)

        self._version = 0
        self._prefix = _PrefixCache(prefix_cache_tokens)
        self._cv = threading.Condition()
        self._step_lock = threading.Lock()
        self._pending: collections.deque[_Request] = collections.deque()
        self._pause_requests = 0
        self._stopping = False
        self._closed = False
        # running batch
        self._rows: list[_Row] = []
        self._K: list[torch.Tensor] = []
        self._V: list[torch.Tensor] = []
        self._W = 0
        self._pad = torch.zeros(0, dtype=torch.long)
        self.stats: dict[str, float] = collections.defaultdict(float)
        self._worker_error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="legorl-embedded-engine", daemon=True)
        self._thread.start()

    # ------------------------------------------------------------------ construction

    @classmethod
    def from_pretrained(
        cls,
        name_or_path: str,
        device: str = "cpu",
        dtype: torch.dtype = torch.float32,
        max_batch_size: int = 16,
        prefix_cache_tokens: int = 16384,
        **kwargs: Any,
    ) -> EmbeddedEngine:
        from legorl.models.registry import load_model, load_tokenizer, resolve_model

        path = resolve_model(name_or_path)
        model = load_model(path, dtype=dtype, device=device)
        tok = load_tokenizer(path)
        return cls(
            model,
            tok,
            model_name=str(name_or_path),
            max_batch_size=max_batch_size,
            prefix_cache_tokens=prefix_cache_tokens,
            **kwargs,
        )

    @staticmethod
    def _eos_ids(model: Any, tokenizer: Any) -> frozenset[int]:
        ids: set[int] = set()
        for src in (getattr(model, "config", None), getattr(model, "generation_config", None), tokenizer):
            v = getattr(src, "eos_token_id", None) if src is not None else None
            if isinstance(v, int):
                ids.add(v)
            elif isinstance(v, (list, tuple)):
                ids.update(int(x) for x in v)
        return frozenset(ids)

    # ------------------------------------------------------------------ public API

    @property
    def weight_version(self) -> int:
        return self._version

    def _validate(self, prompt_token_ids: Sequence[int], sampling: SamplingParams) -> tuple[list[int], int]:
        if not isinstance(sampling, SamplingParams):
            raise InvalidRequestError(f"sampling must be SamplingParams, got {type(sampling).__name__}")
        if isinstance(prompt_token_ids, torch.Tensor):
            prompt_token_ids = prompt_token_ids.tolist()
        if isinstance(prompt_token_ids, (str, bytes)) or not isinstance(prompt_token_ids, Sequence):
            raise InvalidRequestError("prompt_token_ids must be a list of integers")
        prompt = []
        for t in prompt_token_ids:
            if isinstance(t, bool) or not hasattr(t, "__index__"):
                raise InvalidRequestError(f"prompt_token_ids must be integers, got {t!r}")
            prompt.append(operator.index(t))
        if not prompt:
            raise InvalidRequestError("empty prompt: at least one prompt token id is required")
        bad = [t for t in prompt if t < 0 or t >= self.vocab_size]
        if bad:
            raise InvalidRequestError(
                f"token id(s) out of vocabulary [0, {self.vocab_size}): {bad[:5]}{' ...' if len(bad) > 5 else ''}"
            )
        for t in sampling.stop_token_ids:
            if t < 0 or t >= self.vocab_size:
                raise InvalidRequestError(f"stop token id {t} out of vocabulary [0, {self.vocab_size})")
        if len(prompt) >= self.max_context:
            raise ContextLengthError(
                f"prompt has {len(prompt)} tokens but the context window is {self.max_context} "
                f"(no room for a single generated token)"
            )
        return prompt, min(sampling.max_tokens, self.max_context - len(prompt))

    streams_tokens: ClassVar[bool] = True
    serves_adapters: ClassVar[bool] = True  # update_adapter: LoRA applied in the served module

    async def generate(
        self, prompt_token_ids: list[int], sampling: SamplingParams, *, on_tokens: TokenSink | None = None
    ) -> GenerationResult:
        if self._closed:
            raise EngineOverloadedError("engine is closed")
        prompt, max_tokens = self._validate(prompt_token_ids, sampling)
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[GenerationResult] = loop.create_future()
        gen = torch.Generator(device="cpu")
        gen.manual_seed(sampling.seed if sampling.seed is not None else random.getrandbits(63))
        req = _Request(prompt, sampling, max_tokens, loop, fut, gen, on_tokens)
        with self._cv:
            if self._closed:
                raise EngineOverloadedError("engine is closed")
            if len(self._pending) >= self.max_pending:
                raise EngineOverloadedError(f"engine has {len(self._pending)} requests waiting (max_pending)")
            self._pending.append(req)
            self._cv.notify_all()
        try:
            return await fut
        except asyncio.CancelledError:
            req.cancelled = True  # the worker drops it at the next step
            with self._cv:
                self._cv.notify_all()
            raise

    async def update_weights(self, state_dict: Mapping[str, object], version: int | None = None) -> int:
        return await asyncio.to_thread(self.load_weights, state_dict, version)

    def load_weights(self, state_dict: Mapping[str, object], version: int | None = None) -> int:
        """Synchronous weight update (see :meth:`update_weights`)."""
        params = dict(self.model.named_parameters(remove_duplicate=False))
        params.update(dict(self.model.named_buffers(remove_duplicate=False)))
        unknown = [k for k in state_dict if k not in params]
        if unknown:
            raise EngineError(f"update_weights: unknown parameter name(s) {unknown[:5]} (model {self.model_name})")
        tensors: dict[str, torch.Tensor] = {}
        for k, v in state_dict.items():
            if not isinstance(v, torch.Tensor):
                raise EngineError(f"update_weights: {k} is not a tensor")
            tensors[k] = v
            if tuple(v.shape) != tuple(params[k].shape):
                raise EngineError(f"update_weights: {k} has shape {tuple(v.shape)}, model has {tuple(params[k].shape)}")
        with self._between_steps(version), torch.no_grad():
            for k, v in tensors.items():
                p = params[k]
                if p.data_ptr() != v.data_ptr():
                    p.copy_(v)
        return self._version

    @contextmanager
    def _between_steps(self, version: int | None) -> Iterator[None]:
        """The worker pauses between steps while the block changes the weights; then the prefix cache
        is dropped and the weights take ``version`` (None: the next one)."""
        with self._cv:
            self._pause_requests += 1
        try:
            with self._step_lock:
                yield
                self._prefix.clear()
                self._version = int(version) if version is not None else self._version + 1
        finally:
            with self._cv:
                self._pause_requests -= 1
                self._cv.notify_all()

    async def update_adapter(self, adapter: LoraAdapter, version: int | None = None) -> int:
        """Apply a LoRA adapter (:mod:`legorl.models.lora`): its layers are injected into the served
        module on the first sync, then its tensors copied in place (a colocated trainer's own
        adapter: nothing copied); as :meth:`load_weights`, between steps, prefix cache cleared."""
        return await asyncio.to_thread(self._load_adapter, adapter, version)

    def _load_adapter(self, adapter: LoraAdapter, version: int | None) -> int:
        from legorl.models.lora import apply_adapter

        with self._between_steps(version):
            try:
                apply_adapter(self.model, adapter)
            except ModelError as exc:
                raise EngineError(f"update_adapter: {exc} (model {self.model_name})") from exc
        return self._version

    def health(self) -> EngineHealth:
        alive = self._thread.is_alive() and not self._closed
        detail = (
            f"batch={len(self._rows)} pending={len(self._pending)} prefix_cache="
            f"{self._prefix.total}/{self._prefix.max_tokens} tokens"
        )
        if self._worker_error is not None:
            detail += f" worker_error={self._worker_error!r}"
        return EngineHealth(
            ok=alive,
            model=self.model_name,
            weight_version=self._version,
            active_requests=len(self._rows) + len(self._pending),
            detail=detail,
        )

    def shutdown(self, timeout: float | None = 30.0) -> None:
        """Stop the worker; pending and running requests fail with EngineOverloadedError."""
        with self._cv:
            self._closed = True
            self._stopping = True
            self._cv.notify_all()
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout)

    async def close(self) -> None:
        await asyncio.to_thread(self.shutdown)

    def clear_prefix_cache(self) -> None:
        with self._step_lock:
            self._prefix.clear()

    def served_module(self) -> torch.nn.Module:
        """The module this engine generates with (:class:`legorl.engines.base.ColocatedEngine`)."""
        module: torch.nn.Module = self.model
        return module

    @contextmanager
    def paused(self) -> Iterator[None]:
        """No step runs while the block does (the one in progress finishes first); the prefix
        cache is dropped on entry. A colocated trainer changes the served weights inside it."""
        with self._cv:
            self._pause_requests += 1
        try:
            # held for the whole block: a worker that chose its step before the pause waits here
            with self._step_lock:
                self._prefix.clear()
                yield
        finally:
            with self._cv:
                self._pause_requests -= 1
                self._cv.notify_all()

    # ------------------------------------------------------------------ worker

    def _run(self) -> None:
        try:
            with torch.inference_mode():
                while True:
                    with self._cv:
                        while not self._stopping and (self._pause_requests or (not self._pending and not self._rows)):
                            self._cv.wait()
                        if self._stopping:
                            break
                        room = self.max_batch_size - len(self._rows)
                        new: list[_Request] = []
                        while self._pending and len(new) < room:
                            new.append(self._pending.popleft())
                    with self._step_lock:
                        self._step(new)
        except BaseException as e:  # pragma: no cover - a bug in the scheduler itself
            log.exception("embedded engine worker crashed")
            self._worker_error = e
        finally:
            err = EngineOverloadedError(
                "engine closed" if self._worker_error is None else f"engine worker crashed: {self._worker_error!r}"
            )
            with self._cv:
                self._closed = True
                pending = list(self._pending)
                self._pending.clear()
            for req in pending:
                self._resolve(req, exc=err)
            for row in self._rows:
                self._resolve(row.req, exc=err)
            self._rows = []
            self._K, self._V = [], []

    def _step(self, new: list[_Request]) -> None:
        # 1. drop cancelled rows
        if any(r.req.cancelled for r in self._rows):
            self._retire([i for i, r in enumerate(self._rows) if r.req.cancelled], store=False)
        # 2. admit new requests
        admitted = [req for req in new if not (req.cancelled or req.future.cancelled())]
        if admitted:
            self._admit(admitted)
        # 3. one decode step for the whole batch
        if self._rows:
            try:
                self._decode()
            except Exception as e:
                log.exception("decode step failed; failing the %d requests of the batch", len(self._rows))
                err = self._wrap(e)
                for r in self._rows:
                    self._resolve(r.req, exc=err)
                self._rows, self._K, self._V, self._W = [], [], [], 0
                self._pad = torch.zeros(0, dtype=torch.long)

    @staticmethod
    def _wrap(e: Exception) -> Exception:
        if isinstance(e, LegoRLError):
            return e
        return EngineError(f"generation failed: {type(e).__name__}: {e}")

    def _kv_shape(self) -> tuple[int, int, int]:
        cfg = (
            self.model.config.get_text_config(decoder=True)
            if hasattr(self.model.config, "get_text_config")
            else self.model.config
        )
        heads = getattr(cfg, "num_key_value_heads", None) or cfg.num_attention_heads
        head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        return cfg.num_hidden_layers, heads, head_dim

    def _mask(self, valid: torch.Tensor, q: int) -> torch.Tensor:
        """Additive 4-D mask from ``valid`` [B, kv] (bool) for the last ``q`` query positions (causal)."""
        B, kv = valid.shape
        cols = torch.arange(kv, device=valid.device)
        rows = torch.arange(kv - q, kv, device=valid.device)
        allowed = valid[:, None, :] & (cols[None, None, :] <= rows[None, :, None])  # [B, q, kv]
        m = torch.zeros(B, 1, q, kv, dtype=self.dtype, device=self.device)
        return m.masked_fill_(~allowed[:, None].to(self.device), torch.finfo(self.dtype).min)

    def _forward(
        self,
        ids: torch.Tensor,
        pos: torch.Tensor,
        mask: torch.Tensor,
        K: Sequence[torch.Tensor],
        V: Sequence[torch.Tensor],
        W: int,
        logits_to_keep: int = 1,
    ) -> torch.Tensor:
        cache = Cache(layers=[_BufLayer(k, v, W) for k, v in zip(K, V)])
        out = self.model(
            input_ids=ids,
            position_ids=pos,
            attention_mask=mask,
            past_key_values=cache,
            use_cache=True,
            logits_to_keep=logits_to_keep,
        )
        logits: torch.Tensor = out.logits
        return logits

    def _prefill(self, req: _Request, K: list[torch.Tensor], V: list[torch.Tensor]) -> _Row:
        """Run ``req``'s prompt into ``K``/``V`` (per layer ``[1, H, len(prompt), D]``: views of its
        row of the batch buffers) and sample its first token."""
        t0 = time.perf_counter()
        n = len(req.prompt)
        prompt_t = torch.tensor(req.prompt, dtype=torch.long)
        entry, cached = self._prefix.lookup(prompt_t) if self._prefix.max_tokens else (None, 0)
        if entry is not None and cached > 0:
            for l, (k, v) in enumerate(entry.kv):
                K[l][:, :, :cached] = k[:, :, :cached]
                V[l][:, :, :cached] = v[:, :, :cached]
        ids = prompt_t.to(self.device)
        W = cached
        valid = torch.ones(1, n, dtype=torch.bool)
        logits = None
        while W < n:
            q = min(self.prefill_chunk, n - W)
            mask = self._mask(valid[:, : W + q], q)
            pos = torch.arange(W, W + q, device=self.device)[None]
            logits = self._forward(ids[None, W : W + q], pos, mask, K, V, W)
            W += q
        assert logits is not None
        row = _Row(req=req, kv_len=n, cached=cached, t_admit=t0)
        self.stats["prefill_tokens"] += n - cached
        self.stats["cached_tokens"] += cached
        self.stats["prefill_s"] += time.perf_counter() - t0
        self._prefix.insert(req.prompt, list(zip(K, V)), copy=True)  # the row's buffers change later
        self._append(row, logits[0, -1])
        row.t_first = time.perf_counter()
        return row

    def _append(self, row: _Row, logits: torch.Tensor) -> None:
        s = row.req.sampling
        tok, lp = sample_token(logits, s.temperature, s.top_k, s.top_p, row.req.generator)
        row.out.append(tok)
        row.lps.append(lp)
        if row.req.on_tokens is not None:
            # queued before the result (same loop, FIFO), so the sink has every token when the result lands
            with contextlib.suppress(RuntimeError):  # the caller's loop is closed: nobody is listening
                row.req.loop.call_soon_threadsafe(row.req.on_tokens, [tok])
        if tok in s.stop_token_ids or tok in self.eos_ids:
            row.finish = "stop"
        elif len(row.out) >= row.req.max_tokens:
            row.finish = "length"

    def _admit(self, reqs: list[_Request]) -> None:
        """Add a row per request to the running batch, then prefill each straight into its row: a
        prompt's KV exists once (not per request and again in the batch). A request that fails or
        finishes at its first token leaves again at once."""
        B0 = len(self._rows)
        self._add_rows([len(r.prompt) for r in reqs], [r.max_tokens for r in reqs])
        W, done = self._W, []
        for j, req in enumerate(reqs):
            n, i = len(req.prompt), B0 + j
            try:
                row = self._prefill(
                    req, [k[i : i + 1, :, W - n : W] for k in self._K], [v[i : i + 1, :, W - n : W] for v in self._V]
                )
            except Exception as e:
                self._resolve(req, exc=self._wrap(e))
                row = _Row(req=req, finish="error")
            self._rows.append(row)
            if row.finish is not None:
                done.append(i)
        if done:
            self._retire(done, store=False)

    def _add_rows(self, lens: list[int], max_tokens: list[int]) -> None:
        """Reallocate the batch buffers with room for rows of ``lens`` prompt tokens (right-aligned,
        zeroed padding before them), the running rows copied over."""
        B0, W0 = len(self._rows), self._W
        W = max([W0] + lens)
        B = B0 + len(lens)
        cap = _capacity(W, [*(r.left for r in self._rows), *max_tokens])
        L, H, D = self._kv_shape()
        pads = [int(p) + (W - W0) for p in self._pad.tolist()] + [W - n for n in lens]
        newK, newV = [], []
        for l in range(L):
            k = torch.empty(B, H, cap, D, dtype=self.dtype, device=self.device)
            v = torch.empty(B, H, cap, D, dtype=self.dtype, device=self.device)
            if B0:
                k[:B0, :, W - W0 : W] = self._K[l][:, :, :W0]
                v[:B0, :, W - W0 : W] = self._V[l][:, :, :W0]
            for i, p in enumerate(pads):
                if p:
                    k[i, :, :p] = 0
                    v[i, :, :p] = 0
            newK.append(k)
            newV.append(v)
        self._K, self._V, self._W = newK, newV, W
        self._pad = torch.tensor(pads, dtype=torch.long)

    def _grow(self) -> None:
        W = self._W
        cap = _capacity(W, (r.left for r in self._rows))
        for l in range(len(self._K)):
            for buf in (self._K, self._V):
                old = buf[l]
                new = torch.empty(old.shape[0], old.shape[1], cap, old.shape[3], dtype=old.dtype, device=old.device)
                new[:, :, :W] = old[:, :, :W]
                buf[l] = new

    def _decode(self) -> None:
        t0 = time.perf_counter()
        rows, W = self._rows, self._W
        if W + 1 > self._K[0].shape[2]:
            self._grow()
        ids = torch.tensor([[r.next_token] for r in rows], dtype=torch.long, device=self.device)
        pos = torch.tensor([[r.kv_len] for r in rows], dtype=torch.long, device=self.device)
        valid = torch.arange(W + 1)[None, :] >= self._pad[:, None]
        mask = self._mask(valid, 1)
        logits = self._forward(ids, pos, mask, self._K, self._V, W)[:, -1].float()
        self._W = W + 1
        done: list[int] = []
        for i, r in enumerate(rows):
            r.kv_len += 1
            if r.req.cancelled:
                done.append(i)
                continue
            try:
                self._append(r, logits[i])
            except Exception as e:  # only this row fails
                r.finish = "error"
                self._resolve(r.req, exc=self._wrap(e))
            if r.finish is not None:
                done.append(i)
        self.stats["decode_tokens"] += len(rows)
        self.stats["decode_steps"] += 1
        self.stats["decode_s"] += time.perf_counter() - t0
        if done:
            self._retire(done, store=True)

    def _retire(self, idx: list[int], store: bool) -> None:
        drop = set(idx)
        for i in idx:
            r = self._rows[i]
            if store and r.finish not in (None, "error") and self._prefix.max_tokens:
                p = int(self._pad[i])
                kv = [
                    (k[i : i + 1, :, p : self._W].clone(), v[i : i + 1, :, p : self._W].clone())
                    for k, v in zip(self._K, self._V)
                ]
                self._prefix.insert((r.req.prompt + r.out)[: r.kv_len], kv)
            if r.finish in ("stop", "length"):
                self._finish(r)
        keep = [i for i in range(len(self._rows)) if i not in drop]
        if not keep:
            self._rows, self._K, self._V, self._W = [], [], [], 0
            self._pad = torch.zeros(0, dtype=torch.long)
            return
        keep_t = torch.tensor(keep, dtype=torch.long)
        pad = self._pad[keep_t]
        lo = int(pad.min())
        W = self._W - lo
        cap = _capacity(W, (self._rows[i].left for i in keep))
        for buf in (self._K, self._V):
            for l in range(len(buf)):
                old = buf[l]
                new = torch.empty(len(keep), old.shape[1], cap, old.shape[3], dtype=old.dtype, device=old.device)
                new[:, :, :W] = old[keep_t.to(old.device), :, lo : self._W]
                buf[l] = new
        self._rows = [self._rows[i] for i in keep]
        self._pad = pad - lo
        self._W = W

    def _finish(self, row: _Row) -> None:
        now = time.perf_counter()
        req = row.req
        res = GenerationResult(
            token_ids=list(row.out),
            logprobs=list(row.lps),
            finish_reason=row.finish or "stop",
            weight_version=self._version,
            prompt_tokens=len(req.prompt),
            cached_prompt_tokens=row.cached,
            timings={
                "queue_s": row.t_admit - req.submitted,
                "ttft_s": row.t_first - req.submitted,
                "total_s": now - req.submitted,
            },
        )
        self._resolve(req, result=res)

    @staticmethod
    def _resolve(req: _Request, result: GenerationResult | None = None, exc: BaseException | None = None) -> None:
        def _set() -> None:
            if req.future.done():
                return
            if exc is not None:
                req.future.set_exception(exc)
            else:
                assert result is not None  # callers pass exactly one of result and exc
                req.future.set_result(result)

        try:
            req.loop.call_soon_threadsafe(_set)
        except RuntimeError:  # the caller's loop is closed: nobody is waiting
            pass
