"""The serving engines' own 1x128 activation quantizers, byte-exact: vLLM 0.33.0, SGLang 0.5.23, DeepGEMM and
FlashInfer.

Each flavor reproduces one released function (its ``models`` names it, its ``description`` says the recipe),
read from the release's wheel: tests/engine_reference loads that very function and compares bytes and scale
bits; the C++ ones, which are not in the wheels, are checked against an oracle written from their source.
``vllm-native`` is what vLLM traces when its custom op is compiled natively, ``vllm-triton`` its path off
CUDA/ROCm and for non-contiguous input, ``vllm-cuda`` the C++ kernel it calls on CUDA and ROCm;
``flashinfer-sm90`` is the input quant inside the GEMM vLLM 0.33.0's FlashInfer swapAB path runs for M < 32
on Hopper.

SGLang's ``per_token_group_quant_fp8`` launches one of two Triton kernels by the scale order it is asked for,
and they round differently (one multiplies by the reciprocal, one divides): ``sglang-triton`` and
``sglang-triton-colmajor`` name the same engine function (``QuantFlavor.by_scale_order``), so
`layouts.quantize_groups` runs the kernel the engine runs for the scale layout it writes, whichever of the two
names is given.

vLLM and SGLang quantize with fp8_max 224 on e4m3fnuz (gfx942) - "240 caused accuracy issues" - and the
dtype max (448) on e4m3fn. aiter's quantizers and the flavors vLLM and SGLang route to aiter are in `flavors`.

Triton's fp32 ``/`` is exact under the CPU interpreter and approximate in a compiled kernel on a GPU; the
Triton flavors model the exact quotient (the interpreted kernel), as the aiter-triton flavor does. FlashInfer
builds its kernels with ``-use_fast_math``, so its two divisions are approximate on the GPU too (within 2 ulps);
``flashinfer-sm90`` models them correctly rounded, the source's arithmetic.
"""

from __future__ import annotations

from dataclasses import replace

from .flavor_recipe import QuantFlavor, recipe

VLLM_RELEASE = "vLLM 0.33.0"
SGLANG_RELEASE = "SGLang 0.5.23"
FLASHINFER_RELEASE = "FlashInfer 0.7.2.post1"
# What vLLM's and SGLang's group quantizers share: no 128x128 block form, and fp8_max 224 on e4m3fnuz, the
# dtype max on e4m3fn (vLLM's get_fp8_min_max() and SGLang's fp8_kernel.py).
_GROUP_QUANT = dict(fnuz_max=224.0, block_quantizer=False)
# SGLang's per_token_group_quant_fp8: the row-major kernel and the column-major one, picked by the scale order.
_SGLANG_BY_ORDER = ("sglang-triton", "sglang-triton-colmajor")

VLLM_NATIVE = recipe(
    "vllm-native",
    VLLM_RELEASE,
    description=(
        "vLLM 0.33 QuantFP8.forward_native group quant: scale = max(absmax / max, 1/(max*512)) (max 224 on "
        "e4m3fnuz), q = clamp(x / scale); ue8m0 as exp2(ceil(log2(scale))) in fp32, which can round below the scale"
    ),
    # `scales_raw = (absmax / _FP8_MAX).clamp(min=_FP8_MIN_SCALING_FACTOR)` with the floor 1 / (_FP8_MAX * 512):
    # a floor on the scale of 2^-9 / max, i.e. a floor of 2^-9 on amax. The two are the same bits: 2^-9 is
    # exact, scaling by a power of two commutes with rounding, and the fp32 division is monotone.
    amax_floor=2.0**-9,
    # `x_grouped / scales` (a bf16 tensor over an fp32 one: an fp32 division), `x_scaled.clamp(_FP8_MIN, _FP8_MAX)`
    # (torch's clamp keeps NaN), the scale `absmax / _FP8_MAX` (a tensor over a Python float) and ue8m0 as
    # `torch.exp2(torch.ceil(torch.log2(scales_raw)))` on fp32 scales.
    quotient="div", clamp=True, scale_rule="torch_scalar_divide", ue8m0_rule="log2_fp32", **_GROUP_QUANT,
    models=(
        "vLLM 0.33.0 vllm/model_executor/layers/quantization/input_quant_fp8.py QuantFP8.forward_native "
        "(QuantFP8._quantize_group_native, dynamic group quant)"
    ),
)

VLLM_TRITON = recipe(
    "vllm-triton",
    VLLM_RELEASE,
    description=(
        "vLLM 0.33 per_token_group_quant_fp8 Triton kernel: scale = max(amax, 1e-10) * fp32(1/max) (max 224 on "
        "e4m3fnuz), q = clamp(x / scale); ue8m0 as exp2(ceil(log2(scale))) in fp32"
    ),
    # _per_token_group_quant_fp8: `_absmax = tl.maximum(tl.max(tl.abs(y)), eps)` (eps=1e-10),
    # `scale_raw = _absmax * (1.0 / fp8_max)` (fp8_max a constexpr: the inverse is a Python float, used as an
    # fp32 constant), `y_s = tl.math.exp2(tl.ceil(tl.log2(scale_raw))) if use_ue8m0`,
    # `y_q = tl.clamp(y / y_s, fp8_min, fp8_max)`. Its column-major twin has the same arithmetic.
    amax_floor=1e-10,
    quotient="div", clamp=True, scale_rule="times_inverse_max", ue8m0_rule="log2_fp32", **_GROUP_QUANT,
    models=(
        "vLLM 0.33.0 vllm/model_executor/layers/quantization/utils/fp8_utils.py per_token_group_quant_fp8, "
        "Triton fallback _per_token_group_quant_fp8 / _per_token_group_quant_fp8_colmajor"
    ),
)

VLLM_CUDA = recipe(
    "vllm-cuda",
    VLLM_RELEASE,
    description=(
        "vLLM 0.33 C++ per_token_group_fp8_quant (CUDA and ROCm): amax = fmaxf over 1e-10 and |x| (NaN dropped), "
        "scale = amax / max (224 on e4m3fnuz), q = fminf(fmaxf(x / scale, -max), max) (NaN -> -max); "
        "ue8m0: the scale floored at 1e-10, rounded up to a power of two exactly"
    ),
    # csrc/quantization/w8a8/fp8/per_token_group_quant.cu (not in the wheel; the wheel's
    # _C_stable_libtorch.abi3.so holds its kernels): `float local_absmax = eps;` then
    # `local_absmax = fmaxf(local_absmax, fabsf(x))`, `float y_s = local_absmax / max_8bit;` (an IEEE division:
    # vLLM builds without fast math), `q = fminf(fmaxf(x / y_s, min_8bit), max_8bit)` and the fp8 constructor
    # (round to nearest even; the clamp leaves nothing to saturate). ue8m0: `y_s = fmaxf(fabsf(y_s), 1e-10f)`,
    # then the exponent bits are bumped when the mantissa is not zero - the register kernels serving's bf16 /
    # fp16 groups of 128 take; the shared-memory kernel (fp32 input, other group sizes) writes
    # `exp2f(ceilf(log2f(...)))`, stated in the source to give the same bits.
    amax_floor=1e-10,
    quotient="div", clamp=True, scale_rule="divide", amax_ignores_nan=True, nan_clamps_to_min=True,
    ue8m0_rule="exact", ue8m0_scale_floor=1e-10, **_GROUP_QUANT,
    models=(
        "vLLM 0.33.0 csrc/quantization/w8a8/fp8/per_token_group_quant.cu per_token_group_quant_8bit_kernel / "
        "per_token_group_quant_8bit_register_kernel (torch.ops._C.per_token_group_fp8_quant, called by "
        "vllm/model_executor/layers/quantization/utils/fp8_utils.py per_token_group_quant_fp8); checked against "
        "an oracle written from that source, not run"
    ),
)

SGLANG_TRITON = recipe(
    "sglang-triton",
    SGLANG_RELEASE,
    description=(
        "SGLang 0.5.23 row-major Triton group quant: scale = max(amax, 1e-10) / max (224 on e4m3fnuz), "
        "q = clamp(x * (1/scale)); no ue8m0 form"
    ),
    # _per_token_group_quant_8bit: `_absmax = tl.maximum(tl.max(tl.abs(y)), eps)`, `y_s = _absmax / bit8_max`,
    # `y_s_inv = 1.0 / y_s`, `y_q = tl.clamp(y * y_s_inv, bit8_min, bit8_max)`; bit8_max is the module's
    # fp8_max on HIP (224.0 when the device is gfx94x, else the e4m3fn max) and the dtype max elsewhere.
    # `_per_token_group_quant_8bit_raw` asserts `not scale_ue8m0` for this kernel.
    amax_floor=1e-10,
    quotient="mul_reciprocal", clamp=True, ue8m0_rule="none", by_scale_order=_SGLANG_BY_ORDER, **_GROUP_QUANT,
    models=(
        "SGLang 0.5.23 sglang/kernels/ops/quantization/fp8_kernel.py _per_token_group_quant_8bit, launched by "
        "_per_token_group_quant_8bit_raw (per_token_group_quant_fp8 off CUDA) with column_major_scales=False"
    ),
)

# _per_token_group_quant_8bit_colmajor: the same amax and scale, then
# `if SCALE_UE8M0: y_s = tl.exp2(tl.ceil(tl.log2(tl.abs(y_s))))` and `y_q = tl.clamp(y / y_s, ...)`.
SGLANG_TRITON_COLMAJOR = replace(
    SGLANG_TRITON,
    name="sglang-triton-colmajor",
    description=(
        "SGLang 0.5.23 column-major Triton group quant: scale = max(amax, 1e-10) / max (224 on e4m3fnuz), "
        "q = clamp(x / scale); ue8m0 as exp2(ceil(log2(scale))) in fp32"
    ),
    quotient="div",
    ue8m0_rule="log2_fp32",
    models=(
        "SGLang 0.5.23 sglang/kernels/ops/quantization/fp8_kernel.py _per_token_group_quant_8bit_colmajor, "
        "launched by _per_token_group_quant_8bit_raw with column_major_scales=True"
    ),
)

DEEPGEMM = recipe(
    "deepgemm",
    "DeepGEMM",
    description=(
        "DeepGEMM per_token_cast_to_fp8 as SGLang ships it: amax floored at 1e-4, q = cast(x * (448/amax)) "
        "unclamped, scale = amax / 448; with ue8m0 DeepGEMM's own form, q = cast(x * (1/scale)) on the "
        "power-of-two scale. Per 128x128 block: per_block_cast_to_fp8, the same recipe"
    ),
    # `x_amax = x_view.abs().float().amax(dim=2).view(m, -1).clamp(1e-4)`,
    # `(x_view * (448.0 / x_amax.unsqueeze(2))).to(torch.float8_e4m3fn)`, scale `x_amax / 448.0`. The output
    # dtype is always e4m3fn; on e4m3fnuz the flavor keeps 448 and reports what overflows.
    amax_floor=1e-4,
    quotient="times_max_over_amax", clamp=False, fixed_max=448.0, scale_rule="torch_scalar_divide",
    # ue8m0 is DeepGEMM's `ceil_to_ue8m0` (exponent + (mantissa != 0), clamped to [1, 254]): the exact ceiling
    # for every scale this floor allows; only a non-finite scale differs (DeepGEMM gives 2^127)
    ue8m0_rule="exact",
    models=(
        "SGLang 0.5.23 sglang/benchmark/deepseek_utils.py per_token_cast_to_fp8 / per_block_cast_to_fp8 (the "
        "same per_token_cast_to_fp8 is in sglang/test/test_deepep_utils.py); with ue8m0, DeepGEMM's "
        "per_token_cast_to_fp8(use_ue8m0=True) as vLLM 0.33.0 vendors it (vllm/third_party/deep_gemm/utils/math.py)"
    ),
)

FLASHINFER_SM90 = recipe(
    "flashinfer-sm90",
    FLASHINFER_RELEASE,
    description=(
        "FlashInfer 0.7.2.post1 fp8_blockscale_gemm_sm90's own bf16 input quant (TensorRT-LLM scale_1x128_kernel): "
        "no amax floor, q = cast_satfinite(x * fp32(448 / amax)), scale = 1 / that multiplier (1 for an all-zero "
        "group); e4m3fn, no ue8m0 form"
    ),
    # fp8_blockscale_gemm_kernel.cuh scale_1x128_kernel: the group's amax over bf16 |x| (__hmax, exact),
    # `ScaleType scale = amax != InputType(0.f) ? 448.f / ScaleType(amax) : 1.f;`, stored
    # `scales[...] = ScaleType(1.f / scale)`, values `OutputType(ScaleType(x) * scale)` - the __nv_fp8_e4m3
    # constructor rounds to nearest even and saturates to +-448 (a clamp that keeps NaN).
    amax_floor=0.0,
    quotient="times_max_div_amax", clamp=True, fixed_max=448.0, scale_rule="reciprocal_of_multiplier",
    ue8m0_rule="none", block_quantizer=False,
    models=(
        "FlashInfer 0.7.2.post1 flashinfer/data/csrc/nv_internal/tensorrt_llm/kernels/cutlass_kernels/fp8_blockscale_gemm/"
        "fp8_blockscale_gemm_kernel.cuh scale_1x128_kernel, launched by fp8_gemm_run for a bf16 input of "
        "flashinfer.gemm.fp8_blockscale_gemm_sm90; checked against an oracle written from that source, not run"
    ),
)

ENGINE_FLAVORS: tuple[QuantFlavor, ...] = (
    VLLM_NATIVE,
    VLLM_TRITON,
    VLLM_CUDA,
    SGLANG_TRITON,
    SGLANG_TRITON_COLMAJOR,
    DEEPGEMM,
    FLASHINFER_SM90,
)
