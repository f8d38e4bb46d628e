"""config.json both ways: `to_hf_dict` writes what `from_hf_dict` reads back, through one key table."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from released_configs import DEEPSEEK_V3_JSON, DEEPSEEK_V4_FLASH_JSON, DEEPSEEK_V32_EXP_JSON

from mla_debug.model import PRESETS, MLAConfig, RopeScaling
from mla_debug.model.hf_config import FIELDS, to_hf_dict


def through_json(data: dict) -> dict:
    return json.loads(json.dumps(data))


@pytest.mark.parametrize("name", sorted(PRESETS))
@pytest.mark.parametrize("quantized", [True, False])
def test_every_preset_round_trips(name, quantized):
    cfg = MLAConfig.preset(name).with_(quantized=quantized)
    data = through_json(cfg.to_hf())
    assert ("quantization_config" in data) == quantized
    assert ("rope_scaling" in data) == (cfg.rope_scaling is not None)
    # scale_fmt lives in quantization_config: an unquantized config.json has no place for it.
    expected = cfg if quantized else cfg.with_(scale_fmt=None)
    assert MLAConfig.from_hf(data, name=name) == expected
    assert to_hf_dict(cfg) == cfg.to_hf()


def test_quantized_argument_overrides_the_config():
    tiny = MLAConfig.preset("tiny")
    assert "quantization_config" not in tiny.to_hf(quantized=False)
    assert MLAConfig.from_hf(tiny.to_hf(quantized=False), name="tiny") == tiny.with_(quantized=False)


@pytest.mark.parametrize(
    ("preset", "released"), [("deepseek-v3", DEEPSEEK_V3_JSON), ("deepseek-v4-flash", DEEPSEEK_V4_FLASH_JSON)]
)
def test_what_is_written_has_the_released_config_json_values(preset, released):
    # The table names real config.json keys (not ones only this library reads), and the values written
    # for a preset are the released model's.
    written = MLAConfig.preset(preset).to_hf()
    arch = MLAConfig.preset(preset).arch
    assert {f.key for f in FIELDS if f.arch in (None, arch)} <= set(released)
    shared = set(written) & set(released)
    assert shared >= {"model_type", "architectures", "num_key_value_heads", "rope_theta", "quantization_config"}
    assert {key: written[key] for key in shared} == {key: released[key] for key in shared}


def test_what_is_written_for_deepseek_v32_has_the_released_values():
    written = MLAConfig.preset("deepseek-v3.2").to_hf()
    assert {f.key for f in FIELDS if f.carried_by("v3", True)} <= set(written) <= set(DEEPSEEK_V32_EXP_JSON)
    assert {key: written[key] for key in written} == {key: DEEPSEEK_V32_EXP_JSON[key] for key in written}
    assert (written["model_type"], written["architectures"]) == ("deepseek_v32", ["DeepseekV32ForCausalLM"])


def test_the_key_table_covers_each_family_and_names_each_key_once():
    keys = [f.key for f in FIELDS]
    assert len(keys) == len(set(keys))
    attributes = {f.attribute for f in FIELDS}
    families = (("v3", False, "deepseek-v3"), ("v3", True, "deepseek-v3.2"), ("v4", False, "deepseek-v4-flash"))
    for arch, indexer, preset in families:
        written = MLAConfig.preset(preset).to_hf()
        assert {f.key for f in FIELDS if f.carried_by(arch, indexer)} <= set(written)
        assert not {f.key for f in FIELDS if not f.carried_by(arch, indexer)} & set(written)
    # Every dimension of MLAConfig goes through the table, except the name, the family (model_type) and
    # those with their own config.json shapes - each written where it belongs when it differs from what
    # the key's absence means.
    own_shapes = {
        "rope_theta": "rope_theta",
        "rope_scaling": "rope_scaling",
        "rope_interleave": "rope_interleave",
        "weight_block": "quantization_config",
        "quantized": "quantization_config",
        "scale_fmt": "quantization_config",
    }
    assert attributes | set(own_shapes) | {"name", "arch", "extra"} == set(MLAConfig.__dataclass_fields__)
    unusual = MLAConfig.preset("tiny").with_(rope_interleave=False, scale_fmt="ue8m0", weight_block=(64, 128))
    written = unusual.to_hf()
    assert set(own_shapes.values()) <= set(written)
    assert written["rope_interleave"] is False and written["quantization_config"]["scale_fmt"] == "ue8m0"
    assert "rope_interleave" not in MLAConfig.preset("tiny").to_hf()
    assert "scale_fmt" not in MLAConfig.preset("tiny").to_hf()["quantization_config"]


@st.composite
def configs(draw) -> MLAConfig:
    """Valid configs of either family, with or without yarn RoPE and quantization."""
    positive = st.integers(1, 4096)
    arch = draw(st.sampled_from(["v3", "v4"]))
    rope_dim = 2 * draw(st.integers(1, 64))
    common = dict(
        name="drawn",
        arch=arch,
        hidden_size=draw(positive),
        q_lora_rank=draw(positive),
        qk_rope_head_dim=rope_dim,
        rms_norm_eps=draw(st.floats(1e-12, 1e-2)),
        rope_theta=draw(st.floats(1.0, 1e7)),
        max_position_embeddings=draw(positive),
    )
    if draw(st.booleans()):
        floats = st.floats(0.0, 64.0)
        common["rope_scaling"] = RopeScaling(
            factor=draw(st.floats(0.125, 64.0)),
            beta_fast=draw(floats),
            beta_slow=draw(floats),
            mscale=draw(st.one_of(st.none(), floats)),
            mscale_all_dim=draw(floats),
            original_max_position_embeddings=draw(positive),
            truncate=draw(st.booleans()),
            attention_factor=draw(st.one_of(st.none(), st.floats(0.01, 4.0))),
        )
    quantized = draw(st.booleans())
    block = (draw(st.sampled_from([64, 128])), draw(st.sampled_from([64, 128]))) if quantized else (128, 128)
    scale_fmt = draw(st.sampled_from([None, "ue8m0"])) if quantized else None
    common.update(quantized=quantized, weight_block=block, scale_fmt=scale_fmt)
    if arch == "v3":
        # DeepSeek-V3.2 now and then: the indexer's fields, its head at least as wide as the rope slice.
        indexer = draw(st.booleans())
        return MLAConfig(
            rope_interleave=True if indexer else draw(st.booleans()),  # V3.2 pairs interleaved (MLAConfig.problems)
            num_heads=draw(positive),
            kv_lora_rank=draw(positive),
            qk_nope_head_dim=draw(positive),
            v_head_dim=draw(positive),
            index_n_heads=draw(positive) if indexer else 0,
            index_head_dim=rope_dim + draw(st.integers(0, 256)) if indexer else 0,
            index_topk=draw(positive) if indexer else 0,
            **common,
        )
    groups = draw(st.integers(1, 16))
    return MLAConfig(
        num_heads=groups * draw(st.integers(1, 8)),
        head_dim=rope_dim + draw(st.integers(0, 512)),
        o_groups=groups,
        o_lora_rank=draw(positive),
        index_n_heads=draw(positive),
        index_head_dim=draw(positive),
        index_topk=draw(st.integers(0, 4096)),
        sliding_window=draw(st.integers(0, 4096)),
        **common,
    )


@settings(max_examples=200, deadline=None)
@given(cfg=configs())
def test_any_valid_config_round_trips_through_json(cfg):
    assert MLAConfig.from_hf(through_json(to_hf_dict(cfg)), cfg.name) == cfg
