"""Seeded inputs for the norm+quant tests and the comparison of one call against the oracle."""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import torch
from nq_oracle import (
    FP8_NAME,
    assert_bits_equal,
    assert_fp8_equal,
    fused_reference,
    is_nan_byte,
    norm_rows,
    quant_rows,
    scale_memory_order,
)

from mla_debug.layouts import ScaleLayout
from mla_debug.numerics import Fp8OverflowWarning, fp8_format, fp8_ulp_distance


def activations(m: int, n: int, dtype: torch.dtype, seed: int, zero_rows: bool = True) -> torch.Tensor:
    """(M, n) values whose rows differ in magnitude by up to 10^6 (10^4 for fp16) and whose 32-column blocks differ by
    up to 2^8, so every (row, group) scale is distinct; with `zero_rows`, row 0 starts with a zero group
    (exercises the amax floor) and row 1 is all zero (exercises eps)."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(m, n, generator=gen, dtype=torch.float64)
    # fp16 tops out at 65504: keep its rows two decades narrower so no input overflows to Inf
    decades = 2 if dtype == torch.float16 else 3
    rows = torch.logspace(-decades, decades, m, dtype=torch.float64)[torch.randperm(m, generator=gen)]
    blocks = torch.exp2(torch.randint(-4, 5, (m, -(-n // 32)), generator=gen).to(torch.float64))
    x = x * rows[:, None] * blocks.repeat_interleave(32, dim=1)[:, :n]
    if zero_rows and m >= 2:
        x[0, : min(n, 128)] = 0.0
        x[1] = 0.0
    return x.to(dtype)


def norm_weight(n: int, dtype: torch.dtype, seed: int, gemma: bool = False) -> torch.Tensor:
    """Weights near 1 (or near 0 for gemma_norm's ``1 + w``), a few of them negative."""
    gen = torch.Generator().manual_seed(seed + 7919)
    w = torch.randn(n, generator=gen, dtype=torch.float64)
    return (0.2 * w if gemma else 1.0 + 0.5 * w).to(dtype)


@dataclass
class Case:
    """One set of inputs; `kwargs()` gives the call's keyword arguments."""

    q: torch.Tensor
    q_weight: torch.Tensor
    q_eps: float = 1e-6
    k: torch.Tensor | None = None
    k_weight: torch.Tensor | None = None
    k_eps: float | None = None
    residual: torch.Tensor | None = None
    group_size: int = 128
    fmt: torch.dtype = torch.float8_e4m3fn
    flavor: str = "aiter"
    gemma_norm: bool = False

    def kwargs(self, **extra) -> dict:
        return dict(
            q=self.q,
            q_weight=self.q_weight,
            q_eps=self.q_eps,
            k=self.k,
            k_weight=self.k_weight,
            k_eps=self.k_eps,
            residual=self.residual,
            group_size=self.group_size,
            fmt=FP8_NAME[self.fmt],
            flavor=self.flavor,
            gemma_norm=self.gemma_norm,
            **extra,
        )


def make_case(
    m: int = 12,
    n1: int = 512,
    n2: int | None = 192,
    dtype: torch.dtype = torch.bfloat16,
    seed: int = 0,
    residual: bool = False,
    **options,
) -> Case:
    gemma = options.get("gemma_norm", False)
    q = activations(m, n1, dtype, seed)
    k = activations(m, n2, dtype, seed + 1) if n2 else None
    res = activations(m, n1, dtype, seed + 2, zero_rows=False) if residual else None
    return Case(
        q=q,
        q_weight=norm_weight(n1, dtype, seed, gemma),
        k=k,
        k_weight=norm_weight(n2, dtype, seed + 1, gemma) if n2 else None,
        residual=res,
        **options,
    )


def call_recording(fn, **kwargs):
    """(result, Fp8OverflowWarning messages) of one call."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = fn(**kwargs)
    return result, [str(w.message) for w in caught if issubclass(w.category, Fp8OverflowWarning)]


def check_scale_buffer(buffer: torch.Tensor, logical: torch.Tensor, layout: ScaleLayout) -> None:
    """The buffer has shape (M, G), strides (G, 1), and the logical scale's bytes in the layout's order."""
    m, g = logical.shape
    assert buffer.dtype == torch.float32
    assert tuple(buffer.shape) == (m, g)
    assert buffer.stride() == (g, 1), f"{layout}: strides {buffer.stride()}, expected {(g, 1)}"
    in_memory = logical.t() if layout is ScaleLayout.COL_MAJOR else logical
    assert_bits_equal(scale_memory_order(buffer), in_memory.reshape(-1), f"{layout} scale bytes")


def check_against_oracle(
    fn, case: Case, transpose_scale: bool = False, round_to: torch.dtype | None = None, producer: str | None = None
) -> dict[str, torch.Tensor]:
    """Call `fn` on `case` and compare every output with the oracle, bit for bit.

    `round_to` rounds the normalized q before quantizing (the unfused path). Returns the oracle's
    q-path tensors for further checks.
    """
    (q_quant, k_normed, q_unq, res_sum), overflow_messages = call_recording(
        fn, **case.kwargs(transpose_scale=transpose_scale, return_unquantized=True)
    )
    ref = fused_reference(
        case.q,
        case.q_weight,
        case.q_eps,
        case.group_size,
        case.fmt,
        case.flavor,
        case.gemma_norm,
        case.residual,
        round_to,
    )
    layout = ScaleLayout.COL_MAJOR if transpose_scale else ScaleLayout.ROW_MAJOR
    assert q_quant.scale_layout is layout
    assert q_quant.group_size == case.group_size and q_quant.fmt.dtype == case.fmt and q_quant.flavor == case.flavor
    if producer is not None:
        assert q_quant.producer == producer
    assert_fp8_equal(q_quant.data, ref["data"], case.fmt)
    assert q_quant.data.is_contiguous()
    check_scale_buffer(q_quant.scale, ref["scale"], layout)
    assert_bits_equal(q_quant.logical_scale(), ref["scale"], "logical scale")

    # Overflow count: finite quotients that the cast turned into NaN (only deepseek on e4m3fnuz).
    expected_overflows = int((is_nan_byte(ref["data"], case.fmt) & torch.isfinite(ref["quotient"])).sum())
    assert q_quant.overflow_count == expected_overflows
    assert len(overflow_messages) == (1 if expected_overflows else 0)

    assert q_unq is not None and q_unq.dtype == case.q.dtype and q_unq.is_contiguous()
    assert_bits_equal(q_unq, ref["y"], "q_unquantized")
    if case.residual is None:
        assert res_sum is None
    else:
        assert res_sum is not None and res_sum.dtype == case.q.dtype
        assert_bits_equal(res_sum, ref["s"], "residual_sum")
    if case.k is None:
        assert k_normed is None
    else:
        k_eps = case.q_eps if case.k_eps is None else case.k_eps
        k_ref, _ = norm_rows(case.k, case.k_weight, k_eps, case.gemma_norm)
        assert k_normed is not None and k_normed.dtype == case.k.dtype and k_normed.is_contiguous()
        assert_bits_equal(k_normed, k_ref, "k_normed")
    return ref


# Unit roundoff (half an ulp at 1, relative) of the dtype the unfused path rounds y to, half its
# smallest subnormal (the absolute error below its normal range), and its smallest normal.
UNIT_ROUNDOFF = {torch.bfloat16: 2.0**-8, torch.float16: 2.0**-11, torch.float32: 2.0**-24}
HALF_MIN_SUBNORMAL = {torch.bfloat16: 2.0**-134, torch.float16: 2.0**-25, torch.float32: 2.0**-150}
MIN_NORMAL = {torch.bfloat16: 2.0**-126, torch.float16: 2.0**-14, torch.float32: 2.0**-126}


def single_vs_double_rounding(fused, unfused, ref: dict[str, torch.Tensor], dtype: torch.dtype) -> int:
    """Locate and bound every difference between the fused (single rounding) and unfused (double
    rounding) fp8 data of one call; returns how many elements differ.

    Why the bound holds: rounding y to `dtype` moves each value by at most u|y| + e (e: half the
    dtype's smallest subnormal, for values below its normal range - fp16 has one at 6.1e-5), and the
    group amax (rounding is monotonic, so the rounded amax is the amax of the rounded values; it is
    asserted to be in the normal range) by a relative u at most. The fp8 quotient t = y/scale
    therefore moves by at most (2u + 4u^2 + 2^-21)|t| + 2e/scale (2^-21 covers the fp32 roundings of
    scale, 1/scale and the product). That is far below the fp8 spacing (2^-4 relative at least, and
    the fixed subnormal quantum below), so the two results are at most one fp8 ulp apart, and they
    differ only where the rounding midpoint between them lies within that distance of t.
    """
    u, e = UNIT_ROUNDOFF[dtype], HALF_MIN_SUBNORMAL[dtype]
    g = fused.group_size
    amax = ref["y"].abs().reshape(ref["y"].shape[0], -1, g).amax(dim=-1)
    assert bool(((amax == 0) | (amax >= MIN_NORMAL[dtype])).all()), "a group amax is subnormal in the dtype"
    distance = fp8_ulp_distance(fused.data, unfused.data)
    assert not torch.isnan(distance).any(), "NaN in the data: choose a flavor/format pair without overflow"
    assert bool((distance <= 1).all()), f"max distance {distance.max().item()} ulp"
    differ = distance == 1

    # exactly where an independent model of both paths says they differ
    double, _, _ = quant_rows(
        ref["y"].to(torch.float32).to(dtype).to(torch.float64), fused.group_size, fused.data.dtype, fused.flavor
    )
    assert torch.equal(differ, (double != ref["data"])), "difference positions do not match the oracle's"

    fmt = fp8_format(fused.data.dtype)
    v_single = fmt.decode(fused.data).to(torch.float64)[differ]
    v_double = fmt.decode(unfused.data).to(torch.float64)[differ]
    t = ref["quotient"][differ]
    scale = ref["scale"].repeat_interleave(g, dim=1)[differ]
    midpoint = (v_single + v_double) / 2
    allowed = (2 * u + 4 * u * u + 2.0**-21) * t.abs() + 2 * e / scale
    excess = ((t - midpoint).abs() - allowed).max().item() if t.numel() else 0.0
    assert excess <= 0, f"a differing element's quotient is {excess:g} farther from the midpoint than allowed"

    # the scales differ by the rounding of amax to `dtype` at most
    s_single, s_double = fused.logical_scale().double(), unfused.logical_scale().double()
    assert ((s_double / s_single - 1).abs() <= u + 2.0**-22).all()
    return int(differ.sum())
