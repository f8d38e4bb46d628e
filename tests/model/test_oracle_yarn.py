"""Oracle: the yarn fields of a config.json read as transformers 5.24 reads them.

For any combination of the yarn fields transformers accepts - factor given or null (the max / original
ratio), original_max_position_embeddings in the RoPE dict, at the top level or absent, betas absent, null
or 0, mscale / mscale_all_dim absent, 0 or set, truncate, attention_factor - the frequencies equal
``_compute_yarn_parameters``' bit for bit, the cos/sin multiplier its ``attention_scaling`` and the softmax
scale DeepSeek-V3's ``yarn_apply_mscale``; and the attention module agrees with run_layer for a few such
configs at positions past the pre-training length.
"""

from __future__ import annotations

import copy

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import mla_debug as md
from mla_debug.model.rope import inverse_frequencies

transformers = pytest.importorskip("transformers")
from transformers.modeling_rope_utils import _compute_yarn_parameters  # noqa: E402
from transformers.models.deepseek_v3 import modeling_deepseek_v3 as hf  # noqa: E402

ABSENT = object()


def dims(rope_dim: int) -> dict:
    return dict(
        hidden_size=256,
        num_attention_heads=4,
        num_key_value_heads=4,
        q_lora_rank=128,
        kv_lora_rank=64,
        qk_nope_head_dim=32,
        qk_rope_head_dim=rope_dim,
        v_head_dim=32,
    )


def optional(values):
    return st.one_of(st.just(ABSENT), values)


@st.composite
def yarn_configs(draw) -> dict:
    """A DeepSeek-V3 config.json (as a dict) with a yarn RoPE transformers accepts and can run."""
    rope = {"rope_type": "yarn", "rope_theta": draw(st.floats(1000.0, 1e6))}
    fields = {
        "beta_fast": optional(st.one_of(st.none(), st.just(0), st.floats(1.0, 64.0))),
        "beta_slow": optional(st.one_of(st.none(), st.just(0), st.floats(0.25, 4.0))),
        "mscale": optional(st.one_of(st.none(), st.just(0), st.floats(0.1, 2.0))),
        "mscale_all_dim": optional(st.one_of(st.none(), st.just(0), st.floats(0.1, 2.0))),
        "original_max_position_embeddings": optional(st.integers(256, 8192)),
        "truncate": optional(st.booleans()),
        "attention_factor": optional(st.floats(0.25, 2.0)),
    }
    for key, strategy in fields.items():
        value = draw(strategy)
        if value is not ABSENT:
            rope[key] = value
    # A null factor takes the max / original ratio; transformers' attention cannot pair it with an mscale_all_dim.
    rope["factor"] = None if not rope.get("mscale_all_dim") and draw(st.booleans()) else draw(st.floats(1.0, 64.0))
    data = {
        "model_type": "deepseek_v3",
        **dims(2 * draw(st.integers(2, 64))),
        "max_position_embeddings": draw(st.integers(1024, 200000)),
        "rope_parameters": rope,
    }
    if draw(st.booleans()):
        data["original_max_position_embeddings"] = draw(st.integers(256, 8192))
    return data


def transformers_config(data: dict):
    kwargs = copy.deepcopy({k: v for k, v in data.items() if k != "model_type"})
    return transformers.DeepseekV3Config(**kwargs)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=yarn_configs())
def test_frequencies_and_scales_equal_transformers(data):
    config = transformers_config(data)
    inv_freq, attention_scaling = _compute_yarn_parameters(config)
    softmax = hf.yarn_apply_mscale(config.rope_parameters, (32 + data["qk_rope_head_dim"]) ** -0.5)
    # The config.json as written and the config transformers saves read the same.
    for source in (data, config.to_dict()):
        cfg = md.MLAConfig.from_hf(copy.deepcopy(source), name="drawn")
        assert torch.equal(inverse_frequencies(cfg.qk_rope_head_dim, cfg.rope_theta, cfg.rope_scaling), inv_freq)
        assert cfg.rope_scaling.cos_sin_scale == attention_scaling
        assert cfg.softmax_scale == pytest.approx(softmax, rel=1e-15)
        assert md.MLAConfig.from_hf(cfg.to_hf(), name="drawn") == cfg


def test_a_null_factor_with_mscale_all_dim_is_refused_where_transformers_fails():
    data = {
        "model_type": "deepseek_v3",
        **dims(16),
        "max_position_embeddings": 8192,
        "rope_parameters": {"rope_type": "yarn", "factor": None, "mscale_all_dim": 1.0},
    }
    with pytest.raises(TypeError):
        hf.DeepseekV3Attention(transformers_config(data), layer_idx=0)
    with pytest.raises(ValueError, match="'factor' is null and mscale_all_dim is set"):
        md.MLAConfig.from_hf(data)


POSITIONS = torch.arange(5000, 5010)
ATTENTION_CASES = {
    "truncate-false": {"factor": 40.0, "beta_fast": 32, "beta_slow": 1, "truncate": False},
    "attention-factor": {"factor": 16.0, "attention_factor": 0.8, "mscale": 1.0, "mscale_all_dim": 0.5},
    "mscale-absent": {"factor": 40.0, "mscale_all_dim": 1.0, "original_max_position_embeddings": 4096},
    "factor-from-ratio": {"factor": None, "original_max_position_embeddings": 2048},
    "original-max-absent": {"factor": 8.0, "beta_fast": 0, "beta_slow": None},
}


@pytest.mark.parametrize("case", sorted(ATTENTION_CASES))
def test_the_attention_module_agrees_past_the_pretraining_length(case):
    data = {
        "model_type": "deepseek_v3",
        **dims(16),
        "rms_norm_eps": 1e-6,
        "max_position_embeddings": 32768,
        "attention_bias": False,
        "rope_parameters": {"rope_type": "yarn", "rope_theta": 10000.0, **ATTENTION_CASES[case]},
    }
    config = transformers_config(data)
    config._attn_implementation = "eager"
    torch.manual_seed(5)
    attention = hf.DeepseekV3Attention(config, layer_idx=0).eval()
    rotary = hf.DeepseekV3RotaryEmbedding(config)
    hidden = torch.randn(len(POSITIONS), 256, generator=torch.Generator().manual_seed(6))
    x = hidden.unsqueeze(0)
    cos, sin = rotary(x, POSITIONS.unsqueeze(0))
    mask = torch.full((len(POSITIONS),) * 2, float("-inf")).triu(1).view(1, 1, len(POSITIONS), len(POSITIONS))
    with torch.no_grad():
        expected = attention(x, position_embeddings=(cos, sin), attention_mask=mask)[0][0]
    cfg = md.MLAConfig.from_hf(data, name=case)
    ckpt = md.Checkpoint.from_state_dict(cfg, attention.state_dict(), quantize=False)
    for mode in ("prefill", "decode"):
        run = md.run_layer(cfg, ckpt, hidden, POSITIONS, tp_size=2, mode=mode, dtype=torch.float32)
        assert md.numerics.error_metrics(run.output, expected)["rel_l2"] < 1e-5, mode
