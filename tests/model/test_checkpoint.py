"""One attention layer's checkpoint: synthetic weights, state dicts, Hugging Face folders, the CLI."""

from __future__ import annotations

import json
import math
import os
import stat
import subprocess
import sys
import textwrap
import warnings

import pytest
import torch
from ckpt_helpers import ATTN, SafeOpenSpy, assert_same_tensors, bits, prefixed, same_bytes, write_sharded
from hf_deepseek import attention_widths
from safetensors.torch import save_file

import mla_debug.model.checkpoint as checkpoint_module
from mla_debug.cli import main
from mla_debug.layouts import QuantizedWeight
from mla_debug.model import Checkpoint, MLAConfig, expected_shapes
from mla_debug.model.checkpoint import open_safetensors
from mla_debug.model.synthetic import BLOCK_FACTOR_RANGE, NORM_RANGE, OUTLIER_COLUMNS, OUTLIER_GAIN_RANGE
from mla_debug.numerics import E4M3FN, E4M3FNUZ, Fp8OverflowWarning, block_dequantize, block_quantize

TINY = MLAConfig.preset("tiny")
TINY_V4 = MLAConfig.preset("tiny-v4")

V3_KEYS = [
    "q_a_proj.weight",
    "q_a_layernorm.weight",
    "q_b_proj.weight",
    "kv_a_proj_with_mqa.weight",
    "kv_a_layernorm.weight",
    "kv_b_proj.weight",
    "o_proj.weight",
]


@pytest.fixture(scope="module")
def tiny() -> Checkpoint:
    return Checkpoint.synthetic(TINY, seed=0)


@pytest.fixture(scope="module")
def tiny_dense() -> Checkpoint:
    return Checkpoint.synthetic(TINY, seed=0, quantize=False)


@pytest.fixture(scope="module")
def tiny_v4() -> Checkpoint:
    return Checkpoint.synthetic(TINY_V4, seed=0)


# -- expected shapes -------------------------------------------------------------------------------


def test_expected_shapes_deepseek_v3():
    shapes = expected_shapes(MLAConfig.preset("deepseek-v3"))
    assert shapes == {
        "q_a_proj.weight": (1536, 7168),
        "q_a_layernorm.weight": (1536,),
        "q_b_proj.weight": (24576, 1536),
        "kv_a_proj_with_mqa.weight": (576, 7168),
        "kv_a_layernorm.weight": (512,),
        "kv_b_proj.weight": (32768, 512),
        "o_proj.weight": (7168, 16384),
    }
    assert sum(math.prod(s) for s in shapes.values()) == 187_107_328
    with_scales = expected_shapes(MLAConfig.preset("deepseek-v3"), scales=True)
    # kv_a_proj_with_mqa has 576 = 4.5 x 128 rows: the last row block is partial.
    assert with_scales["kv_a_proj_with_mqa.weight_scale_inv"] == (5, 56)
    assert with_scales["o_proj.weight_scale_inv"] == (56, 128)
    assert "q_a_layernorm.weight_scale_inv" not in with_scales
    assert len(with_scales) == 12


def test_expected_shapes_deepseek_v4_flash():
    assert expected_shapes(MLAConfig.preset("deepseek-v4-flash")) == {
        "wq_a.weight": (1024, 4096),
        "wkv.weight": (512, 4096),
        "q_norm.weight": (1024,),
        "kv_norm.weight": (512,),
        "wq_b.weight": (32768, 1024),
        "wo_a.weight": (8192, 4096),
        "wo_b.weight": (4096, 8192),
        "indexer.wq_b.weight": (8192, 1024),
    }


def test_expected_shapes_follow_the_block_size():
    cfg = TINY.with_(weight_block=(64, 256))
    assert expected_shapes(cfg, scales=True)["q_b_proj.weight_scale_inv"] == (3072 // 64, 1)


# -- synthetic weights -----------------------------------------------------------------------------


@pytest.mark.parametrize("cfg", [TINY, TINY_V4], ids=["tiny", "tiny-v4"])
def test_synthetic_same_seed_same_bytes_other_seed_other_bytes(cfg):
    a = Checkpoint.synthetic(cfg, seed=7)
    assert_same_tensors(a.tensors, Checkpoint.synthetic(cfg, seed=7).tensors)
    b = Checkpoint.synthetic(cfg, seed=8)
    assert [k for k in a.tensors if same_bytes(a.tensors[k], b.tensors[k])] == []


def test_synthetic_layout_and_dtypes(tiny, tiny_v4):
    assert tiny.quantized and tiny.fmt is E4M3FN and tiny.cfg.quantized and tiny.layer == 0
    assert list(tiny.tensors) == [
        "q_a_proj.weight",
        "q_a_proj.weight_scale_inv",
        "q_a_layernorm.weight",
        "q_b_proj.weight",
        "q_b_proj.weight_scale_inv",
        "kv_a_proj_with_mqa.weight",
        "kv_a_proj_with_mqa.weight_scale_inv",
        "kv_a_layernorm.weight",
        "kv_b_proj.weight",
        "kv_b_proj.weight_scale_inv",
        "o_proj.weight",
        "o_proj.weight_scale_inv",
    ]
    for ckpt in (tiny, tiny_v4):
        shapes = expected_shapes(ckpt.cfg, scales=True)
        assert {k: tuple(t.shape) for k, t in ckpt.tensors.items()} == shapes
        for module in ckpt.linear_modules():
            assert ckpt.tensors[module + ".weight"].dtype == torch.float8_e4m3fn
            assert ckpt.tensors[module + ".weight_scale_inv"].dtype == torch.float32
        for module in ckpt.norm_modules():
            assert ckpt.tensors[module + ".weight"].dtype == torch.bfloat16
    assert tiny.linear_modules() == ["q_a_proj", "q_b_proj", "kv_a_proj_with_mqa", "kv_b_proj", "o_proj"]
    assert tiny.norm_modules() == ["q_a_layernorm", "kv_a_layernorm"]
    assert tiny_v4.linear_modules() == ["wq_a", "wkv", "wq_b", "wo_a", "wo_b", "indexer.wq_b"]
    assert tiny_v4.norm_modules() == ["q_norm", "kv_norm"]
    assert tiny.num_params == sum(math.prod(s) for s in expected_shapes(TINY).values())
    assert repr(tiny).startswith("Checkpoint(tiny, layer 0, fp8 e4m3fn, 12 tensors, 2.6M params")


def test_synthetic_dense_is_bf16_and_the_quantized_one_is_its_deepseek_block_quant(tiny, tiny_dense):
    assert not tiny_dense.quantized and tiny_dense.fmt is None and not tiny_dense.cfg.quantized
    assert set(tiny_dense.tensors) == set(expected_shapes(TINY))
    for module in tiny.linear_modules():
        dense = tiny_dense.tensors[module + ".weight"]
        assert dense.dtype == torch.bfloat16
        q, scale, overflows = block_quantize(dense, (128, 128), "e4m3fn", "deepseek")
        assert overflows == 0
        assert same_bytes(q, tiny.tensors[module + ".weight"]), module
        assert same_bytes(scale, tiny.tensors[module + ".weight_scale_inv"]), module
    for module in tiny.norm_modules():
        assert same_bytes(tiny.tensors[module + ".weight"], tiny_dense.tensors[module + ".weight"])


def test_synthetic_quantization_uses_the_full_448_range_in_every_block(tiny):
    for module in tiny.linear_modules():
        q = tiny.tensors[module + ".weight"]
        values = E4M3FN.decode(q).abs()
        n, k = q.shape
        padded = torch.nn.functional.pad(values, (0, -k % 128, 0, -n % 128))
        block_max = padded.view(-(-n // 128), 128, -(-k // 128), 128).amax(dim=(1, 3))
        assert torch.equal(block_max, torch.full_like(block_max, 448.0)), module


def test_synthetic_block_scales_differ_across_blocks(tiny, tiny_v4):
    low, high = BLOCK_FACTOR_RANGE
    for ckpt in (tiny, tiny_v4):
        for module in ckpt.linear_modules():
            scale = ckpt.tensors[module + ".weight_scale_inv"]
            if scale.numel() == 1:
                continue
            # bf16 amaxes carry 8 significant bits, so two blocks can share a scale by chance - rarely.
            assert scale.unique().numel() >= 0.9 * scale.numel(), module
            # Log-uniform block factors over [1/4, 4]: even 2 blocks almost surely differ by more than 1.2x.
            assert scale.max() / scale.min() > 1.2, module
            assert scale.max() / scale.min() < (high / low) * OUTLIER_GAIN_RANGE[1] * 2, module
    o_scale = tiny.tensors["o_proj.weight_scale_inv"]  # 4 x 16 blocks
    assert o_scale.max() / o_scale.min() > 4


def _outlier_columns(weight: torch.Tensor) -> set[int]:
    """Columns whose RMS is > 5x the median column RMS of their 128x128 block, in every row block."""
    n, k = weight.shape
    outlier = torch.ones(k, dtype=torch.bool)
    for r0 in range(0, n, 128):
        rms = weight[r0 : r0 + 128].pow(2).mean(dim=0).sqrt()
        for c0 in range(0, k, 128):
            block = rms[c0 : c0 + 128]
            outlier[c0 : c0 + 128] &= block > 5 * block.median()
    return set(torch.nonzero(outlier).flatten().tolist())


def test_synthetic_weights_have_outlier_input_columns(tiny, tiny_v4):
    for ckpt in (tiny, tiny_v4):
        for module in ckpt.linear_modules():
            cols = _outlier_columns(ckpt.dense_weight(module))
            assert len(cols) == OUTLIER_COLUMNS, (module, sorted(cols))


def test_synthetic_magnitudes_and_norm_weights(tiny_dense):
    for module in tiny_dense.linear_modules():
        w = tiny_dense.dense_weight(module)
        k = w.shape[1]
        # Median |w| of a normal with std 0.5/sqrt(K) is 0.337/sqrt(K); block factors spread it by <= 4x.
        median = w.abs().median().item() * math.sqrt(k)
        assert 0.337 / 4 < median < 0.337 * 4, (module, median)
    low, high = NORM_RANGE
    for module in tiny_dense.norm_modules():
        w = tiny_dense.norm_weight(module, torch.float32)
        assert w.min() >= low and w.max() <= high and w.std() > 0.2, module


def test_synthetic_never_overflows_and_v3_preset_by_name():
    with warnings.catch_warnings():
        warnings.simplefilter("error", Fp8OverflowWarning)
        ckpt = Checkpoint.synthetic("tiny", seed=3, layer=4)
    assert ckpt.cfg == TINY and ckpt.layer == 4 and ckpt.source == "synthetic(seed=3, e4m3fn, deepseek)"
    # The layer is a label only: same seed, same bytes whatever the layer.
    assert_same_tensors(ckpt.tensors, Checkpoint.synthetic(TINY, seed=3, layer=0).tensors)


def test_synthetic_fnuz_uses_the_format_max():
    ckpt = Checkpoint.synthetic(TINY, seed=0, fmt="e4m3fnuz")
    assert ckpt.fmt is E4M3FNUZ
    q = ckpt.tensors["q_b_proj.weight"]
    assert q.dtype == torch.float8_e4m3fnuz
    assert not E4M3FNUZ.is_nan_bytes(q).any()
    assert E4M3FNUZ.decode(q).abs().max() == 240.0


def test_synthetic_progress_bar_only_when_asked_or_large(capsys):
    Checkpoint.synthetic(TINY, seed=0)
    assert capsys.readouterr().err == ""
    Checkpoint.synthetic(TINY, seed=0, progress=True)
    assert "synthetic tiny layer 0" in capsys.readouterr().err


def test_synthetic_rejects_bad_arguments():
    with pytest.raises(ValueError, match="unknown preset 'huge'"):
        Checkpoint.synthetic("huge")
    with pytest.raises(TypeError, match="seed must be an int, got float"):
        Checkpoint.synthetic(TINY, seed=1.5)
    with pytest.raises(ValueError, match="layer=-1 must be a non-negative int"):
        Checkpoint.synthetic(TINY, layer=-1)
    with pytest.raises(ValueError, match="unknown format 'e5m2'"):
        Checkpoint.synthetic(TINY, fmt="e5m2")


# -- views -----------------------------------------------------------------------------------------


def test_dense_weight_of_a_quantized_checkpoint_is_the_block_dequantization(tiny, tiny_v4):
    for ckpt in (tiny, tiny_v4):
        for module in ckpt.linear_modules():
            q, s = ckpt.tensors[module + ".weight"], ckpt.tensors[module + ".weight_scale_inv"]
            expected = block_dequantize(q, s, (128, 128))
            assert same_bytes(ckpt.dense_weight(module), expected), module
            assert same_bytes(ckpt.dense_weight(module + ".weight", dtype=torch.bfloat16), expected.to(torch.bfloat16))
    # weight_scale_inv multiplies: block (0, 0) of q_b_proj is its fp8 values times scale[0, 0].
    q, s = tiny.tensors["q_b_proj.weight"], tiny.tensors["q_b_proj.weight_scale_inv"]
    assert torch.equal(tiny.dense_weight("q_b_proj")[:128, :128], E4M3FN.decode(q[:128, :128]) * s[0, 0])


def test_dense_weight_of_a_dense_checkpoint_is_a_copy(tiny_dense):
    w = tiny_dense.dense_weight("o_proj", dtype=torch.bfloat16)
    assert same_bytes(w, tiny_dense.tensors["o_proj.weight"])
    w.zero_()
    assert tiny_dense.tensors["o_proj.weight"].abs().sum() > 0
    assert same_bytes(tiny_dense.dense_weight("o_proj"), tiny_dense.tensors["o_proj.weight"].float())


def test_quantized_weight_is_the_stored_bytes_in_plain_layout(tiny):
    qw = tiny.quantized_weight("kv_b_proj")
    assert isinstance(qw, QuantizedWeight)
    assert qw.fmt is E4M3FN and qw.layout.plain and qw.block == (128, 128)
    assert qw.data.data_ptr() == tiny.tensors["kv_b_proj.weight"].data_ptr()
    assert same_bytes(qw.scale, tiny.tensors["kv_b_proj.weight_scale_inv"])
    assert same_bytes(qw.dequantize_plain(), tiny.dense_weight("kv_b_proj"))


def test_view_errors_name_the_module(tiny, tiny_dense):
    with pytest.raises(ValueError, match=r"'q_proj' is not a linear module of a v3 layer; valid: \['q_a_proj'"):
        tiny.dense_weight("q_proj")
    with pytest.raises(ValueError, match=r"'q_a_layernorm' is not a linear module"):
        tiny.quantized_weight("q_a_layernorm")
    with pytest.raises(ValueError, match=r"'o_proj' is not a norm module"):
        tiny.norm_weight("o_proj")
    with pytest.raises(ValueError, match=r"q_b_proj is dense \(torch.bfloat16\); quantize the checkpoint first"):
        tiny_dense.quantized_weight("q_b_proj")
    assert tiny.norm_weight("kv_a_layernorm") is tiny.tensors["kv_a_layernorm.weight"]


# -- validation of a tensor dict -------------------------------------------------------------------


def test_constructor_validates_and_normalizes_the_config(tiny, tiny_dense):
    ckpt = Checkpoint(cfg=TINY, layer=0, tensors=tiny_dense.tensors, quantized=False)
    assert TINY.quantized and not ckpt.cfg.quantized and ckpt.cfg.with_(quantized=True) == TINY
    with pytest.raises(ValueError, match=r"quantized=True but the checkpoint holds dense weights"):
        Checkpoint(cfg=TINY, layer=0, tensors=tiny_dense.tensors, quantized=True)
    with pytest.raises(ValueError, match=r"quantized=False but the checkpoint holds e4m3fn weights"):
        Checkpoint(cfg=TINY, layer=0, tensors=tiny.tensors, quantized=False)
    with pytest.raises(TypeError, match="cfg must be an MLAConfig"):
        Checkpoint(cfg="tiny", layer=0, tensors=tiny.tensors, quantized=True)


def test_mixed_fp8_and_dense_linears_are_refused(tiny, tiny_dense):
    mixed = dict(tiny.tensors)
    mixed["o_proj.weight"] = tiny_dense.tensors["o_proj.weight"]
    del mixed["o_proj.weight_scale_inv"]
    with pytest.raises(ValueError, match=r"mixed linear weights: fp8 \[.*\] and dense \['o_proj.weight'\]"):
        Checkpoint.from_state_dict(TINY, mixed)
    # ... unless the dense one is quantized on the way in.
    fixed = Checkpoint.from_state_dict(TINY, mixed, quantize=True)
    assert_same_tensors(fixed.tensors, tiny.tensors)


# -- from_state_dict -------------------------------------------------------------------------------


def _transformers_attention():
    transformers = pytest.importorskip("transformers")
    from transformers.models.deepseek_v3.modeling_deepseek_v3 import DeepseekV3Attention

    # A decoder layer's MLP needs its widths too (the first three layers are dense).
    config = transformers.DeepseekV3Config(**attention_widths(), intermediate_size=256, first_k_dense_replace=3)
    torch.manual_seed(0)
    return config, DeepseekV3Attention(config, layer_idx=0)


def test_from_state_dict_of_transformers_attention_with_and_without_prefix():
    config, attn = _transformers_attention()
    cfg = MLAConfig.from_hf(config.to_dict())
    assert cfg.with_(name="tiny", quantized=True, max_position_embeddings=TINY.max_position_embeddings) == TINY
    params = dict(attn.named_parameters())
    assert all(p.requires_grad for p in params.values())
    bare = Checkpoint.from_state_dict(TINY, params)
    assert list(bare.tensors) == V3_KEYS and not bare.quantized and bare.layer == 0
    assert not any(t.requires_grad for t in bare.tensors.values())
    assert_same_tensors(bare.tensors, {k: v.detach() for k, v in attn.state_dict().items()})
    with_prefix = Checkpoint.from_state_dict(TINY, {ATTN.format(layer=3) + k: v for k, v in attn.state_dict().items()})
    assert with_prefix.layer == 3
    assert_same_tensors(with_prefix.tensors, bare.tensors)
    assert same_bytes(bare.dense_weight("kv_b_proj"), attn.kv_b_proj.weight.detach())


def test_from_state_dict_of_a_transformers_decoder_layer():
    config, _ = _transformers_attention()
    from transformers.models.deepseek_v3.modeling_deepseek_v3 import DeepseekV3DecoderLayer

    layer = DeepseekV3DecoderLayer(config, layer_idx=0)
    state = layer.state_dict()
    assert "mlp.gate_proj.weight" in state and "input_layernorm.weight" in state
    ckpt = Checkpoint.from_state_dict(TINY, state)
    assert_same_tensors(ckpt.tensors, {k: v for k, v in layer.self_attn.state_dict().items()})


def test_from_state_dict_quantize_matches_block_quantize():
    _, attn = _transformers_attention()
    ckpt = Checkpoint.from_state_dict(TINY, attn.state_dict(), quantize=True)
    assert ckpt.quantized and ckpt.fmt is E4M3FN and len(ckpt.tensors) == 12
    for module in ckpt.linear_modules():
        q, s, _ = block_quantize(getattr(attn, module).weight.detach(), (128, 128), "e4m3fn", "deepseek")
        assert same_bytes(ckpt.tensors[module + ".weight"], q) and same_bytes(
            ckpt.tensors[module + ".weight_scale_inv"], s
        )
    # Norm weights stay as they are (fp32 here, as transformers keeps them).
    assert same_bytes(ckpt.norm_weight("q_a_layernorm"), attn.q_a_layernorm.weight.detach())


def test_from_state_dict_picks_a_layer_and_ignores_other_modules(tiny):
    other = Checkpoint.synthetic(TINY, seed=1, layer=1)
    state = {
        **prefixed(tiny),
        **prefixed(other),
        "model.embed_tokens.weight": torch.zeros(4, 512),
        "model.layers.0.mlp.experts.0.down_proj.weight": torch.zeros(2, 2),
        "model.layers.1.input_layernorm.weight": torch.zeros(512),
        "lm_head.weight": torch.zeros(4, 512),
    }
    assert_same_tensors(Checkpoint.from_state_dict(TINY, state, layer=0).tensors, tiny.tensors)
    picked = Checkpoint.from_state_dict(TINY, state, layer=1)
    assert picked.layer == 1
    assert_same_tensors(picked.tensors, other.tensors)
    with pytest.raises(ValueError, match=r"holds the attention of layers 0-1; pass layer= to pick one"):
        Checkpoint.from_state_dict(TINY, state)
    with pytest.raises(ValueError, match=r"no self_attn tensors for layer 7; layers present: 0-1"):
        Checkpoint.from_state_dict(TINY, state, layer=7)
    only_one = Checkpoint.from_state_dict(TINY, prefixed(other))
    assert only_one.layer == 1


@pytest.mark.parametrize(
    ("edit", "pattern"),
    [
        (
            lambda d: d.pop("kv_b_proj.weight"),
            r"missing tensor 'kv_b_proj.weight' \(expected shape \(4096, 128\) = \(Nh\*\(P\+V\), Lkv\)\)",
        ),
        (
            lambda d: d.update({"q_b_proj.weight": torch.zeros(3072, 255)}),
            r"q_b_proj.weight: shape \(3072, 255\), dtype torch.float32 does not match the expected shape "
            r"\(3072, 256\) = \(Nh\*\(P\+R\), Lq\)",
        ),
        (
            lambda d: d.update({"o_proj.weight": torch.zeros(512, 2048, dtype=torch.float64)}),
            r"o_proj.weight: shape \(512, 2048\), dtype torch.float64 has the wrong dtype; a linear weight must be fp8",
        ),
        (
            lambda d: d.update({"o_proj.weight": torch.zeros(512, 2048, dtype=torch.int8)}),
            r"o_proj.weight: shape \(512, 2048\), dtype torch.int8 has the wrong dtype",
        ),
        (
            lambda d: d.update({"kv_a_layernorm.weight": torch.ones(128).to(torch.float8_e4m3fn)}),
            r"kv_a_layernorm.weight: shape \(128,\), dtype torch.float8_e4m3fn has the wrong dtype; a norm weight is never quantized",
        ),
        (
            lambda d: d.update({"q_a_layernorm.weight": torch.ones(255)}),
            r"q_a_layernorm.weight: shape \(255,\).*expected shape \(256,\) = \(Lq,\)",
        ),
        (
            lambda d: d.update({"q_a_proj.bias": torch.zeros(256)}),
            r"tensors \['q_a_proj.bias'\] are not part of a v3 attention layer.*ignore_extra=True",
        ),
        (lambda d: d.update({"q_b_proj.weight": "not a tensor"}), r"q_b_proj.weight: expected a torch.Tensor, got str"),
        (
            lambda d: d.update({"o_proj.weight_scale_inv": torch.ones(4, 16)}),
            r"o_proj.weight_scale_inv: present but o_proj.weight is torch.float32, not fp8",
        ),
    ],
    ids=["missing", "shape", "float64", "int8", "fp8-norm", "norm-shape", "bias", "not-tensor", "dense-with-scale"],
)
def test_from_state_dict_errors_name_the_tensor(edit, pattern):
    state = {k: v.float() for k, v in Checkpoint.synthetic(TINY, quantize=False).tensors.items()}
    edit(state)
    with pytest.raises(ValueError, match=pattern):
        Checkpoint.from_state_dict(TINY, state)


@pytest.mark.parametrize(
    ("edit", "pattern"),
    [
        (
            lambda d: d.pop("q_b_proj.weight_scale_inv"),
            r"missing tensor 'q_b_proj.weight_scale_inv' \(fp32, shape \(24, 2\)\)",
        ),
        (
            lambda d: d.update({"q_b_proj.weight_scale_inv": d["q_b_proj.weight_scale_inv"].bfloat16()}),
            r"q_b_proj.weight_scale_inv: shape \(24, 2\), dtype torch.bfloat16 must be torch.float32 of shape \(24, 2\)",
        ),
        (
            lambda d: d.update({"q_b_proj.weight_scale_inv": d["q_b_proj.weight_scale_inv"][:, :1]}),
            r"q_b_proj.weight_scale_inv: shape \(24, 1\), dtype torch.float32 must be torch.float32 of shape \(24, 2\)",
        ),
        (
            lambda d: d.update({"o_proj.weight": d["o_proj.weight"].view(torch.uint8).view(torch.float8_e4m3fnuz)}),
            r"fp8 weights in different formats",
        ),
    ],
    ids=["missing-scale", "bf16-scale", "scale-shape", "mixed-formats"],
)
def test_fp8_state_dict_errors_name_the_scale(tiny, edit, pattern):
    state = dict(tiny.tensors)
    edit(state)
    with pytest.raises(ValueError, match=pattern):
        Checkpoint.from_state_dict(TINY, state)


def test_from_state_dict_extra_keys_can_be_ignored_and_bad_inputs(tiny):
    state = {**prefixed(tiny), "model.layers.0.self_attn.q_a_proj.bias": torch.zeros(256)}
    with pytest.raises(ValueError, match=r"\['model.layers.0.self_attn.q_a_proj.bias'\] are not part"):
        Checkpoint.from_state_dict(TINY, state)
    assert_same_tensors(Checkpoint.from_state_dict(TINY, state, ignore_extra=True).tensors, tiny.tensors)
    mixed = {**prefixed(tiny), "q_a_proj.weight": tiny.tensors["q_a_proj.weight"]}
    with pytest.raises(ValueError, match=r"keys \['q_a_proj.weight'\] have no 'layers.N.self_attn.' prefix"):
        Checkpoint.from_state_dict(TINY, mixed)
    with pytest.raises(ValueError, match=r"no 'layers.N.self_attn.' tensors among 1 keys"):
        Checkpoint.from_state_dict(TINY, {"model.layers.0.mlp.gate.weight": torch.zeros(2)})
    with pytest.raises(TypeError, match="state_dict must be a mapping, got list"):
        Checkpoint.from_state_dict(TINY, list(tiny.tensors.values()))
    with pytest.raises(ValueError, match=r"missing tensor 'wq_a.weight'"):
        Checkpoint.from_state_dict(TINY_V4, {}, ignore_extra=True)
    with pytest.raises(ValueError, match=r"already torch.float8_e4m3fn, not e4m3fnuz"):
        Checkpoint.from_state_dict(TINY, tiny.tensors, quantize=True, fmt="e4m3fnuz")


# -- save / load -----------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["v3-fp8", "v3-bf16", "v4-fp8", "v3-fnuz"])
def test_save_load_round_trip_is_bitwise(tmp_path, kind):
    cfg = TINY_V4 if kind.startswith("v4") else TINY
    ckpt = Checkpoint.synthetic(
        cfg, seed=5, layer=3, quantize=not kind.endswith("bf16"), fmt="e4m3fnuz" if kind.endswith("fnuz") else "e4m3fn"
    )
    path = ckpt.save(tmp_path / "ckpt")
    assert path == tmp_path / "ckpt"
    assert sorted(p.name for p in path.iterdir()) == [
        "config.json",
        "model.safetensors",
        "model.safetensors.index.json",
    ]
    index = json.loads((path / "model.safetensors.index.json").read_text())
    assert index["weight_map"] == {f"model.layers.3.self_attn.{k}": "model.safetensors" for k in ckpt.tensors}
    assert index["metadata"]["total_size"] == ckpt.nbytes
    loaded = Checkpoint.load(path, layer=3)
    assert loaded.layer == 3 and loaded.quantized == ckpt.quantized and loaded.source == str(path)
    assert loaded.cfg == ckpt.cfg.with_(name="ckpt")
    assert_same_tensors(loaded.tensors, ckpt.tensors)
    assert list(loaded.tensors) == list(ckpt.tensors)


def test_save_refuses_to_overwrite(tmp_path, tiny):
    out = tmp_path / "taken"
    out.mkdir()
    (out / "keep.txt").write_text("earlier run")
    with pytest.raises(FileExistsError, match=f"{out} already exists and is not an empty folder"):
        tiny.save(out)
    assert [p.name for p in out.iterdir()] == ["keep.txt"] and (out / "keep.txt").read_text() == "earlier run"
    afile = tmp_path / "afile"
    afile.write_text("x")
    with pytest.raises(FileExistsError, match="afile already exists"):
        tiny.save(afile)
    empty = tmp_path / "empty"
    empty.mkdir()
    assert tiny.save(empty) == empty and (empty / "model.safetensors").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile", "empty", "taken"]


def test_save_is_atomic(tmp_path, tiny, monkeypatch):
    tiny.save(tmp_path / "nested" / "ok")
    assert [p.name for p in (tmp_path / "nested").iterdir()] == ["ok"]  # no temporary sibling left

    def fail_halfway(tensors, filename, metadata=None):
        with open(filename, "wb") as f:
            f.write(b"partial")
        raise OSError("disk full")

    monkeypatch.setattr(checkpoint_module, "save_file", fail_halfway)
    with pytest.raises(OSError, match="disk full"):
        tiny.save(tmp_path / "nested" / "broken")
    assert [p.name for p in (tmp_path / "nested").iterdir()] == ["ok"]


def test_load_reads_only_the_requested_layer_from_the_shards_that_hold_it(tmp_path, monkeypatch):
    layer0 = Checkpoint.synthetic(TINY, seed=10, layer=0)
    layer1 = Checkpoint.synthetic(TINY, seed=11, layer=1)
    layer2 = Checkpoint.synthetic(TINY, seed=12, layer=2)
    l1 = prefixed(layer1)
    q_keys = [k for k in l1 if ".q_" in k]
    expert = {"weight": torch.zeros(256, 512, dtype=torch.float8_e4m3fn), "scale": torch.ones(2, 4)}
    shards = {
        "model-00001-of-00004.safetensors": {
            "model.embed_tokens.weight": torch.zeros(8, 512, dtype=torch.bfloat16),
            **prefixed(layer0),
            "model.layers.0.mlp.gate_proj.weight": torch.zeros(64, 512, dtype=torch.bfloat16),
        },
        # Layer 1's attention is split over two shards, as in real DeepSeek-V3 checkpoints.
        "model-00002-of-00004.safetensors": {
            **{k: l1[k] for k in q_keys},
            "model.layers.1.input_layernorm.weight": torch.ones(512, dtype=torch.bfloat16),
        },
        "model-00003-of-00004.safetensors": {
            **{k: v for k, v in l1.items() if k not in q_keys},
            "model.layers.1.mlp.experts.0.gate_proj.weight": expert["weight"],
            "model.layers.1.mlp.experts.0.gate_proj.weight_scale_inv": expert["scale"],
            "model.layers.1.mlp.gate.weight": torch.zeros(16, 512, dtype=torch.bfloat16),
        },
        "model-00004-of-00004.safetensors": {
            "model.layers.1.mlp.experts.1.gate_proj.weight": expert["weight"],
            "model.layers.1.mlp.experts.1.gate_proj.weight_scale_inv": expert["scale"],
            **prefixed(layer2),
            "lm_head.weight": torch.zeros(8, 512, dtype=torch.bfloat16),
        },
    }
    folder = write_sharded(tmp_path / "DeepSeek-V3-tiny", TINY, shards)

    spy = SafeOpenSpy(monkeypatch)
    loaded = Checkpoint.load(folder, layer=1)
    assert sorted(spy.opened) == ["model-00002-of-00004.safetensors", "model-00003-of-00004.safetensors"]
    assert sorted(spy.fetched) == sorted(l1)
    assert_same_tensors(loaded.tensors, layer1.tensors)
    assert loaded.cfg == TINY.with_(name="DeepSeek-V3-tiny")

    spy = SafeOpenSpy(monkeypatch)
    assert_same_tensors(Checkpoint.load(folder, layer=2).tensors, layer2.tensors)
    assert spy.opened == ["model-00004-of-00004.safetensors"]
    with pytest.raises(ValueError, match=r"no self_attn tensors for layer 5; layers present: 0-2"):
        Checkpoint.load(folder, layer=5)

    # Without the index every header is read (lazily), but still only layer 1's tensors are fetched.
    (folder / "model.safetensors.index.json").unlink()
    spy = SafeOpenSpy(monkeypatch)
    assert_same_tensors(Checkpoint.load(folder, layer=1).tensors, layer1.tensors)
    assert sorted(spy.fetched) == sorted(l1)


def test_load_with_an_explicit_config_and_a_single_file(tmp_path, tiny):
    save_file(prefixed(tiny), str(tmp_path / "weights.safetensors"))
    loaded = Checkpoint.load(tmp_path / "weights.safetensors", cfg=TINY)
    assert_same_tensors(loaded.tensors, tiny.tensors)
    assert loaded.cfg == TINY
    with pytest.raises(FileNotFoundError, match="config.json does not exist"):
        Checkpoint.load(tmp_path)


def test_load_refuses_pickle_weights(tmp_path, monkeypatch):
    folder = tmp_path / "pickled"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(TINY.to_hf()))
    torch.save({"model.layers.0.self_attn.q_a_proj.weight": torch.zeros(2)}, folder / "pytorch_model.bin")

    def forbidden(*args, **kwargs):
        raise AssertionError("torch.load must never be called on a checkpoint")

    monkeypatch.setattr(torch, "load", forbidden)
    with pytest.raises(
        ValueError,
        match=r"only pickle weights \(pytorch_model.bin\); only safetensors is loaded, "
        r"because unpickling a file can execute arbitrary code",
    ):
        Checkpoint.load(folder)
    with pytest.raises(ValueError, match=r"is not a .safetensors file \(pickle formats are refused"):
        Checkpoint.load(folder / "pytorch_model.bin", cfg=TINY)
    (folder / "pytorch_model.bin").unlink()
    with pytest.raises(FileNotFoundError, match=r"no \*.safetensors files in"):
        Checkpoint.load(folder)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        Checkpoint.load(tmp_path / "missing")


@pytest.mark.parametrize(
    ("edit", "pattern"),
    [
        (
            lambda d: d.pop(ATTN.format(layer=0) + "o_proj.weight_scale_inv"),
            r"missing tensor 'o_proj.weight_scale_inv'",
        ),
        (
            lambda d: d.pop(ATTN.format(layer=0) + "q_a_layernorm.weight"),
            r"missing tensor 'q_a_layernorm.weight' \(expected shape \(256,\)",
        ),
        (
            lambda d: d.update(
                {ATTN.format(layer=0) + "kv_b_proj.weight": d[ATTN.format(layer=0) + "kv_b_proj.weight"][:-128]}
            ),
            r"kv_b_proj.weight: shape \(3968, 128\), dtype torch.float8_e4m3fn does not match the expected shape \(4096, 128\)",
        ),
        (
            lambda d: d.update(
                {ATTN.format(layer=0) + "o_proj.weight": torch.zeros(512, 2048, dtype=torch.float16).view(torch.int16)}
            ),
            r"o_proj.weight: shape \(512, 2048\), dtype torch.int16 has the wrong dtype",
        ),
    ],
    ids=["missing-scale", "missing-norm", "shape", "dtype"],
)
def test_load_errors_name_the_tensor(tmp_path, tiny, edit, pattern):
    state = prefixed(tiny)
    edit(state)
    folder = write_sharded(tmp_path / "bad", TINY, {"model.safetensors": state})
    with pytest.raises(ValueError, match=pattern):
        Checkpoint.load(folder)


def test_load_index_errors(tmp_path, tiny):
    folder = write_sharded(tmp_path / "ckpt", TINY, {"model-00001-of-00001.safetensors": prefixed(tiny)})
    index = folder / "model.safetensors.index.json"
    data = json.loads(index.read_text())
    data["weight_map"][ATTN.format(layer=0) + "o_proj.weight"] = "model-00009-of-00009.safetensors"
    index.write_text(json.dumps(data))
    with pytest.raises(FileNotFoundError, match=r"shard .*model-00009-of-00009.safetensors"):
        Checkpoint.load(folder)
    index.write_text(json.dumps({"metadata": {}}))
    with pytest.raises(ValueError, match="has no 'weight_map' object"):
        Checkpoint.load(folder)


def test_save_gives_every_file_the_umask_mode(tmp_path, tiny):
    # safetensors writes through a private 0600 file; the checkpoint must be as readable as any new file.
    for umask in (0o022, 0o027):
        previous = os.umask(umask)
        try:
            out = tiny.save(tmp_path / f"umask-{umask:o}")
        finally:
            os.umask(previous)
        modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in out.iterdir()}
        assert modes == dict.fromkeys(modes, 0o666 & ~umask), (oct(umask), modes)


def _two_shards(folder, tiny, index: bool):
    """`tiny` split over two shard files (with or without the index); returns (folder, the q_* shard)."""
    state = prefixed(tiny)
    q = {k: t for k, t in state.items() if ".q_" in k}
    rest = {k: t for k, t in state.items() if k not in q}
    names = ("model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors")
    write_sharded(folder, TINY, {names[0]: q, names[1]: rest}, index=index)
    return folder, folder / names[0]


@pytest.mark.parametrize("index", [True, False], ids=["sharded-with-index", "plain-files"])
def test_load_names_a_truncated_file_and_what_is_wrong(tmp_path, tiny, index):
    folder, shard = _two_shards(tmp_path / "ckpt", tiny, index)
    header_len = int.from_bytes(shard.read_bytes()[:8], "little")
    data_len = shard.stat().st_size - 8 - header_len
    os.truncate(shard, 8 + header_len + 1000)  # a download cut short inside the tensor data
    with pytest.raises(ValueError) as err:
        Checkpoint.load(folder)
    assert str(err.value) == (
        f"Checkpoint.load: {shard} ({8 + header_len + 1000:,} bytes): the header says {data_len:,} bytes of "
        "tensor data, the file holds 1,000: truncated (an interrupted download or copy?)"
    )


def test_safetensors_problem_names_each_way_a_file_breaks(tmp_path, tiny):
    good = tmp_path / "good.safetensors"
    save_file({"w": torch.zeros(4, 4)}, str(good))
    raw = good.read_bytes()
    header_len = int.from_bytes(raw[:8], "little")
    cases = {
        "short": (raw[:5], "holds 5 bytes, fewer than the 8-byte header length a safetensors file starts with"),
        "cut-header": (raw[: 8 + header_len // 2], f"announce a {header_len:,}-byte header, more than the file holds"),
        "not-json": ((8).to_bytes(8, "little") + b"not json", "its 8-byte header is not a safetensors header ("),
        "trailing": (
            raw + b"junk",
            "the file holds 4 bytes more than the 64 bytes of tensor data its header describes",
        ),
    }
    for name, (content, message) in cases.items():
        path = tmp_path / f"{name}.safetensors"
        path.write_bytes(content)
        with pytest.raises(ValueError) as err:
            with open_safetensors(path, f"dump {path}"):
                pass
        assert str(err.value).startswith(f"dump {path}"), name
        assert message in str(err.value), (name, str(err.value))
    with open_safetensors(good) as handle:
        assert list(handle.keys()) == ["w"]
    with pytest.raises(FileNotFoundError, match="nothing.safetensors does not exist"):
        with open_safetensors(tmp_path / "nothing.safetensors"):
            pass


# -- CLI -------------------------------------------------------------------------------------------


def test_cli_checkpoint_make_end_to_end(tmp_path, capsys):
    out = tmp_path / "tiny-seed3"
    assert main(["checkpoint", "make", "--preset", "tiny", "--out", str(out), "--seed", "3", "--layer", "2"]) == 0
    printed = capsys.readouterr().out
    ckpt = Checkpoint.synthetic(TINY, seed=3, layer=2)
    assert f"wrote {out}: tiny layer 2, seed 3, fp8 e4m3fn" in printed
    assert f"12 tensors, {ckpt.num_params:,} parameters, {ckpt.nbytes:,} bytes of tensors" in printed
    size = (out / "model.safetensors").stat().st_size
    assert f"model.safetensors  {size:,} bytes" in printed
    loaded = Checkpoint.load(out, layer=2)
    assert_same_tensors(loaded.tensors, ckpt.tensors)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tiny-seed3"]

    dense = tmp_path / "dense"
    assert main(["checkpoint", "make", "--preset", "tiny-v4", "--out", str(dense), "--no-quantize"]) == 0
    assert "bf16" in capsys.readouterr().out
    assert_same_tensors(Checkpoint.load(dense).tensors, Checkpoint.synthetic(TINY_V4, quantize=False).tensors)


def test_cli_checkpoint_errors(tmp_path, capsys, monkeypatch):
    out = tmp_path / "taken"
    out.mkdir()
    (out / "notes.txt").write_text("mine")

    def refuse(*args, **kwargs):
        raise AssertionError("the weights were built before --out was checked")

    # DeepSeek-V3's layer takes seconds to build; a taken folder is refused before that.
    monkeypatch.setattr(Checkpoint, "synthetic", classmethod(refuse))
    assert main(["checkpoint", "make", "--preset", "deepseek-v3", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("mla-debug checkpoint make: error: --out ")
    assert f"{out} already exists and is not an empty folder" in err
    assert [p.name for p in out.iterdir()] == ["notes.txt"]
    assert main(["checkpoint", "make", "--preset", "tiny-v5", "--out", str(tmp_path / "new")]) == 2
    assert "mla-debug checkpoint make: error: unknown preset 'tiny-v5'" in capsys.readouterr().err
    assert not (tmp_path / "new").exists()


# -- real dimensions -------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="reads the peak RSS from Linux's /proc")
def test_synthetic_deepseek_v3_layer_has_real_shapes_and_stays_small():
    # A fresh process, so its peak RSS measures this generation alone (plus torch itself). How long it takes
    # is a benchmark figure (benchmarks/cpu_layer_bench.py), not something a shared machine can assert.
    script = textwrap.dedent(
        """
        import torch
        from mla_debug.model import Checkpoint, MLAConfig, expected_shapes
        cfg = MLAConfig.preset("deepseek-v3")
        ckpt = Checkpoint.synthetic(cfg, seed=0)
        assert {k: tuple(t.shape) for k, t in ckpt.tensors.items()} == expected_shapes(cfg, scales=True)
        assert ckpt.num_params == 187_107_328 and ckpt.fmt.name == "e4m3fn"
        s = ckpt.tensors["o_proj.weight_scale_inv"]
        # bf16 amaxes have 8 significant bits: over 4+ binades that still leaves hundreds of distinct scales.
        assert s.numel() == 56 * 128 and s.unique().numel() > 500 and s.max() / s.min() > 8
        # VmHWM: the peak RSS of this process image. ru_maxrss is not: Linux carries it over from the
        # forking parent, so a pytest worker that just ran a large triage would be measured instead.
        status = open("/proc/self/status").read()
        print(next(int(line.split()[1]) for line in status.splitlines() if line.startswith("VmHWM:")))
        """
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    # KiB on Linux: under 3 GiB including torch. 0.93 GiB measured (0.27 of it torch itself): room for other
    # torch builds and allocators, and still a catch for a generation that keeps full-precision copies of
    # the whole layer around (0.7 GiB each in fp32).
    assert int(result.stdout) < 3 * 1024 * 1024
    assert "synthetic deepseek-v3 layer 0" in result.stderr  # progress shown for a large layer


def test_bits_helper_sees_negative_zero():
    # The bitwise comparisons above rely on this: -0.0 and +0.0 compare equal as values, not as bytes.
    assert torch.equal(torch.tensor([0.0]), torch.tensor([-0.0]))
    assert not torch.equal(bits(torch.tensor([0.0])), bits(torch.tensor([-0.0])))
