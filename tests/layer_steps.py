"""The step programs of the layers, written out as the tests expect them (not read from mla_debug, so a
step renamed or reordered there fails the tests that compare against these)."""

from __future__ import annotations

V3_PREFILL_STEPS = [
    "fused_qkv_a",
    "q_a_layernorm",
    "kv_a_layernorm",
    "q_b_proj",
    "rope",
    "kv_b_proj",
    "attention",
    "o_proj",
    "all_reduce",
]
# Absorbed decode: W_UK before the attention, W_UV after it, instead of kv_b_proj.
V3_DECODE_STEPS = V3_PREFILL_STEPS[:5] + ["absorb_uk", "attention", "absorb_uv", "o_proj", "all_reduce"]
V4_STEPS = [
    "fused_wqa_wkv",
    "q_norm",
    "kv_norm",
    "wq_b",
    "q_head_norm",
    "indexer_q",
    "rope",
    "attention",
    "inverse_rope",
    "wo_a",
    "wo_b",
    "all_reduce",
]
