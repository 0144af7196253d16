"""SGLang engine: token-in / token-out over HTTP to one or more SGLang servers.

What every HTTP engine shares (request ids and aborts, retries, the replica pool with affinity, our
servers' restarts, disk weight sync) is :mod:`legorl.engines.http_engine`; this module is SGLang's
wire format, as SGLang 0.5 defines it (``sglang/srt/managers/io_struct.py``, ``http_server.py``).

* Generation: ``POST /generate`` with ``input_ids``, ``sampling_params`` (``max_new_tokens``,
  ``temperature``, ``top_p``, ``top_k`` with ``-1`` for off, ``stop_token_ids``, ``sampling_seed``),
  ``rid`` (our request id) and ``return_logprob``. The answer's ``output_ids`` are the sampled
  tokens; ``meta_info`` has ``output_token_logprobs`` (``[logprob, token_id, text]`` each),
  ``finish_reason`` (``{"type": "stop" | "length" | "abort", ...}``), ``cached_tokens`` and the
  weight version (``weight_version``, and ``weight_versions`` spans when the weights changed
  mid-generation). Servers run with ``--skip-tokenizer-init``: no text either way.
* Which logprob: SGLang's ``output_token_logprobs`` are ``log softmax(logits / temperature)``, before
  top-k / top-p (its sampler). That is the distribution sampled from only when nothing truncates it;
  so when ``top_p < 1`` or ``top_k`` is on, the request also asks for the sampling support
  (``return_sampling_mask`` with ``sampling_logprobs_mode: "selected"``) and the result takes
  ``output_token_sampling_logprobs``: the token's logprob under the truncated, renormalised
  distribution, as :class:`~legorl.engines.base.GenerationResult` requires. Greedy requests
  (``temperature 0``) get the unscaled distribution's logprob, as the embedded engine gives.
* Abort: ``POST /abort_request`` with the ``rid``.
* Weight sync by disk: ``/pause_generation`` (``retract``: requests in flight go back to the queue
  and are recomputed after the update, none is lost) → ``/update_weights_from_disk`` with the new
  weights' directory (a whole model directory: config, tokenizer, safetensors) and
  ``weight_version`` → ``/continue_generation``. ``/update_weight_version`` names the weights without
  aborting anything (SGLang's default aborts every request).
* MoE routing: SGLang can return each token's routed experts (``return_routed_experts``), which a
  routing-replay trainer would need; the trainer here recomputes with its own router (see
  ``docs/engines.md``).

SGLang does not run on this CPU machine (its PyPI kernels package is CUDA-only; the CPU build is a
source build), so the wire format is tested against responses of the documented shape
(``tests/engines/test_sglang.py``) and the real check is ``scripts/gpu_check.sh``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

from legorl.engines.base import FinishReason, GenerationResult, SamplingParams
from legorl.engines.http_engine import HTTPEngine
from legorl.engines.server_process import ServerProcess
from legorl.errors import EngineError

__all__ = ["SGLangEngine", "SGLangServer"]

_FINISH: dict[str | None, FinishReason] = {"stop": "stop", "length": "length", "abort": "cancelled", None: "stop"}


def truncates(sampling: SamplingParams) -> bool:
    """The sampling distribution is cut (top-p or top-k) beyond the temperature."""
    return sampling.temperature > 0 and (sampling.top_p < 1.0 or sampling.top_k > 0)


class SGLangEngine(HTTPEngine):
    """An :class:`~legorl.engines.base.Engine` served by SGLang servers at ``base_urls`` (see
    :class:`~legorl.engines.http_engine.HTTPEngine` for the arguments)."""

    label: ClassVar[str] = "SGLang"
    generate_path: ClassVar[str] = "/generate"
    whole_model_dir: ClassVar[bool] = True  # /update_weights_from_disk reads a model directory

    def _body(self, prompt_token_ids: list[int], sampling: SamplingParams, request_id: str) -> dict[str, Any]:
        params: dict[str, Any] = {
            "max_new_tokens": sampling.max_tokens,
            "temperature": sampling.temperature,
            "top_p": sampling.top_p,
            "top_k": sampling.top_k or -1,
            **self.optional_sampling(sampling, "sampling_seed"),
        }
        body: dict[str, Any] = {
            "rid": request_id,
            "input_ids": prompt_token_ids,
            "sampling_params": params,
            "return_logprob": True,
            "stream": False,
        }
        if truncates(sampling):
            body["return_sampling_mask"] = True
            body["sampling_logprobs_mode"] = "selected"
        return body

    def _result(self, payload: dict[str, Any], prompt_tokens: int, elapsed: float) -> GenerationResult:
        try:
            meta = payload["meta_info"]
            token_ids = [int(t) for t in payload["output_ids"]]
            if "output_token_sampling_logprobs" in meta:
                logprobs = [float(v) for v in meta["output_token_sampling_logprobs"]]
            else:
                entries = meta["output_token_logprobs"]
                logprobs = [float(e[0]) for e in entries]
                if [int(e[1]) for e in entries] != token_ids:
                    raise EngineError(f"SGLang's logprobs are for other tokens than output_ids: {str(payload)[:300]}")
        except (KeyError, IndexError, TypeError, ValueError) as e:
            raise EngineError(f"SGLang answered an unexpected shape ({e!r}): {str(payload)[:300]}") from e
        if len(logprobs) != len(token_ids):
            raise EngineError(f"SGLang returned {len(token_ids)} tokens but {len(logprobs)} logprobs")
        spans = meta.get("weight_versions") or []
        version = self.parse_version(spans[-1].get("version") if spans else meta.get("weight_version"))
        finish = meta.get("finish_reason")
        kind = finish.get("type") if isinstance(finish, dict) else finish
        return GenerationResult(
            token_ids=token_ids,
            logprobs=logprobs,
            finish_reason=_FINISH.get(kind, "stop"),
            weight_version=version,
            prompt_tokens=prompt_tokens,
            cached_prompt_tokens=int(meta.get("cached_tokens") or 0),
            timings={"total_s": elapsed},
        )

    async def _abort(self, url: str, request_id: str) -> None:
        await self._client.post(f"{url}/abort_request", json={"rid": request_id}, timeout=5.0)

    async def _load(self, url: str, weights: Path, version: int) -> None:
        await self._post(url, "/pause_generation", json={"mode": "retract"})
        try:
            await self._post(
                url,
                "/update_weights_from_disk",
                json={
                    "model_path": str(weights),
                    "weight_version": str(version),
                    "abort_all_requests": False,
                    "flush_cache": True,
                },
            )
        finally:
            await self._post(url, "/continue_generation", json={})

    async def _set_version(self, url: str, version: int) -> None:
        await self._post(url, "/update_weight_version", json={"new_version": str(version), "abort_all_requests": False})


class SGLangServer(ServerProcess):
    """One ``sglang.launch_server`` process serving ``model`` on 127.0.0.1:``port``; ``python`` is an
    interpreter with SGLang installed (``engine.sglang_python``)."""

    label: ClassVar[str] = "SGLang"

    def environment(self) -> dict[str, str]:
        return {"SGLANG_DISABLE_USAGE_STATS": "1"}

    def command(self) -> list[str]:
        return [
            str(self.python),
            "-m",
            "sglang.launch_server",
            "--model-path",
            str(self.model),
            *self.serving_args(),
            "--context-length",
            str(self.max_model_len),
            "--skip-tokenizer-init",  # token ids in and out: the gateway owns tokenization
            *self.extra_args,
        ]
