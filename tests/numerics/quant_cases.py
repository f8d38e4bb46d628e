"""Inputs, hypothesis strategies and the round-trip error bound shared by the quantizer tests."""

from __future__ import annotations

import warnings

import torch
from hypothesis import strategies as st

from mla_debug.numerics import E4M3FN, E4M3FNUZ, Fp8OverflowWarning

FMT_OF = {torch.float8_e4m3fn: E4M3FN, torch.float8_e4m3fnuz: E4M3FNUZ}


def varied(shape: tuple[int, ...], seed: int, tile: tuple[int, ...] | None = None) -> torch.Tensor:
    """fp32 values whose magnitude changes by up to 2^40 between tiles (groups/blocks) and by up to
    2^20 inside one, so some quotients land in the fp8 subnormal range and below; with exact zeros,
    negative zeros, and the tile's amax repeated with both signs."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=gen)
    x = x * torch.exp2(-20 * torch.rand(shape, generator=gen))
    if tile is not None:
        grid = [-(-s // t) for s, t in zip(shape, tile, strict=True)]
        offsets = torch.exp2(torch.randint(-20, 21, grid, generator=gen).float())
        for dim, t in enumerate(tile):
            offsets = offsets.repeat_interleave(t, dim)
        x = x * offsets[tuple(slice(0, s) for s in shape)]
    flat = x.view(-1)
    n = flat.numel()
    picks = torch.randperm(n, generator=gen)
    flat[picks[: n // 16]] = 0.0
    flat[picks[n // 16 : n // 8]] = -0.0
    return x


def amax_ties(x: torch.Tensor) -> torch.Tensor:
    """Copy of x with a row's first element's magnitude repeated with both signs (exact amax ties)."""
    x = x.clone()
    x.view(-1, x.shape[-1])[:, 1] = -x.view(-1, x.shape[-1])[:, 0]
    return x


@st.composite
def scattered_values(draw, n: int, max_magnitude: float | None = None) -> torch.Tensor:
    """n fp32 values: log-uniform magnitudes around a drawn binade with a drawn spread, random signs,
    a drawn fraction of zeros, and a few hypothesis-chosen fp32 values (subnormals, huge values...)."""
    gen = torch.Generator().manual_seed(draw(st.integers(0, 2**31 - 1)))
    base = draw(st.integers(-100, 100))
    spread = draw(st.integers(0, 30))
    zero_fraction = draw(st.sampled_from([0.0, 0.25, 0.95]))
    limit = {} if max_magnitude is None else {"min_value": -max_magnitude, "max_value": max_magnitude}
    specials = draw(st.lists(st.floats(width=32, allow_nan=False, allow_infinity=False, **limit), max_size=6))
    exps = base - spread * torch.rand(n, generator=gen)
    sign = torch.where(torch.rand(n, generator=gen) < 0.5, -1.0, 1.0)
    x = sign * torch.exp2(exps)
    x[torch.rand(n, generator=gen) < zero_fraction] = 0.0
    if specials:
        where = torch.randint(0, n, (len(specials),), generator=gen)
        x[where] = torch.tensor(specials, dtype=torch.float32)
    return x


def roundtrip_bound(x: torch.Tensor, scale: torch.Tensor, min_subnormal: float) -> torch.Tensor:
    """Largest |x - dequantize(quantize(x))| per element, for elements that did not overflow.

    With t = x/scale (exact), the fp32 quotient y is within 2^-22 |t| of t (div: one rounding;
    x * fl(1/scale): two), and clamping to +-fmt_max never moves it further from t (|t| <= fmt_max up
    to one rounding of the scale). Rounding to fp8 moves y by at most half an ulp: 2^-4 |y| in the
    normal range (ulp = 2^(e-3) for y in [2^e, 2^(e+1))), min_subnormal/2 below it. Dequantization
    multiplies by the scale with one more fp32 rounding (2^-24 relative) or, in the fp32 subnormal
    range, at most 2^-150 absolute. Summing: |x - deq| <= (2^-4 + 2^-20)|x| + (1/2 + 2^-20) scale *
    min_subnormal + 2^-149 (2^-20 absorbs the 2^-22, 2^-24 and cross terms).
    """
    x = x.to(torch.float64).abs()
    return (2.0**-4 + 2.0**-20) * x + (0.5 + 2.0**-20) * scale.to(torch.float64) * min_subnormal + 2.0**-149


def call_recording_overflow(fn, *args, **kwargs):
    """Run a quantizer, returning (result, list of Fp8OverflowWarning messages)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = fn(*args, **kwargs)
    messages = [str(w.message) for w in caught if issubclass(w.category, Fp8OverflowWarning)]
    others = [w for w in caught if not issubclass(w.category, Fp8OverflowWarning)]
    assert not others, [str(w.message) for w in others]
    return result, messages
