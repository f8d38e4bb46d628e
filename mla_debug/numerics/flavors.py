"""Quantization flavors: the small recipe differences that make two "correct" quantizers disagree in bits.

aiter, vLLM and the DeepSeek/DeepGEMM references all compute ``scale = amax / fp8_max`` per group or
block, but they differ in the fp8_max they use on fnuz hardware, in the floor applied to amax, in how
they form the quotient, and in whether they clamp before the cast. Their outputs are all valid and not
bit-comparable, so every quantizer here takes a flavor.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from .formats import E4M3FNUZ, Fp8Format

Quotient = Literal["mul_reciprocal", "div"]


@dataclass(frozen=True)
class QuantFlavor:
    """One quantization recipe.

    quotient: ``"mul_reciprocal"`` computes ``x * (1 / scale)`` in fp32 (aiter, DeepGEMM);
    ``"div"`` computes ``x / scale`` (vLLM's Triton group quant). They differ by one rounding.
    """

    name: str
    description: str
    group_amax_floor: float
    block_amax_floor: float
    quotient: Quotient
    clamp: bool
    fnuz_max: float | None = None
    fixed_max: float | None = None

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
        "aiter: scale = max(amax, 1e-10) / dtype max (240 on e4m3fnuz, 448 on e4m3fn), "
        "q = clamp(x * (1/scale)) (aiter's Triton quant; its HIP quant uses a hardware approximate "
        "reciprocal, which is not modelled)"
    ),
    group_amax_floor=1e-10,
    block_amax_floor=1e-10,
    quotient="mul_reciprocal",
    clamp=True,
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

FLAVORS: dict[str, QuantFlavor] = {f.name: f for f in (AITER, VLLM, DEEPSEEK)}


def quant_flavor(spec: str | QuantFlavor) -> QuantFlavor:
    """Look up a flavor by name ("aiter", "vllm", "deepseek") or pass a QuantFlavor through."""
    if isinstance(spec, QuantFlavor):
        return spec
    if isinstance(spec, str) and spec.lower() in FLAVORS:
        return FLAVORS[spec.lower()]
    raise ValueError(f"unknown quantization flavor {spec!r}; valid: {', '.join(FLAVORS)}")
