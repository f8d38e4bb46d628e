"""Verdicts on saved tensors as records: `compare_tensor`, `compare_tensors`, `shuffle_fit`."""

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
    present_scale,
    shuffle_period,
    shuffle_weight,
)
from mla_debug.layouts.forensics import (
    MAX_SHUFFLES,
    ROW_COLUMNS,
    ShuffleAttempt,
    TensorComparison,
    VerdictKind,
    compare_tensor,
    compare_tensors,
    shuffle_fit,
)

FP8 = torch.float8_e4m3fn


@settings(max_examples=80, deadline=None)
@given(
    bands=st.integers(1, 3),
    k_blocks=st.integers(1, 8),
    dtype=st.sampled_from([FP8, torch.bfloat16, torch.float32]),
    layout=st.sampled_from(LAYOUTS),
    times=st.integers(1, MAX_SHUFFLES),
    seed=st.integers(0, 2**16),
)
def test_a_weight_shuffled_k_times_is_said_to_be_shuffled_k_times(bands, k_blocks, dtype, layout, times, seed):
    # N a multiple of 32 and K of 32 elements: both tiles fit, so either could be the one applied.
    size = torch.empty((), dtype=dtype).element_size()
    n, k = 32 * bands, 32 * k_blocks
    period = shuffle_period(k, size, layout)
    w = distinct_weight((n, k), dtype, seed)
    verdict = compare_tensor("kv_b_proj.weight", shuffled(w, layout, times), w)
    if times % period == 0:
        # A whole number of periods gives the bytes back.
        assert verdict.kind is VerdictKind.PLAIN and verdict.shuffles == 0
    else:
        assert verdict.kind is VerdictKind.SHUFFLED
        # Counts are known modulo the period: the smallest count that matches.
        assert verdict.match == WeightLayoutMatch(layout=layout, shuffles=times % period, period=period)
    assert verdict.tried == () and verdict.scale_layouts == ()


def test_plain_bytes_name_the_involution_that_looks_the_same():
    w = distinct_weight((32, 256))  # 256-byte rows: the (16, 16) shuffle is its own inverse
    verdict = compare_tensor("q_b_proj.weight", w.clone(), w)
    assert verdict.kind is VerdictKind.PLAIN
    assert verdict.match == WeightLayoutMatch(layout=None, shuffles=0, period=1)
    assert verdict.same_bytes_as == (WeightLayoutMatch(layout=(16, 16), shuffles=2, period=2),)
    assert compare_tensor("w", distinct_weight((32, 128)), distinct_weight((32, 128))).same_bytes_as == ()


def test_unrelated_bytes_list_the_shuffles_tried():
    w, other = distinct_weight((32, 128), seed=1), distinct_weight((32, 128), seed=2)
    verdict = compare_tensor("w", other, w)
    assert verdict.kind is VerdictKind.UNRELATED and verdict.match is None and verdict.shuffles is None
    # Both periods exceed 4 at 128-byte rows: the default 1..4 shuffles were tried with each tile.
    assert verdict.tried == (ShuffleAttempt((16, 16), 4), ShuffleAttempt((32, 16), 4))
    # 64-byte rows: (16, 16) has period 3, so 1..2 shuffles are all there is; N = 16 rules out (32, 16).
    small, small_other = distinct_weight((16, 64)), distinct_weight((16, 64), seed=3)
    assert compare_tensor("w", small_other, small).tried == (ShuffleAttempt((16, 16), 2),)
    odd = distinct_weight((48, 48))  # K = 48 fits no tile
    assert compare_tensor("w", distinct_weight((48, 48), seed=4), odd).tried == ()


def test_shape_dtype_and_scalar_verdicts():
    w = distinct_weight((32, 128))
    shorter = compare_tensor("w", w[:16], w)
    assert shorter.kind is VerdictKind.SHAPE_DIFFERS
    assert (shorter.observed_shape, shorter.reference_shape) == ((16, 128), (32, 128))
    wider = compare_tensor("w", torch.zeros(32, 128, dtype=torch.bfloat16), w)
    assert wider.kind is VerdictKind.DTYPE_DIFFERS and wider.dtypes_differ
    # Same element size, other dtype: the bytes are still compared, and the record says the dtypes differ.
    as_int8 = compare_tensor("w", shuffle_weight(w).view(torch.int8), w)
    assert as_int8.kind is VerdictKind.SHUFFLED and as_int8.shuffles == 1 and as_int8.dtypes_differ
    scalar = torch.tensor(1.5)
    assert compare_tensor("s", scalar.clone(), scalar).kind is VerdictKind.PLAIN
    assert compare_tensor("s", -scalar, scalar).kind is VerdictKind.DIFFERENT_VALUE
    # -0.0 and +0.0 are equal values, different bytes.
    assert compare_tensor("s", torch.tensor(-0.0), torch.tensor(0.0)).kind is VerdictKind.DIFFERENT_VALUE


def logical_scale(m: int, g: int) -> torch.Tensor:
    return (torch.randperm(m * g, generator=torch.Generator().manual_seed(m * 100 + g)).float() / 4 + 0.25).view(m, g)


@pytest.mark.parametrize("layout", list(ScaleLayout))
def test_activation_scales_are_matched_by_presentation(layout):
    logical = logical_scale(16, 12)
    buffer = present_scale(logical, layout)
    if layout is ScaleLayout.COL_MAJOR_STRIDED:
        # No contiguous (M, G) form: a dump saves its memory as the (G, M) transpose.
        verdict = compare_tensor("x_scale", buffer.t().contiguous(), logical)
        assert verdict.kind is VerdictKind.SCALE_TRANSPOSED
    else:
        verdict = compare_tensor("x.scale", buffer, logical)
        assert verdict.kind is VerdictKind.SCALE_WRITTEN
    assert verdict.scale_layouts == (layout,) and verdict.activation_scale


def test_activation_scale_verdicts_other_values_and_coinciding_presentations():
    logical = logical_scale(16, 12)
    assert compare_tensor("x_scale", logical * 2, logical).kind is VerdictKind.SCALE_UNRELATED
    one = logical[:1].clone()
    verdict = compare_tensor("x_scale", present_scale(one, "col_major"), one)
    assert verdict.kind is VerdictKind.SCALE_WRITTEN and verdict.scale_layouts == tuple(ScaleLayout)
    # A transposed shape that holds no presentation of the values is a shape difference.
    assert compare_tensor("x_scale", logical.t().contiguous() + 1, logical).kind is VerdictKind.SHAPE_DIFFERS
    # Weight scales (*.weight_scale_inv) are compared as plain bytes, not as presentations.
    plain = compare_tensor("o_proj.weight_scale_inv", logical.clone(), logical)
    assert plain.kind is VerdictKind.PLAIN and not plain.activation_scale


def test_compare_tensors_follows_the_reference_order_and_names_one_sided_tensors():
    w = distinct_weight((32, 128))
    reference = {"b": w, "a": w, "only_ref": w}
    observed = {"a": shuffled(w, (16, 16), 2), "extra": w, "b": w.clone()}
    comparison = compare_tensors(observed, reference)
    assert [v.name for v in comparison.verdicts] == ["b", "a"]
    assert comparison["a"].shuffles == 2 and comparison["b"].kind is VerdictKind.PLAIN
    assert comparison.only_in_observed == ("extra",) and comparison.only_in_reference == ("only_ref",)
    chosen = compare_tensors(observed, reference, names=["a", "b", "a"])
    assert [v.name for v in chosen.verdicts] == ["a", "b"]
    with pytest.raises(LookupError, match="compare_tensors: only_ref not in observed; it has a, extra, b"):
        compare_tensors(observed, reference, names=["only_ref"])
    with pytest.raises(KeyError, match="no verdict for tensor 'extra'; compared: b, a"):
        comparison["extra"]


def test_the_comparison_as_a_dataframe():
    pytest.importorskip("pandas")
    w = distinct_weight((32, 128))
    frame = compare_tensors({"a": shuffle_weight(w), "b": w[:16]}, {"a": w, "b": w}).to_frame()
    assert list(frame.columns) == list(ROW_COLUMNS)
    assert frame["tensor"].tolist() == ["a", "b"]
    assert frame["verdict"].tolist() == ["shuffled", "shape_differs"]
    assert frame.loc[0, "shuffles"] == 1 and frame.loc[0, "shuffle_layout"] == (16, 16)
    assert frame.loc[1, "observed_shape"] == (16, 128)
    empty = TensorComparison(verdicts=()).to_frame()
    assert list(empty.columns) == list(ROW_COLUMNS) and len(empty) == 0


@pytest.mark.parametrize(
    "shape, dtype, layout, fits, broken",
    [
        ((32, 128), FP8, (16, 16), True, set()),
        ((32, 128), FP8, (32, 16), True, set()),
        ((16, 128), FP8, (32, 16), False, {"n"}),
        ((24, 2), torch.float32, (16, 16), False, {"n", "k"}),
        ((32, 64), torch.float64, (16, 16), False, {"element_size"}),
        ((256,), torch.bfloat16, (16, 16), False, set()),
    ],
)
def test_shuffle_fit_says_which_rule_breaks(shape, dtype, layout, fits, broken):
    fit = shuffle_fit(torch.zeros(shape, dtype=dtype), layout)
    assert fit.fits is fits
    if len(shape) >= 2:
        found = {rule for rule in ("n", "k", "element_size") if not getattr(fit, f"{rule}_fits")}
        assert found == broken
    else:
        assert (fit.ndim, fit.n, fit.k) == (1, None, None)


def test_bad_inputs_name_the_tensor():
    with pytest.raises(TypeError, match=r"w \(observed\)"):
        compare_tensor("w", [1, 2], torch.zeros(2))
