"""A tiny Qwen3-MoE model built from a config with seeded random weights (no hub): the MoE
architecture of the published LEGO-RL runs (Qwen3-MoE), at a size a CPU serves and trains in
seconds. It borrows SmolLM2's tokenizer (and so its vocabulary), so the gateway, the harnesses and
the trainer handle it exactly as any served model. Its outputs are noise: it exists to check that
an engine and the trainer agree on an MoE (routing included), not to solve tasks."""

from __future__ import annotations

from pathlib import Path

__all__ = ["build_tiny_qwen3_moe"]


def build_tiny_qwen3_moe(out: str | Path, *, seed: int = 0, experts: int = 8, active: int = 2) -> Path:
    """Write the model (fp32 safetensors, per-expert checkpoint names as Hugging Face saves them)
    and SmolLM2's tokenizer into ``out``; returns ``out``. The same seed writes the same weights."""
    import torch
    from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

    from legorl.models.registry import load_tokenizer, resolve_model

    out = Path(out)
    tok = load_tokenizer(resolve_model("smollm2-135m"))
    cfg = Qwen3MoeConfig(  # type: ignore[call-arg]  # head_dim: a config attribute the stubs omit
        vocab_size=len(tok),
        hidden_size=256,
        intermediate_size=512,
        moe_intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=64,
        num_experts=experts,
        num_experts_per_tok=active,
        norm_topk_prob=True,
        decoder_sparse_step=1,
        max_position_embeddings=4096,
        tie_word_embeddings=False,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
    )
    torch.manual_seed(seed)
    model = Qwen3MoeForCausalLM(cfg).float()
    model.save_pretrained(out, safe_serialization=True)
    tok.save_pretrained(out)
    return out
