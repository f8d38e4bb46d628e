"""Seeded inputs for the norm+quant tests and the comparison of one call against the oracle."""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import torch
from nq_oracle import (
    FP8_NAME,
    assert_bits_equal,
    assert_fp8_equal,
    flavor_max,
    fp8_from_ordinal,
    fp8_quantum,
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


def extreme_rows(n: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """Six bf16 rows (and a residual for them) at the edges of the float64 sum of squares: bf16
    subnormals only; subnormals beside normals; squares near 2^200 (beyond fp32); squares whose sum
    passes 2^256 (the fp32 mean overflows); zeros; 1e-30 beside 1. The residual is scaled to each row, so
    x + residual are fp32 sums with low mantissa bits set."""
    gen = torch.Generator().manual_seed(8)
    signs = torch.randint(0, 2, (6, n), generator=gen) * 2.0 - 1.0
    mags = 1.0 + torch.rand(6, n, generator=gen)
    every = torch.arange(n)
    rows = [
        mags[0] * 2.0**-133 * torch.randint(1, 100, (n,), generator=gen),
        torch.where(every % 7 == 0, mags[1], mags[1] * 2.0**-130),
        mags[2] * 2.0**100,
        mags[3] * 2.0**125,
        torch.zeros(n),
        torch.where(every % 5 == 0, mags[5] * 1e-30, mags[5]),
    ]
    q = (torch.stack(rows) * signs).to(torch.bfloat16)
    size = torch.stack([r.double().abs().mean().float() for r in rows])  # (an fp32 mean of row 3 overflows)
    residual = (torch.randn(6, n, generator=gen) * size[:, None]).to(torch.bfloat16)
    return q.to(device), residual.to(device)


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


# Unit roundoff (half an ulp at 1, relative) of the dtype the unfused path rounds y to; half its
# smallest subnormal, the absolute rounding error below its smallest normal (fp16's is 6.1e-5).
UNIT_ROUNDOFF = {torch.bfloat16: 2.0**-8, torch.float16: 2.0**-11, torch.float32: 2.0**-24}
HALF_MIN_SUBNORMAL = {torch.bfloat16: 2.0**-134, torch.float16: 2.0**-25, torch.float32: 2.0**-150}
MIN_NORMAL = {torch.bfloat16: 2.0**-126, torch.float16: 2.0**-14, torch.float32: 2.0**-126}


def single_vs_double_rounding(fused, unfused, ref: dict[str, torch.Tensor], dtype: torch.dtype) -> tuple[int, int]:
    """Locate and bound every difference between the fused (single rounding) and unfused (double
    rounding) fp8 data of one call. Returns (elements that differ, elements outside the 1-ulp regime).

    The bound: rounding y to `dtype` moves each value by at most r(y) = u|y| in the dtype's normal
    range, e below it (0 for y = 0), with u its unit roundoff and e half its smallest subnormal. The
    group amax moves likewise (rounding is monotonic, so the rounded amax is the amax of the rounded
    values), so the scale moves by a relative c, asserted <= u + 2^-22 + e/(fmax s). The fp8 quotient
    t = y/scale (clamped) then moves by at most

        P = r(y) (1 + 2^-22) / (s (1 - c)) + |t| (c / (1 - c) + 2^-21)

    (2^-21 covers the fp32 roundings of 1/scale and the product; clamping cannot increase a distance).
    Hence, per element:
      - the unfused value is the rounding of a number within P of t: |v_d - t| <= P + quantum(v_d)/2;
      - where P < quantum(t)/2 at most one rounding midpoint lies within P of t, so the two differ
        by at most one fp8 ulp. For bf16 that is every element (P ~ 2^-6.9 |t|, quantum/2 >= 2^-5 |t|);
        for fp16 it can fail only where y is an fp16 subnormal in a group whose scale is tiny;
      - wherever they differ, the rounding midpoint next to v_s on v_d's side lies within P of t.
    The differing positions and bytes also match the oracle's model of the double rounding exactly.
    """
    u, e = UNIT_ROUNDOFF[dtype], HALF_MIN_SUBNORMAL[dtype]
    fmt = fp8_format(fused.data.dtype)
    g = fused.group_size
    distance = fp8_ulp_distance(fused.data, unfused.data)
    assert not torch.isnan(distance).any(), "NaN in the data: choose a flavor/format pair without overflow"

    # exactly the oracle's double rounding, byte for byte
    double, _, _ = quant_rows(ref["y"].to(torch.float32).to(dtype).to(torch.float64), g, fused.data.dtype, fused.flavor)
    assert_fp8_equal(unfused.data, double, fused.data.dtype, "unfused q")
    assert_fp8_equal(fused.data, ref["data"], fused.data.dtype, "fused q")

    s_single, s_double = fused.logical_scale().double(), unfused.logical_scale().double()
    fmax = flavor_max(fused.flavor, fused.data.dtype)
    c = (s_double / s_single - 1).abs()
    assert bool((c <= u + 2.0**-22 + e / (fmax * s_single)).all()), "the scales moved more than amax's rounding"
    c = c.repeat_interleave(g, dim=1)
    s = s_single.repeat_interleave(g, dim=1)
    t, y = ref["quotient"], ref["y"]
    r = torch.where(y.abs() >= MIN_NORMAL[dtype], u * y.abs(), torch.where(y == 0, 0.0, e))
    p = r * (1 + 2.0**-22) / (s * (1 - c)) + t.abs() * (c / (1 - c) + 2.0**-21)

    v_single = fmt.decode(fused.data).to(torch.float64)
    v_double = fmt.decode(unfused.data).to(torch.float64)
    excess = (v_double - t).abs() - (p + fp8_quantum(v_double, fused.data.dtype) / 2)
    assert excess.max().item() <= 0, f"an unfused value is {excess.max().item():g} too far from the quotient"

    one_ulp_regime = p < fp8_quantum(t, fused.data.dtype) / 2
    assert bool((distance[one_ulp_regime] <= 1).all()), f"max distance {distance.max().item()} ulp"
    if dtype != torch.float16:
        assert bool(one_ulp_regime.all())

    differ = distance > 0
    ord_single, ord_double = fmt.ordinal(fused.data), fmt.ordinal(unfused.data)
    neighbor = fp8_from_ordinal(ord_single + torch.sign(ord_double - ord_single), fused.data.dtype)
    midpoint = (v_single + neighbor) / 2
    excess = ((t - midpoint).abs() - p)[differ]
    assert excess.numel() == 0 or excess.max().item() <= 0, "a difference away from any rounding midpoint"
    return int(differ.sum()), int((~one_ulp_regime).sum())
