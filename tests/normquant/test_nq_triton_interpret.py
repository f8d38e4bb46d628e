"""The Triton norm + quant kernels under Triton's CPU interpreter, bit for bit against the torch backend.

The interpreter needs TRITON_INTERPRET=1 before triton is first imported (triton decorates its own
library functions in one mode at import): tests/conftest.py sets it on machines without CUDA, and this
module does the same if it is collected first; where triton was already imported compiled (a GPU
machine), these tests skip - test_nq_triton_gpu.py covers the compiled kernels there.

Why the comparisons can be exact: the interpreter's own fp32 -> fp8 and fp32 -> bf16 conversions are
numpy emulations that do not round to nearest even (they truncate to bf16, and round fp8 wrongly, e.g.
1.97 -> 1.0 and NaN -> 384), so a kernel using them could only be compared as dequantized values with
an fp8 ulp of slack. The kernels therefore convert with integer arithmetic under the interpreter
(SOFT=True), whose rounding is checked here against torch's casts value by value; on a GPU the
hardware conversions are checked against the same integer path (test_nq_triton_gpu.py). Everything
else - fp64 sum of squares, sqrt_rn, div_rn, amax with NaN, clamp, the fnuz fix-ups, the scale byte
order - is the same code in both modes, except the scale store: on NVIDIA GPUs, launches with few
programs store the scales with inline PTX (`_store_scales`), which the GPU tests cover.
"""

from __future__ import annotations

import functools
import itertools
import math
import os
import sys
import warnings

import pytest
import torch

if "triton" not in sys.modules and not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")  # what tests/conftest.py does, if collected alone
pytest.importorskip("triton")

from nq_cases import (  # noqa: E402
    activations,
    check_against_oracle,
    check_scale_buffer,
    extreme_rows,
    make_case,
    norm_weight,
)
from nq_oracle import AITER_FLAVORS, FLAVORS, FN, FNUZ, assert_bits_equal, conversion_probe_values, fused_reference  # noqa: E402

from mla_debug.gpu.normquant import support  # noqa: E402
from mla_debug.layouts import ScaleLayout  # noqa: E402
from mla_debug.normquant import (  # noqa: E402
    fused_qk_rmsnorm_group_quant,
    norm_then_quant,
    norm_then_quant_for_v4,
    triton_norm_then_quant,
    triton_norm_then_quant_for_v4,
)

_WHY_NOT = support.triton_unavailable_reason(torch.device("cpu"))
pytestmark = [
    pytest.mark.skipif(_WHY_NOT is not None, reason=f"Triton interpreter not usable here: {_WHY_NOT}"),
    # numpy warns about the overflowing and NaN lanes the kernels compute and then discard
    pytest.mark.filterwarnings("ignore::RuntimeWarning"),
]

TRITON = functools.partial(fused_qk_rmsnorm_group_quant, backend="triton")
RECIPES = list(itertools.product(FLAVORS, (FN, FNUZ), (False, True)))
RECIPE_IDS = [f"{f}-{'fn' if d == FN else 'fnuz'}-{'col' if t else 'row'}" for f, d, t in RECIPES]


def assert_same_result(a, b) -> None:
    """Two NormQuantResults are bitwise identical (scale buffers byte for byte, NaN bytes included)."""
    qa, qb = a.q_quant, b.q_quant
    assert qa.scale_layout is qb.scale_layout and qa.fmt == qb.fmt and qa.flavor == qb.flavor
    assert qa.overflow_count == qb.overflow_count
    assert torch.equal(qa.data.view(torch.uint8), qb.data.view(torch.uint8)), "fp8 bytes differ"
    assert qa.scale.stride() == qb.scale.stride()
    assert torch.equal(qa.scale.view(torch.int32), qb.scale.view(torch.int32)), "scale buffer bytes differ"
    for name in ("k_normed", "q_unquantized", "residual_sum"):
        x, y = getattr(a, name), getattr(b, name)
        assert (x is None) == (y is None), name
        if x is not None:
            assert x.dtype == y.dtype and x.is_contiguous(), name
            assert_bits_equal(x, y.double(), name)


def both(fn_triton, fn_torch, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # overflow warnings are checked by check_against_oracle
        return fn_triton(**kwargs), fn_torch(**kwargs)


@pytest.mark.parametrize(("flavor", "fmt", "transpose"), RECIPES, ids=RECIPE_IDS)
def test_fused_matches_oracle_and_torch(flavor, fmt, transpose):
    # deepseek on e4m3fnuz overflows to NaN (counted and warned, like the torch backend)
    case = make_case(m=5, n1=256, n2=64, seed=11, residual=True, fmt=fmt, flavor=flavor)
    check_against_oracle(TRITON, case, transpose, producer="fused_qk_rmsnorm_group_quant")
    kwargs = case.kwargs(transpose_scale=transpose, return_unquantized=True)
    assert_same_result(*both(TRITON, functools.partial(fused_qk_rmsnorm_group_quant, backend="torch"), **kwargs))


@pytest.mark.parametrize("flavor", AITER_FLAVORS)
@pytest.mark.parametrize("fmt", [FN, FNUZ], ids=["fn", "fnuz"])
def test_aiter_flavors_match_oracle_and_torch(flavor, fmt):
    # zero rows (activations() makes some) give aiter-triton its scale-0 / NaN groups
    case = make_case(m=4, n1=256, n2=64, seed=12, fmt=fmt, flavor=flavor)
    check_against_oracle(TRITON, case, transpose_scale=True)
    kwargs = case.kwargs(transpose_scale=False, return_unquantized=True)
    assert_same_result(*both(TRITON, functools.partial(fused_qk_rmsnorm_group_quant, backend="torch"), **kwargs))


@pytest.mark.parametrize("flavor", ["vllm-triton", "sglang-triton", "sglang-triton-colmajor"])
@pytest.mark.parametrize("fmt", [FN, FNUZ], ids=["fn", "fnuz"])
def test_engine_flavors_made_of_kernel_recipe_elements_match_torch(flavor, fmt):
    """vLLM's and SGLang's Triton quant recipes use only what the kernels implement (an fp32 inverse of max,
    x / scale or x * (1/scale), 224 on e4m3fnuz), so the kernels quantize with them bit for bit."""
    case = make_case(m=4, n1=256, n2=64, seed=13, fmt=fmt, flavor=flavor)
    kwargs = case.kwargs(transpose_scale=True, return_unquantized=True)
    assert_same_result(*both(TRITON, functools.partial(fused_qk_rmsnorm_group_quant, backend="torch"), **kwargs))


@pytest.mark.parametrize(
    ("flavor", "why"),
    [("vllm-cuda", "clamps NaN to -max"), ("deepgemm", "divides by a Python float"), ("vllm-native", "Python float")],
)
def test_engine_flavors_the_kernels_do_not_implement_are_refused(flavor, why):
    case = make_case(m=2, n1=128, n2=None, seed=1, flavor=flavor)
    with pytest.raises(ValueError, match=rf"flavor '{flavor}' .*{why}.*backend='torch'"):
        TRITON(**case.kwargs())


def test_aiter_torch_flavor_is_refused_with_the_reason():
    case = make_case(m=2, n1=128, n2=None, seed=1, flavor="aiter-torch")
    with pytest.raises(ValueError, match="flavor 'aiter-torch' divides by a Python float.*backend='torch'"):
        TRITON(**case.kwargs())


OPTION_CASES = {
    "fp16-gemma-residual": dict(dtype=torch.float16, gemma_norm=True, residual=True),
    "fp32-gemma": dict(dtype=torch.float32, gemma_norm=True),
    "bf16-gemma-fnuz-vllm": dict(gemma_norm=True, fmt=FNUZ, flavor="vllm"),
    "no-k": dict(n2=None),
    "group64-n2-not-multiple": dict(group_size=64, n1=320, n2=96, residual=True),
    "group32": dict(group_size=32, n1=96, n2=40, flavor="vllm"),
    "one-token": dict(m=1, residual=True),
    "one-group": dict(m=3, n1=128, n2=64),
}


@pytest.mark.parametrize("options", OPTION_CASES.values(), ids=OPTION_CASES.keys())
def test_fused_options_match_oracle(options):
    options = dict(options)
    case = make_case(m=options.pop("m", 4), n1=options.pop("n1", 256), n2=options.pop("n2", 128), seed=21, **options)
    check_against_oracle(TRITON, case, transpose_scale=True)


def test_widest_rows():
    case = make_case(m=2, n1=8192, n2=8192, seed=3, residual=True)
    check_against_oracle(TRITON, case, transpose_scale=True)


def test_weights_in_other_dtypes_and_large_eps():
    case = make_case(m=3, n1=128, n2=64, seed=4)
    for q_w, k_w in ((case.q_weight.double(), case.k_weight.float()), (case.q_weight.half(), case.k_weight.double())):
        kwargs = dict(q=case.q, q_weight=q_w, q_eps=0.5, k=case.k, k_weight=k_w, k_eps=0.25, return_unquantized=True)
        assert_same_result(*both(TRITON, functools.partial(fused_qk_rmsnorm_group_quant, backend="torch"), **kwargs))


def test_split_views_are_read_in_place():
    # DeepSeek-V4 splits fused_wqa_wkv's output into qr and kv views (row stride n1 + n2 + tail)
    m, n1, n2 = 4, 256, 64
    full = activations(m, n1 + n2 + 64, torch.bfloat16, seed=5)
    q, k, _ = full.split([n1, n2, 64], dim=1)
    res = activations(m, n1 + 128, torch.bfloat16, seed=6, zero_rows=False)[:, 128:]
    assert q.stride(0) == k.stride(0) == n1 + n2 + 64 and res.stride(0) == n1 + 128
    weights = norm_weight(n1 + n2, torch.bfloat16, seed=5)
    q_w, k_w = weights.split([n1, n2])
    for transpose in (False, True):
        kwargs = dict(q=q, q_weight=q_w, q_eps=1e-6, k=k, k_weight=k_w, residual=res, transpose_scale=transpose)
        torch_ref = functools.partial(fused_qk_rmsnorm_group_quant, backend="torch")
        assert_same_result(*both(TRITON, torch_ref, **kwargs, return_unquantized=True))
    ref = fused_reference(q, q_w, 1e-6, 128, FN, "aiter", residual=res)
    assert torch.equal(TRITON(q, q_w, 1e-6, k, k_w, residual=res).q_quant.data.view(torch.uint8), ref["data"])


def test_scale_bytes_follow_the_declared_order():
    # M > 1 and G > 1, so the two byte orders differ; the buffer claims (G, 1) strides either way
    case = make_case(m=3, n1=384, n2=None, seed=7)
    row = TRITON(**case.kwargs(transpose_scale=False)).q_quant
    col = TRITON(**case.kwargs(transpose_scale=True)).q_quant
    assert row.scale_layout is ScaleLayout.ROW_MAJOR and col.scale_layout is ScaleLayout.COL_MAJOR
    logical = row.scale.clone()
    check_scale_buffer(row.scale, logical.double(), ScaleLayout.ROW_MAJOR)
    check_scale_buffer(col.scale, logical.double(), ScaleLayout.COL_MAJOR)
    assert torch.equal(col.scale.view(-1), logical.t().reshape(-1))
    assert not torch.equal(row.scale.view(-1), col.scale.view(-1))


def test_nan_and_inf_flow_through_like_torch():
    case = make_case(m=5, n1=256, n2=128, seed=12, residual=True, fmt=FNUZ)
    q, k = case.q.clone(), case.k.clone()
    q[0, 5] = math.nan
    q[1, 200] = math.inf
    q[2, 7], q[2, 9] = math.inf, -math.inf
    k[3, 3] = math.nan
    case.q, case.k = q, k
    check_against_oracle(TRITON, case, transpose_scale=True)


def test_empty_batch():
    result = TRITON(torch.empty(0, 256, dtype=torch.bfloat16), torch.ones(256), 1e-6, transpose_scale=True)
    assert result.q_quant.data.shape == (0, 256) and result.q_quant.scale.shape == (0, 2)


def test_group_size_must_be_a_power_of_two():
    with pytest.raises(ValueError, match=r"group_size=96 is not a power of two.*backend='torch'"):
        TRITON(torch.ones(2, 192), torch.ones(192), 1e-6, group_size=96)


# --- the unfused Triton baseline ------------------------------------------------------------------


@pytest.mark.parametrize(("flavor", "fmt"), [("aiter", FN), ("vllm", FNUZ), ("deepseek", FNUZ)])
def test_unfused_matches_torch_unfused(flavor, fmt):
    case = make_case(m=4, n1=256, n2=64, seed=31, residual=True, fmt=fmt, flavor=flavor)
    kwargs = case.kwargs(transpose_scale=True, return_unquantized=True)
    assert_same_result(*both(triton_norm_then_quant, norm_then_quant, **kwargs))
    check_against_oracle(triton_norm_then_quant, case, True, round_to=torch.bfloat16, producer="norm_then_quant")


@pytest.mark.parametrize("transpose", [False, True], ids=["row", "col"])
def test_v4_unfused_quantizes_the_same_bf16_twice(transpose):
    case = make_case(m=3, n1=256, n2=128, seed=33)
    args = (case.q, case.q_weight, 1e-6, case.k, case.k_weight)
    ours = triton_norm_then_quant_for_v4(*args, transpose_scale=transpose)
    ref = norm_then_quant_for_v4(*args, transpose_scale=transpose)
    for a, b in ((ours.q_for_wq_b, ref.q_for_wq_b), (ours.q_for_indexer, ref.q_for_indexer)):
        assert a.producer == b.producer and a.scale_layout is b.scale_layout
        assert torch.equal(a.data.view(torch.uint8), b.data.view(torch.uint8))
        assert torch.equal(a.scale.view(torch.int32), b.scale.view(torch.int32))
    assert ours.q_for_wq_b.data.data_ptr() != ours.q_for_indexer.data.data_ptr()
    assert_bits_equal(ours.k_normed, ref.k_normed.double(), "k_normed")
    assert_bits_equal(ours.q_bf16, ref.q_bf16.double(), "q_bf16")


def test_rows_of_extreme_finite_values_match_torch():
    # the float64 sum of squares at its edges (subnormal inputs, squares beyond fp32's range, fp32 sums
    # with a residual; see nq_cases.extreme_rows) gives torch's bytes
    q, residual = extreme_rows(256, torch.device("cpu"))
    weight = norm_weight(256, torch.bfloat16, seed=8)
    torch_ref = functools.partial(fused_qk_rmsnorm_group_quant, backend="torch")
    for eps in (1e-6, 1e-30):  # (eps = 0 on the zero row makes NaNs, whose sign x86 and GPUs disagree on)
        for res in (None, residual):
            kwargs = dict(q=q, q_weight=weight, q_eps=eps, residual=res, return_unquantized=True)
            assert_same_result(*both(TRITON, torch_ref, **kwargs))


# --- the conversions --------------------------------------------------------------------------------


def _probe_values() -> torch.Tensor:
    return conversion_probe_values(2000, (-14, 10))


@pytest.mark.parametrize("fmt", [FN, FNUZ], ids=["fn", "fnuz"])
def test_integer_conversions_round_like_torch(fmt):
    x = _probe_values()
    fp8, bf16 = support.convert_values(x, fnuz=fmt == FNUZ, soft=True)
    expected = x.to(fmt).view(torch.uint8)
    nan_byte = (lambda b: b == 0x80) if fmt == FNUZ else (lambda b: (b & 0x7F) == 0x7F)
    bad = (fp8 != expected) & ~(nan_byte(fp8) & nan_byte(expected))
    assert not bad.any(), f"{int(bad.sum())} fp8 bytes differ, first at value {x[bad][0].item()!r}"
    assert_bits_equal(bf16, x.double(), "bf16")


# --- several rows per program ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("block_m", "warps", "k_with_q", "short_chain"),
    [(2, 2, False, False), (4, 4, False, True), (1, 1, True, False), (2, 2, True, True)],
)
def test_several_rows_per_program_with_a_partial_last_block(block_m, warps, k_with_q, short_chain):
    # tiny M never makes the heuristic put several rows in one program; force it, with M = 5 so the
    # last program has masked rows
    from mla_debug.gpu.normquant import launch as nq_launch
    from mla_debug.normquant._inputs import validate_inputs

    case = make_case(m=5, n1=256, n2=64, seed=41, residual=True, fmt=FNUZ, flavor="deepseek")
    config = support.RowLaunch(block_m, warps, k_with_q, short_chain)
    for transpose in (False, True):
        args = validate_inputs(
            "fused_qk_rmsnorm_group_quant", case.q, case.q_weight, 1e-6, case.k, case.k_weight, None, case.residual,
            128, transpose, "e4m3fnuz", "deepseek", False,
        )  # fmt: skip
        outs = nq_launch.allocate_outputs(args, return_unquantized=True)
        outs.q_bytes.fill_(0xFF)
        outs.scale.fill_(math.nan)
        nq_launch.make_launch(args, outs, config)()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ref = fused_qk_rmsnorm_group_quant(**case.kwargs(transpose_scale=transpose, return_unquantized=True))
        assert torch.equal(outs.q_bytes, ref.q_quant.data.view(torch.uint8))
        assert torch.equal(outs.scale.view(torch.int32), ref.q_quant.scale.view(torch.int32))
        assert int(outs.overflow_counter.item()) == ref.q_quant.overflow_count > 0
        for name in ("k_out", "q_unquantized", "residual_sum"):
            other = {"k_out": "k_normed"}.get(name, name)
            assert_bits_equal(getattr(outs, name), getattr(ref, other).double(), name)

        v4_args = validate_inputs(
            "norm_then_quant_for_v4", case.q, case.q_weight, 1e-6, case.k, case.k_weight, None, None, 128, transpose,
            "e4m3fnuz", "deepseek", False,
        )  # fmt: skip
        launch, norm, quants = nq_launch.make_v4_launch(v4_args, config)
        launch()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ref_v4 = norm_then_quant_for_v4(case.q, case.q_weight, 1e-6, case.k, case.k_weight, transpose_scale=transpose,
                                            fmt="e4m3fnuz", flavor="deepseek")  # fmt: skip
        assert_bits_equal(norm.q_normed, ref_v4.q_bf16.double(), "q_bf16")
        assert_bits_equal(norm.k_out, ref_v4.k_normed.double(), "k_normed")
        for out in quants:
            assert torch.equal(out.scale.view(torch.int32), ref_v4.q_for_wq_b.scale.view(torch.int32))
            assert torch.equal(out.q_bytes, ref_v4.q_for_wq_b.data.view(torch.uint8))

        # the norm kernel's residual branch, several rows per program
        norm = nq_launch.allocate_norm(args)
        nq_launch.make_norm_launch(args, norm, config)()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ref_unfused = norm_then_quant(**case.kwargs(transpose_scale=transpose, return_unquantized=True))
        assert_bits_equal(norm.q_normed, ref_unfused.q_unquantized.double(), "q normed")
        assert_bits_equal(norm.residual_sum, ref_unfused.residual_sum.double(), "residual_sum")
