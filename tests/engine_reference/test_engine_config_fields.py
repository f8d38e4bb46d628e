"""How the released engines read the config.json fields beyond the attention widths - rope_interleave,
quantization_config.scale_fmt, compressed-tensors' targets - checked in the wheels (vLLM 0.33.0, SGLang
0.5.23), so that what the profiles and `hf_quantization` model stays what the engines do."""

from __future__ import annotations

import re
from fnmatch import fnmatch

import engine_source
from test_engine_model_sources import function_source

from mla_debug.model.hf_quantization import V3_ATTENTION_LINEARS, module_matches


def test_vllm_pairs_mla_rope_interleaved_whatever_rope_interleave_says():
    init = function_source("vllm", "vllm/model_executor/models/deepseek_v2.py", "DeepseekV2MLAAttention.__init__")
    (call,) = [part for part in init.split("self.rotary_emb = get_rope(")[1:]]
    assert "is_neox_style=False" in call.split(")")[0]
    assert "rope_interleave" not in init.replace("indexer_rope_interleave", "")


def test_sglang_pairs_mla_rope_as_rope_interleave_says():
    init = function_source("sglang", "sglang/srt/models/deepseek_v2.py", "DeepseekV2AttentionMLA.__init__")
    assert 'is_neox_style = not getattr(config, "rope_interleave", True)' in init


def test_vllm_turns_deepgemm_ue8m0_on_for_a_ue8m0_checkpoint_only_when_unset():
    get_config = function_source("vllm", "vllm/transformers_utils/config.py", "get_config")
    assert 'scale_fmt = quantization_config.get("scale_fmt", None)' in get_config
    assert 'if not envs.is_set("VLLM_USE_DEEP_GEMM_E8M0"):' in get_config
    assert 'os.environ["VLLM_USE_DEEP_GEMM_E8M0"] = "1"' in get_config


def test_sglang_binds_the_checkpoint_scale_format_to_the_deepgemm_call():
    init = function_source("sglang", "sglang/srt/layers/quantization/fp8.py", "Fp8LinearMethod.__init__")
    assert 'self.quant_config.scale_fmt == "ue8m0"' in init and "act_scale_ue8m0=" in init
    dispatch = function_source(
        "sglang", "sglang/srt/layers/quantization/fp8_utils.py", "dispatch_w8a8_block_fp8_linear"
    )
    assert "if act_scale_ue8m0 and linear is deepgemm_w8a8_block_fp8_linear_with_fallback:" in dispatch
    wrapper = function_source(
        "sglang", "sglang/srt/layers/quantization/fp8_utils.py", "deepgemm_w8a8_block_fp8_linear_with_fallback"
    )
    hopper = wrapper[wrapper.index("if get_platform().is_sm90 and act_scale_ue8m0:") :]
    assert "scale_ue8m0=True" in hopper.split("elif")[0]


def test_compressed_tensors_names_match_like_vllm_does():
    """`hf_quantization`'s target/ignore rule agrees with vLLM's own matcher (is_equal_or_regex_match, by
    module name; a class name counts by containment, as find_matched_target asks) on every attention
    linear, for exact names, regular expressions and the Linear class."""
    namespace = engine_source.load(
        "vllm",
        "vllm/model_executor/layers/quantization/utils/config_utils.py",
        ["is_equal_or_regex_match"],
        {"re": re, "fnmatch": fnmatch},
    )
    vllm_match = namespace["is_equal_or_regex_match"]
    targets = [
        "Linear",
        "re:.*self_attn.*",
        "re:.*mlp\\.(gate|up|gate_up|down)_proj.*",
        "re:model\\.layers\\.[0-9]\\.self_attn\\.o_proj",
        "model.layers.3.self_attn.kv_b_proj",
        "lm_head",
        "re:self_attn",
    ]
    for layer in (0, 3, 12):
        for module in V3_ATTENTION_LINEARS:
            name = f"model.layers.{layer}.self_attn.{module}"
            for target in targets:
                by_name = vllm_match(name, target)
                by_class = vllm_match("Linear", target, check_contains=True)
                assert module_matches(name, target) == (by_name or by_class), (name, target)
