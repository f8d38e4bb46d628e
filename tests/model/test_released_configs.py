"""Every preset of a released family equals what that release's config.json reads to (released_configs.py
says where each came from), and the multimodal Kimi-K2.5/K2.6 wrapper is read through its text_config."""

from __future__ import annotations

import json

import pytest
from released_configs import (
    DEEPSEEK_R1_JSON,
    DEEPSEEK_V3_JSON,
    DEEPSEEK_V31_JSON,
    KIMI_K2_INSTRUCT_0905_JSON,
    KIMI_K2_INSTRUCT_JSON,
    KIMI_K2_THINKING_JSON,
)

from mla_debug.model import MLAConfig


def differing(a: MLAConfig, b: MLAConfig) -> dict:
    return {k: (v, b.to_dict()[k]) for k, v in a.to_dict().items() if k != "name" and v != b.to_dict()[k]}


@pytest.mark.parametrize(
    ("preset", "released"),
    [
        ("deepseek-v3", DEEPSEEK_V3_JSON),
        ("deepseek-r1", DEEPSEEK_R1_JSON),
        ("deepseek-v3.1", DEEPSEEK_V31_JSON),
        ("kimi-k2", KIMI_K2_INSTRUCT_JSON),
        ("kimi-k2-0905", KIMI_K2_INSTRUCT_0905_JSON),
    ],
)
def test_the_preset_is_the_release(preset, released):
    assert differing(MLAConfig.from_hf(json.loads(json.dumps(released))), MLAConfig.preset(preset)) == {}


def test_the_kimi_presets_differ_in_context_and_yarn_factor_only():
    assert differing(MLAConfig.preset("kimi-k2"), MLAConfig.preset("kimi-k2-0905")) == {
        "max_position_embeddings": (131072, 262144),
        "rope_scaling": (
            vars(MLAConfig.preset("kimi-k2").rope_scaling),
            vars(MLAConfig.preset("kimi-k2-0905").rope_scaling),
        ),
    }


def test_v31_carries_power_of_two_scales_and_v3_does_not():
    assert MLAConfig.from_hf(DEEPSEEK_V31_JSON).scale_fmt == "ue8m0"
    assert MLAConfig.from_hf(DEEPSEEK_V3_JSON).scale_fmt is None


def test_kimi_k2_thinking_reads_as_0905_with_bf16_attention():
    cfg = MLAConfig.from_hf(KIMI_K2_THINKING_JSON)
    assert not cfg.quantized and cfg.scale_fmt is None
    assert differing(cfg, MLAConfig.preset("kimi-k2-0905").with_(quantized=False)) == {}


def test_a_kimi_k25_wrapper_is_read_through_its_text_config():
    transformers = pytest.importorskip("transformers")
    # transformers' own Kimi-K2.5/K2.6 config class builds the wrapper (model_type kimi_k25) around a text
    # config; the text part here is Kimi-K2-Instruct-0905's attention.
    text = {k: v for k, v in KIMI_K2_INSTRUCT_0905_JSON.items() if k != "architectures"}
    wrapper = transformers.Kimi_K25Config(text_config=json.loads(json.dumps(text))).to_dict()
    assert wrapper["model_type"] == "kimi_k25" and "kv_lora_rank" not in wrapper
    cfg = MLAConfig.from_hf(wrapper)
    assert cfg.name == "kimi_k25"
    assert differing(cfg, MLAConfig.preset("kimi-k2-0905")) == {}


def test_a_wrapper_whose_two_quantization_configs_differ_is_refused():
    wrapper = {
        "model_type": "kimi_k25",
        "text_config": KIMI_K2_INSTRUCT_0905_JSON,
        "quantization_config": KIMI_K2_THINKING_JSON["quantization_config"],
    }
    with pytest.raises(ValueError, match="quantization_config differs between the top level and text_config"):
        MLAConfig.from_hf(wrapper)
    nested_only = {"model_type": "kimi_k25", "text_config": KIMI_K2_THINKING_JSON}
    assert not MLAConfig.from_hf(nested_only).quantized


def test_a_wrapper_without_an_attention_text_config_is_refused():
    with pytest.raises(ValueError, match="nor a wrapper with such a text_config"):
        MLAConfig.from_hf({"model_type": "kimi_k25", "text_config": {"model_type": "llama", "hidden_size": 64}})
