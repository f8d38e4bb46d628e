"""Per-128x128 block quantization of weights: oracle, partial edge blocks, chunking, round trips, bad input."""

from __future__ import annotations

import itertools
import math
import warnings

import pytest
import torch
from fp8_oracle import (
    BLOCK_FLAVOR_NAMES,
    DTYPES,
    FN,
    FNUZ,
    assert_same_f32,
    assert_same_fp8,
    block_quant_ref,
)
from hypothesis import given, settings
from hypothesis import strategies as st
from quant_cases import FMT_OF, call_recording_overflow, roundtrip_bound, scattered_values, varied

import mla_debug.numerics.quantize as quantize_module
from mla_debug.numerics import (
    E4M3FNUZ,
    Fp8OverflowWarning,
    block_dequantize,
    block_quantize,
    overflow_threshold,
)

CASES = list(itertools.product(BLOCK_FLAVOR_NAMES, DTYPES, (False, True)))
CASE_IDS = [f"{f}-{'fn' if d == FN else 'fnuz'}-{'ue8m0' if u else 'fp32scale'}" for f, d, u in CASES]


def check_against_oracle(w, block, dtype, flavor, ue8m0):
    (q, scale, count), messages = call_recording_overflow(
        block_quantize, w, block=block, fmt=FMT_OF[dtype], flavor=flavor, ue8m0=ue8m0
    )
    ref_q, ref_scale, ref_overflow = block_quant_ref(w, block, dtype, flavor, ue8m0)
    assert q.shape == w.shape
    assert_same_f32(scale, ref_scale)
    assert_same_fp8(q, ref_q, dtype)
    assert count == int(ref_overflow.sum())
    assert len(messages) == (1 if count else 0)
    return q, scale, count


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.dtype == b.dtype and torch.equal(a.view(torch.uint8), b.view(torch.uint8))


def same_f32(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.dtype == b.dtype == torch.float32 and torch.equal(a.view(torch.int32), b.view(torch.int32))


# --- bitwise against the oracle ------------------------------------------------------------------


@pytest.mark.parametrize(("flavor", "dtype", "ue8m0"), CASES, ids=CASE_IDS)
def test_matches_oracle_partial_blocks(flavor, dtype, ue8m0):
    w = varied((300, 200), seed=21, tile=(128, 128))
    check_against_oracle(w, (128, 128), dtype, flavor, ue8m0)


@pytest.mark.parametrize(("flavor", "dtype", "ue8m0"), CASES, ids=CASE_IDS)
def test_matches_oracle_aligned_bf16(flavor, dtype, ue8m0):
    w = varied((256, 384), seed=22, tile=(128, 128)).to(torch.bfloat16)
    check_against_oracle(w, (128, 128), dtype, flavor, ue8m0)


@pytest.mark.parametrize("block", [(64, 32), (1, 128), (128, 1), (32, 96)])
def test_matches_oracle_other_block_shapes(block):
    w = varied((130, 190), seed=23, tile=block)
    for flavor, dtype in itertools.product(BLOCK_FLAVOR_NAMES, DTYPES):
        check_against_oracle(w, block, dtype, flavor, False)


def test_tiny_blocks_use_the_amax_floor():
    w = varied((256, 256), seed=24) * 1e-14
    w[:128, 128:] *= 1e2  # amax between the vLLM block floor 1e-12 and aiter's 1e-10
    w[128:, :128] *= 1e5  # between 1e-10 and deepseek's 1e-4
    for flavor, dtype in itertools.product(BLOCK_FLAVOR_NAMES, DTYPES):
        check_against_oracle(w, (128, 128), dtype, flavor, False)


@settings(max_examples=40, deadline=None, derandomize=True)
@given(
    data=st.data(),
    n=st.integers(1, 300),
    k=st.integers(1, 300),
    flavor=st.sampled_from(BLOCK_FLAVOR_NAMES),
    dtype=st.sampled_from(DTYPES),
    ue8m0=st.booleans(),
)
def test_matches_oracle_property(data, n, k, flavor, dtype, ue8m0):
    w = data.draw(scattered_values(n * k)).reshape(n, k)
    check_against_oracle(w, (128, 128), dtype, flavor, ue8m0)


# --- partial edge blocks and chunking ----------------------------------------------------------------


@pytest.mark.parametrize(("flavor", "dtype"), list(itertools.product(BLOCK_FLAVOR_NAMES, DTYPES)))
def test_partial_blocks_equal_padded_then_cropped(flavor, dtype):
    # 2112 rows = 16.5 blocks (DeepSeek's fused q_a/kv_a projection), 200 columns = 1.5 blocks
    w = varied((2112, 200), seed=25, tile=(128, 128))
    padded = torch.nn.functional.pad(w, (0, 256 - 200, 0, 2176 - 2112))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", Fp8OverflowWarning)
        q, scale, count = block_quantize(w, fmt=FMT_OF[dtype], flavor=flavor)
        q_pad, scale_pad, count_pad = block_quantize(padded, fmt=FMT_OF[dtype], flavor=flavor)
    assert scale.shape == (17, 2)
    assert same_bits(q, q_pad[:2112, :200].contiguous())
    assert same_f32(scale, scale_pad)
    assert count == count_pad  # padding zeros never overflow


@pytest.mark.parametrize("chunk_elements", [1, 3 * 128 * 128 * 3, 7 * 128 * 128 * 3])
@pytest.mark.parametrize("flavor", BLOCK_FLAVOR_NAMES)
def test_result_independent_of_chunking(monkeypatch, chunk_elements, flavor):
    """1, 3 or 7 block rows per chunk (the weight has 10, the last one partial) against one chunk."""
    w = varied((1200, 300), seed=26, tile=(128, 128))
    monkeypatch.setattr(quantize_module, "_CHUNK_ELEMENTS", 1 << 40)
    (q_one, s_one, c_one), m_one = call_recording_overflow(block_quantize, w, fmt="fnuz", flavor=flavor)
    monkeypatch.setattr(quantize_module, "_CHUNK_ELEMENTS", chunk_elements)
    (q, s, c), m = call_recording_overflow(block_quantize, w, fmt="fnuz", flavor=flavor)
    assert same_bits(q, q_one) and same_f32(s, s_one)
    assert c == c_one and m == m_one
    assert len(m) == (1 if flavor == "deepseek" else 0)  # one warning for the whole weight, not per chunk


def test_default_chunking_spans_several_chunks():
    # K = 7168 (56 column blocks): the default 2^22-element chunk holds 4 block rows = 512 rows, so
    # 1100 rows take 3 chunks, the last one partial.
    w = varied((1100, 7168), seed=27, tile=(128, 128))
    q, s, _ = block_quantize(w, flavor="vllm", fmt="fnuz")
    old = quantize_module._CHUNK_ELEMENTS
    try:
        quantize_module._CHUNK_ELEMENTS = 1 << 40
        q_one, s_one, _ = block_quantize(w, flavor="vllm", fmt="fnuz")
    finally:
        quantize_module._CHUNK_ELEMENTS = old
    assert old // (128 * 56 * 128) == 4
    assert same_bits(q, q_one) and same_f32(s, s_one)


# --- round trip --------------------------------------------------------------------------------------


@settings(max_examples=40, deadline=None, derandomize=True)
@given(
    data=st.data(),
    n=st.integers(1, 260),
    k=st.integers(1, 260),
    flavor=st.sampled_from(BLOCK_FLAVOR_NAMES),
    dtype=st.sampled_from(DTYPES),
    ue8m0=st.booleans(),
)
def test_roundtrip_error_bound(data, n, k, flavor, dtype, ue8m0):
    # magnitudes up to 2^120: see test_group_quant.test_roundtrip_error_bound
    w = data.draw(scattered_values(n * k, max_magnitude=2.0**120)).reshape(n, k)
    fmt = FMT_OF[dtype]
    (q, scale, count), _ = call_recording_overflow(block_quantize, w, fmt=fmt, flavor=flavor, ue8m0=ue8m0)
    assert scale.shape == (-(-n // 128), -(-k // 128))
    deq = block_dequantize(q, scale)
    assert deq.dtype == torch.float32 and deq.shape == w.shape
    per_element = scale.repeat_interleave(128, 0)[:n].repeat_interleave(128, 1)[:, :k]
    nan = torch.isnan(deq)
    assert int(nan.sum()) == count
    if count:
        assert flavor == "deepseek" and dtype == FNUZ
    err = (w.double() - deq.double()).abs()
    bad = ~nan & (err > roundtrip_bound(w, per_element, fmt.min_subnormal))
    assert not bad.any(), (w[bad][:4].tolist(), deq[bad][:4].tolist())
    if ue8m0:
        log2 = torch.log2(scale.double())
        assert torch.equal(log2, torch.round(log2))


@pytest.mark.parametrize("shape", [(256, 384), (300, 200), (5, 7), (300, 256), (2112, 128), (100, 128)])
@pytest.mark.parametrize("dtype", DTYPES)
def test_dequantize_is_one_rounded_product(shape, dtype):
    # aligned, partial in K, partial in N only, and smaller than one block
    w = varied(shape, seed=28, tile=(128, 128))
    q, scale, _ = block_quantize(w, fmt=FMT_OF[dtype])
    n, k = shape
    per_element = scale.double().repeat_interleave(128, 0)[:n].repeat_interleave(128, 1)[:, :k]
    exact = FMT_OF[dtype].decode(q).double() * per_element  # exact in float64
    assert_same_f32(block_dequantize(q, scale), exact.float())


def test_dequantize_other_block_shape_and_mismatch():
    w = varied((100, 70), seed=29)
    q, scale, _ = block_quantize(w, block=(32, 64))
    assert scale.shape == (4, 2)
    exact = (
        FMT_OF[FN].decode(q).double() * scale.double().repeat_interleave(32, 0)[:100].repeat_interleave(64, 1)[:, :70]
    )
    assert_same_f32(block_dequantize(q, scale, block=(32, 64)), exact.float())
    with pytest.raises(ValueError, match="weight scale"):
        block_dequantize(q, scale)
    with pytest.raises(ValueError, match="weight scale"):
        block_dequantize(q, scale[:, :1], block=(32, 64))


# --- layout invariance -----------------------------------------------------------------------------


def test_non_contiguous_and_dtype_variants():
    base = varied((384, 300), seed=30, tile=(128, 128))
    before = base.clone()
    for view in (base.t(), base[::2], base[:, 1:290]):
        for flavor in BLOCK_FLAVOR_NAMES:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", Fp8OverflowWarning)
                q, s, _ = block_quantize(view, flavor=flavor, fmt="fnuz")
                qc, sc, _ = block_quantize(view.contiguous(), flavor=flavor, fmt="fnuz")
            assert same_bits(q, qc) and same_f32(s, sc)
    assert torch.equal(base, before)  # input untouched
    bf = base.to(torch.bfloat16)
    q, s, _ = block_quantize(bf)
    qf, sf, _ = block_quantize(bf.float())
    assert same_bits(q, qf) and same_f32(s, sf)
    q, s, _ = block_quantize(base.double())
    qf, sf, _ = block_quantize(base)
    assert same_bits(q, qf) and same_f32(s, sf)


def test_shapes():
    q, s, c = block_quantize(torch.ones(1, 1))
    assert q.shape == (1, 1) and s.shape == (1, 1) and c == 0
    assert FMT_OF[FN].decode(q).item() == 448.0
    q, s, _ = block_quantize(torch.ones(129, 257), fmt="fnuz")
    assert q.dtype == torch.float8_e4m3fnuz and s.shape == (2, 3)
    q, s, _ = block_quantize(torch.ones(0, 256))
    assert q.shape == (0, 256) and s.shape == (0, 2)


# --- bad input --------------------------------------------------------------------------------------


def test_bad_input():
    with pytest.raises(ValueError) as info:
        block_quantize(torch.ones(2, 128, 128), name="wq_b")
    assert "wq_b" in str(info.value) and "2-D" in str(info.value) and "(2, 128, 128)" in str(info.value)
    with pytest.raises(ValueError, match="2-D"):
        block_quantize(torch.ones(128))
    with pytest.raises(TypeError, match="wkv"):
        block_quantize(torch.ones(128, 128, dtype=torch.int64), name="wkv")
    with pytest.raises(TypeError):
        block_quantize(torch.ones(128, 128).to(torch.float8_e4m3fn))
    with pytest.raises(TypeError, match="Tensor"):
        block_quantize([[1.0]])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="positive"):
        block_quantize(torch.ones(128, 128), block=(0, 128))
    with pytest.raises(ValueError, match="positive"):
        block_quantize(torch.ones(128, 128), block=(128, -1))


# --- NaN, Inf and overflow ----------------------------------------------------------------------------


@pytest.mark.parametrize(("flavor", "dtype", "ue8m0"), CASES, ids=CASE_IDS)
def test_nan_and_inf_stay_in_their_block(flavor, dtype, ue8m0):
    w = varied((300, 260), seed=31, tile=(128, 128))
    w[5, 140] = math.nan  # block (0, 1)
    w[200, 3] = math.inf  # block (1, 0)
    w[290, 259] = -math.inf  # block (2, 2), a partial corner block
    fmt = FMT_OF[dtype]
    kwargs = dict(fmt=fmt, flavor=flavor, ue8m0=ue8m0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", Fp8OverflowWarning)
        q, scale, _ = block_quantize(w, **kwargs)
    _, _, overflow = block_quant_ref(w, (128, 128), dtype, flavor, ue8m0)
    for i, j in itertools.product(range(3), range(3)):
        rows, cols = slice(i * 128, (i + 1) * 128), slice(j * 128, (j + 1) * 128)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Fp8OverflowWarning)
            q_alone, s_alone, _ = block_quantize(w[rows, cols], **kwargs)
        assert same_bits(q[rows, cols].contiguous(), q_alone), (i, j)
        assert_same_f32(scale[i, j].reshape(1, 1), s_alone)
        nan = fmt.is_nan_bytes(q[rows, cols])
        if (i, j) == (0, 1):
            assert math.isnan(scale[i, j].item()) and nan.all()
        elif (i, j) in ((1, 0), (2, 2)):
            assert scale[i, j].item() == math.inf
            expected = torch.isinf(w[rows, cols])
            assert torch.equal(nan, expected)
            assert (fmt.decode(q[rows, cols])[~expected] == 0).all()
        else:
            assert math.isfinite(scale[i, j].item())
            assert torch.equal(nan, overflow[rows, cols])
    check_against_oracle(w, (128, 128), dtype, flavor, ue8m0)


def test_deepseek_on_fnuz_overflows_to_nan_and_warns(monkeypatch):
    monkeypatch.setattr(quantize_module, "_CHUNK_ELEMENTS", 1)  # the count must add up over chunks
    gen = torch.Generator().manual_seed(32)
    w = torch.randn(300, 256, generator=gen) * 0.02
    ref_q, _, ref_overflow = block_quant_ref(w, (128, 128), FNUZ, "deepseek")
    expected = int(ref_overflow.sum())
    assert expected > 0
    with pytest.warns(Fp8OverflowWarning) as record:
        q, _, count = block_quantize(w, fmt="fnuz", flavor="deepseek", name="wo")
    assert count == expected and len(record) == 1
    message = str(record[0].message)
    assert f"{expected} finite values" in message and "wo" in message and "deepseek" in message
    assert record[0].filename == __file__
    assert torch.equal(E4M3FNUZ.is_nan_bytes(q), ref_overflow)
    assert_same_fp8(q, ref_q, FNUZ)
    # the count is that of finite quotients at or above the threshold, computed here directly in fp32
    quotient = torch.empty_like(w, dtype=torch.float64)
    for i, j in itertools.product(range(3), range(2)):
        block = w[i * 128 : (i + 1) * 128, j * 128 : (j + 1) * 128]
        s = block.abs().max().clamp_min(1e-4) / 448.0
        quotient[i * 128 : (i + 1) * 128, j * 128 : (j + 1) * 128] = (block * (1.0 / s)).double()
    assert expected == int((quotient.abs() >= overflow_threshold(E4M3FNUZ)).sum())


def test_clamping_flavors_never_overflow():
    w = varied((256, 256), seed=33, tile=(128, 128)) * 1e30
    for flavor, fmt in itertools.product(("aiter", "vllm"), ("fn", "fnuz")):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            q, _, count = block_quantize(w, fmt=fmt, flavor=flavor)
        assert count == 0 and not FMT_OF[q.dtype].is_nan_bytes(q).any()
        top = 224.0 if (flavor, fmt) == ("vllm", "fnuz") else FMT_OF[q.dtype].max
        assert (FMT_OF[q.dtype].decode(q).abs().reshape(2, 128, 2, 128).amax(dim=(1, 3)) == top).all()
