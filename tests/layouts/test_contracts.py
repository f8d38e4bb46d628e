"""Layout contracts: every `effective` flag is checked against what a reader actually gets from the bytes."""

from __future__ import annotations

import itertools

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from mla_debug.layouts import (
    ContractViolation,
    ScaleLayout,
    ViolationKind,
    WeightLayout,
    WeightTransform,
    scale_as_read,
    scale_order_violation,
    shuffle_weight,
    unshuffle_weight,
    weight_read_violation,
)

ALL = tuple(ScaleLayout)
FP8 = torch.float8_e4m3fn
R, C, S = ScaleLayout.ROW_MAJOR, ScaleLayout.COL_MAJOR, ScaleLayout.COL_MAJOR_STRIDED


def distinct_scale(m: int, g: int) -> torch.Tensor:
    return (torch.randperm(m * g, generator=torch.Generator().manual_seed(m * 100 + g)).float() + 0.5).view(m, g)


# --------------------------------------------------------------------------------------- scale order


@pytest.mark.parametrize("written,read_as", [(R, R), (C, C), (S, S), (C, S), (S, C)])
def test_same_byte_order_is_no_violation(written, read_as):
    for m, g in [(1, 1), (1, 8), (8, 1), (16, 56)]:
        assert scale_order_violation("gemm", "x_scale", written, read_as, m, g) is None


@pytest.mark.parametrize("written,read_as", [(R, C), (R, S), (C, R), (S, R)])
def test_mismatch_with_several_tokens_is_effective(written, read_as):
    v = scale_order_violation("aiter-bpreshuffle", "wq_b input scale", written, read_as, 4, 12)
    assert isinstance(v, ContractViolation)
    assert v.kind is ViolationKind.SCALE_ORDER and str(v.kind) == "scale-order"
    assert v.effective is True
    assert (v.consumer, v.tensor, v.expected, v.found) == (
        "aiter-bpreshuffle",
        "wq_b input scale",
        read_as.name,
        written.name,
    )
    assert str(v) == v.message
    assert v.message.startswith("wq_b input scale:")
    assert "aiter-bpreshuffle" in v.message and read_as.name in v.message and written.name in v.message
    assert "harmless" not in v.message


@pytest.mark.parametrize("m,g", [(1, 12), (1, 1), (9, 1)])
def test_mismatch_with_one_token_or_group_is_recorded_but_harmless(m, g):
    v = scale_order_violation("aiter-bpreshuffle", "x_scale", R, C, m, g)
    assert v is not None and v.kind is ViolationKind.SCALE_ORDER
    assert v.effective is False
    assert "harmless" in v.message and f"M={m}" in v.message and "x_scale" in v.message


@settings(max_examples=60, deadline=None)
@given(m=st.integers(1, 24), g=st.integers(1, 24), written=st.sampled_from(ALL), read_as=st.sampled_from(ALL))
def test_scale_effective_flag_matches_the_bytes(m, g, written, read_as):
    logical = distinct_scale(m, g)
    reads_right = torch.equal(scale_as_read(logical, written, read_as), logical)
    v = scale_order_violation("k", "t", written, read_as, m, g)
    if written.byte_order == read_as.byte_order:
        assert v is None and reads_right
    else:
        assert v is not None and v.effective == (not reads_right)


# -------------------------------------------------------------------------------------- weight reads


def history(*layouts: tuple[int, int], who: str = "s") -> WeightLayout:
    layout = WeightLayout()
    for i, shuffle in enumerate(layouts):
        layout = layout.then(WeightTransform("shuffle", by=f"{who}{i}", layout=shuffle))
    return layout


def distinct_weight(n: int, k: int, dtype: torch.dtype = FP8) -> torch.Tensor:
    size = torch.empty((), dtype=dtype).element_size()
    raw = torch.randint(0, 256, (n, k * size), dtype=torch.uint8, generator=torch.Generator().manual_seed(k))
    units = raw.view(-1, 16)
    index = torch.arange(units.shape[0])
    units[:, 0], units[:, 1] = (index & 0xFF).to(torch.uint8), (index >> 8).to(torch.uint8)
    return raw.view(dtype)


def reader_gets_original(w: torch.Tensor, shuffles: tuple, expects) -> bool:
    """Apply the recorded shuffles to the bytes, then read them as the reader does: plain, or un-shuffled once."""
    stored = w
    for layout in shuffles:
        stored = shuffle_weight(stored, layout)
    seen = stored if expects is None else unshuffle_weight(stored, expects)
    return torch.equal(seen.view(torch.uint8), w.view(torch.uint8))


def test_plain_reader_of_plain_weight():
    assert weight_read_violation("aiter-blockscale", "o_proj.weight", WeightLayout(), None, 512, 1) is None


def test_preshuffled_reader_of_weight_shuffled_once():
    for k in (256, 512, 7168):
        assert weight_read_violation("aiter-bpreshuffle", "o_proj.weight", history((16, 16)), (16, 16), k, 1) is None


@pytest.mark.parametrize("expects", [None, (16, 16)])
def test_double_shuffle_k512_is_effective(expects):
    v = weight_read_violation("aiter-bpreshuffle", "wo_b.weight", history((16, 16), (16, 16)), expects, 512, 1)
    assert v is not None and v.kind is ViolationKind.DOUBLE_SHUFFLE and str(v.kind) == "double-shuffle"
    assert v.effective is True
    assert not reader_gets_original(distinct_weight(32, 512), ((16, 16), (16, 16)), expects)
    assert "wo_b.weight" in v.message and "aiter-bpreshuffle" in v.message
    assert v.found == "shuffle(16, 16) by s0; shuffle(16, 16) by s1" and v.found in v.message


def test_double_shuffle_k256_is_invisible_to_a_plain_reader():
    # Two (16, 16) shuffles of a 256-byte fp8 row give back the plain bytes: a plain reader is right.
    v = weight_read_violation(
        "aiter-blockscale", "shared_experts.down.weight", history((16, 16), (16, 16)), None, 256, 1
    )
    assert v is not None and v.kind is ViolationKind.DOUBLE_SHUFFLE
    assert v.effective is False
    assert "harmless" in v.message
    assert reader_gets_original(distinct_weight(32, 256), ((16, 16), (16, 16)), None)
    # Same for bf16 with K=128 (also a 256-byte row).
    v = weight_read_violation("r", "t", history((16, 16), (16, 16)), None, 128, 2)
    assert v is not None and v.effective is False


def test_double_shuffle_k256_is_wrong_for_the_preshuffled_reader():
    # The bytes are plain again, but the preshuffled kernel un-shuffles them once: wrong values.
    v = weight_read_violation("aiter-bpreshuffle", "t", history((16, 16), (16, 16)), (16, 16), 256, 1)
    assert v is not None and v.kind is ViolationKind.DOUBLE_SHUFFLE and v.effective is True
    assert not reader_gets_original(distinct_weight(32, 256), ((16, 16), (16, 16)), (16, 16))
    # Three shuffles of a 256-byte row look like one: harmless for that reader.
    v3 = weight_read_violation("aiter-bpreshuffle", "t", history(*((16, 16),) * 3), (16, 16), 256, 1)
    assert v3 is not None and v3.kind is ViolationKind.DOUBLE_SHUFFLE and v3.effective is False
    assert reader_gets_original(distinct_weight(32, 256), ((16, 16),) * 3, (16, 16))


def test_direct_reader_of_shuffled_weight():
    v = weight_read_violation(
        "absorbed decode (W_UK/W_UV)", "kv_b_proj.weight", history((16, 16)), None, 512, 1, direct_reader=True
    )
    assert v is not None and v.kind is ViolationKind.RELAID_WEIGHT_DIRECT_READ
    assert str(v.kind) == "direct-read-of-relaid-weight"
    assert v.effective is True and v.expected == "plain bytes"
    assert "kv_b_proj.weight" in v.message and "absorbed decode (W_UK/W_UV)" in v.message
    assert "directly" in v.message
    # The flag changes nothing when the weight is plain.
    assert weight_read_violation("r", "t", WeightLayout(), None, 512, 1, direct_reader=True) is None


def test_plain_reader_of_shuffled_weight():
    v = weight_read_violation("aiter-blockscale", "q_b_proj.weight", history((16, 16)), None, 1536, 1)
    assert v is not None and v.kind is ViolationKind.WEIGHT_LAYOUT_MISMATCH
    assert str(v.kind) == "weight-layout-mismatch"
    assert v.effective is True
    assert "q_b_proj.weight" in v.message and "aiter-blockscale" in v.message and "plain bytes" in v.message


def test_preshuffled_reader_of_plain_weight():
    v = weight_read_violation("aiter-bpreshuffle", "wo_a.weight", WeightLayout(), (16, 16), 512, 1)
    assert v is not None and v.kind is ViolationKind.WEIGHT_LAYOUT_MISMATCH and v.effective is True
    assert v.expected == "bytes shuffled once with (16, 16)" and v.found == "plain"
    assert "left plain" in v.message and "wo_a.weight" in v.message and "aiter-bpreshuffle" in v.message


def test_preshuffled_reader_of_weight_shuffled_with_other_layout():
    v = weight_read_violation("aiter-bpreshuffle", "t", history((32, 16)), (16, 16), 512, 1)
    assert v is not None and v.kind is ViolationKind.WEIGHT_LAYOUT_MISMATCH and v.effective is True
    assert not reader_gets_original(distinct_weight(32, 512), ((32, 16),), (16, 16))


@pytest.mark.parametrize(
    "k,dtype",
    [(256, FP8), (512, FP8), (128, FP8), (64, FP8), (128, torch.bfloat16), (256, torch.bfloat16)],
)
@pytest.mark.parametrize("expects", [None, (16, 16), (32, 16)])
def test_weight_effective_flag_matches_the_bytes(k, dtype, expects):
    w = distinct_weight(32, k, dtype)
    size = w.element_size()
    candidates = [()] + [
        shuffles for count in (1, 2, 3) for shuffles in itertools.product([(16, 16), (32, 16)], repeat=count)
    ]
    for shuffles in candidates:
        v = weight_read_violation("reader", "w", history(*shuffles), expects, k, size)
        right = reader_gets_original(w, shuffles, expects)
        wanted = () if expects is None else (expects,)
        if tuple(shuffles) == wanted:
            assert v is None
            assert right
            continue
        assert v is not None, shuffles
        if len(shuffles) >= 2:
            assert v.kind is ViolationKind.DOUBLE_SHUFFLE
        else:
            assert v.kind is ViolationKind.WEIGHT_LAYOUT_MISMATCH
        # Mixed layouts are flagged effective conservatively; the physics decides only when it could
        # be harmless, so the flag must never call a wrong read harmless.
        if not right:
            assert v.effective, (shuffles, expects, k, dtype)
        if len(set(shuffles) | set(wanted)) == 1:
            assert v.effective == (not right), (shuffles, expects, k, dtype)


def test_violation_kind_values():
    assert [str(kind) for kind in ViolationKind] == [
        "scale-order",
        "double-shuffle",
        "direct-read-of-relaid-weight",
        "weight-layout-mismatch",
        "consumers-disagree",
        "scale-codes-read-as-values",
        "packed-scales-read-as-values",
        "scale-truncated-to-power-of-two",
        "ue8m0-packing-mantissa-leak",
        "grouped-scale-order",
    ]
