"""W_UK / W_UV byte for byte against the released engines' own functions, which are plain torch:
SGLang 0.5.23's per-tensor re-quantization on HIP (``block_quant_to_tensor_quant``) and its bf16 use of it
(``_absorb_weight_bf16``), its CUDA dequant (``block_quant_dequant``), and vLLM 0.33.0's
``scaled_dequantize`` at the activation dtype (what ``get_and_maybe_dequant_weights`` runs for W_UK / W_UV).

Stubs, only where unavoidable: which GPU the process runs on (SGLang's ``_is_cuda``, ``_is_fp8_fnuz`` and
``is_fp8_fnuz()``; ``scaled_fp8_quant``, the CUDA branch, is never reached on HIP) and vLLM's ``GroupShape``,
named only by an annotation.
"""

from __future__ import annotations

import typing

import pytest
import torch
from engine_source import load
from model.absorbed_inputs import block_weight

import mla_debug as md
from mla_debug.model.absorbed import build_absorbed_weights, requantize_per_tensor
from mla_debug.numerics.quantize import block_dequantize

SGLANG_FP8_UTILS = "sglang/srt/layers/quantization/fp8_utils.py"
SGLANG_FP8_KERNEL = "sglang/kernels/ops/quantization/fp8_kernel.py"
SGLANG_ROCM_MLA = "sglang/srt/models/deepseek_common/attention_forward_methods/forward_mla_rocm.py"
VLLM_QUANT_UTILS = "vllm/model_executor/layers/quantization/utils/quant_utils.py"
FORMATS = {"e4m3fn": md.E4M3FN, "e4m3fnuz": md.E4M3FNUZ}
TYPING = {"List": typing.List, "Tuple": typing.Tuple, "Optional": typing.Optional}  # noqa: UP006 - the engine's names


def sglang_requant(fnuz: bool):
    """SGLang 0.5.23's block_quant_to_tensor_quant as it runs on HIP, with the fp8 dtype and max its
    fp8_kernel.py sets at import on a gfx94 (fnuz) or another AMD GPU."""
    constants = load(
        "sglang", SGLANG_FP8_KERNEL, ["fp8_dtype", "fp8_max"], {"torch": torch, "is_fp8_fnuz": lambda: fnuz}
    )
    given = {
        "torch": torch,
        **TYPING,
        "_is_cuda": False,
        "_is_fp8_fnuz": fnuz,
        "fp8_dtype": constants["fp8_dtype"],
        "fp8_max": constants["fp8_max"],
        "scaled_fp8_quant": None,
    }
    return load("sglang", SGLANG_FP8_UTILS, ["input_to_float8", "block_quant_to_tensor_quant"], given)[
        "block_quant_to_tensor_quant"
    ]


def bits(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view({1: torch.uint8, 2: torch.int16, 4: torch.int32}[t.element_size()])


@pytest.mark.parametrize("fmt_name", list(FORMATS))
@pytest.mark.parametrize("case", ["random", "wide-spread", "zero"])
def test_per_tensor_requant_is_sglangs_own_byte_for_byte(fmt_name, case):
    fmt = FORMATS[fmt_name]
    engine = sglang_requant(fnuz=fmt is md.E4M3FNUZ)
    weight = block_weight(512, 256, fmt, seed=7, spread=12.0 if case == "wide-spread" else 4.0, zero=case == "zero")
    theirs_q, theirs_scale = engine(weight.data, weight.scale, [128, 128])
    ours_q, ours_scale = requantize_per_tensor(block_dequantize(weight.data, weight.scale), fmt)
    assert ours_q.dtype == theirs_q.dtype == fmt.dtype
    assert torch.equal(bits(ours_q), bits(theirs_q))
    assert ours_scale.dtype == theirs_scale.dtype == torch.float32
    assert torch.equal(bits(ours_scale), bits(theirs_scale))


def test_bf16_weights_are_vllms_scaled_dequantize():
    """vLLM 0.33.0 derives W_UK / W_UV from get_and_maybe_dequant_weights(kv_b_proj, act_dtype): for a
    block-FP8 weight that is scaled_dequantize(..., out_dtype=bf16), then split_kv_b_proj's views."""
    # GroupShape is only named by an annotation; the block size is passed as vLLM's layer holds it (a list).
    fns = load(
        "vllm",
        VLLM_QUANT_UTILS,
        ["group_broadcast", "prep_scale_for_group_broadcast", "scaled_dequantize"],
        {"torch": torch, "GroupShape": list},
    )
    heads, nope, v_dim, lora = 4, 128, 128, 256
    weight = block_weight(heads * (nope + v_dim), lora, md.E4M3FN, seed=1)
    vllm = fns["scaled_dequantize"](weight.data, weight.scale, group_shape=[128, 128], out_dtype=torch.bfloat16)
    ours = build_absorbed_weights(block_dequantize(weight.data, weight.scale), heads, nope, v_dim, lora, "bf16")
    # split_kv_b_proj: weight.T viewed (Lkv, heads, P + V), split into W_UK (Lkv, h, P) and W_UV (Lkv, h, V).
    per_head = vllm.T.reshape(lora, heads, nope + v_dim)
    assert torch.equal(bits(ours.w_uk.permute(2, 0, 1).to(torch.bfloat16)), bits(per_head[..., :nope]))
    assert torch.equal(bits(ours.w_uv.permute(2, 0, 1).to(torch.bfloat16)), bits(per_head[..., nope:]))


def test_bf16_weights_are_sglangs_cuda_dequant_too():
    """SGLang 0.5.23 on CUDA (no DeepGEMM BMM) builds w_kc / w_vc with block_quant_dequant(..., bf16)."""
    dequant = load("sglang", SGLANG_FP8_UTILS, ["block_quant_dequant"], {"torch": torch, **TYPING})[
        "block_quant_dequant"
    ]
    heads, nope, v_dim, lora = 2, 128, 128, 256
    weight = block_weight(heads * (nope + v_dim), lora, md.E4M3FN, seed=4)
    theirs = dequant(weight.data, weight.scale, [128, 128], torch.bfloat16)
    ours = build_absorbed_weights(block_dequantize(weight.data, weight.scale), heads, nope, v_dim, lora, "bf16")
    full = torch.cat((ours.w_uk, ours.w_uv), dim=1).reshape(theirs.shape)
    assert torch.equal(bits(full.to(torch.bfloat16)), bits(theirs))


def test_fp8_weights_multiplied_as_sglangs_bf16_fallback():
    """Without aiter's FP8 BMM, SGLang multiplies ``_absorb_weight_bf16(w_kc, w_scale)``: the per-tensor
    codes in bf16 times the scale, a bf16 result."""
    absorb_bf16 = load("sglang", SGLANG_ROCM_MLA, ["_absorb_weight_bf16"], {"torch": torch})["_absorb_weight_bf16"]
    engine = sglang_requant(fnuz=False)
    heads, nope, v_dim, lora = 2, 128, 128, 256
    weight = block_weight(heads * (nope + v_dim), lora, md.E4M3FN, seed=2)
    codes, scale = engine(weight.data, weight.scale, [128, 128])
    theirs = absorb_bf16(codes, scale)
    assert theirs.dtype == torch.bfloat16
    ours = build_absorbed_weights(
        block_dequantize(weight.data, weight.scale), heads, nope, v_dim, lora, "fp8-per-tensor", fmt=md.E4M3FN
    )
    full = torch.cat((ours.w_uk, ours.w_uv), dim=1).reshape(heads * (nope + v_dim), lora)
    assert torch.equal(bits(full.to(torch.bfloat16)), bits(theirs))
    assert torch.equal(full, full.to(torch.bfloat16).to(torch.float32))  # the values are bf16


# -- vLLM 0.33.0 with VLLM_ROCM_USE_AITER_FP8BMM: W_UK / W_UV each re-quantized from bf16 --------------------

VLLM_MLA = "vllm/model_executor/layers/attention/mla_attention.py"


def vllm_per_batched_tensor_quant():
    return load("vllm", VLLM_MLA, ["dynamic_per_batched_tensor_quant"], {"torch": torch})[
        "dynamic_per_batched_tensor_quant"
    ]


@pytest.mark.parametrize("fmt_name", list(FORMATS))
@pytest.mark.parametrize("case", ["random", "wide-spread", "zero"])
def test_fp8_bmm_weights_are_vllms_dynamic_per_batched_tensor_quant(fmt_name, case):
    """MLAAttention.process_weights_after_loading: W_K = W_UK.transpose(0, 1), W_V = W_UV.permute(1, 2, 0), each
    through dynamic_per_batched_tensor_quant(.., dtype=current_platform.fp8_dtype()) - one scale per tensor."""
    fmt = FORMATS[fmt_name]
    engine = vllm_per_batched_tensor_quant()
    heads, nope, v_dim, lora = 4, 128, 128, 512
    spread = 12.0 if case == "wide-spread" else 4.0
    weight = block_weight(heads * (nope + v_dim), lora, md.E4M3FN, seed=11, spread=spread, zero=case == "zero")
    values = block_dequantize(weight.data, weight.scale)
    # split_kv_b_proj at bf16: (Lkv, heads, P + V) split into W_UK (L, N, P) and W_UV (L, N, V)
    per_head = values.to(torch.bfloat16).T.reshape(lora, heads, nope + v_dim)
    w_uk, w_uv = per_head[..., :nope], per_head[..., nope:]
    k_codes, k_scale = engine(w_uk.transpose(0, 1), dtype=fmt.dtype)
    v_codes, v_scale = engine(w_uv.permute(1, 2, 0), dtype=fmt.dtype)
    ours = build_absorbed_weights(
        values, heads, nope, v_dim, lora, "fp8-per-tensor-from-bf16", "fp8-group-quant", fmt=fmt
    )
    # ours: W_UK (h, P, L) and W_UV (h, V, L) as decoded codes; vLLM's W_K (N, L, P) and W_V (N, V, L)
    assert torch.equal(bits(ours.w_uk.to(fmt.dtype).transpose(1, 2)), bits(k_codes))
    assert torch.equal(bits(ours.w_uv.to(fmt.dtype)), bits(v_codes))
    assert ours.scale.dtype == k_scale.dtype == torch.float32
    assert torch.equal(bits(ours.scale), bits(k_scale)) and torch.equal(bits(ours.scale_uv), bits(v_scale))
    assert (ours.bmm, ours.bmm_uv) == ("fp8-group-quant", "fp8-group-quant")


def test_the_per_tensor_scale_depends_on_the_heads_a_rank_holds():
    """The amax runs over every head of the rank: two ranks of one weight get their own scales."""
    engine = vllm_per_batched_tensor_quant()
    heads, nope, v_dim, lora = 4, 128, 128, 512
    weight = block_weight(heads * (nope + v_dim), lora, md.E4M3FN, seed=12, spread=10.0)
    values = block_dequantize(weight.data, weight.scale)
    rows = nope + v_dim
    halves = [values[i * 2 * rows : (i + 1) * 2 * rows] for i in range(2)]
    ranks = [
        build_absorbed_weights(h, 2, nope, v_dim, lora, "fp8-per-tensor-from-bf16", "fp8-group-quant", fmt=md.E4M3FN)
        for h in halves
    ]
    whole = build_absorbed_weights(
        values, heads, nope, v_dim, lora, "fp8-per-tensor-from-bf16", "fp8-group-quant", fmt=md.E4M3FN
    )
    scales = {ranks[0].scale.item(), ranks[1].scale.item(), whole.scale.item()}
    assert len(scales) >= 2
    _, theirs = engine(
        halves[0].to(torch.bfloat16).view(2, rows, lora)[:, :nope].transpose(1, 2), dtype=md.E4M3FN.dtype
    )
    assert torch.equal(bits(ranks[0].scale), bits(theirs))


def test_sglang_on_gfx942_under_cuda_graphs_multiplies_only_w_uk_in_fp8():
    """rocm_absorb_q_bmm's FP8 branch holds for (is_capture_mode and w_kc e4m3fnuz); rocm_absorb_v_bmm's asks for
    _use_aiter_gfx95 and e4m3fn - read from the release - so W_UV stays SGLang's bf16 fallback."""
    from engine_wheels import source

    text = source("sglang", SGLANG_ROCM_MLA)
    q_side = text[text.index("def rocm_absorb_q_bmm(") : text.index("def rocm_absorb_v_bmm(")]
    v_side = text[text.index("def rocm_absorb_v_bmm(") :][:3000]
    assert "if (_use_aiter_gfx95 and attn.w_kc.dtype == torch.float8_e4m3fn) or (" in q_side
    assert "is_capture_mode and attn.w_kc.dtype == torch.float8_e4m3fnuz" in q_side
    assert "if _use_aiter_gfx95 and attn.w_kc.dtype == torch.float8_e4m3fn:" in v_side
    assert "is_capture_mode" not in v_side
    absorb_bf16 = load("sglang", SGLANG_ROCM_MLA, ["_absorb_weight_bf16"], {"torch": torch})["_absorb_weight_bf16"]
    engine = sglang_requant(fnuz=True)
    heads, nope, v_dim, lora = 2, 128, 128, 256
    weight = block_weight(heads * (nope + v_dim), lora, md.E4M3FNUZ, seed=5)
    codes, scale = engine(weight.data, weight.scale, [128, 128])
    ours = build_absorbed_weights(
        block_dequantize(weight.data, weight.scale),
        heads,
        nope,
        v_dim,
        lora,
        "fp8-per-tensor",
        "fp8-group-quant-uk",
        fmt=md.E4M3FNUZ,
    )
    per_head = codes.view(heads, nope + v_dim, lora)
    assert (ours.bmm, ours.bmm_uv) == ("fp8-group-quant", "dequantized")
    assert torch.equal(bits(ours.w_uk.to(md.E4M3FNUZ.dtype)), bits(per_head[:, :nope]))  # codes, for the FP8 BMM
    assert torch.equal(bits(ours.scale), bits(scale))
    theirs_uv = absorb_bf16(per_head[:, nope:], scale)
    assert torch.equal(bits(ours.w_uv.to(torch.bfloat16)), bits(theirs_uv))
