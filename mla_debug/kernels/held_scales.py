"""A block-scaled GEMM that reads its scales in the representation its caller holds them (CPU emulation).

The other kernels here take fp32 scales and differ in byte *order*; the incidents of ``data/incidents``
differ in *representation* (`layouts.scale_format`): DeepGEMM on Blackwell takes ue8m0 codes, converting
fp32 scales itself with an exponent-only packer (masked, or - before DeepGEMM PR #337 - unmasked), and a
consumer that expects fp32 can be handed packed words or E8M0 codes. `consumer_read` is what one
consumer takes a held scale to mean; `block_gemm` multiplies fp8 codes by scale values read so, for a
linear ``(M, K) x (N, K)^T`` or a grouped GEMM ``einsum("tgd,grd->tgr")`` (DeepGEMM's ``fp8_einsum
("bhr,hdr->bhd")`` as DeepSeek-V4's wo_a uses it), in fp32, rounded to the output dtype once.
"""

from __future__ import annotations

import torch

from .._checks import describe
from ..layouts.scale_format import (
    as_codes,
    e8m0_values,
    pack_exponents,
    packed_words_read_as_scales,
    truncate_to_power_of_two,
    unpack_exponents,
)
from ..numerics import fp8_format

GROUP = 128
# What a consumer does with the scale it is handed:
FP32 = "fp32"  # takes fp32 values as numbers (DeepGEMM's SM90 recipe, Triton, CUTLASS); packed words as fp32 too
UE8M0_MASKED = (
    "ue8m0-masked"  # converts fp32 to ue8m0 keeping each exponent byte (DeepGEMM's torch packer, CUDA after PR #337)
)
UE8M0_UNMASKED = "ue8m0-unmasked"  # DeepGEMM's CUDA packers before PR #337: shift-OR without masking
CONSUMERS = (FP32, UE8M0_MASKED, UE8M0_UNMASKED)


def consumer_read(held: torch.Tensor, groups: int, consumer: str, name: str = "scale") -> torch.Tensor:
    """The fp32 (rows, `groups`) values `consumer` multiplies by when handed `held` (rows, ...) as:
    fp32 values, E8M0 codes (uint8 / float8_e8m0fnu) or packed ue8m0 words (int32)."""
    if consumer not in CONSUMERS:
        raise ValueError(f"{name}: consumer {consumer!r} is not one of {', '.join(CONSUMERS)}")
    if held.dim() != 2:
        raise ValueError(f"{name}: {describe(held)} must be 2-D (rows, groups or packed words)")
    if held.dtype == torch.int32:
        if consumer == FP32:
            return packed_words_read_as_scales(held, groups, name)
        return unpack_exponents(held, groups, name)
    if held.dtype != torch.float32:
        return e8m0_values(as_codes(held, name), name)
    if consumer == UE8M0_MASKED:
        return truncate_to_power_of_two(held, name)
    if consumer == UE8M0_UNMASKED:
        return unpack_exponents(pack_exponents(held, masked=False, name=name), groups, name)
    return held


def dequantize_as_read(codes: torch.Tensor, scale: torch.Tensor, block_rows: int) -> torch.Tensor:
    """fp32 values of fp8 `codes` (..., R, K) times scale values (..., ceil(R / block_rows), K / 128)."""
    values = fp8_format(codes.dtype).decode(codes)
    expanded = scale.to(torch.float32).repeat_interleave(GROUP, dim=-1)
    if block_rows > 1:
        expanded = expanded.repeat_interleave(block_rows, dim=-2)[..., : codes.shape[-2], :]
    if expanded.shape != values.shape:
        raise ValueError(
            f"scale {describe(scale)} does not cover codes {describe(codes)} in 1x{GROUP} / {block_rows}x{GROUP} blocks"
        )
    return values * expanded


def block_gemm(
    x: torch.Tensor, act_values: torch.Tensor, weight: torch.Tensor, weight_values: torch.Tensor, out_dtype: torch.dtype
) -> torch.Tensor:
    """x (M, K) or (T, G, D) fp8 codes with per-1x128 scale values read as `act_values`; weight (N, K) or
    (G, R, D) fp8 codes with 128x128 block scale values `weight_values`: the product in fp32, rounded once."""
    xs = dequantize_as_read(x, act_values, 1)
    ws = dequantize_as_read(weight, weight_values, GROUP)
    if x.dim() == 3:
        return torch.einsum("tgd,grd->tgr", xs, ws).to(out_dtype)
    return (xs @ ws.t()).to(out_dtype)
