"""The unfused baselines: bitwise against the oracle's double-rounding path, and located against the fused op."""

from __future__ import annotations

import inspect
import itertools
import re

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from nq_cases import check_against_oracle, make_case, single_vs_double_rounding
from nq_oracle import FLAVORS, FN, FNUZ, assert_bits_equal, fused_reference

from mla_debug.layouts import ScaleLayout
from mla_debug.normquant import (
    aiter_test_reference,
    fused_qk_rmsnorm_group_quant,
    norm_then_quant,
    norm_then_quant_for_v4,
    triton_norm_then_quant,
)
from mla_debug.numerics import fp8_ulp_distance

RECIPES = list(itertools.product(FLAVORS, (FN, FNUZ)))
RECIPE_IDS = [f"{f}-{'fn' if d == FN else 'fnuz'}" for f, d in RECIPES]


@pytest.mark.parametrize(("flavor", "fmt"), RECIPES, ids=RECIPE_IDS)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
def test_norm_then_quant_matches_the_double_rounding_oracle(flavor, fmt, dtype):
    case = make_case(m=10, n1=384, n2=128, dtype=dtype, seed=31, residual=True, fmt=fmt, flavor=flavor)
    check_against_oracle(norm_then_quant, case, transpose_scale=True, round_to=dtype, producer="norm_then_quant")


def test_aiter_test_reference_is_norm_then_quant_under_its_own_name():
    case = make_case(m=7, n1=256, n2=128, seed=32, residual=True, gemma_norm=True)
    ours = aiter_test_reference(**case.kwargs(return_unquantized=True))
    base = norm_then_quant(**case.kwargs(return_unquantized=True))
    assert ours.q_quant.producer == "aiter_test_reference" and base.q_quant.producer == "norm_then_quant"
    assert torch.equal(ours.q_quant.data.view(torch.uint8), base.q_quant.data.view(torch.uint8))
    for a, b in zip((ours.q_quant.scale, *ours[1:]), (base.q_quant.scale, *base[1:])):
        assert torch.equal(a, b)


@pytest.mark.parametrize("transpose", [False, True], ids=["row", "col"])
def test_v4_quantizes_the_same_bf16_twice(transpose):
    case = make_case(m=6, n1=512, n2=192, seed=33)
    v4 = norm_then_quant_for_v4(
        case.q, case.q_weight, 1e-6, case.k, case.k_weight, transpose_scale=transpose, fmt="e4m3fn"
    )
    first, second = v4.q_for_wq_b, v4.q_for_indexer
    # two separate quantizations: separate buffers ...
    assert first.data.data_ptr() != second.data.data_ptr() and first.scale.data_ptr() != second.scale.data_ptr()
    assert first.producer == "norm_then_quant_for_v4 (wq_b)"
    assert second.producer == "norm_then_quant_for_v4 (indexer.wq_b)"
    # ... holding identical bytes, in the same declared layout
    assert torch.equal(first.data.view(torch.uint8), second.data.view(torch.uint8))
    assert torch.equal(first.scale.view(torch.int32), second.scale.view(torch.int32))
    layout = ScaleLayout.COL_MAJOR if transpose else ScaleLayout.ROW_MAJOR
    assert first.scale_layout is second.scale_layout is layout
    # and the same as the generic unfused path and the oracle
    base = norm_then_quant(**case.kwargs(transpose_scale=transpose, return_unquantized=True))
    assert torch.equal(first.data.view(torch.uint8), base.q_quant.data.view(torch.uint8))
    assert torch.equal(first.scale, base.q_quant.scale)
    assert torch.equal(v4.q_bf16, base.q_unquantized) and torch.equal(v4.k_normed, base.k_normed)
    ref = fused_reference(case.q, case.q_weight, 1e-6, 128, FN, "aiter", round_to=torch.bfloat16)
    assert_bits_equal(v4.q_bf16, ref["y"], "q_bf16")
    # the fused op normalizes k identically (k is never quantized, so it is rounded once on both paths)
    fused = fused_qk_rmsnorm_group_quant(**case.kwargs())
    assert torch.equal(fused.k_normed, v4.k_normed)


def test_v4_requires_k():
    case = make_case(m=2, n1=128, n2=None, seed=1)
    with pytest.raises(ValueError, match=r"norm_then_quant_for_v4: k is required"):
        norm_then_quant_for_v4(case.q, case.q_weight, 1e-6, None, None)


# Clamping flavors only: deepseek on e4m3fnuz overflows to NaN, which has no ulp distance.
CLEAN = [(f, d) for f, d in RECIPES if not (f == "deepseek" and d == FNUZ)]


@pytest.mark.parametrize(("flavor", "fmt"), CLEAN, ids=[f"{f}-{'fn' if d == FN else 'fnuz'}" for f, d in CLEAN])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
def test_single_and_double_rounding_differ_only_near_fp8_midpoints(flavor, fmt, dtype):
    case = make_case(m=32, n1=1024, n2=None, dtype=dtype, seed=34, residual=True, fmt=fmt, flavor=flavor)
    fused = fused_qk_rmsnorm_group_quant(**case.kwargs()).q_quant
    unfused = norm_then_quant(**case.kwargs()).q_quant
    ref = fused_reference(case.q, case.q_weight, case.q_eps, 128, fmt, flavor, residual=case.residual)
    count, outside = single_vs_double_rounding(fused, unfused, ref, dtype)
    # 32k elements: the double rounding must show somewhere, else this test checks nothing
    assert count > 0


def test_fp16_subnormals_can_move_more_than_one_ulp():
    # Row 0's first group has a small amax (0.0028), so its scale is tiny (6.3e-6); y = 1.8e-8 is below
    # fp16's smallest subnormal and flushes to 0 on the unfused path, while the fused path keeps
    # 1.8e-8 / 6.3e-6 = 0.0029 -> 2 fp8 subnormal steps. bf16 (fp32's exponent range) cannot do this.
    case = make_case(m=6, n1=256, n2=None, dtype=torch.float16, seed=3, residual=True)
    fused = fused_qk_rmsnorm_group_quant(**case.kwargs()).q_quant
    unfused = norm_then_quant(**case.kwargs()).q_quant
    ref = fused_reference(case.q, case.q_weight, case.q_eps, 128, FN, "aiter", residual=case.residual)
    _, outside = single_vs_double_rounding(fused, unfused, ref, torch.float16)
    distance = fp8_ulp_distance(fused.data, unfused.data)
    assert distance[0, 72].item() == 2.0 and outside > 0
    assert fused.data[0, 72].float().item() == 2.0**-8 and unfused.data[0, 72].float().item() == 0.0


def test_the_unfused_paths_take_the_fused_ops_arguments():
    fused = inspect.signature(fused_qk_rmsnorm_group_quant).parameters
    for path, flavor in (
        (norm_then_quant, "aiter"),
        (aiter_test_reference, "aiter"),
        (triton_norm_then_quant, "aiter"),
    ):
        params = inspect.signature(path).parameters
        assert list(params) == [name for name in fused if name != "backend"], path.__name__
        assert params["flavor"].default == flavor and fused["flavor"].default == "aiter-fused"
        assert all(params[n].default == fused[n].default for n in params if n != "flavor"), path.__name__
    v4 = inspect.signature(norm_then_quant_for_v4).parameters
    assert list(v4) == [n for n in fused if n not in ("backend", "residual", "return_unquantized")]
    assert v4["k"].default is inspect.Parameter.empty and v4["k_weight"].default is inspect.Parameter.empty


def test_a_call_that_does_not_fit_the_arguments_names_the_path():
    case = make_case(m=2, n1=128, n2=128, seed=33)
    with pytest.raises(TypeError, match=r"^norm_then_quant: missing a required argument: 'q_eps'"):
        norm_then_quant(case.q, case.q_weight)
    with pytest.raises(TypeError, match=r"^norm_then_quant_for_v4: got an unexpected keyword argument 'residual'"):
        norm_then_quant_for_v4(case.q, case.q_weight, 1e-6, case.k, case.k_weight, residual=case.q)
    with pytest.raises(TypeError, match=r"^aiter_test_reference: got an unexpected keyword argument 'backend'"):
        aiter_test_reference(**case.kwargs(), backend="torch")


NAMES = list(inspect.signature(norm_then_quant).parameters)


@settings(max_examples=300, deadline=None)
@given(
    positional=st.integers(0, len(NAMES) + 2),
    keywords=st.lists(st.sampled_from([*NAMES, "backend", "scale"]), max_size=6, unique=True),
)
def test_a_path_binds_a_call_exactly_as_its_signature_does(positional, keywords):
    """The paths bind calls by a fast rule; it must take and refuse exactly what `Signature.bind` does,
    and fill in the same arguments."""
    from mla_debug.normquant.entries import _entry, _signature

    signature = _signature("aiter", drop=("backend",))
    entry = _entry("path", signature, norm_then_quant, lambda arguments: arguments)
    args = tuple(f"p{i}" for i in range(positional))
    kwargs = {name: f"k-{name}" for name in keywords}
    try:
        bound = signature.bind(*args, **kwargs)
    except TypeError as err:
        with pytest.raises(TypeError, match=rf"^path: {re.escape(str(err))}"):
            entry(*args, **kwargs)
        return
    bound.apply_defaults()
    assert entry(*args, **kwargs) == dict(bound.arguments)
