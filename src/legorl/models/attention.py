"""Grouped-query attention without repeated keys and values.

transformers' ``sdpa`` attention copies every key/value head ``num_attention_heads /
num_key_value_heads`` times (``repeat_kv``) whenever an attention mask is given, which is always
the case for the embedded engine (left-padded batches) and the trainer (padding, packing). On CPU
that copy and the attention over it dominate a decode step once contexts reach ~1k tokens:
SmolLM2-135M (9 query heads, 3 KV heads), 16 sequences at 1,500 tokens with the engine's mask:
a decode step 0.54 s with the copy, 0.29 s with ``scaled_dot_product_attention(...,
enable_gqa=True)``, which reads each KV head in place (same logits bit for bit). Under autograd (training) it is no faster, so there the
function hands over to transformers' own ``sdpa``.

:func:`use_grouped_attention` switches a loaded model to that kernel when it has grouped heads;
``load_model`` applies it to every model the engine, the trainer and the exporters load.
"""

from __future__ import annotations

from typing import Any

__all__ = ["GROUPED_SDPA", "grouped_sdpa_attention", "use_grouped_attention"]

GROUPED_SDPA = "legorl_grouped_sdpa"


def grouped_sdpa_attention(
    module: Any,
    query: Any,
    key: Any,
    value: Any,
    attention_mask: Any,
    dropout: float = 0.0,
    scaling: float | None = None,
    is_causal: bool | None = None,
    **kwargs: Any,
) -> tuple[Any, None]:
    """transformers' attention-interface signature: ``query`` [B, H, q, D], ``key``/``value``
    [B, H_kv, kv, D]; returns [B, q, H, D] as the built-in implementations do."""
    import torch

    if torch.is_grad_enabled() and query.requires_grad:
        # training: measured no faster on CPU (the backward re-expands the heads); keep transformers' own path
        from transformers.integrations.sdpa_attention import sdpa_attention_forward

        return sdpa_attention_forward(
            module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, is_causal=is_causal, **kwargs
        )
    q_len = query.shape[2]
    causal = bool(is_causal if is_causal is not None else getattr(module, "is_causal", True))
    out = torch.nn.functional.scaled_dot_product_attention(
        query,
        key,
        value,
        attn_mask=attention_mask,
        dropout_p=dropout if module.training else 0.0,
        scale=scaling,
        # without a mask a prompt's own positions are causal; with one, the mask says it all
        is_causal=causal and attention_mask is None and q_len > 1,
        enable_gqa=key.shape[1] != query.shape[1],
    )
    return out.transpose(1, 2).contiguous(), None


def use_grouped_attention(model: Any) -> bool:
    """Switch ``model`` to :func:`grouped_sdpa_attention` when its attention has fewer key/value
    heads than query heads and it runs transformers' ``sdpa``; True when switched."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    cfg = model.config.get_text_config(decoder=True) if hasattr(model.config, "get_text_config") else model.config
    kv_heads = getattr(cfg, "num_key_value_heads", None)
    if not kv_heads or kv_heads == cfg.num_attention_heads:
        return False
    if getattr(model.config, "_attn_implementation", None) != "sdpa":
        return False  # eager, flash or a user's choice: leave it
    AttentionInterface.register(GROUPED_SDPA, grouped_sdpa_attention)
    AttentionMaskInterface.register(GROUPED_SDPA, sdpa_mask)  # the masks sdpa gets (padding rows included)
    model.set_attn_implementation(GROUPED_SDPA)
    return True
