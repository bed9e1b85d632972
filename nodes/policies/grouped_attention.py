"""SDPA that reads grouped key/value heads in place, under a mask too.

transformers' SDPA path copies each key/value head ``num_key_value_groups`` times whenever an
attention mask is given (its fused GQA needs an unmasked CUDA kernel), and every batched decode
step has a mask (left padding). On a CPU that copy of the whole KV cache, every layer and step,
was 40% of decoding SmolLM2-135M (3 KV heads for 9 query heads: 8.1 of 20.2 s for 32 planner
replies, measured here); ``torch``'s SDPA takes the grouped heads itself (``enable_gqa``), mask
or not, with the same result.

``use_grouped_sdpa(model)`` switches a model that runs plain SDPA to it (same mask builder).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

NAME = "ragteam_grouped_sdpa"


def grouped_sdpa_forward(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                         attention_mask: torch.Tensor | None, dropout: float = 0.0, scaling: float | None = None,
                         is_causal: bool | None = None, **kwargs) -> tuple[torch.Tensor, None]:
    """query [B, H, T, D], key/value [B, KV, S, D] (H a multiple of KV), mask [B, 1, T, S] or
    None → (output [B, T, H, D], None), as transformers' ``sdpa_attention_forward``."""
    causal = is_causal if is_causal is not None else getattr(module, "is_causal", True)
    causal = query.shape[2] > 1 and attention_mask is None and causal
    out = F.scaled_dot_product_attention(query, key, value, attn_mask=attention_mask, dropout_p=dropout,
                                         scale=scaling, is_causal=causal,
                                         enable_gqa=query.shape[1] != key.shape[1])
    return out.transpose(1, 2).contiguous(), None


def use_grouped_sdpa(model) -> None:
    """Run ``model``'s attention through ``grouped_sdpa_forward`` when it runs SDPA on a CPU
    (anything else is left as it is)."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    config = getattr(model, "config", None)
    if config is None or getattr(config, "_attn_implementation", None) != "sdpa" or model.device.type != "cpu":
        return
    AttentionInterface.register(NAME, grouped_sdpa_forward)
    AttentionMaskInterface.register(NAME, sdpa_mask)
    model.set_attn_implementation(NAME)
