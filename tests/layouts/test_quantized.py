"""Quantized activations and weights as kernels receive them (mla_debug.layouts.quantized)."""

from __future__ import annotations

import itertools

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from mla_debug.layouts import (
    QuantizedActivation,
    QuantizedWeight,
    ScaleLayout,
    WeightLayout,
    WeightTransform,
    quantize_blocks,
    quantize_groups,
    shuffle_weight,
    unshuffle_weight,
)
from mla_debug.numerics import E4M3FN, E4M3FNUZ, block_dequantize, block_quantize, group_quantize

ALL = tuple(ScaleLayout)
FP8 = torch.float8_e4m3fn


def activations(m: int, k: int, seed: int = 0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    # Per-row magnitudes that differ by orders, so every (m, g) scale is distinct.
    rows = torch.logspace(-2, 2, m).unsqueeze(1)
    return (torch.randn(m, k, generator=gen) * rows).to(torch.bfloat16)


def raw_memory(t: torch.Tensor) -> torch.Tensor:
    storage = torch.empty(0, dtype=torch.uint8).set_(t.untyped_storage())
    start = t.storage_offset() * t.element_size()
    return storage[start : start + t.numel() * t.element_size()].clone()


def col_order_bytes(logical: torch.Tensor) -> torch.Tensor:
    m, g = logical.shape
    vals = logical.tolist()
    return torch.tensor([vals[i][j] for j in range(g) for i in range(m)], dtype=torch.float32).view(torch.uint8)


def row_order_bytes(logical: torch.Tensor) -> torch.Tensor:
    m, g = logical.shape
    vals = logical.tolist()
    return torch.tensor([vals[i][j] for i in range(m) for j in range(g)], dtype=torch.float32).view(torch.uint8)


def bits(t: torch.Tensor) -> torch.Tensor:
    return t.reshape(-1).view(torch.uint8)


def bitwise_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and a.dtype == b.dtype and torch.equal(bits(a), bits(b))


STRIDES = {
    ScaleLayout.ROW_MAJOR: lambda m, g: (g, 1),
    ScaleLayout.COL_MAJOR: lambda m, g: (g, 1),
    ScaleLayout.COL_MAJOR_STRIDED: lambda m, g: (1, m),
}


# ---------------------------------------------------------------------------------- quantize_groups


# deepseek's flavor on e4m3fnuz overflows by design (fixed max 448 > 240) and warns; the bytes still agree.
@pytest.mark.filterwarnings("ignore::mla_debug.numerics.Fp8OverflowWarning")
@settings(max_examples=25, deadline=None)
@given(
    m=st.integers(1, 9),
    groups=st.integers(1, 4),
    fmt=st.sampled_from(["e4m3fn", "e4m3fnuz"]),
    flavor=st.sampled_from(["aiter", "vllm", "deepseek"]),
    seed=st.integers(0, 2**16),
)
def test_quantize_groups_same_values_in_every_layout(m, groups, fmt, flavor, seed):
    x = activations(m, 128 * groups, seed)
    q_ref, s_ref, overflows = group_quantize(x, 128, fmt, flavor)
    results = {layout: quantize_groups(x, fmt=fmt, flavor=flavor, scale_layout=layout) for layout in ALL}
    for layout, qa in results.items():
        assert qa.scale_layout is layout
        assert qa.data.dtype == q_ref.dtype and bitwise_equal(qa.data, q_ref)
        assert qa.scale.dtype == torch.float32 and tuple(qa.scale.shape) == (m, groups)
        assert tuple(qa.scale.stride()) == STRIDES[layout](m, groups)
        assert bitwise_equal(qa.logical_scale().contiguous(), s_ref)
        expected = row_order_bytes(s_ref) if layout is ScaleLayout.ROW_MAJOR else col_order_bytes(s_ref)
        assert torch.equal(raw_memory(qa.scale), expected)
        assert (qa.m, qa.k, qa.groups, qa.group_size) == (m, 128 * groups, groups, 128)
        assert qa.overflow_count == overflows
    row, col = results[ScaleLayout.ROW_MAJOR], results[ScaleLayout.COL_MAJOR]
    # Same shape and strides; different bytes as soon as M > 1 and G > 1.
    assert row.scale.stride() == col.scale.stride()
    assert torch.equal(raw_memory(row.scale), raw_memory(col.scale)) == (m == 1 or groups == 1)


def test_quantize_groups_records_producer_and_options():
    x = activations(4, 256)
    qa = quantize_groups(x, fmt="fnuz", flavor="vllm", scale_layout="col_major", producer="fused_rms_quant")
    assert qa.fmt is E4M3FNUZ and qa.data.dtype == torch.float8_e4m3fnuz
    assert qa.scale_layout is ScaleLayout.COL_MAJOR
    assert qa.producer == "fused_rms_quant" and qa.flavor == "vllm" and qa.ue8m0 is False
    qa = quantize_groups(x, ue8m0=True)
    s = qa.logical_scale()
    assert torch.equal(torch.exp2(torch.log2(s).round()), s), "ue8m0 scales are powers of two"


@pytest.mark.parametrize("layout", ALL)
def test_dequantize_equals_group_dequant_of_logical_scale(layout):
    m, k = 5, 384
    x = activations(m, k, seed=2)
    qa = quantize_groups(x, scale_layout=layout)
    q_ref, s_ref, _ = group_quantize(x)
    # Independent group dequant: fp8 values times the group's scale, expanded by index.
    expected = q_ref.to(torch.float32) * s_ref.repeat_interleave(128, dim=1)
    got = qa.dequantize()
    assert got.dtype == torch.float32 and bitwise_equal(got, expected)


def test_dequantize_follows_the_declared_layout():
    # The same bytes declared in the wrong order dequantize to other values: the silent bug.
    qa = quantize_groups(activations(4, 384, seed=3), scale_layout="row_major")
    mislabelled = QuantizedActivation(data=qa.data, scale=qa.scale, scale_layout=ScaleLayout.COL_MAJOR, fmt=qa.fmt)
    assert not torch.equal(mislabelled.dequantize(), qa.dequantize())


@pytest.mark.parametrize("src,dst", list(itertools.product(ALL, ALL)))
def test_presented_as_is_byte_exact(src, dst):
    m, g = 6, 3
    qa = quantize_groups(activations(m, 128 * g, seed=4), scale_layout=src, producer="p0")
    before = raw_memory(qa.scale)
    other = qa.presented_as(dst, producer="p1")
    assert other.scale_layout is dst and other.producer == "p1"
    assert tuple(other.scale.stride()) == STRIDES[dst](m, g)
    logical = qa.logical_scale().contiguous()
    expected = row_order_bytes(logical) if dst is ScaleLayout.ROW_MAJOR else col_order_bytes(logical)
    assert torch.equal(raw_memory(other.scale), expected)
    assert bitwise_equal(other.logical_scale().contiguous(), logical)
    assert bitwise_equal(other.data, qa.data)
    assert bitwise_equal(other.dequantize(), qa.dequantize())
    # The original is unchanged, keeps its producer, and does not share the new buffer.
    assert qa.scale_layout is src and qa.producer == "p0"
    other.scale.fill_(0.0)
    assert torch.equal(raw_memory(qa.scale), before)
    assert qa.presented_as(dst).producer == "p0"


def test_presented_as_accepts_names():
    qa = quantize_groups(activations(2, 256))
    assert qa.presented_as("col-major-strided").scale_layout is ScaleLayout.COL_MAJOR_STRIDED


def test_quantize_groups_bad_input():
    with pytest.raises(ValueError, match="2-D"):
        quantize_groups(torch.randn(2, 3, 128))
    with pytest.raises(ValueError, match="K=100"):
        quantize_groups(torch.randn(2, 100))
    with pytest.raises(ValueError, match="ROW_MAJOR"):
        quantize_groups(torch.randn(2, 128), scale_layout="diagonal")
    with pytest.raises(TypeError):
        quantize_groups([[1.0] * 128])


# ------------------------------------------------------------------------- QuantizedActivation checks


def _parts(m: int = 4, k: int = 256):
    qa = quantize_groups(activations(m, k, seed=5))
    return qa.data, qa.scale


def test_activation_constructor_accepts_valid_parts():
    data, scale = _parts()
    qa = QuantizedActivation(data=data, scale=scale, scale_layout="row_major", fmt=E4M3FN)
    assert qa.scale_layout is ScaleLayout.ROW_MAJOR


def test_activation_wrong_scale_shape():
    data, scale = _parts()
    for bad in (scale.t().contiguous(), scale[:, :1].contiguous(), torch.ones(4, 2, 1)):
        with pytest.raises(ValueError) as err:
            QuantizedActivation(data=data, scale=bad, scale_layout="row_major", fmt=E4M3FN)
        assert "(4, 2)" in str(err.value) and "activation scale" in str(err.value)


def test_activation_wrong_scale_dtype():
    data, scale = _parts()
    with pytest.raises(TypeError, match="float32"):
        QuantizedActivation(data=data, scale=scale.to(torch.bfloat16), scale_layout="row_major", fmt=E4M3FN)


def test_activation_wrong_data_dtype():
    data, scale = _parts()
    with pytest.raises(TypeError, match="not an fp8 tensor"):
        QuantizedActivation(data=data.to(torch.bfloat16), scale=scale, scale_layout="row_major", fmt=E4M3FN)
    with pytest.raises(TypeError, match="does not match format e4m3fnuz"):
        QuantizedActivation(data=data, scale=scale, scale_layout="row_major", fmt=E4M3FNUZ)


def test_activation_wrong_rank_and_group():
    data, scale = _parts()
    with pytest.raises(ValueError, match="2-D"):
        QuantizedActivation(data=data.unsqueeze(0), scale=scale, scale_layout="row_major", fmt=E4M3FN)
    with pytest.raises(ValueError, match="group_size 96"):
        QuantizedActivation(data=data, scale=scale, scale_layout="row_major", fmt=E4M3FN, group_size=96)
    with pytest.raises(ValueError, match="ROW_MAJOR"):
        QuantizedActivation(data=data, scale=scale, scale_layout="sideways", fmt=E4M3FN)


# ---------------------------------------------------------------------------------- QuantizedWeight


def weight(n: int = 256, k: int = 384, seed: int = 7) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(n, k, generator=gen).to(torch.bfloat16)


def test_quantize_blocks_is_plain():
    w = weight()
    qw = quantize_blocks(w)
    q_ref, s_ref, _ = block_quantize(w)
    assert qw.data.dtype == FP8 and bitwise_equal(qw.data, q_ref)
    assert bitwise_equal(qw.scale, s_ref) and tuple(qw.scale.shape) == (2, 3)
    assert qw.layout == WeightLayout() and qw.layout.plain and qw.layout.shuffle_count == 0
    assert qw.layout.describe() == "plain" and qw.layout.shufflers == ()
    assert qw.fmt is E4M3FN and qw.block == (128, 128) and (qw.n, qw.k) == (256, 384)
    assert bitwise_equal(qw.dequantize_plain(), block_dequantize(q_ref, s_ref))


def test_quantize_blocks_options():
    qw = quantize_blocks(weight(64, 200), block=(64, 64), fmt="fnuz", flavor="vllm")
    assert qw.fmt is E4M3FNUZ and qw.block == (64, 64) and tuple(qw.scale.shape) == (1, 4)
    q_ref, s_ref, _ = block_quantize(weight(64, 200), (64, 64), "fnuz", "vllm")
    assert bitwise_equal(qw.data, q_ref) and bitwise_equal(qw.scale, s_ref)


def test_shuffled_records_who_shuffled():
    qw = quantize_blocks(weight())
    once = qw.shuffled(by="AiterPreshuffledFp8BlockScaledMMKernel")
    assert bitwise_equal(once.data, shuffle_weight(qw.data))
    assert once.layout.transforms == (
        WeightTransform("shuffle", by="AiterPreshuffledFp8BlockScaledMMKernel", layout=(16, 16)),
    )
    assert once.layout.shuffle_count == 1 and not once.layout.plain
    assert once.layout.describe() == "shuffle(16, 16) by AiterPreshuffledFp8BlockScaledMMKernel"
    assert bitwise_equal(once.scale, qw.scale), "weight scales are never shuffled"
    # The original is untouched.
    assert qw.layout.plain and bitwise_equal(qw.data, quantize_blocks(weight()).data)

    twice = once.shuffled(by="prepare_attn_preshuffle")
    assert twice.layout.shuffle_count == 2
    assert twice.layout.shufflers == ("AiterPreshuffledFp8BlockScaledMMKernel", "prepare_attn_preshuffle")
    assert twice.layout.shuffle_layouts == ((16, 16), (16, 16))
    assert twice.layout.describe() == (
        "shuffle(16, 16) by AiterPreshuffledFp8BlockScaledMMKernel; shuffle(16, 16) by prepare_attn_preshuffle"
    )
    assert bitwise_equal(twice.data, shuffle_weight(shuffle_weight(qw.data)))
    assert once.layout.shuffle_count == 1, "shuffled() returns a new history"

    other = qw.shuffled((32, 16), by="asm")
    assert other.layout.shuffle_layouts == ((32, 16),) and str(other.layout) == "shuffle(32, 16) by asm"
    assert bitwise_equal(other.data, shuffle_weight(qw.data, (32, 16)))


def test_shuffled_with_k_padding():
    w = weight(128, 200)
    qw = quantize_blocks(w)
    padded = qw.shuffled(by="kernel", pad_k_to=256)
    assert tuple(padded.data.shape) == (128, 256) and padded.k == 200 and padded.n == 128
    assert [t.kind for t in padded.layout.transforms] == ["pad_k", "shuffle"]
    assert padded.layout.transforms[0] == WeightTransform("pad_k", by="kernel", pad_k_to=256)
    assert padded.layout.shuffle_count == 1
    assert "pad K to a multiple of 256 by kernel" in padded.layout.describe()
    assert bitwise_equal(unshuffle_weight(padded.data, k=200), qw.data)
    with pytest.raises(ValueError, match="K-padded"):
        padded.dequantize_plain()
    # No padding needed: nothing about padding is recorded.
    aligned = quantize_blocks(weight(128, 256)).shuffled(by="kernel", pad_k_to=128)
    assert [t.kind for t in aligned.layout.transforms] == ["shuffle"]


def test_shuffled_bad_shape_names_the_shuffler():
    qw = quantize_blocks(weight(40, 128))
    with pytest.raises(ValueError) as err:
        qw.shuffled(by="model")
    assert "N=40" in str(err.value) and "model" in str(err.value)


def test_weight_constructor_validation():
    qw = quantize_blocks(weight())
    with pytest.raises(ValueError, match=r"\(2, 3\)"):
        QuantizedWeight(data=qw.data, scale=qw.scale[:, :2], fmt=E4M3FN)
    with pytest.raises(TypeError, match="float32"):
        QuantizedWeight(data=qw.data, scale=qw.scale.double(), fmt=E4M3FN)
    with pytest.raises(TypeError, match="not an fp8 tensor"):
        QuantizedWeight(data=qw.data.to(torch.bfloat16), scale=qw.scale, fmt=E4M3FN)
    with pytest.raises(TypeError, match="does not match format e4m3fnuz"):
        QuantizedWeight(data=qw.data, scale=qw.scale, fmt=E4M3FNUZ)
    with pytest.raises(ValueError, match="2-D"):
        QuantizedWeight(data=qw.data.reshape(-1), scale=qw.scale, fmt=E4M3FN)


def test_weight_transform_strings():
    assert str(WeightTransform("shuffle", by="x", layout=(32, 16))) == "shuffle(32, 16) by x"
    assert str(WeightTransform("pad_k", by="y", pad_k_to=64)) == "pad K to a multiple of 64 by y"
    layout = WeightLayout().then(WeightTransform("pad_k", by="a", pad_k_to=64))
    assert layout.shuffle_count == 0 and not layout.plain
