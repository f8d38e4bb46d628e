"""Quantization flavors: the named recipes of aiter, vLLM, SGLang and DeepGEMM, and the one registry of them.

aiter, vLLM, SGLang and the DeepSeek/DeepGEMM references all compute ``scale ~ amax / fp8_max`` per group
or block, but differ in the recipe's details (`flavor_recipe.QuantFlavor` lists them): their outputs are
all valid and not bit-comparable, so every quantizer here takes a flavor. `FLAVORS` names every one; a
flavor's ``description`` says its recipe and ``models`` the function it reproduces byte-exact
(tests/aiter_reference and tests/engine_reference check them against the released code).

This module holds aiter's four 1x128 activation quantizers, which are not bit-identical to each other
(amd-aiter 0.1.7.post2.dev18): ``aiter-hip`` (what serving calls; vLLM's ``group_fp8_quant``),
``aiter-triton``, ``aiter-fused`` (the quant step of the fused RMSNorm + quant) and ``aiter-torch`` (aiter's
test reference); and three names that saved scenarios, checkpoints and verdicts use: ``aiter`` (aiter-fused's
recipe, applied to 128x128 weight blocks too: aiter has no block quantizer), ``vllm`` and ``deepseek``. Only
``aiter``, ``vllm``, ``deepseek`` and ``deepgemm`` quantize blocks. The serving engines' own quantizers are in
`engine_flavors`.
"""

from __future__ import annotations

from .engine_flavors import ENGINE_FLAVORS
from .flavor_recipe import QuantFlavor, recipe

AITER = recipe(
    "aiter",
    "aiter",
    description=(
        "aiter (generic): scale = max(amax, 1e-10) / dtype max (240 on e4m3fnuz, 448 on e4m3fn), "
        "q = clamp(x * (1/scale)); the recipe of aiter-fused under its older name, also for weights"
    ),
    amax_floor=1e-10,
    quotient="mul_reciprocal", clamp=True,
    models="aiter-fused's recipe; aiter has no 128x128 block quantizer, this one applies it per block",
)

AITER_HIP = recipe(
    "aiter-hip",
    "aiter",
    description=(
        "aiter HIP group quant (what serving calls): scale = max(amax, 1e-10) * float(1/dtype max), "
        "q = clamp(x * (1.0f/scale)); NaN elements do not enter amax"
    ),
    # quant_kernels.cu: `absMax = 1e-10f; absMax = max(absMax, abs(x))` (fmaxf: NaN dropped), then
    # `inverted_scale = absMax * inverted_DTYPE_MAX` with `const float inverted_DTYPE_MAX = 1. / float(max)`,
    # stored as the scale; the values are multiplied by `1.0f / inverted_scale` (an IEEE fp32 division:
    # aiter builds without fast-math) and converted by `v_med3_f32` (clamp to +-max) + `v_cvt_pk_fp8_f32`
    # (round to nearest even), ck_tile/vec_convert.h `fp32x2_t_to_fp8x2_t`.
    amax_floor=1e-10,
    quotient="mul_reciprocal", clamp=True, scale_rule="times_inverse_max", amax_ignores_nan=True,
    block_quantizer=False,
    models=(
        "amd-aiter 0.1.7.post2.dev18 csrc/kernels/quant_kernels.cu dynamic_per_group_scaled_quant_kernel "
        "(aiter.ops.quant.per_group_quant_hip / dynamic_per_token_scaled_quant with group size 128)"
    ),
)

AITER_TRITON = recipe(
    "aiter-triton",
    "aiter",
    description=(
        "aiter Triton per-1x128 quant: scale = amax / dtype max with no floor, q = x * (1/scale) with no "
        "clamp; an all-zero group gets scale 0 and NaN bytes"
    ),
    # _dynamic_per_token_quant_fp8_i8_kernel: `m = tl.max(tl.abs(x)); scale_out = m / DTYPE_MAX;
    # scale_recip = 1 / scale_out; qx = (x * scale_recip).to(fp8)` - no floor, no clamp.
    amax_floor=0.0,
    quotient="mul_reciprocal", clamp=False, block_quantizer=False,
    models=(
        "amd-aiter 0.1.7.post2.dev18 aiter/ops/triton/_triton_kernels/quant.py _dynamic_per_token_quant_fp8_i8_kernel "
        "(aiter.ops.quant.get_triton_quant(QuantType.per_1x128))"
    ),
)

AITER_FUSED = recipe(
    "aiter-fused",
    "aiter",
    description=(
        "aiter Triton fused RMSNorm + group quant: scale = max(amax, 1e-10) / dtype max, q = clamp(x * (1/scale))"
    ),
    # _fp8_quant_op: `m = tl.maximum(tl.max(tl.abs(x)), 1e-10); scale_out = m / DTYPE_MAX;
    # scale_recip = 1.0 / scale_out; x = tl.clamp(x * scale_recip, DTYPE_MIN, DTYPE_MAX)`.
    amax_floor=1e-10,
    quotient="mul_reciprocal", clamp=True, block_quantizer=False,
    models=(
        "amd-aiter 0.1.7.post2.dev18 aiter/ops/triton/_triton_kernels/fused_fp8_quant.py _fp8_quant_op "
        "(aiter.ops.triton.fused_fp8_quant.fused_rms_fp8_group_quant)"
    ),
)

AITER_TORCH = recipe(
    "aiter-torch",
    "aiter",
    description=(
        "aiter torch reference (pertoken_quant per 128): scale = amax / dtype max with no floor, an all-zero "
        "group's scale replaced by 1, q = x / scale with no clamp"
    ),
    # pertoken_quant: `per_token_scale = per_token_amax / dtypeMax; per_token_scale[per_token_scale == 0] = 1;
    # y = (hidden_states / per_token_scale).to(quant_dtype)`.
    amax_floor=0.0,
    quotient="div", clamp=False, scale_rule="torch_scalar_divide", zero_scale=1.0, block_quantizer=False,
    models=(
        "amd-aiter 0.1.7.post2.dev18 aiter/ops/quant.py pertoken_quant wrapped by per_block_quant_wrapper((1, 128)) "
        "(aiter.ops.quant.get_torch_quant(QuantType.per_1x128))"
    ),
)

# vLLM 0.33.0's Triton kernel forms the scale as amax * (1/max) instead (``vllm-triton``, one ulp apart in about
# half the groups); the block form does not model scaled_quantize's own multiply by fp8_max / amax.
VLLM = QuantFlavor(
    name="vllm",
    owner="vLLM",
    description=(
        "vLLM: like aiter but 224 on e4m3fnuz ('240 caused accuracy issues'), group quant "
        "q = clamp(x / scale) with amax floor 1e-10, block quant (scaled_quantize) amax floor 1e-12"
    ),
    group_amax_floor=1e-10,
    block_amax_floor=1e-12,
    quotient="div", clamp=True, fnuz_max=224.0,
    models=(
        "the arithmetic of vLLM's Triton _per_token_group_quant_fp8 before 0.33 (vllm/model_executor/layers/"
        "quantization/utils/fp8_utils.py: `_absmax / fp8_max`, `y / y_s`), which vLLM 0.33.0's C++ "
        "per_token_group_fp8_quant keeps for finite input without ue8m0; blocks take only scaled_quantize's 1e-12 amax floor"
    ),
)

# ``deepgemm`` (engine_flavors) is the older form SGLang ships, ``x * (448 / amax)``; the two differ by one
# rounding now and then.
DEEPSEEK = recipe(
    "deepseek",
    "DeepGEMM",
    description=(
        "DeepSeek-V3 / DeepGEMM references: scale = max(amax, 1e-4) / 448, q = cast(x * (1/scale)) "
        "with no clamp (the e4m3fn cast saturates; on e4m3fnuz values above 240 become NaN, which is "
        "reported)"
    ),
    amax_floor=1e-4,
    # The scale is `x_amax / 448.0` in DeepGEMM (a tensor over a Python float); "divide" is that on the CPU
    # and keeps one device-independent rounding. ue8m0 is DeepGEMM's `ceil_to_ue8m0`, the exact ceiling for
    # every scale this floor allows (a non-finite scale becomes 2^127 there and passes through here).
    quotient="mul_reciprocal", clamp=False, fixed_max=448.0,
    models=(
        "DeepGEMM per_token_cast_to_fp8 / per_block_cast_to_fp8 as vLLM 0.33.0 vendors them "
        "(vllm/third_party/deep_gemm/utils/math.py); byte-exact on the CPU for finite input"
    ),
)

FLAVORS: dict[str, QuantFlavor] = {
    f.name: f for f in (AITER, AITER_HIP, AITER_TRITON, AITER_FUSED, AITER_TORCH, VLLM, DEEPSEEK, *ENGINE_FLAVORS)
}


def quant_flavor(spec: str | QuantFlavor) -> QuantFlavor:
    """Look up a flavor by name ("aiter-hip", "aiter-fused", "vllm", ... see FLAVORS) or pass a QuantFlavor
    through."""
    if isinstance(spec, QuantFlavor):
        return spec
    if isinstance(spec, str) and spec.lower() in FLAVORS:
        return FLAVORS[spec.lower()]
    raise ValueError(f"unknown quantization flavor {spec!r}; valid: {', '.join(FLAVORS)}")
