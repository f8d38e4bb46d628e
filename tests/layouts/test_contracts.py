"""Layout contracts: every `effective` flag is checked against what a reader actually gets from the bytes."""

from __future__ import annotations

import itertools

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from mla_debug.layouts import (
    ConsumerOrders,
    ContractViolation,
    ScaleLayout,
    ShuffleExpectation,
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
        assert scale_order_violation("gemm", "x", written, read_as, m, g) is None


@pytest.mark.parametrize("written,read_as", [(R, C), (R, S), (C, R), (S, R)])
def test_mismatch_with_several_tokens_is_effective(written, read_as):
    v = scale_order_violation("aiter-bpreshuffle", "wq_b", written, read_as, 4, 12)
    assert isinstance(v, ContractViolation)
    assert v.kind is ViolationKind.SCALE_ORDER and str(v.kind) == "scale-order"
    assert v.effective is True
    assert (v.consumer, v.tensor, v.expected, v.found, v.rows, v.groups) == (
        "aiter-bpreshuffle",
        "wq_b.input_scale",
        read_as,
        written,
        4,
        12,
    )
    assert (
        str(v)
        == f"scale-order: wq_b.input_scale read by aiter-bpreshuffle as {read_as.name}, found {written.name} (effective)"
    )
    assert ContractViolation.from_dict(v.to_dict()) == v


@pytest.mark.parametrize("m,g", [(1, 12), (1, 1), (9, 1)])
def test_mismatch_with_one_token_or_group_is_recorded_but_harmless(m, g):
    v = scale_order_violation("aiter-bpreshuffle", "x", R, C, m, g)
    assert v is not None and v.kind is ViolationKind.SCALE_ORDER
    assert v.effective is False and (v.rows, v.groups) == (m, g) and str(v).endswith("(harmless)")


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
    assert weight_read_violation("aiter-blockscale", "o_proj", WeightLayout(), None, 512, 1) is None


def test_preshuffled_reader_of_weight_shuffled_once():
    for k in (256, 512, 7168):
        assert weight_read_violation("aiter-bpreshuffle", "o_proj", history((16, 16)), (16, 16), k, 1) is None


@pytest.mark.parametrize("expects", [None, (16, 16)])
def test_double_shuffle_k512_is_effective(expects):
    v = weight_read_violation("aiter-bpreshuffle", "wo_b", history((16, 16), (16, 16)), expects, 512, 1)
    assert v is not None and v.kind is ViolationKind.DOUBLE_SHUFFLE and str(v.kind) == "double-shuffle"
    assert v.effective is True
    assert not reader_gets_original(distinct_weight(32, 512), ((16, 16), (16, 16)), expects)
    assert v.tensor == "wo_b.weight" and v.consumer == "aiter-bpreshuffle"
    assert v.found == history((16, 16), (16, 16)) and v.expected == ShuffleExpectation(expects)
    assert ContractViolation.from_dict(v.to_dict()) == v


def test_double_shuffle_k256_is_invisible_to_a_plain_reader():
    # Two (16, 16) shuffles of a 256-byte fp8 row give back the plain bytes: a plain reader is right.
    v = weight_read_violation("aiter-blockscale", "shared_experts.down", history((16, 16), (16, 16)), None, 256, 1)
    assert v is not None and v.kind is ViolationKind.DOUBLE_SHUFFLE
    assert v.effective is False
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
        "absorbed decode (W_UK/W_UV)", "kv_b_proj", history((16, 16)), None, 512, 1, direct_reader=True
    )
    assert v is not None and v.kind is ViolationKind.RELAID_WEIGHT_DIRECT_READ
    assert str(v.kind) == "direct-read-of-relaid-weight"
    assert v.effective is True and v.expected == ShuffleExpectation(None, direct=True)
    assert (v.module, v.operand, v.consumer) == ("kv_b_proj", "weight", "absorbed decode (W_UK/W_UV)")
    # The flag changes nothing when the weight is plain.
    assert weight_read_violation("r", "t", WeightLayout(), None, 512, 1, direct_reader=True) is None


def test_plain_reader_of_shuffled_weight():
    v = weight_read_violation("aiter-blockscale", "q_b_proj", history((16, 16)), None, 1536, 1)
    assert v is not None and v.kind is ViolationKind.WEIGHT_LAYOUT_MISMATCH
    assert str(v.kind) == "weight-layout-mismatch"
    assert v.effective is True
    assert (v.tensor, v.consumer, v.expected) == ("q_b_proj.weight", "aiter-blockscale", ShuffleExpectation(None))


def test_preshuffled_reader_of_plain_weight():
    v = weight_read_violation("aiter-bpreshuffle", "wo_a", WeightLayout(), (16, 16), 512, 1)
    assert v is not None and v.kind is ViolationKind.WEIGHT_LAYOUT_MISMATCH and v.effective is True
    assert v.expected == ShuffleExpectation((16, 16)) and v.found == WeightLayout()
    assert (v.tensor, v.consumer) == ("wo_a.weight", "aiter-bpreshuffle")


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


# ------------------------------------------------------------------------------- reports of schema 3-5


def test_violations_written_as_sentences_read_back_typed():
    """Reports of schemas 3 to 5 kept a violation's layouts as the sentences it was made with."""
    old_scale = {
        "kind": "scale-order",
        "tensor": "wq_b input scale",
        "consumer": "aiter-bpreshuffle",
        "expected": "COL_MAJOR",
        "found": "ROW_MAJOR",
        "effective": True,
        "message": "wq_b input scale: aiter-bpreshuffle reads COL_MAJOR activation-scale bytes but the producer "
        "wrote ROW_MAJOR; for M=16 > 1 row m reads the scales of other tokens",
    }
    typed = ContractViolation.from_dict(old_scale)
    assert (typed.module, typed.operand, typed.expected, typed.found, typed.rows) == ("wq_b", "input_scale", C, R, 16)
    old_weight = {
        "kind": "direct-read-of-relaid-weight",
        "tensor": "kv_b_proj.weight",
        "consumer": "absorbed decode (W_UK/W_UV)",
        "expected": "plain bytes",
        "found": "shuffle(16, 16) by aiter-bpreshuffle.process_weights_after_loading",
        "effective": True,
        "message": "...",
    }
    typed = ContractViolation.from_dict(old_weight)
    assert typed == weight_read_violation(
        "absorbed decode (W_UK/W_UV)",
        "kv_b_proj",
        WeightLayout((WeightTransform("shuffle", "aiter-bpreshuffle.process_weights_after_loading", (16, 16)),)),
        None,
        512,
        1,
        direct_reader=True,
    )
    old_consumers = {
        "kind": "consumers-disagree",
        "tensor": "q_norm output (the pre-quantized q-lora)",
        "consumer": "wq_b and indexer.wq_b",
        "expected": "one scale order for both consumers",
        "found": "wq_b reads COL_MAJOR, indexer.wq_b reads ROW_MAJOR",
        "effective": True,
        "message": "...",
    }
    typed = ContractViolation.from_dict(old_consumers)
    assert typed.found == ConsumerOrders((("wq_b", C), ("indexer.wq_b", R)))
    assert ContractViolation.from_dict(typed.to_dict()) == typed
