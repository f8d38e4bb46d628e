"""The config.json fields beyond the attention widths: rope_interleave, the rare yarn fields, scale_fmt and
compressed-tensors - each read as transformers 5.24 reads it, or refused with the reason."""

from __future__ import annotations

import copy

import pytest
from released_configs import DEEPSEEK_V3_JSON, DEEPSEEK_V32_EXP_JSON, KIMI_K2_THINKING_JSON

from mla_debug.model import MLAConfig
from mla_debug.model.hf_quantization import V3_ATTENTION_LINEARS


def with_rope(**changes) -> dict:
    data = copy.deepcopy(DEEPSEEK_V3_JSON)
    data["rope_scaling"].update(changes)
    data["rope_scaling"] = {k: v for k, v in data["rope_scaling"].items() if v is not _DROP}
    return data


_DROP = object()


def test_rope_interleave_reads_true_when_absent_and_false_when_written():
    assert MLAConfig.from_hf(DEEPSEEK_V3_JSON).rope_interleave is True
    assert MLAConfig.from_hf({**DEEPSEEK_V3_JSON, "rope_interleave": True}).rope_interleave is True
    cfg = MLAConfig.from_hf({**DEEPSEEK_V3_JSON, "rope_interleave": False})
    assert cfg.rope_interleave is False and cfg.to_hf()["rope_interleave"] is False


def test_rope_interleave_from_a_transformers_config():
    transformers = pytest.importorskip("transformers")
    for value in (True, False):
        data = transformers.DeepseekV3Config(rope_interleave=value).to_dict()
        assert data["rope_interleave"] is value
        assert MLAConfig.from_hf(data).rope_interleave is value


@pytest.mark.parametrize(
    ("data", "pattern"),
    [
        ({**DEEPSEEK_V3_JSON, "rope_interleave": None}, r"rope_interleave must be true or false, got None"),
        (
            {**DEEPSEEK_V32_EXP_JSON, "rope_interleave": False},
            r"rope_interleave false in a deepseek_v32 config: .* ambiguous",
        ),
        (with_rope(factor=_DROP), r"yarn RoPE without 'factor' \(transformers 5.24 refuses it"),
        (with_rope(factor=None), r"'factor' is null and mscale_all_dim is set"),
        (
            {**with_rope(factor=None, mscale_all_dim=0), "max_position_embeddings": None},
            r"'factor' is null and max_position_embeddings, its numerator, is missing",
        ),
        (
            {**with_rope(original_max_position_embeddings=_DROP), "max_position_embeddings": None},
            r"without original_max_position_embeddings takes max_position_embeddings",
        ),
        (with_rope(truncate="no"), r"'truncate' must be true or false"),
        (with_rope(attention_factor=-0.5), r"attention_factor=-0.5 must be a positive number"),
        (with_rope(partial_rotary_factor=0.5), r"partial_rotary_factor=0.5 rotates int\(64 \* 0.5\) dimensions"),
        ({**DEEPSEEK_V3_JSON, "rope_scaling": {"factor": 40.0}}, r"RoPE fields \['factor'\] without a scaling type"),
        (with_rope(type="longrope"), r"RoPE type 'longrope' is not supported"),
    ],
    ids=[
        "interleave-null",
        "interleave-false-v32",
        "factor-missing",
        "factor-null-with-mscale",
        "factor-null-without-max",
        "original-missing-without-max",
        "truncate-string",
        "attention-factor-negative",
        "partial-rotary",
        "factor-without-type",
        "longrope",
    ],
)
def test_rope_fields_transformers_would_read_otherwise_are_refused(data, pattern):
    with pytest.raises(ValueError, match=pattern):
        MLAConfig.from_hf(data)


def test_the_rare_yarn_fields_take_transformers_defaults():
    missing_original = MLAConfig.from_hf(with_rope(original_max_position_embeddings=_DROP)).rope_scaling
    assert missing_original.original_max_position_embeddings == DEEPSEEK_V3_JSON["max_position_embeddings"]
    top_level = MLAConfig.from_hf({**DEEPSEEK_V3_JSON, "original_max_position_embeddings": 8192}).rope_scaling
    assert top_level.original_max_position_embeddings == 8192  # the top-level key wins, as in transformers
    ratio = MLAConfig.from_hf(with_rope(factor=None, mscale_all_dim=0)).rope_scaling
    assert ratio.factor == 163840 / 4096
    nulls = MLAConfig.from_hf(with_rope(beta_fast=None, beta_slow=None, mscale=None)).rope_scaling
    assert (nulls.beta_fast, nulls.beta_slow, nulls.mscale) == (32.0, 1.0, None)
    kept = MLAConfig.from_hf(with_rope(truncate=False, attention_factor=0.9))
    assert (kept.rope_scaling.truncate, kept.rope_scaling.attention_factor) == (False, 0.9)
    written = kept.to_hf()["rope_scaling"]
    assert written["truncate"] is False and written["attention_factor"] == 0.9
    assert MLAConfig.from_hf(kept.to_hf(), name=kept.name) == kept


# -- quantization_config -------------------------------------------------------------------------------------


def with_quant(**changes) -> dict:
    return {**DEEPSEEK_V3_JSON, "quantization_config": {**DEEPSEEK_V3_JSON["quantization_config"], **changes}}


def test_scale_fmt_is_read_and_written_with_the_quantization():
    cfg = MLAConfig.from_hf(with_quant(scale_fmt="ue8m0"))
    assert cfg.scale_fmt == "ue8m0" and cfg.quantized
    assert cfg.to_hf()["quantization_config"]["scale_fmt"] == "ue8m0"
    with pytest.raises(ValueError, match=r"scale_fmt 'e5m2' is not modelled \(known: none, 'float', 'ue8m0'\)"):
        MLAConfig.from_hf(with_quant(scale_fmt="e5m2"))


def compressed(**changes) -> dict:
    data = copy.deepcopy(KIMI_K2_THINKING_JSON)
    data["quantization_config"].update(changes)
    return data


def test_compressed_tensors_that_leave_the_attention_alone_read_as_unquantized():
    assert not MLAConfig.from_hf(KIMI_K2_THINKING_JSON).quantized
    # Targets that name only the experts leave the attention unquantized too, whatever 'ignore' says.
    experts_only = compressed(ignore=["lm_head"])
    experts_only["quantization_config"]["config_groups"]["group_0"]["targets"] = ["re:.*mlp\\.experts\\..*"]
    assert not MLAConfig.from_hf(experts_only).quantized


@pytest.mark.parametrize(
    ("data", "pattern"),
    [
        (
            compressed(ignore=["lm_head"]),
            r"compressed-tensors quantizes attention linears \(model.layers.0.self_attn.q_a_proj \(config_groups.group_0\)",
        ),
        (
            compressed(ignore=["lm_head", "re:.*self_attn\\.(q_a_proj|q_b_proj|kv_b_proj|o_proj)$"]),
            r"model.layers.0.self_attn.kv_a_proj_with_mqa \(config_groups.group_0\)",
        ),
        (
            compressed(ignore=["lm_head", *(f"model.layers.0.self_attn.{m}" for m in V3_ATTENTION_LINEARS)]),
            r"model.layers.1.self_attn.q_a_proj",
        ),
        (compressed(kv_cache_scheme={"num_bits": 8, "type": "float"}), r"kv_cache_scheme .* not modelled"),
        (with_quant(quant_method="gptq", bits=4), r"quant_method 'gptq' is not modelled"),
    ],
    ids=["attention-targeted", "one-linear-targeted", "layer-one-targeted", "kv-cache", "gptq"],
)
def test_quantizations_not_modelled_are_refused(data, pattern):
    with pytest.raises(ValueError, match=pattern):
        MLAConfig.from_hf(data)
