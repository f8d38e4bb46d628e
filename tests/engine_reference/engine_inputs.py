"""Activations for the engine-quantizer cross-checks: every kind of 1x128 group a quantizer treats specially.

`edge_groups` lays out one group of each kind, in the dtype the engines feed (bf16) or in fp32, where a
scale can land a few ulps above a power of two (the case where ``exp2(ceil(log2(s)))`` rounds below s).
`nonfinite_groups` adds NaN and Inf, for the functions whose behaviour on them is defined (torch code and
C++; a Triton max reduction leaves NaN to the backend). `activation_rows` is the hypothesis strategy.
"""

from __future__ import annotations

import math

import torch
from hypothesis import strategies as st

GROUP = 128


def _ramp(seed: int, magnitude: float) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(GROUP, generator=gen, dtype=torch.float64) * magnitude


def _just_above_power_of_two_scale(fmt_max: float, exponent: int) -> torch.Tensor:
    """A group whose amax / fmt_max is 2^exponent plus one fp32 ulp: amax is fmt_max * 2^exponent nudged up
    by one fp32 ulp (only fp32 input can hold it)."""
    amax = torch.nextafter(
        torch.tensor(fmt_max * 2.0**exponent, dtype=torch.float32), torch.tensor(math.inf, dtype=torch.float32)
    )
    group = _ramp(7, 2.0**exponent).to(torch.float32).clamp(-amax.item() / 2, amax.item() / 2)
    group[3] = -amax
    return group.to(torch.float64)


def _near_ties(amax: float, fmt_max: float) -> torch.Tensor:
    """A group of amax `amax` whose other values are fp32(m * scale), m the midpoints between neighbouring
    fp8 codes below fmt_max and scale = fp32(amax / fmt_max): x / scale lands within an fp32 ulp of a
    rounding tie, where x / scale and x * fp32(1 / scale) round to different fp32 numbers and then to
    different fp8 codes now and then. Meant for fp32 input (bf16 rounds the values away from the ties)."""
    codes = torch.arange(0, 0x7F, dtype=torch.uint8).view(torch.float8_e4m3fn).to(torch.float64)
    codes = codes * (fmt_max / 448.0)  # the e4m3fnuz grid is the e4m3fn one halved
    midpoints = (codes[:-1] + codes[1:]) / 2
    picks = midpoints[torch.linspace(0, len(midpoints) - 1, GROUP - 1).round().long()]
    signs = torch.where(torch.arange(GROUP - 1) % 2 == 0, 1.0, -1.0).to(torch.float64)
    scale = (torch.tensor(amax, dtype=torch.float32) / fmt_max).to(torch.float64)
    values = (picks * scale * signs).to(torch.float32).to(torch.float64)
    return torch.cat([torch.tensor([amax], dtype=torch.float32).to(torch.float64), values])


def edge_groups(dtype: torch.dtype) -> torch.Tensor:
    """(rows, 128 * groups) in `dtype`: ordinary data at 1e-3..1e3, all-zero, amax 1e-12 (below the 1e-10
    floors), amax 1e-4 (below vLLM-native's 2^-9 floor), +-fp8 max exactly, powers of two, one outlier,
    negative zeros, values between fp8 codes, quotients exactly on rounding ties; in fp32 also scales just
    above a power of two for both maxima."""
    groups = [
        _ramp(1, 1.0),
        _ramp(2, 1e-3),
        _ramp(3, 1e3),
        torch.zeros(GROUP, dtype=torch.float64),
        _ramp(4, 1e-12),
        _ramp(5, 1e-4),
        torch.where(torch.arange(GROUP) % 2 == 0, 448.0, -448.0).to(torch.float64),
        torch.where(torch.arange(GROUP) % 3 == 0, 224.0, -240.0).to(torch.float64),
        torch.exp2(torch.arange(GROUP, dtype=torch.float64) % 16 - 8)
        * torch.where(torch.arange(GROUP) % 2 == 0, 1, -1),
        torch.cat([torch.tensor([3e4], dtype=torch.float64), _ramp(6, 0.01)[1:]]),
        -torch.zeros(GROUP, dtype=torch.float64),
        (torch.arange(GROUP, dtype=torch.float64) - 64) * 7.0 / 3.0,
        *(_near_ties(amax, fmt_max) for amax in (1.2345, 3.3) for fmt_max in (448.0, 224.0)),
    ]
    if dtype == torch.float32:
        groups += [_just_above_power_of_two_scale(fmt_max, e) for fmt_max in (448.0, 224.0) for e in (-8, -12)]
    if len(groups) % 2:
        groups.append(_ramp(8, 0.5))
    return torch.stack(groups).reshape(len(groups) // 2, 2 * GROUP).to(dtype)


def nonfinite_groups(dtype: torch.dtype) -> torch.Tensor:
    """(rows, 256) in `dtype`: a NaN among ordinary values, an Inf, both infinities, all NaN, NaN and Inf
    together, and ordinary groups beside them."""
    groups = []
    for specials in ([math.nan], [math.inf], [math.inf, -math.inf], [math.nan] * GROUP, [math.nan, -math.inf]):
        group = _ramp(len(groups) + 20, 2.0)
        start = 5 if len(specials) < GROUP else 0
        group[start : start + len(specials)] = torch.tensor(specials, dtype=torch.float64)
        groups.append(group)
    groups.append(_ramp(40, 3.0))
    return torch.stack(groups).reshape(len(groups) // 2, 2 * GROUP).to(dtype)


@st.composite
def activation_rows(draw, nonfinite: bool = False, max_rows: int = 3) -> torch.Tensor:
    """(rows, 128 * groups) in bf16 or fp32: each group at its own drawn binade (2^-40 .. 2^20) and
    spread, random signs, a drawn fraction of zeros, and a few hypothesis-chosen values (subnormal,
    huge, and NaN/Inf when `nonfinite`)."""
    rows, groups = draw(st.integers(1, max_rows)), draw(st.integers(1, 2))
    dtype = draw(st.sampled_from([torch.bfloat16, torch.float32]))
    gen = torch.Generator().manual_seed(draw(st.integers(0, 2**31 - 1)))
    base = torch.tensor(draw(st.lists(st.integers(-40, 20), min_size=rows * groups, max_size=rows * groups)))
    spread = draw(st.integers(0, 24))
    exponents = base.view(rows, groups, 1) - spread * torch.rand(rows, groups, GROUP, generator=gen)
    signs = torch.where(torch.rand(rows, groups, GROUP, generator=gen) < 0.5, -1.0, 1.0)
    x = (signs * torch.exp2(exponents)).reshape(rows, groups * GROUP)
    zero_fraction = draw(st.sampled_from([0.0, 0.5, 1.0]))
    x[torch.rand(x.shape, generator=gen) < zero_fraction] = 0.0
    # bounded when finite: bf16 rounds the largest fp32 values up to Inf
    bound = {} if nonfinite else {"min_value": -(2.0**126), "max_value": 2.0**126}
    specials = draw(st.lists(st.floats(width=32, allow_nan=nonfinite, allow_infinity=nonfinite, **bound), max_size=4))
    if specials:
        where = torch.randint(0, x.numel(), (len(specials),), generator=gen)
        x.view(-1)[where] = torch.tensor(specials, dtype=torch.float32)
    return x.to(dtype)
