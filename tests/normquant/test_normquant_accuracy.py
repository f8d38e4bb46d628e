"""The norm+quant accuracy study: seeded inputs, the fp64 truth, and the rounding bounds theory gives.

Every bound is checked element by element from the definitions - the fp8 grid enumerated from its 256
bytes, bf16 neighbours read from the bits - not from the study's own helpers, so a wrong metric in the
library cannot make its own test pass. The slack terms cover the fp32 norm's error: the reference norm
rounds about six times in fp32 (mean, eps add, sqrt, reciprocal, two products) and the quantizer twice
more (1/scale, the product), so |t - y/s| <= 2^-20 |y/s| with room to spare.
"""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import mla_debug.normquant.study as S
from mla_debug.normquant import norm_then_quant
from mla_debug.normquant.study.accuracy import dequantize_exact, fp8_spacing, quantize_path
from mla_debug.numerics import fp8_format, quant_flavor

# Relative slack of the fp32 arithmetic (see the module docstring).
FP32_SLACK = 2.0**-19


def fp8_grid(fmt) -> torch.Tensor:
    """Every finite non-negative value of the format, sorted (float64), from its 256 bytes."""
    values = fmt.decode(torch.arange(256, dtype=torch.uint8).view(fmt.dtype)).to(torch.float64)
    return values[torch.isfinite(values)].abs().unique()


def grid_gap(v: torch.Tensor, fmt, top: float) -> torch.Tensor:
    """Width of the interval of the fp8 grid (up to the flavor's max `top`) that contains |v|."""
    grid = fp8_grid(fmt)
    grid = grid[grid <= top]
    a = v.abs().clamp(max=top)
    hi = torch.searchsorted(grid, a, right=True).clamp(max=grid.numel() - 1)
    lo = (hi - 1).clamp(min=0)
    return grid[hi] - grid[lo]


def bf16_gap(b: torch.Tensor) -> torch.Tensor:
    """The larger distance from each bf16 value to its two neighbours (from the bits)."""
    bits = b.abs().view(torch.int16)
    up = (bits + 1).view(torch.bfloat16).to(torch.float64)
    down = (bits - 1).clamp(min=0).view(torch.bfloat16).to(torch.float64)
    mag = b.abs().to(torch.float64)
    return torch.maximum(up - mag, mag - down)


def truth64(x, w, eps) -> torch.Tensor:
    x, w = x.to(torch.float64), w.to(torch.float64)
    return x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps) * w


def per_element(scale: torch.Tensor) -> torch.Tensor:
    return scale.to(torch.float64).repeat_interleave(128, dim=1)


@st.composite
def studies(draw):
    fmt = draw(st.sampled_from(["e4m3fn", "e4m3fnuz"]))
    flavor = draw(st.sampled_from(["aiter", "vllm"] + (["deepseek"] if fmt == "e4m3fn" else [])))
    inputs = S.make_inputs(
        draw(st.sampled_from(S.distribution_names())),
        m=draw(st.integers(1, 12)),
        n=128 * draw(st.sampled_from([1, 2, 3, 8])),
        seed=draw(st.integers(0, 2**16)),
        eps=draw(st.sampled_from([1e-6, 1e-5])),
    )
    return inputs, fp8_format(fmt), quant_flavor(flavor)


# -- inputs -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", S.distribution_names())
def test_generators_are_seeded_and_deterministic(name):
    a, b = S.make_inputs(name, 16, 512, seed=7), S.make_inputs(name, 16, 512, seed=7)
    assert a.x.dtype == a.weight.dtype == torch.bfloat16 and a.x.shape == (16, 512) and a.weight.shape == (512,)
    assert torch.equal(a.x.view(torch.int16), b.x.view(torch.int16))
    assert torch.equal(a.weight.view(torch.int16), b.weight.view(torch.int16))
    assert a.outlier_columns == b.outlier_columns and torch.equal(a.row_scale, b.row_scale)
    assert not torch.equal(a.x, S.make_inputs(name, 16, 512, seed=8).x)
    assert torch.isfinite(a.x.float()).all() and (a.weight.float() > 0).all()


def test_outlier_channels_are_50_to_100x():
    inp = S.make_inputs("outlier_channels", 256, 1536, seed=0)
    cols = list(inp.outlier_columns)
    assert len(cols) == 1536 // 128
    rms = inp.x.to(torch.float64).square().mean(0).sqrt()
    others = rms[[c for c in range(1536) if c not in cols]].mean()
    ratio = rms[cols] / others
    assert (ratio > 40).all() and (ratio < 120).all()  # 50-100 x, with the sampling noise of 256 rows


def test_heavy_tails_are_heavier_than_normal():
    def kurtosis(x):
        x = x.to(torch.float64)
        return float((x**4).mean() / (x**2).mean() ** 2)

    normal, heavy = S.make_inputs("normal", 64, 1536).x, S.make_inputs("heavy_tailed", 64, 1536).x
    assert abs(kurtosis(normal) - 3) < 0.3 and kurtosis(heavy) > 6


def test_near_zero_rows_hold_exact_zeros_and_tiny_magnitudes():
    inp = S.make_inputs("near_zero_rows", 64, 256, seed=0)
    tiny = torch.arange(3, 64, 4)
    assert (inp.row_scale[tiny] < 1e-5).all() and (inp.row_scale[inp.row_scale != 1] == inp.row_scale[tiny]).all()
    zero = tiny[inp.row_scale[tiny] == 0]
    assert zero.numel() == 2 and (inp.x[zero].view(torch.int16) == 0).all()  # +0, like padding rows
    scales = inp.row_scale[tiny][2:]
    assert math.isclose(scales.max(), 1e-6) and math.isclose(scales.min(), 1e-30)
    rms = inp.x[tiny[2:]].to(torch.float64).square().mean(-1).sqrt()
    assert torch.allclose(rms / scales, torch.ones_like(rms), rtol=0.2)  # bf16 keeps them (no flush)


def test_unknown_distribution_or_path_is_named():
    with pytest.raises(ValueError, match="unknown distribution 'lognormal'.*normal"):
        S.make_inputs("lognormal")
    with pytest.raises(ValueError, match=r"unknown path\(s\) \['fp16'\]"):
        S.measure_accuracy(S.make_inputs("normal", 2, 128), paths=("fp16",))


# -- the units --------------------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["e4m3fn", "e4m3fnuz"])
def test_fp8_spacing_is_the_gap_of_the_enumerated_grid(fmt):
    fmt = fp8_format(fmt)
    gen = torch.Generator().manual_seed(0)
    v = torch.exp2(torch.empty(20000, dtype=torch.float64).uniform_(-14, math.log2(fmt.max), generator=gen))
    grid = fp8_grid(fmt)
    v = torch.cat([v, grid[grid < fmt.max], torch.zeros(1, dtype=torch.float64)])
    assert torch.equal(fp8_spacing(v, fmt), grid_gap(v, fmt, fmt.max))
    assert fp8_spacing(torch.tensor([1.0, 448.0], dtype=torch.float64), "e4m3fn").tolist() == [0.125, 32.0]


# -- the bounds -------------------------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(case=studies())
def test_single_rounding_error_is_at_most_half_an_fp8_ulp(case):
    """Fused: |dequantized - truth| <= 0.5 x (the gap of its own fp8 grid containing y / scale), up to
    the fp32 norm's error; and the study's reported ulp error, in the exact scale's units, <= 0.5."""
    inputs, fmt, flavor = case
    q = quantize_path("fused", inputs, fmt, flavor, backend="torch")
    y = truth64(inputs.x, inputs.weight, inputs.eps)
    s = per_element(q.logical_scale())
    err = (dequantize_exact(q) - y).abs()
    bound = 0.5 * s * grid_gap(y / s, fmt, flavor.fmt_max(fmt)) + 2 * FP32_SLACK * y.abs()
    assert (err <= bound).all(), float((err - bound).max())
    acc = S.measure_accuracy(inputs, ("fused",), fmt, flavor, backend="torch")
    assert float(acc.errors["fused"].err_ulp.max()) <= 0.5 + 2.0**-12


@settings(max_examples=60, deadline=None)
@given(case=studies())
def test_double_rounding_error_is_a_bf16_rounding_plus_an_fp8_rounding(case):
    """Unfused: the stored bf16 value is within half a bf16 ulp of the truth, the fp8 value within half
    a gap of its own grid of the bf16 value - so |err| <= 0.5 fp8 ulp + 0.5 bf16 ulp. In the exact
    scale's units that is <= 0.5 + 1/16 (half a bf16 ulp is at most 1/16 of an e4m3 ulp: 4 more
    mantissa bits), plus up to 2^-7 where the bf16-rounded scale moves a value across a binade."""
    inputs, fmt, flavor = case
    result = norm_then_quant(inputs.x, inputs.weight, inputs.eps, fmt=fmt, flavor=flavor, return_unquantized=True)
    q, b = result.q_quant, result.q_unquantized
    y = truth64(inputs.x, inputs.weight, inputs.eps)
    b64 = b.to(torch.float64)
    assert ((b64 - y).abs() <= 0.5 * bf16_gap(b) + FP32_SLACK * y.abs()).all()
    s = per_element(q.logical_scale())
    d = dequantize_exact(q)
    assert ((d - b64).abs() <= 0.5 * s * grid_gap(b64 / s, fmt, flavor.fmt_max(fmt)) + FP32_SLACK * b64.abs()).all()
    acc = S.measure_accuracy(inputs, ("unfused",), fmt, flavor, backend="torch")
    assert float(acc.errors["unfused"].err_ulp.max()) <= 0.5 + 1 / 16 + 2.0**-7


@settings(max_examples=60, deadline=None)
@given(case=studies())
def test_unfused_is_never_better_than_fused_by_more_than_its_grid_shift(case):
    """The fused value is (up to fp32) the nearest point of its grid s_f x G to the truth; the unfused
    code g_u placed on that grid, s_f x g_u, is |g_u| |s_u - s_f| from the unfused value. Hence
    err_f <= err_u + |g_u| |s_u - s_f| element-wise - the shift is at most half a bf16 ulp of amax."""
    inputs, fmt, flavor = case
    qf = quantize_path("fused", inputs, fmt, flavor, backend="torch")
    qu = quantize_path("unfused", inputs, fmt, flavor)
    y = truth64(inputs.x, inputs.weight, inputs.eps)
    err_f, err_u = (dequantize_exact(qf) - y).abs(), (dequantize_exact(qu) - y).abs()
    g_u = fmt.decode(qu.data).to(torch.float64).abs()
    shift = g_u * (per_element(qu.logical_scale()) - per_element(qf.logical_scale())).abs()
    assert (err_f <= err_u + shift + 2 * FP32_SLACK * y.abs()).all()
    # and the shift is the bf16 rounding of the group amax: at most half a bf16 ulp of it (x 448/448)
    amax = y.abs().view(inputs.m, -1, 128).amax(-1).repeat_interleave(128, dim=1)
    assert (shift <= (0.5 * 2.0**-7 + 4 * FP32_SLACK) * amax).all()


@settings(max_examples=60, deadline=None)
@given(case=studies())
def test_codes_differ_only_where_the_bf16_rounding_crosses_an_fp8_midpoint(case):
    """Where fused and unfused codes differ they are adjacent, and the fp8 rounding midpoint between
    them lies within beta of y / s_f: beta = the bf16 rounding plus the scale's shift, in fp8 units."""
    inputs, fmt, flavor = case
    qf = quantize_path("fused", inputs, fmt, flavor, backend="torch")
    qu = quantize_path("unfused", inputs, fmt, flavor)
    differ = fmt.ordinal(qf.data) != fmt.ordinal(qu.data)
    if not differ.any():
        return
    assert ((fmt.ordinal(qf.data) - fmt.ordinal(qu.data)).abs()[differ] == 1).all()
    y = truth64(inputs.x, inputs.weight, inputs.eps)
    s_f, s_u = per_element(qf.logical_scale()), per_element(qu.logical_scale())
    midpoint = (fmt.decode(qf.data).to(torch.float64) + fmt.decode(qu.data).to(torch.float64)) / 2
    b = y.to(torch.bfloat16)
    beta = (0.5 * bf16_gap(b) * (s_f / s_u) + y.abs() * (s_u - s_f).abs() / s_u) / s_f
    beta = beta + 4 * FP32_SLACK * (y / s_f).abs()
    assert ((y / s_f - midpoint).abs()[differ] <= beta[differ]).all()
    # beta is a sliver of the fp8 gap, which is why so few codes change
    gap = grid_gap(y / s_f, fmt, flavor.fmt_max(fmt))
    assert (beta[differ] <= gap[differ] / 8).all()


@settings(max_examples=40, deadline=None)
@given(case=studies())
def test_the_element_that_sets_the_scale_is_exact_in_the_fused_path(case):
    """A group's amax maps to fp8_max (x * (1/scale) = fp8_max up to fp32, which rounds or clamps to it), so
    the fused path returns it up to the fp32 norm's error - where the unfused path returns bf16(amax)."""
    inputs, fmt, flavor = case
    q = quantize_path("fused", inputs, fmt, flavor, backend="torch")
    y = truth64(inputs.x, inputs.weight, inputs.eps)
    magnitude = y.abs().view(inputs.m, -1, 128)
    floor = flavor.group_amax_floor * (1 + 1e-6)  # groups at the floor do not reach fp8_max
    top = ((magnitude == magnitude.amax(-1, keepdim=True)) & (magnitude > floor)).view(inputs.m, inputs.n)
    if not top.any():
        return
    assert (fmt.decode(q.data).to(torch.float64).abs()[top] == flavor.fmt_max(fmt)).all()
    err = (dequantize_exact(q) - y).abs()
    assert (err[top] <= 2 * FP32_SLACK * y.abs()[top]).all()


def test_exact_zero_rows_give_exact_zeros_in_every_path():
    inputs = S.make_inputs("near_zero_rows", 16, 512, seed=3)
    zero_rows = (inputs.row_scale == 0).nonzero().flatten()
    assert zero_rows.numel() == 2
    acc = S.measure_accuracy(inputs, backend="torch")
    for e in acc.errors.values():
        q = e.quantized
        assert (q.data[zero_rows].view(torch.uint8) == 0).all()
        scale = q.logical_scale()[zero_rows]
        assert torch.isfinite(scale).all() and (scale > 0).all()  # the amax floor, not a 0 or NaN scale
        assert (e.dequantized[zero_rows] == 0).all() and (e.err[zero_rows] == 0).all()
    groups = acc.groups[acc.groups["row"].isin(zero_rows.tolist())]
    assert (groups["rel_l2"] == 0).all() and (groups["max_err_ulp"] == 0).all()


def test_rows_below_the_amax_floor_flush_to_zero_alike_in_every_path():
    """A row of magnitude 1e-24 normalizes to ~1e-21 (eps dominates its mean square): far below the
    1e-10 floor, so the scale is the floor's and every value rounds to zero - rel L2 1 in every path,
    and still within half an ulp: the values lie below half the smallest fp8 subnormal of that scale."""
    inputs = S.make_inputs("near_zero_rows", 64, 256, seed=0)
    acc = S.measure_accuracy(inputs, backend="torch")
    rows = acc.rows
    deep = rows[(rows["row_scale"] > 0) & (rows["row_scale"] < 1e-20)]
    assert len(deep) == 3 * int(((inputs.row_scale > 0) & (inputs.row_scale < 1e-20)).sum()) > 0
    assert (deep["rel_l2"] == 1.0).all() and (deep["flushed"] == 256).all() and (deep["max_err_ulp"] < 0.5).all()
    normal = rows[(rows["row_scale"] > 1e-9)]
    assert (normal["rel_l2"] < 0.05).all()


def test_aiter_test_reference_is_the_unfused_path_bit_for_bit():
    acc = S.measure_accuracy(S.make_inputs("mixed", 32, 1536, seed=1), backend="torch")
    assert acc.identical("aiter_test_reference", "unfused")
    assert not acc.identical("fused", "unfused")


# -- the tables -------------------------------------------------------------------------------------


def test_tables_have_one_row_per_group_row_and_path():
    inputs = S.make_inputs("outlier_channels", 8, 512, seed=0)
    acc = S.measure_accuracy(inputs, backend="torch")
    assert acc.paths == list(S.PATHS)
    assert len(acc.groups) == 3 * 8 * 4 and len(acc.rows) == 3 * 8 and len(acc.summary) == 3
    grid = acc.group_matrix("unfused", "codes_differ")
    assert grid.shape == (8, 4) and grid.sum() == (acc.errors["unfused"].codes != acc.errors["fused"].codes).sum()
    fused = acc.summary.set_index("path").loc["fused"]
    assert fused["equal"] == 1.0 and fused["codes_differ"] == 0.0 and fused["scales_differ"] == 0.0
    unfused = acc.summary.set_index("path").loc["unfused"]
    assert unfused["fused_better"] + unfused["fused_worse"] + unfused["equal"] == pytest.approx(1.0)
    # the per-group maxima agree with the element tensors
    e = acc.errors["unfused"].err_ulp.view(8, 4, 128).amax(-1)
    assert torch.equal(acc.group_matrix("unfused", "max_err_ulp"), e)
    with pytest.raises(KeyError, match="no per-group metric"):
        acc.group_matrix("fused", "snr")


def test_the_default_study_and_its_conclusions():
    """The notebook's study (M=64, n=1536, every distribution): the bounds hold on every distribution,
    and the conclusions are read from the numbers."""
    study = S.accuracy_study(backend="torch")
    table = study.summary
    assert list(table.index.get_level_values("distribution").unique()) == S.distribution_names()
    assert (table.xs("fused", level="path")["max_err_ulp"] <= 0.5 + 2.0**-12).all()
    unfused = table.xs("unfused", level="path")
    assert (unfused["max_err_ulp"] > 0.5).all() and (unfused["max_err_ulp"] <= 0.5 + 1 / 16 + 2.0**-7).all()
    assert (unfused["codes_differ"] > 0).all() and (unfused["codes_differ"] < 0.05).all()
    # the scale-setting elements: exact (fp32) in the fused path, bf16-rounded in the unfused one
    assert (table.xs("fused", level="path")["amax_rel_l2"] < 1e-6).all() and (unfused["amax_rel_l2"] > 1e-4).all()
    text = "\n".join(study.conclusions())
    for name in S.distribution_names():
        assert name in text
    assert "within the single-rounding bound" in text and "bitwise identical" in text
    assert len(study.groups) == 5 * 3 * 64 * 12 and len(study.rows) == 5 * 3 * 64


@pytest.mark.gpu
def test_study_runs_on_the_gpu_with_the_fastest_backend():
    study = S.accuracy_study(["normal", "mixed"], m=32, n=1536, backend="auto", device="cuda")
    fused = study.summary.xs("fused", level="path")
    # a GPU rsqrt is within 2 fp32 ulps of the exact one: still ~2^-19 of an fp8 ulp
    assert (fused["max_err_ulp"] <= 0.5 + 2.0**-10).all()
