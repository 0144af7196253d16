"""A scripted policy engine for harness tests: only the model is scripted.

Given the prompt (decoded with the run's tokenizer), a *policy* function returns the text the
"model" answers; the engine emits exactly the tokenizer's encoding of that text plus the stop token,
as token ids, through the normal Engine protocol. Everything around it — harness binary, gateway
(rendering, tool-call parsing, alignment, recording), sandbox and grader — is real. Logprobs are
0.0 (probability 1: the script is deterministic). Never use it where the real model can run.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import Any

from legorl.engines.base import EngineHealth, FinishReason, GenerationResult, SamplingParams

Policy = Callable[[str], str]


def replies_in_order(*replies: str, fallback: str = "Done.") -> Policy:
    """A policy answering the n-th call with ``replies[n]`` (then ``fallback``)."""
    calls = {"n": 0}

    def policy(_prompt: str) -> str:
        i = calls["n"]
        calls["n"] += 1
        return replies[i] if i < len(replies) else fallback

    return policy


class ScriptedEngine:
    # tokenizer: a Hugging Face tokenizer, typed Any like the embedded engine's (transformers' stubs are partial)
    def __init__(
        self,
        tokenizer: Any,
        policy: Policy,
        *,
        model_name: str = "scripted",
        max_context: int = 8192,
        stop_token_id: int | None = None,
    ) -> None:
        self.tokenizer = tokenizer
        self.policy = policy
        self.model_name = model_name
        self.max_context = max_context
        self.stop_token_id = tokenizer.eos_token_id if stop_token_id is None else stop_token_id
        self.prompts: list[str] = []  # every decoded prompt, for assertions
        self._version = 0

    @property
    def weight_version(self) -> int:
        return self._version

    async def generate(self, prompt_token_ids: list[int], sampling: SamplingParams) -> GenerationResult:
        prompt = self.tokenizer.decode(prompt_token_ids, skip_special_tokens=False)
        self.prompts.append(prompt)
        text = self.policy(prompt)
        ids = list(self.tokenizer.encode(text, add_special_tokens=False))
        finish: FinishReason = "stop"
        if len(ids) >= sampling.max_tokens:
            ids, finish = ids[: sampling.max_tokens], "length"
        else:
            ids.append(self.stop_token_id)
        await asyncio.sleep(0)
        return GenerationResult(
            token_ids=ids,
            logprobs=[0.0] * len(ids),
            finish_reason=finish,
            weight_version=self._version,
            prompt_tokens=len(prompt_token_ids),
        )

    async def update_weights(self, state_dict: Mapping[str, object], version: int | None = None) -> int:
        self._version = self._version + 1 if version is None else version
        return self._version

    def health(self) -> EngineHealth:
        return EngineHealth(ok=True, model=self.model_name, weight_version=self._version, active_requests=0)

    async def close(self) -> None:
        return None
