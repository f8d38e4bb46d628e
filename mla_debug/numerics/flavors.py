"""Quantization flavors: the small recipe differences that make two "correct" quantizers disagree in bits.

aiter, vLLM and the DeepSeek/DeepGEMM references all compute ``scale ~ amax / fp8_max`` per group or
block, but they differ in the fp8_max they use on fnuz hardware, in the floor applied to amax, in how
they form the scale and the quotient, in what an all-zero group gets, and in whether they clamp before
the cast. Their outputs are all valid and not bit-comparable, so every quantizer here takes a flavor.

aiter alone has four 1x128 activation quantizers that are not bit-identical to each other; each is its
own flavor, byte-exact with aiter's code (amd-aiter 0.1.7.post2.dev18; tests/aiter_reference checks the
three that run off ROCm against aiter itself):

- ``aiter-hip``: the HIP ``dynamic_per_group_scaled_quant_kernel`` (csrc/kernels/quant_kernels.cu), what
  serving calls (``per_group_quant_hip``; vLLM's ``group_fp8_quant``). amax floored at 1e-10, scale
  ``amax * float(1/max)``, ``q = clamp(x * (1/scale))``.
- ``aiter-triton``: the Triton ``_dynamic_per_token_quant_fp8_i8_kernel`` per 128 elements
  (ops/triton/quant.py; ``get_triton_quant(per_1x128)``). No floor, scale ``amax / max``,
  ``q = x * (1/scale)`` unclamped: an all-zero group gets scale 0 and NaN bytes.
- ``aiter-fused``: the quant step ``_fp8_quant_op`` of the Triton ``fused_rms_fp8_group_quant``
  (ops/triton/_triton_kernels/fused_fp8_quant.py). Floor 1e-10, scale ``amax / max``,
  ``q = clamp(x * (1/scale))``.
- ``aiter-torch``: the torch ``pertoken_quant`` per 128 elements (ops/quant.py;
  ``get_torch_quant(per_1x128)``), aiter's test reference. No floor, scale ``amax / max`` as torch
  divides by a Python float (exactly on the CPU, by the fp32 reciprocal on a GPU), a zero scale
  replaced by 1, ``q = x / scale`` unclamped.

``aiter`` is the recipe of ``aiter-fused`` under its older name, kept for weights and for callers that
named it (aiter has no 128x128 block quantizer, so only it, ``vllm`` and ``deepseek`` quantize blocks).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from .formats import E4M3FNUZ, Fp8Format

Quotient = Literal["mul_reciprocal", "div"]
# How the scale is formed from the (floored) amax:
#   divide               amax / fmt_max, one correctly rounded fp32 division
#   times_inverse_max    amax * fp32(1 / fmt_max): the inverse rounded to fp32 once (C++ `1. / float(max)`
#                        stored in a float), then one fp32 multiply - aiter's HIP kernel
#   torch_scalar_divide  amax / fmt_max written as a torch tensor divided by a Python float, which is
#                        what aiter's torch reference does: exact division on the CPU, while CUDA/ROCm
#                        torch multiplies by the fp32 reciprocal instead (times_inverse_max's bits)
ScaleRule = Literal["divide", "times_inverse_max", "torch_scalar_divide"]


@dataclass(frozen=True)
class QuantFlavor:
    """One quantization recipe.

    quotient: ``"mul_reciprocal"`` computes ``x * (1 / scale)`` in fp32 (aiter, DeepGEMM);
    ``"div"`` computes ``x / scale`` (vLLM's Triton group quant, aiter's torch reference). They differ
    by one rounding. scale_rule: how amax becomes the scale (see ``ScaleRule``). zero_scale: what an
    all-zero group's scale is replaced by (None: kept, so with no floor it is 0 and the bytes NaN).
    amax_ignores_nan: NaN elements do not enter the group's amax (HIP ``fmaxf``); elsewhere they make it
    NaN. block_quantizer: whether the recipe exists as a 128x128 weight quantizer. models: the function
    this flavor reproduces, with file and release.
    """

    name: str
    description: str
    group_amax_floor: float
    block_amax_floor: float
    quotient: Quotient
    clamp: bool
    fnuz_max: float | None = None
    fixed_max: float | None = None
    scale_rule: ScaleRule = "divide"
    zero_scale: float | None = None
    amax_ignores_nan: bool = False
    block_quantizer: bool = True
    models: str = ""

    def fmt_max(self, fmt: Fp8Format) -> float:
        """The largest value this flavor maps a group's amax to, for the given element format."""
        if self.fixed_max is not None:
            return self.fixed_max
        if fmt == E4M3FNUZ and self.fnuz_max is not None:
            return self.fnuz_max
        return fmt.max


AITER = QuantFlavor(
    name="aiter",
    description=(
        "aiter (generic): scale = max(amax, 1e-10) / dtype max (240 on e4m3fnuz, 448 on e4m3fn), "
        "q = clamp(x * (1/scale)); the recipe of aiter-fused under its older name, also for weights"
    ),
    group_amax_floor=1e-10,
    block_amax_floor=1e-10,
    quotient="mul_reciprocal",
    clamp=True,
    models="aiter-fused's recipe; aiter has no 128x128 block quantizer, this one applies it per block",
)

AITER_HIP = QuantFlavor(
    name="aiter-hip",
    description=(
        "aiter HIP group quant (what serving calls): scale = max(amax, 1e-10) * float(1/dtype max), "
        "q = clamp(x * (1.0f/scale)); NaN elements do not enter amax"
    ),
    group_amax_floor=1e-10,
    block_amax_floor=1e-10,
    quotient="mul_reciprocal",
    clamp=True,
    # quant_kernels.cu: `absMax = 1e-10f; absMax = max(absMax, abs(x))` (fmaxf: NaN dropped), then
    # `inverted_scale = absMax * inverted_DTYPE_MAX` with `const float inverted_DTYPE_MAX = 1. / float(max)`,
    # stored as the scale; the values are multiplied by `1.0f / inverted_scale` (an IEEE fp32 division:
    # aiter builds without fast-math) and converted by `v_med3_f32` (clamp to +-max) + `v_cvt_pk_fp8_f32`
    # (round to nearest even), ck_tile/vec_convert.h `fp32x2_t_to_fp8x2_t`.
    scale_rule="times_inverse_max",
    amax_ignores_nan=True,
    block_quantizer=False,
    models=(
        "amd-aiter 0.1.7.post2.dev18 csrc/kernels/quant_kernels.cu dynamic_per_group_scaled_quant_kernel "
        "(aiter.ops.quant.per_group_quant_hip / dynamic_per_token_scaled_quant with group size 128)"
    ),
)

AITER_TRITON = QuantFlavor(
    name="aiter-triton",
    description=(
        "aiter Triton per-1x128 quant: scale = amax / dtype max with no floor, q = x * (1/scale) with no "
        "clamp; an all-zero group gets scale 0 and NaN bytes"
    ),
    # _dynamic_per_token_quant_fp8_i8_kernel: `m = tl.max(tl.abs(x)); scale_out = m / DTYPE_MAX;
    # scale_recip = 1 / scale_out; qx = (x * scale_recip).to(fp8)` - no floor, no clamp.
    group_amax_floor=0.0,
    block_amax_floor=0.0,
    quotient="mul_reciprocal",
    clamp=False,
    block_quantizer=False,
    models=(
        "amd-aiter 0.1.7.post2.dev18 aiter/ops/triton/_triton_kernels/quant.py _dynamic_per_token_quant_fp8_i8_kernel "
        "(aiter.ops.quant.get_triton_quant(QuantType.per_1x128))"
    ),
)

AITER_FUSED = QuantFlavor(
    name="aiter-fused",
    description=(
        "aiter Triton fused RMSNorm + group quant: scale = max(amax, 1e-10) / dtype max, q = clamp(x * (1/scale))"
    ),
    # _fp8_quant_op: `m = tl.maximum(tl.max(tl.abs(x)), 1e-10); scale_out = m / DTYPE_MAX;
    # scale_recip = 1.0 / scale_out; x = tl.clamp(x * scale_recip, DTYPE_MIN, DTYPE_MAX)`.
    group_amax_floor=1e-10,
    block_amax_floor=1e-10,
    quotient="mul_reciprocal",
    clamp=True,
    block_quantizer=False,
    models=(
        "amd-aiter 0.1.7.post2.dev18 aiter/ops/triton/_triton_kernels/fused_fp8_quant.py _fp8_quant_op "
        "(aiter.ops.triton.fused_fp8_quant.fused_rms_fp8_group_quant)"
    ),
)

AITER_TORCH = QuantFlavor(
    name="aiter-torch",
    description=(
        "aiter torch reference (pertoken_quant per 128): scale = amax / dtype max with no floor, an all-zero "
        "group's scale replaced by 1, q = x / scale with no clamp"
    ),
    # pertoken_quant: `per_token_scale = per_token_amax / dtypeMax; per_token_scale[per_token_scale == 0] = 1;
    # y = (hidden_states / per_token_scale).to(quant_dtype)`.
    group_amax_floor=0.0,
    block_amax_floor=0.0,
    quotient="div",
    clamp=False,
    scale_rule="torch_scalar_divide",
    zero_scale=1.0,
    block_quantizer=False,
    models=(
        "amd-aiter 0.1.7.post2.dev18 aiter/ops/quant.py pertoken_quant wrapped by per_block_quant_wrapper((1, 128)) "
        "(aiter.ops.quant.get_torch_quant(QuantType.per_1x128))"
    ),
)

VLLM = QuantFlavor(
    name="vllm",
    description=(
        "vLLM: like aiter but 224 on e4m3fnuz ('240 caused accuracy issues'), group quant "
        "q = clamp(x / scale) with amax floor 1e-10, block quant (scaled_quantize) amax floor 1e-12"
    ),
    group_amax_floor=1e-10,
    block_amax_floor=1e-12,
    quotient="div",
    clamp=True,
    fnuz_max=224.0,
)

DEEPSEEK = QuantFlavor(
    name="deepseek",
    description=(
        "DeepSeek-V3 / DeepGEMM references: scale = max(amax, 1e-4) / 448, q = cast(x * (1/scale)) "
        "with no clamp (the e4m3fn cast saturates; on e4m3fnuz values above 240 become NaN, which is "
        "reported)"
    ),
    group_amax_floor=1e-4,
    block_amax_floor=1e-4,
    quotient="mul_reciprocal",
    clamp=False,
    fixed_max=448.0,
)

FLAVORS: dict[str, QuantFlavor] = {
    f.name: f for f in (AITER, AITER_HIP, AITER_TRITON, AITER_FUSED, AITER_TORCH, VLLM, DEEPSEEK)
}


def quant_flavor(spec: str | QuantFlavor) -> QuantFlavor:
    """Look up a flavor by name ("aiter-hip", "aiter-fused", "vllm", ... see FLAVORS) or pass a QuantFlavor
    through."""
    if isinstance(spec, QuantFlavor):
        return spec
    if isinstance(spec, str) and spec.lower() in FLAVORS:
        return FLAVORS[spec.lower()]
    raise ValueError(f"unknown quantization flavor {spec!r}; valid: {', '.join(FLAVORS)}")
