"""The small transformers DeepSeek attention configs the oracle and capture tests share, and how the oracle
tests run transformers' attention module.

`attention_widths` is DeepSeek-V3's head structure (P=V=128, R=64) at hidden size 512 with its yarn RoPE
(factor 40, original 4096), so every TP-8 shard an FP8 block cuts stays a multiple of 128; the tests
build transformers' own `DeepseekV3Config` / `DeepseekV32Config` from it with eager attention.
"""

from __future__ import annotations

from typing import Any

import torch

DEEPSEEK_YARN = {
    "rope_type": "yarn",
    "rope_theta": 10000.0,
    "factor": 40.0,
    "beta_fast": 32.0,
    "beta_slow": 1.0,
    "mscale": 1.0,
    "mscale_all_dim": 1.0,
    "original_max_position_embeddings": 4096,
}


def attention_widths(heads: int = 16) -> dict[str, Any]:
    """The config.json fields of the tiny DeepSeek-V3-shaped attention, with `heads` heads."""
    return dict(
        hidden_size=512,
        num_attention_heads=heads,
        num_key_value_heads=heads,
        q_lora_rank=256,
        kv_lora_rank=128,
        qk_nope_head_dim=128,
        qk_rope_head_dim=64,
        v_head_dim=128,
        rms_norm_eps=1e-6,
        max_position_embeddings=163840,
        rope_parameters=dict(DEEPSEEK_YARN),
        attention_bias=False,
    )


def eager(config):
    """`config` with transformers' eager attention (the one whose math the oracle tests compare)."""
    config._attn_implementation = "eager"
    return config


def transformers_output(attention, rotary, hidden: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """transformers' attention module `attention` (with its rotary embedding `rotary`) on one causal
    sequence of `hidden` (T, hidden size) at `positions`: the (T, hidden size) output."""
    x = hidden.unsqueeze(0)
    cos, sin = rotary(x, positions.unsqueeze(0))
    t = hidden.shape[0]
    mask = torch.full((t, t), float("-inf")).triu(1).view(1, 1, t, t)
    with torch.no_grad():
        out, _ = attention(x, position_embeddings=(cos, sin), attention_mask=mask)
    return out[0]
