"""Layout forensics: recover a weight's shuffle history and a scale's presentation from bytes alone."""

from __future__ import annotations

import pytest
import torch
from distinct_bytes import distinct_weight, shuffled
from hypothesis import given, settings
from hypothesis import strategies as st

from mla_debug.layouts import (
    LAYOUTS,
    ScaleLayout,
    WeightLayoutMatch,
    identify_scale_layout,
    identify_weight_layout,
    present_scale,
    shuffle_period,
)

FP8 = torch.float8_e4m3fn
ALL = tuple(ScaleLayout)


# (shape, dtype) where both layouts apply and both periods exceed 3, so 0..3 shuffles all differ.
DISTINGUISHABLE = [
    ((32, 128), FP8),  # periods 7 and 8
    ((2, 32, 128), FP8),
    ((64, 64), torch.bfloat16),  # 128-byte rows: same periods
    ((32, 1024), torch.int8),
]


@pytest.mark.parametrize("shape,dtype", DISTINGUISHABLE)
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("times", [0, 1, 2, 3])
def test_identify_counts_shuffles(shape, dtype, layout, times):
    w = distinct_weight(shape, dtype, seed=times)
    k, size = shape[-1], w.element_size()
    period = shuffle_period(k, size, layout)
    assert period > 3, "precondition: the shape must tell 0..3 shuffles apart"
    found = identify_weight_layout(shuffled(w, layout, times), w)
    if times == 0:
        assert found == WeightLayoutMatch(layout=None, shuffles=0, period=1)
        assert str(found).startswith("plain")
    else:
        assert found == WeightLayoutMatch(layout=layout, shuffles=times, period=period)
        assert str(layout) in str(found) and f"period {period}" in str(found)


def test_identify_reports_the_period_and_the_involution_ambiguity():
    w = distinct_weight((32, 256))  # 256-byte rows: the (16, 16) shuffle is an involution
    assert identify_weight_layout(shuffled(w, (16, 16), 1), w) == WeightLayoutMatch((16, 16), 1, 2)
    assert identify_weight_layout(shuffled(w, (16, 16), 2), w) == WeightLayoutMatch(None, 0, 1)
    assert identify_weight_layout(shuffled(w, (16, 16), 3), w) == WeightLayoutMatch((16, 16), 1, 2)
    # The (32, 16) shuffle is not an involution at 256 bytes.
    p32 = shuffle_period(256, 1, (32, 16))
    assert p32 > 2
    assert identify_weight_layout(shuffled(w, (32, 16), 2), w) == WeightLayoutMatch((32, 16), 2, p32)


def test_identify_count_is_modulo_the_period():
    w = distinct_weight((16, 64))  # (16, 16) period 3 at 64-byte rows
    assert shuffle_period(64, 1) == 3
    assert identify_weight_layout(shuffled(w, (16, 16), 3), w) == WeightLayoutMatch(None, 0, 1)
    assert identify_weight_layout(shuffled(w, (16, 16), 4), w) == WeightLayoutMatch((16, 16), 1, 3)


def test_max_shuffles_bounds_the_search():
    w = distinct_weight((32, 128))
    five = shuffled(w, (16, 16), 5)  # period 7: five shuffles are not two
    assert identify_weight_layout(five, w, layouts=((16, 16),)) is None  # default max_shuffles=4
    assert identify_weight_layout(five, w, layouts=((16, 16),), max_shuffles=6) == WeightLayoutMatch((16, 16), 5, 7)


def test_layouts_restricts_the_search():
    w = distinct_weight((32, 128))
    once16 = shuffled(w, (16, 16), 1)
    assert identify_weight_layout(once16, w, layouts=((32, 16),)) is None
    assert identify_weight_layout(once16, w, layouts=((16, 16),)) == WeightLayoutMatch((16, 16), 1, 7)


def test_layouts_that_do_not_fit_are_skipped():
    w = distinct_weight((16, 128))  # N = 16: (32, 16) cannot apply
    assert identify_weight_layout(shuffled(w, (16, 16), 2), w) == WeightLayoutMatch((16, 16), 2, 7)
    odd = distinct_weight((48, 48))  # K = 48: no layout applies; only "plain" can match
    other = distinct_weight((48, 48), seed=1)
    assert identify_weight_layout(odd.clone(), odd) == WeightLayoutMatch(None, 0, 1)
    assert identify_weight_layout(other, odd) is None


def test_unrelated_bytes_are_not_identified():
    w = distinct_weight((32, 128), seed=1)
    other = distinct_weight((32, 128), seed=2)
    assert identify_weight_layout(other, w) is None
    # One flipped byte after a shuffle breaks the match too.
    tampered = shuffled(w, (16, 16), 1).clone()
    tampered.view(torch.uint8)[5, 7] ^= 0x01
    assert identify_weight_layout(tampered, w) is None


def test_identify_compares_bytes_not_values():
    # +0 and -0 are equal values but different bytes: not "plain".
    w = torch.zeros(16, 32, dtype=torch.bfloat16)
    neg = w.neg()
    assert torch.equal(w, neg)
    assert identify_weight_layout(neg, w) is None


def test_identify_handles_degenerate_strides():
    # A (N, 1) tensor with strides (1, N): torch calls it contiguous but cannot view it as bytes directly.
    w = torch.arange(5, dtype=torch.bfloat16).view(1, 5).t()
    assert w.stride() == (1, 5)
    assert identify_weight_layout(w, w.clone()) == WeightLayoutMatch(None, 0, 1)


def test_identify_rejects_mismatched_inputs():
    w = distinct_weight((32, 128))
    with pytest.raises(ValueError, match="same shape"):
        identify_weight_layout(w[:16], w)
    with pytest.raises(ValueError, match="element size"):
        identify_weight_layout(torch.zeros(32, 128, dtype=torch.bfloat16), w)
    with pytest.raises(TypeError):
        identify_weight_layout([1, 2], w)


# -------------------------------------------------------------------------------------------- scales


def distinct_scale(m: int, g: int, seed: int = 0) -> torch.Tensor:
    perm = torch.randperm(m * g, generator=torch.Generator().manual_seed(seed)).float()
    return (perm / 4.0 + 0.25).view(m, g)


@settings(max_examples=60, deadline=None)
@given(m=st.integers(2, 40), g=st.integers(2, 40), layout=st.sampled_from(ALL), seed=st.integers(0, 2**16))
def test_identify_scale_layout_exact_when_unambiguous(m, g, layout, seed):
    logical = distinct_scale(m, g, seed)
    assert identify_scale_layout(present_scale(logical, layout), logical) == (layout,)


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 40), layout=st.sampled_from(ALL), one_token=st.booleans())
def test_identify_scale_layout_ambiguous_for_one_token_or_group(n, layout, one_token):
    m, g = (1, n) if one_token else (n, 1)
    logical = distinct_scale(m, g)
    # All three presentations write identical bytes; only size-1 strides differ, which say nothing.
    assert identify_scale_layout(present_scale(logical, layout), logical) == ALL


def test_identify_scale_layout_other_values():
    logical = distinct_scale(4, 6)
    for layout in ALL:
        buf = present_scale(logical, layout)
        assert identify_scale_layout(buf, logical + 1.0) == ()
    # Other values that the same bytes do spell in another presentation: found, in that presentation.
    col = present_scale(logical, "col_major")
    misread = col.clone()  # its tensor values: the row-major reading of column-order bytes
    assert not torch.equal(misread, logical)
    assert identify_scale_layout(col, misread) == (ScaleLayout.ROW_MAJOR,)
    one = distinct_scale(1, 6)
    assert identify_scale_layout(present_scale(one, "row_major"), one.flip(1)) == ()


def test_identify_scale_layout_right_bytes_wrong_strides():
    m, g = 4, 6
    logical = distinct_scale(m, g)
    # Row-major bytes in a buffer that claims strides (1, M): no producer writes that.
    row_bytes = present_scale(logical, "row_major").reshape(-1)
    odd = torch.as_strided(row_bytes, (m, g), (1, m))
    assert identify_scale_layout(odd, logical) == ()


def test_identify_scale_layout_non_dense_and_bad_shapes():
    logical = distinct_scale(4, 6)
    big = present_scale(distinct_scale(4, 12), "row_major")
    assert identify_scale_layout(big[:, ::2], logical) == ()
    with pytest.raises(ValueError, match="must both be"):
        identify_scale_layout(present_scale(logical, "row_major"), logical.t())
    with pytest.raises(ValueError, match="must both be"):
        identify_scale_layout(logical.reshape(-1), logical.reshape(-1))
    with pytest.raises(TypeError):
        identify_scale_layout(logical.tolist(), logical)
