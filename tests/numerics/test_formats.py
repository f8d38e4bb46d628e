"""FP8 format facts: decode, ordinals, ULP distances, lookups, and torch's cast as the rounding model."""

from __future__ import annotations

import itertools
import math

import pytest
import torch
from fp8_oracle import (
    DTYPES,
    FN,
    FNUZ,
    all_values,
    decode_byte,
    finite_sorted_unique,
    is_nan_byte,
    round_to_fp8_bytes,
)

from mla_debug.numerics import (
    E4M3FN,
    E4M3FNUZ,
    FORMATS,
    Fp8Format,
    format_of,
    fp8_format,
    fp8_ulp_distance,
    overflow_threshold,
)

FMT_OF = {FN: E4M3FN, FNUZ: E4M3FNUZ}
ALL_BYTES = torch.arange(256, dtype=torch.int32).to(torch.uint8)


def fp8_from_bytes(b: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return b.to(torch.uint8).view(dtype)


def f32_bits(t: torch.Tensor) -> torch.Tensor:
    return t.to(torch.float32).view(torch.int32)


# --- static facts ------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
def test_format_constants_match_bit_fields(dtype):
    fmt = FMT_OF[dtype]
    values = [v for v in all_values(dtype) if not math.isnan(v)]
    assert fmt.dtype == dtype
    assert fmt.max == max(values)
    assert fmt.min_subnormal == min(v for v in values if v > 0)
    assert set(fmt.nan_bytes) == {b for b in range(256) if is_nan_byte(b, dtype)}
    has_neg_zero = any(v == 0 and math.copysign(1.0, v) < 0 for v in values)
    assert fmt.has_negative_zero == has_neg_zero


def test_format_constants_literal():
    # docs/semantics.md §2: fn max 448, bias 7, NaN 0x7F (and 0xFF); fnuz max 240, bias 8, single NaN 0x80.
    assert (E4M3FN.max, E4M3FN.exponent_bias, E4M3FN.min_subnormal) == (448.0, 7, 2.0**-9)
    assert (E4M3FNUZ.max, E4M3FNUZ.exponent_bias, E4M3FNUZ.min_subnormal) == (240.0, 8, 2.0**-10)
    assert E4M3FNUZ.nan_bytes == (0x80,)
    assert 0x7F in E4M3FN.nan_bytes and 0xFF in E4M3FN.nan_bytes
    assert repr(E4M3FN) == "md.E4M3FN" and str(E4M3FNUZ) == "e4m3fnuz"
    assert FORMATS == {"e4m3fn": E4M3FN, "e4m3fnuz": E4M3FNUZ}


# --- decode ------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
def test_decode_all_bytes_equals_torch_float32_cast(dtype):
    data = fp8_from_bytes(ALL_BYTES, dtype)
    decoded = FMT_OF[dtype].decode(data)
    reference = data.to(torch.float32)
    assert decoded.dtype == torch.float32 and decoded.shape == (256,)
    nan = torch.isnan(reference)
    assert torch.equal(torch.isnan(decoded), nan)
    # bitwise, so -0.0 must stay -0.0
    assert torch.equal(f32_bits(decoded)[~nan], f32_bits(reference)[~nan])


@pytest.mark.parametrize("dtype", DTYPES)
def test_decode_all_bytes_equals_bit_field_formula(dtype):
    decoded = FMT_OF[dtype].decode(fp8_from_bytes(ALL_BYTES, dtype))
    expected = torch.tensor(all_values(dtype), dtype=torch.float32)
    nan = torch.isnan(expected)
    assert torch.equal(torch.isnan(decoded), nan)
    assert int(nan.sum()) == len(FMT_OF[dtype].nan_bytes)
    assert torch.equal(f32_bits(decoded)[~nan], f32_bits(expected)[~nan])


def test_decode_keeps_shape_and_rejects_wrong_dtype():
    data = fp8_from_bytes(ALL_BYTES.reshape(4, 8, 8), FN)
    assert E4M3FN.decode(data).shape == (4, 8, 8)
    with pytest.raises(TypeError, match="e4m3fnuz"):
        E4M3FNUZ.decode(data)
    with pytest.raises(TypeError):
        E4M3FN.decode(torch.zeros(3))


@pytest.mark.parametrize("dtype", DTYPES)
def test_is_nan_bytes(dtype):
    mask = FMT_OF[dtype].is_nan_bytes(fp8_from_bytes(ALL_BYTES, dtype))
    assert mask.tolist() == [is_nan_byte(b, dtype) for b in range(256)]


# --- ordinal and ULP distance ----------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
def test_ordinal_adjacent_values_are_one_apart(dtype):
    fmt = FMT_OF[dtype]
    values = all_values(dtype)
    ordinal = fmt.ordinal(fp8_from_bytes(ALL_BYTES, dtype))
    assert ordinal.dtype == torch.int32
    finite = [b for b in range(256) if not math.isnan(values[b])]
    # sort the finite bytes by value; equal values (+0/-0) must share an ordinal
    finite.sort(key=lambda b: values[b])
    for a, b in itertools.pairwise(finite):
        step = int(ordinal[b]) - int(ordinal[a])
        if values[a] == values[b]:
            assert step == 0, (hex(a), hex(b))
        else:
            assert step == 1, (hex(a), values[a], hex(b), values[b], step)
    # ordinals of the finite values cover -n..n, symmetric around zero
    distinct = finite_sorted_unique(dtype)
    n = (len(distinct) - 1) // 2
    assert sorted({int(ordinal[b]) for b in finite}) == list(range(-n, n + 1))
    assert n == (126 if dtype == FN else 127)


@pytest.mark.parametrize("dtype", DTYPES)
def test_ordinal_of_zeros_and_nan(dtype):
    fmt = FMT_OF[dtype]
    assert int(fmt.ordinal(fp8_from_bytes(torch.tensor([0x00]), dtype))) == 0
    if dtype == FN:
        assert int(fmt.ordinal(fp8_from_bytes(torch.tensor([0x80]), dtype))) == 0
    # documented: NaN bytes map to 0 (fp8_ulp_distance masks them)
    nan_bytes = torch.tensor(list(fmt.nan_bytes))
    assert fmt.ordinal(fp8_from_bytes(nan_bytes, dtype)).tolist() == [0] * len(fmt.nan_bytes)


@pytest.mark.parametrize("dtype", DTYPES)
def test_ulp_distance_all_byte_pairs(dtype):
    values = all_values(dtype)
    distinct = finite_sorted_unique(dtype)
    rank = [math.nan if math.isnan(v) else float(distinct.index(v)) for v in values]
    rank_t = torch.tensor(rank, dtype=torch.float64)
    a_bytes = ALL_BYTES.repeat_interleave(256)
    b_bytes = ALL_BYTES.repeat(256)
    expected = (rank_t[a_bytes.long()] - rank_t[b_bytes.long()]).abs().to(torch.float32)
    got = fp8_ulp_distance(fp8_from_bytes(a_bytes, dtype), fp8_from_bytes(b_bytes, dtype))
    assert got.dtype == torch.float32
    nan = torch.isnan(expected)
    assert torch.equal(torch.isnan(got), nan)
    assert torch.equal(got[~nan], expected[~nan])


def test_ulp_distance_spot_values():
    a = torch.tensor([0.0, -0.0, 448.0, -448.0, 1.0, 2.0**-9]).to(FN)
    b = torch.tensor([-0.0, 0.0, 416.0, 448.0, 1.125, -(2.0**-9)]).to(FN)
    assert fp8_ulp_distance(a, b).tolist() == [0.0, 0.0, 1.0, 252.0, 1.0, 2.0]
    nan = fp8_from_bytes(torch.tensor([0x7F, 0x00]), FN)
    zero = fp8_from_bytes(torch.tensor([0x00, 0xFF]), FN)
    assert torch.isnan(fp8_ulp_distance(nan, zero)).tolist() == [True, True]


def test_ulp_distance_rejects_mismatches():
    a = torch.zeros(4).to(FN)
    with pytest.raises(TypeError, match="dtypes differ"):
        fp8_ulp_distance(a, torch.zeros(4).to(FNUZ))
    with pytest.raises(ValueError, match="shapes differ"):
        fp8_ulp_distance(a, torch.zeros(5).to(FN))


# --- lookups -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("e4m3fn", E4M3FN),
        ("E4M3FN", E4M3FN),
        (" fn ", E4M3FN),
        ("ocp", E4M3FN),
        ("float8_e4m3fn", E4M3FN),
        ("torch.float8_e4m3fn", E4M3FN),
        (torch.float8_e4m3fn, E4M3FN),
        (E4M3FN, E4M3FN),
        ("e4m3fnuz", E4M3FNUZ),
        ("fnuz", E4M3FNUZ),
        ("float8_e4m3fnuz", E4M3FNUZ),
        ("torch.float8_e4m3fnuz", E4M3FNUZ),
        (torch.float8_e4m3fnuz, E4M3FNUZ),
        (E4M3FNUZ, E4M3FNUZ),
    ],
)
def test_fp8_format_lookup(spec, expected):
    assert fp8_format(spec) is expected


def test_fp8_format_unknown_name_lists_valid_names():
    with pytest.raises(ValueError) as info:
        fp8_format("e5m2")
    message = str(info.value)
    assert "'e5m2'" in message
    for name in ("e4m3fn", "e4m3fnuz", "fn", "fnuz", "ocp"):
        assert name in message


def test_fp8_format_unsupported_dtype_lists_valid_names():
    with pytest.raises(ValueError) as info:
        fp8_format(torch.float8_e5m2)
    assert "e4m3fn" in str(info.value) and "e4m3fnuz" in str(info.value)
    with pytest.raises(ValueError):
        fp8_format(torch.bfloat16)


def test_fp8_format_wrong_type():
    with pytest.raises(TypeError, match="int"):
        fp8_format(8)


def test_format_of():
    assert format_of(torch.zeros(2).to(FN), "w") is E4M3FN
    assert format_of(torch.zeros(2).to(FNUZ), "w") is E4M3FNUZ
    with pytest.raises(TypeError) as info:
        format_of(torch.zeros(2, 3, dtype=torch.bfloat16), "my_weight")
    assert "my_weight" in str(info.value) and "(2, 3)" in str(info.value)


def test_fp8_format_is_frozen():
    with pytest.raises(AttributeError):
        E4M3FN.max = 1.0  # type: ignore[misc]
    assert isinstance(E4M3FN, Fp8Format)


# --- overflow threshold and torch's cast as the rounding model ----------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
def test_overflow_threshold_is_max_plus_half_top_ulp(dtype):
    distinct = finite_sorted_unique(dtype)
    top_ulp = distinct[-1] - distinct[-2]
    assert overflow_threshold(FMT_OF[dtype]) == distinct[-1] + top_ulp / 2
    assert overflow_threshold(E4M3FN) == 464.0 and overflow_threshold(E4M3FNUZ) == 248.0


def test_fnuz_cast_overflows_exactly_at_threshold():
    t = overflow_threshold(E4M3FNUZ)
    below = torch.nextafter(torch.tensor(t), torch.tensor(0.0))
    x = torch.tensor([below.item(), t, -below.item(), -t])
    assert x.to(FNUZ).view(torch.uint8).tolist() == [0x7F, 0x80, 0xFF, 0x80]


def _rounding_probe(dtype: torch.dtype) -> torch.Tensor:
    """fp32 probes: every fp8 value, every midpoint, one fp32 ulp either side of each, random values
    spanning the whole range and beyond, fp32 subnormals, infinities and NaN; both signs."""
    grid = torch.tensor(finite_sorted_unique(dtype), dtype=torch.float64)
    grid = grid[grid >= 0]
    step = grid[-1] - grid[-2]
    extended = torch.cat([grid, (grid[-1] + step).reshape(1)])
    mids = ((extended[1:] + extended[:-1]) / 2).to(torch.float32)
    pts = torch.cat([grid.to(torch.float32), mids])
    up = torch.nextafter(pts, torch.full_like(pts, math.inf))
    down = torch.nextafter(pts, torch.zeros_like(pts))
    gen = torch.Generator().manual_seed(7)
    rand = torch.exp2(torch.rand(4000, generator=gen) * 40 - 20)
    specials = torch.tensor(
        [1e-45, 1e-40, 2.0**-126, 500.0, 1e4, 3.0e38, math.inf, 248.0, 464.0, 480.0, 479.9], dtype=torch.float32
    )
    probe = torch.cat([pts, up, down, rand, specials])
    return torch.cat([probe, -probe])


@pytest.mark.parametrize("dtype", DTYPES)
def test_torch_cast_is_round_to_nearest_even(dtype):
    """The library relies on torch's fp32->fp8 cast being RNE with fn saturating / fnuz giving NaN."""
    probe = _rounding_probe(dtype)
    got = probe.to(dtype).view(torch.uint8)
    expected = round_to_fp8_bytes(probe.to(torch.float64), dtype)
    assert torch.equal(got, expected)
    nan = torch.tensor([math.nan, -math.nan], dtype=torch.float32).to(dtype)
    assert FMT_OF[dtype].is_nan_bytes(nan).all()


def test_oracle_decode_byte_examples():
    # a few values worked out by hand, to anchor the bit-field oracle itself
    assert decode_byte(0x38, FN) == 1.0 and decode_byte(0x40, FNUZ) == 1.0
    assert decode_byte(0x7E, FN) == 448.0 and decode_byte(0x7F, FNUZ) == 240.0
    assert decode_byte(0x01, FN) == 2.0**-9 and decode_byte(0x01, FNUZ) == 2.0**-10
    assert decode_byte(0x08, FN) == 2.0**-6 and decode_byte(0x08, FNUZ) == 2.0**-7
    assert decode_byte(0xB8, FN) == -1.0 and math.copysign(1, decode_byte(0x80, FN)) < 0
