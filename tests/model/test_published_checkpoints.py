"""Checkpoints made by code that is not this package's: DeepSeek's published FP8 format (V3 and V3.2,
sharded, with its index; written by the tests' own writer from the published convention) and
transformers' FP8 quantizer (FineGrainedFP8Config). Every attention tensor is found, V3.2's indexer is
recognised and skipped, dequantized weights equal both producers' dequantizers bit for bit, and loading
one layer reads no other layer's bytes."""

from __future__ import annotations

import json

import pytest
import torch
from ckpt_helpers import (
    SafeOpenSpy,
    deepseek_block_cast,
    deepseek_dequantize,
    same_bytes,
    tiny_deepseek_config,
    transformers_config,
    transformers_model_state,
    write_deepseek_checkpoint,
)
from hypothesis import given, settings
from hypothesis import strategies as st

from mla_debug.model import Checkpoint, MLAConfig, expected_shapes
from mla_debug.model.indexer import indexer_keys
from mla_debug.numerics import block_quantize

transformers = pytest.importorskip("transformers")

SHARDS = [["model.embed_tokens.", "model.layers.0."], ["model.layers.1.self_attn."], ["model.", "lm_head."]]
INDEXER = sorted(
    [
        "indexer.wq_b.weight",
        "indexer.wq_b.weight_scale_inv",
        "indexer.wk.weight",
        "indexer.wk.weight_scale_inv",
        "indexer.k_norm.weight",
        "indexer.k_norm.bias",
        "indexer.weights_proj.weight",
    ]
)


def deepseek_folder(tmp_path, model_type: str, ue8m0: bool = False, **overrides):
    config = tiny_deepseek_config(model_type, **overrides)
    cls = transformers.DeepseekV32ForCausalLM if model_type == "deepseek_v32" else transformers.DeepseekV3ForCausalLM
    state = transformers_model_state(cls, transformers_config(config), seed=3)
    folder = write_deepseek_checkpoint(tmp_path / model_type, config, state, SHARDS, ue8m0=ue8m0)
    return folder, state


# -- DeepSeek's format -------------------------------------------------------------------------------


@settings(max_examples=40, deadline=None)
@given(
    rows=st.integers(1, 300),
    cols=st.integers(1, 300),
    scale=st.floats(1e-6, 1e3),
    ue8m0=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_the_deepseek_flavor_is_the_published_block_cast(rows, cols, scale, ue8m0, seed):
    """mla_debug's "deepseek" block quantizer gives the bytes of DeepSeek's published convention (partial
    edge blocks, tiny and large magnitudes, ue8m0 scales included)."""
    w = (torch.randn(rows, cols, generator=torch.Generator().manual_seed(seed)) * scale).to(torch.bfloat16)
    ours, our_scale, _ = block_quantize(w, (128, 128), "e4m3fn", "deepseek", ue8m0=ue8m0)
    theirs, their_scale = deepseek_block_cast(w, ue8m0)
    assert same_bytes(ours, theirs) and same_bytes(our_scale, their_scale)


@pytest.mark.parametrize("ue8m0", [False, True], ids=["fp32-scales", "ue8m0-scales"])
def test_a_deepseek_v32_layer_loads_with_its_indexer_recognised(tmp_path, ue8m0):
    folder, state = deepseek_folder(tmp_path, "deepseek_v32", ue8m0)
    ckpt = Checkpoint.load(folder, layer=1)
    cfg = ckpt.cfg
    assert cfg.arch == "v3" and cfg.has_indexer and (cfg.index_n_heads, cfg.index_topk) == (4, 32)
    assert ckpt.quantized and set(ckpt.tensors) == set(expected_shapes(cfg, scales=True))
    assert list(ckpt.unmodelled) == INDEXER and ckpt.ignored == ()
    assert sorted(indexer_keys(cfg)) == sorted(set(INDEXER) | {"indexer.weights_proj.weight_scale_inv"})
    assert "7 not modelled" in repr(ckpt)
    shards = json.loads((folder / "model.safetensors.index.json").read_text())["weight_map"]
    for module in ckpt.linear_modules():
        key = f"model.layers.1.self_attn.{module}"
        q, scale = deepseek_block_cast(state[f"{key}.weight"], ue8m0)
        assert same_bytes(ckpt.tensors[f"{module}.weight"], q), module
        assert same_bytes(ckpt.dense_weight(module), deepseek_dequantize(q, scale)), module
        assert shards[f"{key}.weight"] == "model-00002-of-00003.safetensors"
        if ue8m0:
            exponent = torch.log2(ckpt.tensors[f"{module}.weight_scale_inv"])
            assert torch.equal(exponent, exponent.round()), module
    for module in ckpt.norm_modules():
        assert same_bytes(ckpt.norm_weight(module), state[f"model.layers.1.self_attn.{module}.weight"])


def test_loading_one_layer_reads_no_other_layers_bytes_nor_the_indexers(tmp_path, monkeypatch):
    folder, _ = deepseek_folder(tmp_path, "deepseek_v32")
    spy = SafeOpenSpy(monkeypatch)
    ckpt = Checkpoint.load(folder, layer=1)
    assert spy.opened == ["model-00002-of-00003.safetensors"]  # the index names the one shard
    assert sorted(spy.fetched) == sorted(f"model.layers.1.self_attn.{key}" for key in ckpt.tensors)
    spy.opened.clear(), spy.fetched.clear()
    Checkpoint.load(folder, layer=0)
    assert spy.opened == ["model-00001-of-00003.safetensors"]
    assert all(key.startswith("model.layers.0.self_attn.") and ".indexer." not in key for key in spy.fetched)


def test_a_deepseek_v3_layer_has_no_indexer(tmp_path):
    folder, _ = deepseek_folder(tmp_path, "deepseek_v3")
    ckpt = Checkpoint.load(folder, layer=0)
    assert not ckpt.cfg.has_indexer and ckpt.unmodelled == () and ckpt.quantized
    assert set(ckpt.tensors) == set(expected_shapes(ckpt.cfg, scales=True))


def test_indexer_tensors_under_a_v3_config_are_refused_with_the_reason_or_ignored(tmp_path):
    folder, _ = deepseek_folder(tmp_path, "deepseek_v32")
    config = json.loads((folder / "config.json").read_text())
    config.update(model_type="deepseek_v3", architectures=["DeepseekV3ForCausalLM"])
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError) as err:
        Checkpoint.load(folder, layer=1)
    message = str(err.value)
    assert "model.layers.1.self_attn.indexer.k_norm.bias" in message and "not part of a v3 attention layer" in message
    assert "model_type deepseek_v32" in message and "--ignore-extra" in message
    ckpt = Checkpoint.load(folder, layer=1, ignore_extra=True)
    assert list(ckpt.ignored) == INDEXER and ckpt.unmodelled == () and "7 ignored" in repr(ckpt)


def test_an_unknown_tensor_beside_the_indexer_needs_ignore_extra(tmp_path):
    folder, state = deepseek_folder(tmp_path, "deepseek_v32")
    extra = {"model.layers.1.self_attn.q_b_proj.bias": torch.zeros(3072, dtype=torch.bfloat16)}
    from safetensors.torch import save_file

    save_file(extra, str(folder / "model-extra.safetensors"))
    index = json.loads((folder / "model.safetensors.index.json").read_text())
    index["weight_map"].update({key: "model-extra.safetensors" for key in extra})
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(ValueError, match=r"q_b_proj\.bias'\] are not part of a v3 attention layer"):
        Checkpoint.load(folder, layer=1)
    ckpt = Checkpoint.load(folder, layer=1, ignore_extra=True)
    assert ckpt.ignored == ("q_b_proj.bias",) and list(ckpt.unmodelled) == INDEXER


# -- transformers' FP8 quantizer ---------------------------------------------------------------------------


def transformers_fp8_folder(tmp_path, monkeypatch, model_type: str, **overrides):
    """A model folder quantized by transformers' FineGrainedFP8Config (128x128 blocks) and saved by
    save_pretrained. The quantizer refuses a machine without a GPU in `validate_environment`; that
    environment check is the only part bypassed here - quantization, module replacement and saving
    are transformers' own."""
    from transformers.quantizers.quantizer_finegrained_fp8 import FineGrainedFP8HfQuantizer

    config = transformers_config(tiny_deepseek_config(model_type, **overrides))
    cls = transformers.DeepseekV32ForCausalLM if model_type == "deepseek_v32" else transformers.DeepseekV3ForCausalLM
    state = transformers_model_state(cls, config, seed=5)
    dense = cls(config).to(torch.bfloat16)
    dense.load_state_dict(state)
    dense.save_pretrained(tmp_path / "bf16")
    monkeypatch.setattr(FineGrainedFP8HfQuantizer, "validate_environment", lambda self, *args, **kwargs: None)
    quantized = cls.from_pretrained(
        tmp_path / "bf16", quantization_config=transformers.FineGrainedFP8Config(weight_block_size=(128, 128))
    )
    quantized.save_pretrained(tmp_path / "fp8")
    return tmp_path / "fp8", quantized


@pytest.mark.slow
@pytest.mark.parametrize("model_type", ["deepseek_v3", "deepseek_v32"])
def test_transformers_fp8_quantized_layer_equals_transformers_dequantization(tmp_path, monkeypatch, model_type):
    # R = 128 and Lkv = 128 make every attention weight a whole number of 128x128 blocks: transformers'
    # quantizer leaves any other weight in bf16 (see the next test).
    folder, quantized = transformers_fp8_folder(
        tmp_path, monkeypatch, model_type, qk_rope_head_dim=128, kv_lora_rank=128, qk_nope_head_dim=128
    )
    from transformers.integrations.finegrained_fp8 import Fp8Dequantize

    dequantize = Fp8Dequantize(None)._dequantize_one
    ckpt = Checkpoint.load(folder, layer=1)
    assert ckpt.quantized and ckpt.cfg.has_indexer == (model_type == "deepseek_v32")
    attention = quantized.model.layers[1].self_attn
    for module in ckpt.linear_modules():
        linear = attention.get_submodule(module)
        assert same_bytes(ckpt.tensors[f"{module}.weight"], linear.weight.data), module
        theirs = dequantize(linear.weight.data, linear.weight_scale_inv.data, torch.float32)
        assert same_bytes(ckpt.dense_weight(module), theirs), module
    if model_type == "deepseek_v32":
        # weights_proj is kept in fp32 by transformers (_keep_in_fp32_modules); wq_b and wk are fp8.
        assert "indexer.wq_b.weight_scale_inv" in ckpt.unmodelled and "indexer.weights_proj.weight" in ckpt.unmodelled


@pytest.mark.slow
def test_transformers_fp8_leaves_a_partial_block_weight_dense_and_the_layer_is_refused(tmp_path, monkeypatch):
    """With DeepSeek's own widths kv_a_proj_with_mqa has Lkv + R rows (576 in V3; 320 here), not a whole
    number of 128-row blocks: transformers' quantizer keeps it bf16 beside a weight_scale_inv it never
    filled. A layer with fp8 and dense linears is refused, naming the tensor and the rule."""
    folder, quantized = transformers_fp8_folder(tmp_path, monkeypatch, "deepseek_v3")
    assert quantized.model.layers[0].self_attn.kv_a_proj_with_mqa.weight.dtype == torch.bfloat16
    with pytest.raises(ValueError) as err:
        Checkpoint.load(folder, layer=0)
    assert "kv_a_proj_with_mqa.weight_scale_inv: present but kv_a_proj_with_mqa.weight is torch.bfloat16" in str(
        err.value
    )
    assert "mixed linear weights" in str(err.value)


def test_the_published_v32_config_and_transformers_agree_on_the_tiny_folder(tmp_path):
    folder, _ = deepseek_folder(tmp_path, "deepseek_v32")
    theirs = transformers.AutoConfig.from_pretrained(folder)
    assert type(theirs).__name__ == "DeepseekV32Config"
    ours = MLAConfig.from_hf(folder)
    assert (theirs.index_n_heads, theirs.index_head_dim, theirs.index_topk) == (
        ours.index_n_heads,
        ours.index_head_dim,
        ours.index_topk,
    )
    assert theirs.rope_parameters["factor"] == ours.rope_scaling.factor == 40
