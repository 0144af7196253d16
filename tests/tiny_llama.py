"""A tiny random Llama: a real transformers causal LM (decoder layers, KV cache, tied shapes) for
tests that need the machinery but not a trained model. Fast, no model files."""

from __future__ import annotations

import torch
from transformers import LlamaConfig, LlamaForCausalLM


def tiny_llama(vocab_size: int, *, layers: int = 2, max_positions: int = 512, seed: int = 0) -> LlamaForCausalLM:
    """Hidden size 32, 4 attention heads over 2 KV heads (GQA), in eval mode; ``seed`` fixes the weights."""
    torch.manual_seed(seed)
    cfg = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=max_positions,
    )
    return LlamaForCausalLM(cfg).eval()
