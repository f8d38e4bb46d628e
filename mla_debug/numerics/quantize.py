"""Per-1x128 group quantization (activations) and per-128x128 block quantization (weights), as math.

These functions return plain tensors: fp8 values and the LOGICAL fp32 scale (one value per group or
block). How the scale is laid out in memory for a kernel is a layout question, answered in
``mla_debug.layouts``.

Recipe (docs/semantics.md §3): ``amax = max(max|x|, floor)`` in fp32 (no floor where the flavor has none; NaN left
out where the flavor's C++ reduction drops it), ``scale = amax / fmt_max`` (or ``amax * fp32(1/fmt_max)``,
by the flavor's scale rule; an all-zero group's scale replaced where the flavor says so; with ue8m0 rounded
up to a power of two by the flavor's rule), ``q = cast_rne(x * (1/scale))``, ``x / scale`` or
``x * (fmt_max / amax)`` by the flavor's quotient, clamped to +-fmt_max first when the flavor clamps.
NaN and Inf inputs flow through (a group holding an Inf gets an infinite scale and NaN/0 values; a flavor
whose C++ clamp maps NaN to -fmt_max does so); they never raise. Which engine function each flavor
reproduces is in `flavors` and `engine_flavors`.
"""

from __future__ import annotations

import math
import warnings

import torch

from .._checks import describe, require_floating, require_min_ndim, require_multiple, require_tensor
from .flavors import FLAVORS, QuantFlavor, quant_flavor
from .formats import Fp8Format, fp8_format

# Bound on the fp32 temporaries of block quantization (elements), so quantizing a 37M-element weight
# does not hold several full fp32 copies at once.
_CHUNK_ELEMENTS = 1 << 22


class Fp8OverflowWarning(UserWarning):
    """Finite values left the fp8 range during a cast (NaN on e4m3fnuz, saturation on e4m3fn)."""


def overflow_threshold(fmt: Fp8Format) -> float:
    """Smallest magnitude the cast no longer rounds to +-max: max plus half an ulp of the top binade."""
    top_exponent = math.floor(math.log2(fmt.max))
    return fmt.max + 2.0 ** (top_exponent - 3 - 1)


def _tie_rounds_up(fmt: Fp8Format) -> bool:
    """Whether a value exactly halfway above max rounds away from max (round-to-nearest-even: when
    max's last mantissa bit is odd, e.g. 240 = 1.111b x 2^7; 448 = 1.110b x 2^8 keeps the tie)."""
    top_exponent = math.floor(math.log2(fmt.max))
    return int(fmt.max / 2.0 ** (top_exponent - 3)) % 2 == 1


def ceil_pow2(scale: torch.Tensor) -> torch.Tensor:
    """Round positive scales up to a power of two exactly (ue8m0); zero (a flavor without an amax floor),
    NaN and Inf pass through."""
    mantissa, exponent = torch.frexp(scale)
    exponent = exponent - (mantissa == 0.5).to(exponent.dtype)
    rounded = torch.ldexp(torch.ones_like(scale), exponent)
    return torch.where(torch.isfinite(scale) & (scale > 0), rounded, scale)


def _ue8m0(scale: torch.Tensor, flavor: QuantFlavor) -> torch.Tensor:
    """The flavor's power-of-two scale (its ue8m0 rule, after its ue8m0 scale floor)."""
    if flavor.ue8m0_scale_floor > 0:
        scale = scale.clamp_min(flavor.ue8m0_scale_floor)
    if flavor.ue8m0_rule == "log2_fp32":
        # Literally the engines' expression on fp32 scales: log2 rounds to fp32 first, so a scale a few ulps
        # above 2^k has log2 == k and comes back as 2^k, below itself.
        return torch.exp2(torch.ceil(torch.log2(scale)))
    return ceil_pow2(scale)


def _scale(amax: torch.Tensor, fmt_max: float, flavor: QuantFlavor) -> torch.Tensor:
    """The fp32 scale of each (floored) amax under the flavor's scale rule."""
    if flavor.scale_rule == "times_inverse_max":
        # `const float inverted_DTYPE_MAX = 1. / float(max)`: the quotient in double, rounded to fp32 once
        return amax * torch.tensor(1.0 / fmt_max, dtype=torch.float32, device=amax.device)
    if flavor.scale_rule == "torch_scalar_divide":
        # Literally what the torch code writes, so each device rounds it as it does there.
        return amax / fmt_max
    if flavor.scale_rule == "reciprocal_of_multiplier":
        return torch.reciprocal(_max_div_amax(amax, fmt_max))
    # Divide by a full tensor, not a Python scalar: CUDA torch turns `t / scalar` into `t * (1/scalar)`,
    # which is not the correctly rounded quotient (the CPU divides exactly), so scales would differ by
    # an ulp between devices.
    return amax / torch.full_like(amax, fmt_max)


def _max_div_amax(amax: torch.Tensor, fmt_max: float) -> torch.Tensor:
    """fp32(fmt_max / amax), one rounding, and 1 where amax is 0 (``amax != 0 ? 448.f / amax : 1.f``)."""
    multiplier = torch.full_like(amax, fmt_max) / amax
    return torch.where(amax == 0, torch.ones_like(amax), multiplier)


def _quotient(
    view: torch.Tensor, amax: torch.Tensor, scale: torch.Tensor, fmt_max: float, flavor: QuantFlavor, ue8m0: bool
) -> torch.Tensor:
    """The fp32 numbers the flavor casts to fp8, before any clamp."""
    if flavor.quotient == "div":
        return view / scale
    if flavor.quotient == "times_max_over_amax" and not ue8m0:
        # torch's `448.0 / amax` is `amax.reciprocal() * 448.0`: two roundings, then the product with x
        return view * (amax.reciprocal() * fmt_max)
    if flavor.quotient == "times_max_div_amax":
        return view * _max_div_amax(amax, fmt_max)
    return view * (1.0 / scale)


def _clamp(y: torch.Tensor, fmt_max: float, flavor: QuantFlavor) -> torch.Tensor:
    """Clamp to +-fmt_max the flavor's way: torch's clamp keeps NaN, C++ fminf(fmaxf(y, -max), max) makes it -max."""
    y = y.clamp_(-fmt_max, fmt_max)
    if flavor.nan_clamps_to_min:
        y = y.masked_fill_(torch.isnan(y), -fmt_max)
    return y


def _scaled_cast(
    view: torch.Tensor,
    reduce_dims: tuple[int, ...],
    floor: float,
    fmt: Fp8Format,
    flavor: QuantFlavor,
    ue8m0: bool,
) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Quantize a float32 view whose `reduce_dims` span one group/block. Returns (q, scale, overflows)."""
    fmt_max = flavor.fmt_max(fmt)
    magnitude = view.abs()
    if flavor.amax_ignores_nan:
        magnitude = torch.where(torch.isnan(magnitude), torch.zeros_like(magnitude), magnitude)
    amax = magnitude.amax(dim=reduce_dims, keepdim=True)
    if floor > 0:
        amax = amax.clamp_min(floor)
    scale = _scale(amax, fmt_max, flavor)
    if flavor.zero_scale is not None:
        scale = torch.where(scale == 0, torch.full_like(scale, flavor.zero_scale), scale)
    if ue8m0:
        scale = _ue8m0(scale, flavor)
    y = _quotient(view, amax, scale, fmt_max, flavor, ue8m0)
    overflows = 0
    if flavor.clamp:
        y = _clamp(y, fmt_max, flavor)
    else:
        magnitude, threshold = y.abs(), overflow_threshold(fmt)
        beyond = magnitude >= threshold if _tie_rounds_up(fmt) else magnitude > threshold
        overflows = int((beyond & torch.isfinite(y)).sum())
    return y.to(fmt.dtype), scale.squeeze(reduce_dims), overflows


def _report_overflow(name: str, count: int, fmt: Fp8Format, flavor: QuantFlavor) -> None:
    if count:
        effect = "NaN" if fmt.dtype == torch.float8_e4m3fnuz else f"+-{fmt.max:g} (saturated)"
        warnings.warn(
            f"{name}: {count} finite values exceeded the {fmt.name} range under flavor "
            f"'{flavor.name}' (fmt max {flavor.fmt_max(fmt):g}) and became {effect}",
            Fp8OverflowWarning,
            stacklevel=3,
        )


def _check_ue8m0(name: str, flavor: QuantFlavor, ue8m0: bool) -> None:
    if ue8m0 and flavor.ue8m0_rule == "none":
        raise ValueError(
            f"{name}: ue8m0=True, but flavor {flavor.name!r} has no power-of-two scale form ({flavor.models} "
            "has none); use a flavor whose engine function takes ue8m0, e.g. 'sglang-triton-colmajor' or 'vllm-cuda'"
        )


def group_quantize(
    x: torch.Tensor,
    group_size: int = 128,
    fmt: Fp8Format | str = "e4m3fn",
    flavor: QuantFlavor | str = "aiter",
    ue8m0: bool = False,
    name: str = "x",
) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Quantize the last dimension in groups of `group_size`.

    Returns (q, scale, overflow_count): q has x's shape and the fp8 dtype, scale has shape
    (..., K/group_size) in fp32 (logical, row-major).
    """
    require_tensor(name, x)
    require_floating(name, x)
    require_min_ndim(name, x, 1)
    fmt, flavor = fp8_format(fmt), quant_flavor(flavor)
    _check_ue8m0(name, flavor, ue8m0)
    if group_size <= 0:
        raise ValueError(f"{name}: group_size={group_size} must be positive")
    k = x.shape[-1]
    require_multiple(name, x, "K", k, group_size, f"per-1x{group_size} group quantization")
    view = x.to(torch.float32).reshape(*x.shape[:-1], k // group_size, group_size)
    q, scale, overflows = _scaled_cast(view, (-1,), flavor.group_amax_floor, fmt, flavor, ue8m0)
    _report_overflow(name, overflows, fmt, flavor)
    return q.reshape(x.shape), scale, overflows


def block_quantize(
    w: torch.Tensor,
    block: tuple[int, int] = (128, 128),
    fmt: Fp8Format | str = "e4m3fn",
    flavor: QuantFlavor | str = "aiter",
    ue8m0: bool = False,
    name: str = "weight",
) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Quantize a 2-D weight (N, K) in blocks; partial edge blocks are allowed (zeros do not move amax).

    Returns (q, scale, overflow_count) with q (N, K) fp8 and scale (ceil(N/bn), ceil(K/bk)) fp32.
    Works in row chunks so the fp32 temporaries stay small whatever the weight's size.
    """
    require_tensor(name, w)
    require_floating(name, w)
    if w.dim() != 2:
        raise ValueError(f"{name}: {describe(w)} must be 2-D (N, K) for block quantization")
    fmt, flavor = fp8_format(fmt), quant_flavor(flavor)
    if not flavor.block_quantizer:
        whose = f"{flavor.owner}'s" if flavor.owner else "a"
        block_names = ", ".join(f"'{f.name}'" for f in FLAVORS.values() if f.block_quantizer)
        raise ValueError(
            f"{name}: flavor {flavor.name!r} is {whose} 1x128 activation quantizer ({flavor.models}), with no "
            f"128x128 block form - use one of {block_names} ('aiter' is aiter-fused's recipe applied per block)"
        )
    _check_ue8m0(name, flavor, ue8m0)
    bn, bk = block
    if bn <= 0 or bk <= 0:
        raise ValueError(f"{name}: block {block} must be positive")
    n, k = w.shape
    nb, kb = -(-n // bn), -(-k // bk)
    q = torch.empty((n, k), dtype=fmt.dtype, device=w.device)
    scale = torch.empty((nb, kb), dtype=torch.float32, device=w.device)
    blocks_per_chunk = max(1, _CHUNK_ELEMENTS // (bn * kb * bk))
    overflows = 0
    for b0 in range(0, nb, blocks_per_chunk):
        b1 = min(nb, b0 + blocks_per_chunk)
        r0, r1 = b0 * bn, min(n, b1 * bn)
        chunk = w[r0:r1].to(torch.float32)
        padded_rows, padded_cols = (b1 - b0) * bn, kb * bk
        if chunk.shape != (padded_rows, padded_cols):
            chunk = torch.nn.functional.pad(chunk, (0, padded_cols - k, 0, padded_rows - (r1 - r0)))
        view = chunk.view(b1 - b0, bn, kb, bk)
        q_chunk, s_chunk, count = _scaled_cast(view, (1, 3), flavor.block_amax_floor, fmt, flavor, ue8m0)
        q[r0:r1] = q_chunk.view(padded_rows, padded_cols)[: r1 - r0, :k]
        scale[b0:b1] = s_chunk
        overflows += count
    _report_overflow(name, overflows, fmt, flavor)
    return q, scale, overflows


def group_dequantize(q: torch.Tensor, scale: torch.Tensor, group_size: int = 128) -> torch.Tensor:
    """fp32 values of group-quantized data: q (..., K) times the logical scale (..., K/group_size)."""
    fmt = fp8_format(q.dtype)
    k = q.shape[-1]
    if group_size <= 0 or k % group_size:
        raise ValueError(f"data: K={k} ({describe(q)}) is not a multiple of group_size {group_size}")
    if scale.shape != (*q.shape[:-1], k // group_size):
        raise ValueError(f"scale: {describe(scale)} does not match data {describe(q)} with group_size {group_size}")
    values = fmt.decode(q).view(*q.shape[:-1], k // group_size, group_size)
    return (values * scale.unsqueeze(-1)).reshape(q.shape)


def block_dequantize(q: torch.Tensor, scale: torch.Tensor, block: tuple[int, int] = (128, 128)) -> torch.Tensor:
    """fp32 values of a block-quantized (N, K) weight; `weight_scale_inv` multiplies despite its name."""
    fmt = fp8_format(q.dtype)
    if q.dim() != 2:
        raise ValueError(f"weight: {describe(q)} must be 2-D (N, K) for block dequantization")
    n, k = q.shape
    bn, bk = block
    nb, kb = -(-n // bn), -(-k // bk)
    if tuple(scale.shape) != (nb, kb):
        raise ValueError(f"weight scale: {describe(scale)} does not match weight {describe(q)} in {block} blocks")
    return scale_blocks_(fmt.decode(q), scale, block)


def scale_blocks_(values: torch.Tensor, scale: torch.Tensor, block: tuple[int, int] = (128, 128)) -> torch.Tensor:
    """Multiply fp32 (N, K) `values` in place by their (ceil(N/bn), ceil(K/bk)) block scale; returns them.
    `block_dequantize` is `scale_blocks_(decode(q), scale)`; a reader that keeps the decoded fp8 values
    (exact in bf16) scales a fp32 copy of them the same way, to the same bits."""
    n, k = values.shape
    bn, bk = block
    kb = -(-k // bk)
    if k % bk == 0:
        # Broadcast over whole row blocks, then the partial last block (e.g. 2112 = 16.5 x 128 rows),
        # so no (N, K) expanded scale is ever materialized.
        full = (n // bn) * bn
        values[:full].view(n // bn, bn, kb, bk).mul_(scale[: n // bn].view(n // bn, 1, kb, 1))
        if full < n:
            values[full:].view(n - full, kb, bk).mul_(scale[-1].view(1, kb, 1))
        return values
    expanded = scale.repeat_interleave(bn, 0)[:n].repeat_interleave(bk, 1)[:, :k]
    return values.mul_(expanded)
