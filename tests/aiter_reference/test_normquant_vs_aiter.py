"""aiter's Triton ``fused_rms_fp8_group_quant`` (through our "aiter-triton" backend) against our fused
RMSNorm + group quant ("torch" backend, flavor "aiter-fused"), both scale orders, both fp8 formats.

The one arithmetic difference is the sum of squares: aiter sums in fp32 (a tree or pairwise order), we
sum in float64 and round once. Where that sum is exact in fp32 - inputs that are multiples of 2^-3 below
4 in magnitude, whose squares and partial sums all fit in 24 bits - the two agree bit for bit in every
output. Elsewhere the fp32 sum is within n u of the exact one (u = 2^-24, n the row width), the mean and
rsqrt round once each on both sides, so the normalized values, and with them each group's scale, differ
relatively by at most (n / 2 + 8) u; an fp8 byte then moves by at most one code and a bf16 output by at
most one ulp. Residual sums involve no reduction and always agree exactly.
"""

from __future__ import annotations

import pytest
import torch
from aiter_ref import assert_same_bits, require_aiter, triton_device, triton_semantics

import mla_debug as md
from mla_debug.normquant import fused_qk_rmsnorm_group_quant

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

U = 2.0**-24
FORMATS = [torch.float8_e4m3fn, torch.float8_e4m3fnuz]


def exact_rows(m: int, n: int, gen: torch.Generator) -> torch.Tensor:
    """Multiples of 2^-3 in (-4, 4): squares and every partial sum of a row are exact in fp32."""
    return (torch.randint(-31, 32, (m, n), generator=gen).float() / 8).to(torch.bfloat16)


def random_rows(m: int, n: int, gen: torch.Generator) -> torch.Tensor:
    scale = 10.0 ** torch.randint(-3, 3, (m, 1), generator=gen).float()
    return (torch.randn(m, n, generator=gen) * scale).to(torch.bfloat16)


def weights(n: int, gen: torch.Generator) -> torch.Tensor:
    return torch.exp2(torch.randint(-2, 3, (n,), generator=gen).float()).to(torch.bfloat16)


def both(device, q, qw, k, kw, residual, fmt, transpose):
    """(aiter's result, ours) for the same call."""
    kwargs = dict(
        q=q.to(device),
        q_weight=qw.to(device),
        q_eps=1e-6,
        k=None if k is None else k.to(device),
        k_weight=None if kw is None else kw.to(device),
        residual=None if residual is None else residual.to(device),
        transpose_scale=transpose,
        fmt=fmt,
        flavor="aiter-fused",
        return_unquantized=True,
    )
    with triton_semantics():
        theirs = fused_qk_rmsnorm_group_quant(**kwargs, backend="aiter-triton")
    return theirs, fused_qk_rmsnorm_group_quant(**kwargs, backend="torch")


def check_layout(result, transpose: bool) -> None:
    qa = result.q_quant
    assert qa.scale_layout is (md.ScaleLayout.COL_MAJOR if transpose else md.ScaleLayout.ROW_MAJOR)
    m, g = qa.scale.shape
    # aiter's transposed result: shape (M, G) and row-major strides over column-major bytes
    assert qa.scale.stride() == (g, 1)


@pytest.mark.parametrize("fmt", FORMATS, ids=["fn", "fnuz"])
@pytest.mark.parametrize("transpose", [False, True], ids=["row", "col"])
@pytest.mark.parametrize("residual", [False, True], ids=["plain", "residual"])
def test_exact_sums_agree_bit_for_bit(fmt, transpose, residual):
    require_aiter()
    device = triton_device()
    if device.type == "cuda":
        pytest.skip("compiled on a GPU (approximate rsqrt and `/`) this runs in test_aiter_gpu.py")
    gen = torch.Generator().manual_seed(1 + transpose + 2 * residual)
    q, k = exact_rows(5, 512, gen), exact_rows(5, 128, gen)
    res = exact_rows(5, 512, gen) if residual else None
    theirs, ours = both(device, q, weights(512, gen), k, weights(128, gen), res, fmt, transpose)
    check_layout(theirs, transpose)
    assert theirs.q_quant.producer == "fused_qk_rmsnorm_group_quant (aiter Triton fused_rms_fp8_group_quant)"
    assert_same_bits(theirs.q_quant.data, ours.q_quant.data, "q fp8")
    assert_same_bits(theirs.q_quant.scale, ours.q_quant.scale, "q scale buffer")
    for name in ("q_unquantized", "k_normed", "residual_sum"):
        a, b = getattr(theirs, name), getattr(ours, name)
        assert (a is None) == (b is None), name
        if a is not None:
            assert_same_bits(a, b, name)


def _fp8_steps(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """How many codes apart two fp8 tensors are (same sign: the magnitude bytes' difference)."""
    ab, bb = a.view(torch.uint8).int(), b.view(torch.uint8).int()
    sign_a, sign_b = ab & 0x80, bb & 0x80
    magnitude = ((ab & 0x7F) - (bb & 0x7F)).abs()
    return torch.where(sign_a == sign_b, magnitude, (ab & 0x7F) + (bb & 0x7F))


def _bf16_ulps(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return (a.view(torch.int16).int() - b.view(torch.int16).int()).abs()


@pytest.mark.parametrize("fmt", FORMATS, ids=["fn", "fnuz"])
@pytest.mark.parametrize("transpose", [False, True], ids=["row", "col"])
@pytest.mark.parametrize("n", [256, 1536])
def test_random_rows_within_the_fp32_sum_bound(fmt, transpose, n):
    require_aiter()
    device = triton_device()
    if device.type == "cuda":
        pytest.skip("compiled on a GPU (approximate rsqrt and `/`) this runs in test_aiter_gpu.py")
    gen = torch.Generator().manual_seed(n + transpose)
    q, k, res = random_rows(6, n, gen), random_rows(6, 128, gen), random_rows(6, n, gen)
    theirs, ours = both(device, q, weights(n, gen), k, weights(128, gen), res, fmt, transpose)
    check_layout(theirs, transpose)
    a, b = theirs.q_quant.logical_scale().cpu().double(), ours.q_quant.logical_scale().cpu().double()
    assert ((a - b).abs() <= b * (n / 2 + 8) * U).all(), "a group's scale beyond the fp32-sum bound"
    assert _fp8_steps(theirs.q_quant.data.cpu(), ours.q_quant.data.cpu()).max() <= 1
    assert _bf16_ulps(theirs.q_unquantized.cpu(), ours.q_unquantized.cpu()).max() <= 1
    assert _bf16_ulps(theirs.k_normed.cpu(), ours.k_normed.cpu()).max() <= 1
    assert_same_bits(theirs.residual_sum, ours.residual_sum, "residual sum")


def test_what_aiters_op_cannot_do_is_refused():
    require_aiter()
    device = triton_device()
    gen = torch.Generator().manual_seed(0)
    q, qw = exact_rows(2, 256, gen).to(device), weights(256, gen).to(device)
    with pytest.raises(ValueError, match="flavor='aiter-hip'.*'aiter-fused'"):
        fused_qk_rmsnorm_group_quant(q, qw, 1e-6, flavor="aiter-hip", backend="aiter-triton")
    with pytest.raises(ValueError, match="no gemma_norm"):
        fused_qk_rmsnorm_group_quant(q, qw, 1e-6, gemma_norm=True, backend="aiter-triton")
    k = exact_rows(2, 128, gen).to(device).float()
    with pytest.raises(TypeError, match="writes k in q's dtype"):
        fused_qk_rmsnorm_group_quant(q, qw, 1e-6, k, weights(128, gen).to(device), backend="aiter-triton")
    empty = fused_qk_rmsnorm_group_quant(q[:0], qw, 1e-6, return_unquantized=True, backend="aiter-triton")
    assert empty.q_quant.data.shape == (0, 256) and empty.q_unquantized.shape == (0, 256)
