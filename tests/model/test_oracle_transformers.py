"""Oracle: transformers' DeepseekV3Attention (fp32, eager) against run_layer with unquantized fp32
weights imported from it, prefill with a causal mask, at TP 1 and TP 4.

The two differ only in fp32 summation order (different op decomposition), so the relative L2 error
must be far below 1e-5. transformers hard-wires eps 1e-6 for the two latent norms; the config uses 1e-6
too, and it de-interleaves rotated pairs, which leaves q.k unchanged (SEMANTICS 7).
"""

from __future__ import annotations

import pytest
import torch

import mla_debug as md

transformers = pytest.importorskip("transformers")
from transformers.models.deepseek_v3 import modeling_deepseek_v3 as hf  # noqa: E402

ROPE = {
    "rope_type": "yarn",
    "rope_theta": 10000.0,
    "factor": 40.0,
    "beta_fast": 32.0,
    "beta_slow": 1.0,
    "mscale": 1.0,
    "mscale_all_dim": 1.0,
    "original_max_position_embeddings": 4096,
}


@pytest.fixture(scope="module")
def reference_module():
    config = transformers.DeepseekV3Config(
        hidden_size=512,
        num_attention_heads=16,
        num_key_value_heads=16,
        q_lora_rank=256,
        kv_lora_rank=128,
        qk_nope_head_dim=128,
        qk_rope_head_dim=64,
        v_head_dim=128,
        rms_norm_eps=1e-6,
        max_position_embeddings=163840,
        rope_parameters=dict(ROPE),
        rope_interleave=True,
        attention_bias=False,
    )
    config._attn_implementation = "eager"
    torch.manual_seed(0)
    attention = hf.DeepseekV3Attention(config, layer_idx=0).eval()
    with torch.no_grad():  # norm weights other than ones, so the norms are really tested
        attention.q_a_layernorm.weight.uniform_(0.5, 1.5)
        attention.kv_a_layernorm.weight.uniform_(0.5, 1.5)
    rotary = hf.DeepseekV3RotaryEmbedding(config)
    return config, attention, rotary


def transformers_output(config, attention, rotary, hidden, positions):
    x = hidden.unsqueeze(0)
    cos, sin = rotary(x, positions.unsqueeze(0))
    t = hidden.shape[0]
    mask = torch.full((t, t), float("-inf")).triu(1).view(1, 1, t, t)
    with torch.no_grad():
        out, _ = attention(x, position_embeddings=(cos, sin), attention_mask=mask)
    return out[0]


@pytest.mark.parametrize("tp_size", [1, 4])
def test_prefill_matches_transformers(reference_module, tp_size):
    config, attention, rotary = reference_module
    cfg = md.MLAConfig.from_hf(config.to_dict(), name="hf-tiny")
    ckpt = md.Checkpoint.from_state_dict(cfg, attention.state_dict(), quantize=False)
    gen = torch.Generator().manual_seed(1)
    hidden = torch.randn(12, 512, generator=gen)
    positions = torch.arange(100, 112)  # past the yarn-blend region start, so scaling matters
    expected = transformers_output(config, attention, rotary, hidden, positions)
    run = md.run_layer(cfg, ckpt, hidden, positions, tp_size=tp_size, dtype=torch.float32)
    assert run.output.dtype == torch.float32
    assert md.numerics.error_metrics(run.output, expected)["rel_l2"] < 1e-5


def test_decode_equals_prefill_in_fp32(reference_module):
    """Absorbed decode and naive prefill agree in exact arithmetic; in fp32 to summation order."""
    config, attention, _ = reference_module
    cfg = md.MLAConfig.from_hf(config.to_dict(), name="hf-tiny")
    ckpt = md.Checkpoint.from_state_dict(cfg, attention.state_dict(), quantize=False)
    hidden = torch.randn(9, 512, generator=torch.Generator().manual_seed(2))
    positions = torch.arange(9)
    prefill = md.run_layer(cfg, ckpt, hidden, positions, tp_size=2, mode="prefill", dtype=torch.float32)
    decode = md.run_layer(cfg, ckpt, hidden, positions, tp_size=2, mode="decode", dtype=torch.float32)
    assert md.numerics.error_metrics(decode.output, prefill.output)["rel_l2"] < 1e-5
    assert (
        md.numerics.error_metrics(decode.records["absorb_uv"].output, prefill.records["attention"].output)["rel_l2"]
        < 1e-5
    )
