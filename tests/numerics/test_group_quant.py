"""Per-1xG group quantization: bitwise against an independent recipe, round trips, bad and non-finite input."""

from __future__ import annotations

import itertools
import math
import warnings

import pytest
import torch
from fp8_oracle import (
    DTYPES,
    FLAVOR_NAMES,
    FN,
    FNUZ,
    assert_same_f32,
    assert_same_fp8,
    ceil_pow2_ref,
    f32,
    group_quant_ref,
)
from hypothesis import given, settings
from hypothesis import strategies as st
from quant_cases import FMT_OF, amax_ties, call_recording_overflow, roundtrip_bound, scattered_values, varied

from mla_debug.numerics import (
    E4M3FN,
    E4M3FNUZ,
    Fp8OverflowWarning,
    ceil_pow2,
    group_dequantize,
    group_quantize,
    overflow_threshold,
    quant_flavor,
)

CASES = list(itertools.product(FLAVOR_NAMES, DTYPES, (False, True)))
CASE_IDS = [f"{f}-{'fn' if d == FN else 'fnuz'}-{'ue8m0' if u else 'fp32scale'}" for f, d, u in CASES]


def check_against_oracle(x, group, dtype, flavor, ue8m0):
    (q, scale, count), messages = call_recording_overflow(
        group_quantize, x, group_size=group, fmt=FMT_OF[dtype], flavor=flavor, ue8m0=ue8m0
    )
    ref_q, ref_scale, ref_overflow, _ = group_quant_ref(x, group, dtype, flavor, ue8m0)
    assert q.shape == x.shape and scale.shape == (*x.shape[:-1], x.shape[-1] // group)
    assert_same_f32(scale, ref_scale)
    assert_same_fp8(q, ref_q, dtype)
    assert count == int(ref_overflow.sum())
    assert len(messages) == (1 if count else 0)
    return q, scale, count


# --- bitwise against the oracle ------------------------------------------------------------------


@pytest.mark.parametrize(("flavor", "dtype", "ue8m0"), CASES, ids=CASE_IDS)
def test_matches_oracle_fp32_input(flavor, dtype, ue8m0):
    x = amax_ties(varied((24, 512), seed=1, tile=(1, 128)))
    check_against_oracle(x, 128, dtype, flavor, ue8m0)


@pytest.mark.parametrize(("flavor", "dtype", "ue8m0"), CASES, ids=CASE_IDS)
def test_matches_oracle_bf16_3d_input(flavor, dtype, ue8m0):
    x = varied((2, 5, 256), seed=2, tile=(1, 1, 128)).to(torch.bfloat16)
    check_against_oracle(x, 128, dtype, flavor, ue8m0)


@pytest.mark.parametrize("group", [1, 32, 64, 96, 256])
@pytest.mark.parametrize("flavor", FLAVOR_NAMES)
def test_matches_oracle_other_group_sizes(group, flavor):
    x = varied((6, 768), seed=3, tile=(1, group))
    check_against_oracle(x, group, FN, flavor, False)
    check_against_oracle(x, group, FNUZ, flavor, True)


def test_tiny_groups_use_the_amax_floor():
    # amax below each floor: the scale is floor/fmt_max and the values still quantize to the oracle
    x = varied((4, 256), seed=4) * 1e-13
    x[1] *= 1e3  # between the 1e-10 floor and the deepseek 1e-4 floor
    for flavor, dtype in itertools.product(FLAVOR_NAMES, DTYPES):
        check_against_oracle(x, 128, dtype, flavor, False)


def test_mul_reciprocal_and_div_differ_where_expected():
    """A quotient that is an exact fp8 tie under x/scale but not under x*(1/scale): vLLM (div) and
    aiter (mul_reciprocal) must then round differently, each as its oracle says."""
    x = torch.zeros(1, 128)
    x[0, 0] = 7 * 448.0  # scale = 7 exactly on e4m3fn
    x[0, 1] = 7 * 25 / 16  # x/scale = 1.5625, the tie between 1.5 and 1.625
    q_aiter, s_aiter, _ = group_quantize(x, fmt="fn", flavor="aiter")
    q_vllm, s_vllm, _ = group_quantize(x, fmt="fn", flavor="vllm")
    assert s_aiter.item() == s_vllm.item() == 7.0
    assert E4M3FN.decode(q_vllm)[0, 1].item() == 1.5  # tie to even (mantissa 100)
    assert E4M3FN.decode(q_aiter)[0, 1].item() == 1.625  # fl(1/7) > 1/7 pushes it above the tie
    check_against_oracle(x, 128, FN, "aiter", False)
    check_against_oracle(x, 128, FN, "vllm", False)


@settings(max_examples=60, deadline=None, derandomize=True)
@given(
    data=st.data(),
    rows=st.integers(1, 3),
    groups=st.integers(1, 3),
    group=st.sampled_from([32, 128]),
    flavor=st.sampled_from(FLAVOR_NAMES),
    dtype=st.sampled_from(DTYPES),
    ue8m0=st.booleans(),
    bf16=st.booleans(),
)
def test_matches_oracle_property(data, rows, groups, group, flavor, dtype, ue8m0, bf16):
    x = data.draw(scattered_values(rows * groups * group)).reshape(rows, groups * group)
    if bf16:
        x = x.to(torch.bfloat16)
    check_against_oracle(x, group, dtype, flavor, ue8m0)


# --- round trip and scale properties ------------------------------------------------------------


@settings(max_examples=60, deadline=None, derandomize=True)
@given(
    data=st.data(),
    rows=st.integers(1, 3),
    groups=st.integers(1, 3),
    flavor=st.sampled_from(FLAVOR_NAMES),
    dtype=st.sampled_from(DTYPES),
    ue8m0=st.booleans(),
)
def test_roundtrip_error_bound(data, rows, groups, flavor, dtype, ue8m0):
    # Up to 2^120: within 2^-4 of fp32's max (2^128), q * scale can round past it, and no fp32
    # dequantization can return that value (test_dequantize_near_fp32_max covers that region).
    x = data.draw(scattered_values(rows * groups * 128, max_magnitude=2.0**120)).reshape(rows, groups * 128)
    fmt = FMT_OF[dtype]
    (q, scale, count), _ = call_recording_overflow(group_quantize, x, fmt=fmt, flavor=flavor, ue8m0=ue8m0)
    deq = group_dequantize(q, scale)
    assert deq.dtype == torch.float32 and deq.shape == x.shape
    per_element_scale = scale.repeat_interleave(128, dim=-1)
    nan = torch.isnan(deq)
    # only the deepseek recipe on fnuz (448 on a 240-max format) can overflow, and then exactly the
    # counted elements are NaN
    assert int(nan.sum()) == count
    if count:
        assert flavor == "deepseek" and dtype == FNUZ
    err = (x.double() - deq.double()).abs()
    bound = roundtrip_bound(x, per_element_scale, fmt.min_subnormal)
    bad = ~nan & (err > bound)
    assert not bad.any(), (x[bad][:4].tolist(), deq[bad][:4].tolist(), per_element_scale[bad][:4].tolist())


@settings(max_examples=60, deadline=None, derandomize=True)
@given(
    data=st.data(),
    groups=st.integers(1, 4),
    # the recipes whose scale is max(amax, floor) / fmt_max; the aiter-* ones are checked against the oracle
    flavor=st.sampled_from(("aiter", "vllm", "deepseek")),
    dtype=st.sampled_from(DTYPES),
)
def test_scales_plain_and_ue8m0(data, groups, flavor, dtype):
    x = data.draw(scattered_values(2 * groups * 128)).reshape(2, groups * 128)
    fmt = FMT_OF[dtype]
    (_, plain, _), _ = call_recording_overflow(group_quantize, x, fmt=fmt, flavor=flavor)
    (q, pow2, _), _ = call_recording_overflow(group_quantize, x, fmt=fmt, flavor=flavor, ue8m0=True)
    fmt_max = {"aiter": fmt.max, "vllm": 224.0 if dtype == FNUZ else 448.0, "deepseek": 448.0}[flavor]
    floor = f32(torch.tensor({"deepseek": 1e-4}.get(flavor, 1e-10), dtype=torch.float64))
    amax = x.reshape(2, groups, 128).abs().amax(-1).double()
    # plain scales are exactly fl32(max(amax, floor) / fmt_max)
    assert torch.equal(plain, f32(torch.maximum(amax, floor) / fmt_max).float())
    # ue8m0 scales are powers of two, >= the plain scale and < twice it
    log2 = torch.log2(pow2.double())
    assert torch.equal(log2, torch.round(log2))
    assert (pow2 >= plain).all() and (pow2.double() < 2 * plain.double()).all()
    # and dequantization by a power of two is exact: the float64 product (itself exact) is the fp32
    # result wherever it fits in fp32 (the scale is >= 1e-10/448, so no product is fp32-subnormal)
    deq = group_dequantize(q, pow2)
    exact = FMT_OF[dtype].decode(q).double() * pow2.double().repeat_interleave(128, -1)
    assert_same_f32(deq, exact.float())
    fits = exact.abs() <= torch.finfo(torch.float32).max
    assert torch.equal(deq.double()[fits], exact[fits])


@settings(max_examples=200, deadline=None, derandomize=True)
@given(st.floats(min_value=0.0, max_value=2.0**127, width=32, exclude_min=True))
def test_ceil_pow2_property(s):
    out = ceil_pow2(torch.tensor([s], dtype=torch.float32)).item()
    assert out == ceil_pow2_ref(torch.tensor([s], dtype=torch.float64)).item()
    assert math.frexp(out)[0] == 0.5  # an exact power of two
    assert s <= out < 2 * s


def test_ceil_pow2_examples():
    s = torch.tensor([1.0, 0.75, 3.0, 2.0**-130, 1e-40, 2.0**-149, 2.0**127, math.inf, math.nan])
    out = ceil_pow2(s)
    assert out[:7].tolist() == [1.0, 1.0, 4.0, 2.0**-130, 2.0**-132, 2.0**-149, 2.0**127]
    assert math.isinf(out[7].item()) and math.isnan(out[8].item())


# --- dequantization ------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
def test_dequantize_is_one_rounded_product(dtype):
    x = varied((3, 4, 256), seed=5, tile=(1, 1, 64))
    q, scale, _ = group_quantize(x, group_size=64, fmt=FMT_OF[dtype], flavor="aiter")
    deq = group_dequantize(q, scale, group_size=64)
    # an fp8 value (4 significant bits) times an fp32 scale is exact in float64; fp32 rounds once
    exact = FMT_OF[dtype].decode(q).double() * scale.double().repeat_interleave(64, -1)
    assert_same_f32(deq, exact.float())


def test_dequantize_near_fp32_max():
    """Inputs within 2^-4 of fp32's max can dequantize to inf: q rounds up and q * scale = 2^128.
    Documented limitation of fp32 output, not a quantizer error: the scale and q match the oracle."""
    x = torch.zeros(1, 128)
    x[0, 0] = 248 * 2.0**120  # 3.2965e38; ue8m0 scale 2^120, quotient 248 ties to 256
    q, scale, _ = group_quantize(x, ue8m0=True)
    check_against_oracle(x, 128, FN, "aiter", True)
    assert scale.item() == 2.0**120 and E4M3FN.decode(q)[0, 0].item() == 256.0
    assert group_dequantize(q, scale)[0, 0].item() == math.inf


def test_dequantize_rejects_mismatched_scale():
    q, scale, _ = group_quantize(torch.ones(4, 256))
    with pytest.raises(ValueError, match="scale"):
        group_dequantize(q, scale[:, :1])
    with pytest.raises(ValueError, match="group_size 64"):
        group_dequantize(q, scale, group_size=64)


# --- layout and dtype invariance ----------------------------------------------------------------


def test_input_dtypes_and_layouts_are_equivalent():
    x = varied((8, 384), seed=6, tile=(1, 128)).to(torch.bfloat16).float()  # exactly representable in bf16
    x16 = x.clamp(-6e4, 6e4).to(torch.float16).float()  # exactly representable in fp16
    q_ref, s_ref, _ = group_quantize(x)
    for variant in (x.to(torch.bfloat16), x.double()):
        q, s, _ = group_quantize(variant)
        assert torch.equal(q.view(torch.uint8), q_ref.view(torch.uint8)) and torch.equal(s, s_ref)
    q, s, _ = group_quantize(x16.to(torch.float16))
    q16, s16, _ = group_quantize(x16)
    assert torch.equal(q.view(torch.uint8), q16.view(torch.uint8)) and torch.equal(s, s16)
    # non-contiguous views quantize like their contiguous copies, and the input is left untouched
    wide = varied((8, 768), seed=7, tile=(1, 128))
    before = wide.clone()
    strided = wide[:, ::2]
    q, s, _ = group_quantize(strided, flavor="vllm")
    qc, sc, _ = group_quantize(strided.contiguous(), flavor="vllm")
    assert torch.equal(q.view(torch.uint8), qc.view(torch.uint8)) and torch.equal(s, sc)
    transposed = varied((256, 8), seed=12).t()  # (8, 256), column-major
    q, s, _ = group_quantize(transposed, flavor="deepseek")
    qc, sc, _ = group_quantize(transposed.contiguous(), flavor="deepseek")
    assert torch.equal(q.view(torch.uint8), qc.view(torch.uint8)) and torch.equal(s, sc)
    assert torch.equal(wide, before)


def test_shapes():
    q, s, count = group_quantize(torch.ones(256))
    assert q.shape == (256,) and s.shape == (2,) and count == 0
    q, s, _ = group_quantize(torch.ones(2, 3, 4, 128), fmt="fnuz")
    assert q.shape == (2, 3, 4, 128) and q.dtype == torch.float8_e4m3fnuz and s.shape == (2, 3, 4, 1)
    q, s, _ = group_quantize(torch.ones(0, 256))
    assert q.shape == (0, 256) and s.shape == (0, 2)


# --- bad input -------------------------------------------------------------------------------------


def test_k_not_multiple_of_group_size():
    with pytest.raises(ValueError) as info:
        group_quantize(torch.ones(4, 200), name="hidden_states")
    message = str(info.value)
    assert "K=200" in message and "hidden_states" in message and "(4, 200)" in message and "128" in message
    with pytest.raises(ValueError, match="K=100"):
        group_quantize(torch.ones(100), group_size=64)


@pytest.mark.parametrize(
    "bad",
    [
        torch.ones(2, 128, dtype=torch.int32),
        torch.ones(2, 128, dtype=torch.bool),
        torch.ones(2, 128).to(torch.float8_e4m3fn),
        torch.ones(2, 128, dtype=torch.complex64),
    ],
    ids=["int32", "bool", "fp8", "complex"],
)
def test_non_float_input_is_type_error(bad):
    with pytest.raises(TypeError, match="activation"):
        group_quantize(bad, name="activation")


def test_other_bad_input():
    with pytest.raises(TypeError, match="Tensor"):
        group_quantize([1.0] * 128)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="at least 1"):
        group_quantize(torch.tensor(1.0))
    with pytest.raises(ValueError, match="group_size=0"):
        group_quantize(torch.ones(128), group_size=0)
    with pytest.raises(ValueError, match="group_size=-128"):
        group_quantize(torch.ones(128), group_size=-128)


# --- NaN, Inf and overflow -------------------------------------------------------------------------


def _alone(x: torch.Tensor, rows: list[int], groups: list[int], **kwargs):
    """Quantize selected (row, group) pairs one at a time."""
    out = {}
    for r in rows:
        for g in groups:
            q, s, _ = group_quantize(x[r : r + 1, g * 128 : (g + 1) * 128], **kwargs)
            out[(r, g)] = (q.view(torch.uint8), s)
    return out


@pytest.mark.parametrize(("flavor", "dtype", "ue8m0"), CASES, ids=CASE_IDS)
def test_nan_and_inf_stay_in_their_group(flavor, dtype, ue8m0):
    x = varied((3, 512), seed=8, tile=(1, 128))
    x[0, 130] = math.nan  # row 0, group 1
    x[1, 300] = math.inf  # row 1, group 2
    x[1, 260] = -math.inf
    x[2, 5] = -math.inf  # row 2, group 0 (alone with finite values)
    kwargs = dict(fmt=FMT_OF[dtype], flavor=flavor, ue8m0=ue8m0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", Fp8OverflowWarning)
        q, scale, _ = group_quantize(x, **kwargs)
        alone = _alone(x, [0, 1, 2], [0, 1, 2, 3], **kwargs)
    fmt = FMT_OF[dtype]
    _, _, overflow, _ = group_quant_ref(x, 128, dtype, flavor, ue8m0)
    poisoned = {(0, 1), (1, 2), (2, 0)}
    for (r, g), (q_alone, s_alone) in alone.items():
        cols = slice(g * 128, (g + 1) * 128)
        assert torch.equal(q[r, cols].view(torch.uint8), q_alone[0]), (r, g)
        assert_same_f32(scale[r, g].reshape(1, 1), s_alone)
        if (r, g) not in poisoned:
            # finite groups: finite scale, NaN only where deepseek-on-fnuz overflows
            assert torch.isfinite(scale[r, g])
            assert torch.equal(fmt.is_nan_bytes(q[r, cols]), overflow[r, cols])
    if quant_flavor(flavor).amax_ignores_nan:
        # aiter's HIP kernel: fmaxf drops the NaN from amax; only the NaN element itself is NaN
        assert torch.isfinite(scale[0, 1])
        assert torch.equal(fmt.is_nan_bytes(q[0, 128:256]), torch.arange(128, 256) == 130)
    else:
        assert math.isnan(scale[0, 1].item())
        assert fmt.is_nan_bytes(q[0, 128:256]).all()  # x * (1/NaN) is NaN everywhere in the group
    for r, g, inf_cols in ((1, 2, [300, 260]), (2, 0, [5])):
        assert math.isinf(scale[r, g].item()) and scale[r, g].item() > 0
        nan = fmt.is_nan_bytes(q[r, g * 128 : (g + 1) * 128])
        expected = torch.zeros(128, dtype=torch.bool)
        expected[[c - g * 128 for c in inf_cols]] = True
        # Inf * 0 (or Inf / Inf) is NaN; the finite values of the group become zeros
        assert torch.equal(nan, expected)
        assert (fmt.decode(q[r, g * 128 : (g + 1) * 128])[~expected] == 0).all()
    check_against_oracle(x, 128, dtype, flavor, ue8m0)


@pytest.mark.parametrize("flavor", FLAVOR_NAMES)
def test_non_finite_input_never_raises_or_warns(flavor):
    x = torch.full((2, 256), math.nan)
    x[1, :128] = math.inf
    x[1, 128:] = -math.inf
    for fmt in ("fn", "fnuz"):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            q, scale, count = group_quantize(x, fmt=fmt, flavor=flavor)
        assert count == 0
        assert FMT_OF[q.dtype].is_nan_bytes(q).all()


def test_deepseek_on_fnuz_overflows_to_nan_and_warns():
    gen = torch.Generator().manual_seed(9)
    x = torch.randn(6, 384, generator=gen)
    x[5] = 0.0
    x[5, 0] = 1e-6  # amax below the 1e-4 floor: nothing in this row can overflow
    # deepseek maps amax to 448 on a 240-max format: |x| >= ~0.554 amax overflows
    ref_q, _, ref_overflow, y = group_quant_ref(x, 128, FNUZ, "deepseek")
    expected = int(ref_overflow.sum())
    assert expected > 0 and not ref_overflow[5].any()
    # independent of the oracle's own mask: count of finite quotients >= overflow_threshold
    assert expected == int(((y.abs() >= overflow_threshold(E4M3FNUZ)) & torch.isfinite(y)).sum())
    with pytest.warns(Fp8OverflowWarning) as record:
        q, _, count = group_quantize(x, fmt="fnuz", flavor="deepseek", name="q_input")
    assert count == expected
    assert len(record) == 1
    message = str(record[0].message)
    assert f"{expected} finite values" in message and "q_input" in message and "NaN" in message
    assert record[0].filename == __file__  # stacklevel points at the caller
    assert torch.equal(E4M3FNUZ.is_nan_bytes(q), ref_overflow)
    assert_same_fp8(q, ref_q, FNUZ)


def test_deepseek_on_fn_saturates_silently():
    gen = torch.Generator().manual_seed(10)
    x = torch.randn(4, 256, generator=gen) * 1e30
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        q, _, count = group_quantize(x, fmt="fn", flavor="deepseek")
    assert count == 0
    assert not E4M3FN.is_nan_bytes(q).any()
    assert E4M3FN.decode(q).abs().max().item() == 448.0


def test_clamping_flavors_never_overflow():
    x = varied((16, 256), seed=11, tile=(1, 128)) * 1e30
    for flavor, fmt in itertools.product(("aiter", "vllm"), ("fn", "fnuz")):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            q, _, count = group_quantize(x, fmt=fmt, flavor=flavor)
        assert count == 0 and not FMT_OF[q.dtype].is_nan_bytes(q).any()
        # the group's amax maps exactly to +-fmt_max
        fmt_max = 224.0 if (flavor, fmt) == ("vllm", "fnuz") else FMT_OF[q.dtype].max
        assert (FMT_OF[q.dtype].decode(q).abs().amax(-1) == fmt_max).all()


@pytest.mark.parametrize(
    "fmt,fixed_max,value,overflows",
    [
        (E4M3FN, 464.0, 464.0, 0),  # halfway above 448 = 1.110b x 2^8: the tie rounds to even, to 448
        (E4M3FN, 480.0, 480.0, 1),  # past the tie: saturates
        (E4M3FNUZ, 248.0, 248.0, 1),  # halfway above 240 = 1.111b x 2^7: the tie rounds up, to NaN
        (E4M3FNUZ, 247.0, 247.0, 0),
    ],
)
def test_overflow_count_follows_round_to_nearest_even_at_the_top(fmt, fixed_max, value, overflows):
    """A flavor without clamp whose max puts a quotient exactly on the rounding tie above fmt.max
    (amax == fixed_max makes scale exactly 1, so the quotient is the value itself)."""
    from mla_debug.numerics import QuantFlavor

    loose = QuantFlavor("loose", "test", 1e-10, 1e-10, "mul_reciprocal", clamp=False, fixed_max=fixed_max)
    x = torch.zeros(1, 128)
    x[0, 0] = value
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", Fp8OverflowWarning)
        q, scale, count = group_quantize(x, fmt=fmt, flavor=loose)
    assert scale.item() == 1.0 and count == overflows
    decoded = fmt.decode(q)[0, 0].item()
    if fmt is E4M3FNUZ:
        assert math.isnan(decoded) == bool(overflows)
    else:
        assert decoded == fmt.max  # e4m3fn: the tie rounds down, anything above saturates
