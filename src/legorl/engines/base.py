"""The engine interface shared by the gateway (generation) and the trainer (weight sync).

An engine is token-in / token-out: it never sees text. Every backend (embedded transformers,
vLLM, SGLang) implements :class:`Engine`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal, Protocol, runtime_checkable

from legorl.errors import InvalidRequestError

if TYPE_CHECKING:
    import torch

FinishReason = Literal["stop", "length", "cancelled", "error"]

# Receives the token ids sampled since its last call, in order, on the caller's event loop, while the
# generation runs (true streaming). Their concatenation is the result's ``token_ids``.
TokenSink = Callable[[list[int]], None]


@dataclass(frozen=True)
class SamplingParams:
    """How to sample one continuation. Validated on construction."""

    max_tokens: int = 256
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0  # 0 = off
    stop_token_ids: tuple[int, ...] = ()
    seed: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.max_tokens, int) or self.max_tokens < 1:
            raise InvalidRequestError(f"max_tokens must be a positive integer, got {self.max_tokens!r}")
        if not (isinstance(self.temperature, (int, float)) and math.isfinite(self.temperature)) or self.temperature < 0:
            raise InvalidRequestError(f"temperature must be a finite number >= 0, got {self.temperature!r}")
        if not (isinstance(self.top_p, (int, float)) and 0 < self.top_p <= 1):
            raise InvalidRequestError(f"top_p must be in (0, 1], got {self.top_p!r}")
        if not isinstance(self.top_k, int) or self.top_k < 0:
            raise InvalidRequestError(f"top_k must be an integer >= 0 (0 = off), got {self.top_k!r}")
        if self.seed is not None and not isinstance(self.seed, int):
            raise InvalidRequestError(f"seed must be an integer, got {self.seed!r}")
        object.__setattr__(self, "stop_token_ids", tuple(int(t) for t in self.stop_token_ids))


@dataclass
class GenerationResult:
    """One sampled continuation. ``logprobs[i]`` is the log-probability of ``token_ids[i]`` under
    the distribution it was actually sampled from (after temperature / top-k / top-p)."""

    token_ids: list[int]
    logprobs: list[float]
    finish_reason: FinishReason
    weight_version: int
    prompt_tokens: int
    cached_prompt_tokens: int = 0  # prompt tokens served from the prefix KV cache
    timings: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class EngineHealth:
    ok: bool
    model: str
    weight_version: int
    active_requests: int
    detail: str = ""


@runtime_checkable
class Engine(Protocol):
    """What the gateway and the trainer need from an inference engine."""

    model_name: str
    max_context: int

    @property
    def weight_version(self) -> int: ...

    async def generate(self, prompt_token_ids: list[int], sampling: SamplingParams) -> GenerationResult:
        """Sample one continuation. Cancelling the awaiting task cancels the generation.

        An engine that can stream sets ``streams_tokens = True`` and takes a keyword argument
        ``on_tokens: TokenSink | None``; the gateway passes it only to such engines (see
        :func:`streams_tokens`)."""

    async def update_weights(self, state_dict: Mapping[str, object], version: int | None = None) -> int:
        """Load new weights between generations; returns the new weight version."""

    def health(self) -> EngineHealth: ...

    async def close(self) -> None: ...


def streams_tokens(engine: object) -> bool:
    """Whether ``engine.generate`` takes ``on_tokens`` and reports tokens as they are sampled."""
    return bool(getattr(engine, "streams_tokens", False))


def honours_seeds(engine: object) -> bool:
    """Whether ``engine`` samples a request with ``SamplingParams.seed`` reproducibly, also among
    other requests (``seeded_sampling``, default True). vLLM's CPU build does not: seeded requests
    at once killed its engine core ("CPU Generator does not use offset"), so the gateway sends it no
    seeds."""
    return bool(getattr(engine, "seeded_sampling", True))


def takes_adapters(engine: object) -> bool:
    """Whether ``engine`` swaps LoRA adapters itself: it has ``update_adapter(adapter, version) ->
    int`` (a :class:`~legorl.models.lora.LoraAdapter`, the new weight version) and ``serves_adapters``
    is true (an HTTP engine's servers were started with LoRA support). Other engines get an adapter
    merged into whole weights (:meth:`Engine.update_weights`)."""
    return callable(getattr(engine, "update_adapter", None)) and bool(getattr(engine, "serves_adapters", False))


@runtime_checkable
class ColocatedEngine(Protocol):
    """An engine that serves a torch module in the trainer's own process. The trainer trains that
    very module: one copy of the weights in memory, and a weight sync that copies nothing
    (:meth:`Engine.update_weights` sees its own tensors and only bumps the version)."""

    def served_module(self) -> torch.nn.Module:
        """The module generation runs on."""

    def paused(self) -> AbstractContextManager[None]:
        """Generation waits while the block runs, so no forward reads weights the trainer is
        changing in place; caches computed with the old weights are dropped."""
