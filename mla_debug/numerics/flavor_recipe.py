"""What a quantization flavor is: the handful of recipe choices that make two "correct" quantizers disagree.

Every quantizer here computes ``scale ~ amax / fp8_max`` per group or block; the flavors differ in the
fp8_max they use on fnuz hardware, the floor applied to amax, how the scale and the quotient are formed,
what an all-zero group gets, how NaN is treated, whether they clamp before the cast and how they round a
scale up to a power of two (ue8m0). A `QuantFlavor` holds those choices as data; `quantize` applies them
and `flavors` / `engine_flavors` name the recipes of aiter, vLLM, SGLang and DeepGEMM.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from .formats import E4M3FNUZ, Fp8Format

# How each value becomes the fp32 number cast to fp8:
#   mul_reciprocal       x * fp32(1 / scale)
#   div                  x / scale, one correctly rounded fp32 division
#   times_max_over_amax  x * fp32(fp32(1 / amax) * fmt_max): torch's `448.0 / amax` (a Python number over a
#                        tensor is the tensor's reciprocal times the number), with amax the floored group amax;
#                        the scale returned is formed separately from amax by the scale rule. With ue8m0 the
#                        power-of-two scale's reciprocal is exact and the recipe multiplies by it instead.
#   times_max_div_amax   x * fp32(fmt_max / amax), ONE correctly rounded division (C++ `448.f / float(amax)`),
#                        and x * 1 for an all-zero group (the C++ writes `amax != 0 ? 448.f / amax : 1.f`)
Quotient = Literal["mul_reciprocal", "div", "times_max_over_amax", "times_max_div_amax"]
# How the scale is formed from the (floored) amax:
#   divide               amax / fmt_max, one correctly rounded fp32 division
#   times_inverse_max    amax * fp32(1 / fmt_max): the inverse rounded to fp32 once (C++ `1. / float(max)`
#                        stored in a float, a Triton constexpr `1.0 / fp8_max`), then one fp32 multiply
#   torch_scalar_divide  amax / fmt_max written as a torch tensor divided by a Python float: exact division
#                        on the CPU, while CUDA/ROCm torch multiplies by the fp32 reciprocal instead
#                        (times_inverse_max's bits)
#   reciprocal_of_multiplier  fp32(1 / fp32(fmt_max / amax)): the scale stored as the reciprocal of the rounded
#                        multiplier the values were scaled by (C++ `1.f / scale` with `scale = 448.f / amax`);
#                        an all-zero group's multiplier is 1, so its scale is 1
ScaleRule = Literal["divide", "times_inverse_max", "torch_scalar_divide", "reciprocal_of_multiplier"]
# How a scale is rounded up to a power of two (ue8m0):
#   exact      the smallest power of two >= the scale (an exponent-bit rule: bump the exponent when the
#              mantissa is not zero); non-finite scales pass through
#   log2_fp32  exp2(ceil(log2(scale))) with log2 rounded to fp32, as written in torch and Triton: just above
#              a power of two 2^k, log2 rounds to k itself and the result is 2^k, BELOW the scale
#   none       the engine function has no ue8m0 form; asking for one is an error
Ue8m0Rule = Literal["exact", "log2_fp32", "none"]


@dataclass(frozen=True)
class QuantFlavor:
    """One quantization recipe.

    quotient: how a value becomes the fp32 number that is cast (see ``Quotient``); x * (1/scale) and
    x / scale differ by one rounding now and then. scale_rule: how amax becomes the scale (see
    ``ScaleRule``). group_amax_floor / block_amax_floor: amax is raised to this before the scale is
    formed (0: no floor). zero_scale: what an all-zero group's scale is replaced by (None: kept, so with no
    floor it is 0 and the bytes NaN). amax_ignores_nan: NaN elements do not enter the group's amax (C++
    ``fmaxf``); elsewhere they make it NaN. clamp: the quotient is clamped to +-fmt_max before the cast;
    nan_clamps_to_min: that clamp is ``fminf(fmaxf(y, -max), max)``, which turns NaN into -max (C++),
    instead of keeping NaN (torch, Triton). ue8m0_rule: how ``ue8m0=True`` rounds the scale up (see
    ``Ue8m0Rule``); ue8m0_scale_floor: the scale is raised to this before that rounding. block_quantizer:
    whether the recipe exists as a 128x128 weight quantizer. owner: whose code the recipe is ("aiter",
    "vLLM 0.33.0", ...); models: the function this flavor reproduces, with release, file and function.
    by_scale_order: (row-major flavor, column-major flavor) where the engine function launches a different
    kernel per scale order and the two round differently (SGLang's Triton group quant); `for_scale_order`
    picks the one the engine runs, so a flavor names the engine function, not one of its kernels. None:
    one arithmetic whatever the order.
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
    ue8m0_rule: Ue8m0Rule = "exact"
    ue8m0_scale_floor: float = 0.0
    nan_clamps_to_min: bool = False
    owner: str = ""
    by_scale_order: tuple[str, str] | None = None

    def __post_init__(self) -> None:
        if self.nan_clamps_to_min and not self.clamp:
            raise ValueError(f"flavor {self.name!r}: nan_clamps_to_min describes the clamp, but clamp=False")
        if self.by_scale_order is not None and self.name not in self.by_scale_order:
            raise ValueError(
                f"flavor {self.name!r}: by_scale_order {self.by_scale_order} names the engine function's two "
                "kernels, one of which is this flavor"
            )

    def for_scale_order(self, order: str) -> str:
        """The flavor the engine function runs when it writes its scales in `order` ("row": row-major
        bytes, "col": column-major bytes): this one, unless the engine picks another kernel - with other
        arithmetic - for that order (``by_scale_order`` = (row-major flavor, column-major flavor))."""
        if order not in ("row", "col"):
            raise ValueError(f"flavor {self.name!r}: scale order {order!r} is not 'row' or 'col'")
        if self.by_scale_order is None:
            return self.name
        return self.by_scale_order[0 if order == "row" else 1]

    def fmt_max(self, fmt: Fp8Format) -> float:
        """The largest value this flavor maps a group's amax to, for the given element format."""
        if self.fixed_max is not None:
            return self.fixed_max
        if fmt == E4M3FNUZ and self.fnuz_max is not None:
            return self.fnuz_max
        return fmt.max


def recipe(name: str, owner: str, amax_floor: float, **choices: Any) -> QuantFlavor:
    """A flavor whose group and block quantizers floor amax alike (every named flavor but ``vllm``);
    ``choices`` are QuantFlavor's other fields, by name."""
    return QuantFlavor(name=name, owner=owner, group_amax_floor=amax_floor, block_amax_floor=amax_floor, **choices)
