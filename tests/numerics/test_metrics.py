"""Error metrics against values worked out by hand in float64."""

from __future__ import annotations

import math

import pytest
import torch

from mla_debug.numerics import (
    cosine,
    deepgemm_diff,
    error_metrics,
    max_abs,
    nonfinite,
    rel_l2,
    snr_db,
)

ALL = (rel_l2, max_abs, cosine, snr_db, deepgemm_diff)
REL = 1e-12  # the metrics sum a handful of float64 terms in their own order: a few ulps at most


def close(got: float, expected: float) -> bool:
    return math.isclose(got, expected, rel_tol=REL, abs_tol=0.0)


def test_small_integer_example():
    a = torch.tensor([1.0, 2.0, 3.0])
    r = torch.tensor([1.0, 2.0, 4.0])
    # |a-r|^2 = 1, |r|^2 = 21, |a|^2 = 14, <a,r> = 17
    assert close(rel_l2(a, r), 1 / math.sqrt(21))
    assert max_abs(a, r) == 1.0
    assert close(cosine(a, r), 17 / math.sqrt(14 * 21))
    assert close(snr_db(a, r), 10 * math.log10(21))
    assert close(deepgemm_diff(a, r), 1 - 34 / 35)
    # the metrics are relative to the second argument
    assert close(rel_l2(r, a), 1 / math.sqrt(14))
    assert close(snr_db(r, a), 10 * math.log10(14))


def test_random_example_against_fsum():
    gen = torch.Generator().manual_seed(41)
    r = torch.randn(3, 50, generator=gen)
    a = r + 0.01 * torch.randn(3, 50, generator=gen)
    av = [float(v) for v in a.flatten().tolist()]
    rv = [float(v) for v in r.flatten().tolist()]
    diff2 = math.fsum((x - y) ** 2 for x, y in zip(av, rv, strict=True))  # float64 of fp32 inputs: differences exact
    ref2 = math.fsum(y * y for y in rv)
    act2 = math.fsum(x * x for x in av)
    dot = math.fsum(x * y for x, y in zip(av, rv, strict=True))
    assert close(rel_l2(a, r), math.sqrt(diff2 / ref2))
    assert max_abs(a, r) == max(abs(x - y) for x, y in zip(av, rv, strict=True))
    assert close(cosine(a, r), dot / math.sqrt(act2 * ref2))
    assert close(snr_db(a, r), 10 * math.log10(ref2 / diff2))
    # 1 - 2<a,r>/(|a|^2+|r|^2) = |a-r|^2/(|a|^2+|r|^2); compare on the value the metric forms: its
    # subtraction from 1 cancels about log10(1/diff) digits, so allow 1e-12 of 1 rather than of diff
    assert abs(deepgemm_diff(a, r) - (1 - 2 * dot / (act2 + ref2))) <= REL
    assert abs(deepgemm_diff(a, r) - diff2 / (act2 + ref2)) <= REL


def test_computed_in_float64():
    # |r|^2 = 1e40 overflows fp32 (and 1 would vanish next to it even in a wider-range fp32-width sum)
    r = torch.tensor([1e20, 1.0], dtype=torch.float32)
    a = torch.tensor([1e20, 2.0], dtype=torch.float32)
    r20 = float(r[0])  # the fp32 value of 1e20
    assert close(snr_db(a, r), 10 * math.log10((r20 * r20 + 1) / 1))
    assert close(rel_l2(a, r), 1 / math.sqrt(r20 * r20 + 1))
    assert max_abs(a, r) == 1.0
    # bf16 inputs are converted exactly
    b = torch.tensor([1.0078125, -3.0], dtype=torch.bfloat16)
    c = torch.tensor([1.0, -3.0], dtype=torch.bfloat16)
    assert max_abs(b, c) == 0.0078125


@pytest.mark.parametrize("power", [-200, -60, 60, 200])
def test_scale_invariance(power):
    """Scaling both tensors by a power of two is exact in float64, and the relative metrics must not
    change at all: no absolute epsilon may hide in them."""
    gen = torch.Generator().manual_seed(43)
    r = torch.randn(64, generator=gen, dtype=torch.float64)
    a = r + 0.1 * torch.randn(64, generator=gen, dtype=torch.float64)
    f = 2.0**power
    for metric in (rel_l2, cosine, deepgemm_diff):
        assert metric(a * f, r * f) == metric(a, r), metric.__name__
    # snr divides two sums each scaled by 2^(2*power): same ratio exactly
    assert snr_db(a * f, r * f) == snr_db(a, r)
    assert max_abs(a * f, r * f) == max_abs(a, r) * f


def test_identical_tensors():
    gen = torch.Generator().manual_seed(42)
    x = torch.randn(4, 64, generator=gen)
    assert rel_l2(x, x) == 0.0
    assert max_abs(x, x) == 0.0
    assert snr_db(x, x) == math.inf
    assert deepgemm_diff(x, x) == 0.0  # 2*S / (S + S) is exactly 1
    # vector_norm and the dot product reduce 256 terms in different orders: n * 2^-53 relative each
    assert abs(cosine(x, x) - 1.0) <= 256 * 2.0**-52
    assert cosine(torch.tensor([3.0, 4.0]), torch.tensor([3.0, 4.0])) == 1.0


def test_zero_cases():
    z = torch.zeros(5)
    x = torch.tensor([0.0, 1.0, 0.0, 0.0, -2.0])
    assert rel_l2(z, z) == 0.0 and rel_l2(x, z) == math.inf
    assert close(rel_l2(z, x), 1.0)
    assert cosine(z, z) == 1.0 and cosine(x, z) == 0.0 and cosine(z, x) == 0.0
    assert snr_db(z, z) == math.inf and snr_db(x, z) == -math.inf
    assert deepgemm_diff(z, z) == 0.0 and deepgemm_diff(x, z) == 1.0
    assert max_abs(torch.zeros(0), torch.zeros(0)) == 0.0
    assert rel_l2(torch.zeros(0), torch.zeros(0)) == 0.0


def test_opposite_vectors():
    x = torch.tensor([1.0, -2.0, 2.0])
    assert cosine(-x, x) == -1.0
    assert deepgemm_diff(-x, x) == 2.0
    assert close(rel_l2(-x, x), 2.0)


def test_snr_db_infinite_and_extreme():
    r = torch.tensor([1.0, 2.0])
    # infinite noise (an Inf in actual): -inf dB
    assert snr_db(torch.tensor([1.0, math.inf]), r) == -math.inf
    # infinite signal, finite noise: +inf dB
    big = torch.tensor([1e300, 1.0], dtype=torch.float64)
    assert snr_db(big + torch.tensor([0.0, 1.0], dtype=torch.float64), big) == math.inf
    # Inf - Inf is NaN noise
    assert math.isnan(snr_db(torch.tensor([math.inf, 2.0]), torch.tensor([math.inf, 1.0])))
    # |r|^2 = 1e-300 against noise ~1e300: the ratio underflows float64, the answer is still -6000 dB
    tiny = torch.tensor([1e-150], dtype=torch.float64)
    assert close(snr_db(tiny + 1e150, tiny), -6000.0)


@pytest.mark.parametrize("metric", ALL + (error_metrics,))
def test_shape_mismatch(metric):
    with pytest.raises(ValueError) as info:
        metric(torch.zeros(2, 3), torch.zeros(3, 2))
    assert "(2, 3)" in str(info.value) and "(3, 2)" in str(info.value)
    with pytest.raises(ValueError):
        metric(torch.zeros(6), torch.zeros(2, 3))  # same numel is not enough


def test_nan_propagates():
    a = torch.tensor([1.0, math.nan, 3.0])
    r = torch.tensor([1.0, 2.0, 3.0])
    for metric in (rel_l2, max_abs, cosine, snr_db, deepgemm_diff):
        assert math.isnan(metric(a, r)), metric.__name__
        assert math.isnan(metric(r, a)), metric.__name__


def test_nonfinite_counts():
    assert nonfinite(torch.tensor([1.0, math.nan, math.inf, -math.inf, 0.0])) == 3
    assert nonfinite(torch.tensor([1.0, math.nan], dtype=torch.bfloat16)) == 1
    assert nonfinite(torch.tensor([math.inf, 2.0], dtype=torch.float16)) == 1
    assert nonfinite(torch.arange(5)) == 0
    assert nonfinite(torch.zeros(0)) == 0
    fn = torch.tensor([0x7F, 0xFF, 0x00, 0x80, 0x7E], dtype=torch.uint8).view(torch.float8_e4m3fn)
    assert nonfinite(fn) == 2
    fnuz = torch.tensor([0x80, 0x7F, 0xFF, 0x00], dtype=torch.uint8).view(torch.float8_e4m3fnuz)
    assert nonfinite(fnuz) == 1


def test_error_metrics_bundle():
    a = torch.tensor([[1.0, math.inf], [2.0, 3.0]])
    r = torch.tensor([[1.0, 1.0], [2.0, 4.0]])
    m = error_metrics(a, r)
    assert set(m) == {"rel_l2", "max_abs", "cosine", "snr_db", "deepgemm_diff", "nonfinite"}
    assert m["nonfinite"] == 1.0
    assert m["max_abs"] == math.inf and m["rel_l2"] == math.inf and m["snr_db"] == -math.inf
    # <a,r> and |a| are both infinite: the angle is undefined
    assert math.isnan(m["cosine"]) and math.isnan(m["deepgemm_diff"])
    finite_a = torch.tensor([1.0, 2.0, 3.0])
    finite_r = torch.tensor([1.0, 2.0, 4.0])
    m = error_metrics(finite_a, finite_r)
    expected = {
        "rel_l2": rel_l2(finite_a, finite_r),
        "max_abs": 1.0,
        "cosine": cosine(finite_a, finite_r),
        "snr_db": snr_db(finite_a, finite_r),
        "deepgemm_diff": deepgemm_diff(finite_a, finite_r),
        "nonfinite": 0.0,
    }
    assert m == expected
    assert close(m["rel_l2"], 1 / math.sqrt(21))


def test_inputs_are_not_modified_and_grad_is_ignored():
    a = torch.tensor([1.0, 2.0], requires_grad=True)
    r = torch.tensor([1.5, 2.0])
    assert max_abs(a, r) == 0.5
    assert torch.equal(a.detach(), torch.tensor([1.0, 2.0])) and torch.equal(r, torch.tensor([1.5, 2.0]))
