"""The compiled Triton norm + quant kernels on a CUDA GPU, bit for bit against the torch backend there.

DeepSeek-V4 shapes (Flash qr/kv 1024/512, Pro 1536/512), M in {1, 3, 64, 1000}, normal and outlier
data, fresh random inputs for every call, and output buffers poisoned (NaN / 0xFF) before every launch,
so an element the kernel forgets to write cannot pass. Reference: the torch backend on the same GPU,
whose fnuz bytes come from torch's own ``.to(torch.float8_e4m3fnuz)``.

Both sides round the same way (fp64 sum of squares rounded once to fp32, correctly rounded sqrt,
reciprocal and quotient), so scales and bytes are expected equal. The one theoretical source of
difference is the fp64 sum: torch and Triton add in different orders, which moves the fp64 sum by an
ulp or so; that changes the fp32 mean only if it lies within ~2^-29 (relative) of an fp32 rounding
midpoint, about one row in 10^8. The counts of differing bytes are printed and asserted zero.

No hypothesis here: the GPU image does not have it.
"""

from __future__ import annotations

import functools
import warnings

import pytest
import torch
from nq_cases import extreme_rows
from nq_oracle import conversion_probe_values

from mla_debug.normquant import (
    fused_qk_rmsnorm_group_quant,
    norm_then_quant,
    norm_then_quant_for_v4,
    triton_norm_then_quant,
    triton_norm_then_quant_for_v4,
)
from mla_debug.normquant._inputs import validate_inputs

pytestmark = pytest.mark.gpu

OP = "fused_qk_rmsnorm_group_quant"
SHAPES = [(1024, 512), (1536, 512)]
SHAPE_IDS = ["v4flash-1024-512", "v4pro-1536-512"]
MS = [1, 3, 64, 1000]
FN, FNUZ = torch.float8_e4m3fn, torch.float8_e4m3fnuz
TORCH = functools.partial(fused_qk_rmsnorm_group_quant, backend="torch")
TRITON = functools.partial(fused_qk_rmsnorm_group_quant, backend="triton")


def _support():
    from mla_debug.gpu.normquant import support

    why = support.triton_unavailable_reason(torch.device("cuda"))
    if why is not None or support.interpreting():
        pytest.skip(f"compiled Triton not usable: {why or 'TRITON_INTERPRET is on'}")
    return support


def qkv_inputs(m: int, n1: int, n2: int, seed: int, outliers: bool, residual: bool = False) -> dict:
    """qr and kv as torch.split views of one (M, n1 + n2 + 64) bf16 tensor, weights near 1, optionally
    a residual view; `outliers`: a few huge values, a tiny row, a zero group and a zero row."""
    gen = torch.Generator(device="cuda").manual_seed(seed)
    full = torch.randn(m, n1 + n2 + 64, generator=gen, device="cuda", dtype=torch.float32)
    if outliers:
        spikes = torch.rand(full.shape, generator=gen, device="cuda") < 0.002
        full = torch.where(spikes, full * 3000.0, full)
        full[::7] *= 1e-3
        full[:, :128][1::5] = 0.0
        if m > 2:
            full[2] = 0.0
    full = full.to(torch.bfloat16)
    q, k, _ = full.split([n1, n2, 64], dim=1)
    w = (1.0 + 0.3 * torch.randn(n1 + n2, generator=gen, device="cuda")).to(torch.bfloat16)
    q_w, k_w = w.split([n1, n2])
    kwargs = dict(q=q, q_weight=q_w, q_eps=1e-6, k=k, k_weight=k_w)
    if residual:
        res_full = torch.randn(m, n1 + 32, generator=gen, device="cuda").to(torch.bfloat16)
        kwargs["residual"] = res_full[:, 32:]
    return kwargs


def is_nan_byte(b: torch.Tensor, fmt: torch.dtype) -> torch.Tensor:
    return (b == 0x80) if fmt == FNUZ else ((b & 0x7F) == 0x7F)


def differing_bytes(a: torch.Tensor, b: torch.Tensor, fmt: torch.dtype) -> int:
    """fp8 bytes that differ, any NaN byte matching any NaN byte (e4m3fn has two)."""
    a, b = a.view(torch.uint8), b.view(torch.uint8)
    return int(((a != b) & ~(is_nan_byte(a, fmt) & is_nan_byte(b, fmt))).sum())


def ulps(a: torch.Tensor, b: torch.Tensor) -> int:
    """Largest distance in ulps of their (common) dtype, via ordered bit patterns; NaN must be at the
    same places and is not measured."""
    assert a.dtype == b.dtype and a.shape == b.shape
    assert torch.equal(torch.isnan(a), torch.isnan(b)), "NaN positions differ"
    as_int, sign_off = (torch.int32, 0x7FFFFFFF) if a.element_size() == 4 else (torch.int16, 0x7FFF)
    ia, ib = a.view(as_int).to(torch.int64), b.view(as_int).to(torch.int64)
    ia = torch.where(ia < 0, -(ia & sign_off), ia)
    ib = torch.where(ib < 0, -(ib & sign_off), ib)
    d = (ia - ib).abs()[~torch.isnan(a)]
    return int(d.max()) if d.numel() else 0


def compare(label: str, ours, ref, fmt: torch.dtype) -> None:
    qa, qr = ours.q_quant, ref.q_quant
    scale_bits = qa.scale.view(torch.int32) != qr.scale.view(torch.int32)
    scale_bits &= ~(torch.isnan(qa.scale) & torch.isnan(qr.scale))
    n_scale, n_bytes = int(scale_bits.sum()), differing_bytes(qa.data, qr.data, fmt)
    k_ulps = 0 if ours.k_normed is None else ulps(ours.k_normed, ref.k_normed)
    k_exact = (
        0 if ours.k_normed is None else int((ours.k_normed.view(torch.int16) != ref.k_normed.view(torch.int16)).sum())
    )
    print(
        f"{label}: scales differing {n_scale}, fp8 bytes differing {n_bytes}, k differing {k_exact} (max {k_ulps} ulp)"
    )
    assert qa.scale_layout is qr.scale_layout and qa.scale.stride() == qr.scale.stride()
    assert qa.overflow_count == qr.overflow_count
    assert n_scale == 0, f"{label}: {n_scale} scales differ"
    assert n_bytes == 0, f"{label}: {n_bytes} fp8 bytes differ"
    assert k_ulps <= 1, f"{label}: k differs by {k_ulps} ulps"
    for name in ("q_unquantized", "residual_sum"):
        x, y = getattr(ours, name), getattr(ref, name)
        assert (x is None) == (y is None)
        if x is not None:
            assert ulps(x, y) <= 1, name


@pytest.mark.parametrize("m", MS)
@pytest.mark.parametrize(("n1", "n2"), SHAPES, ids=SHAPE_IDS)
@pytest.mark.parametrize("outliers", [False, True], ids=["normal", "outliers"])
def test_fused_bitwise_vs_torch_backend_poisoned_outputs(n1, n2, m, outliers):
    _support()
    from mla_debug.gpu.normquant import launch as nq_launch

    for i, transpose in enumerate((False, True)):
        kwargs = qkv_inputs(m, n1, n2, seed=1000 * m + 10 * i + outliers, outliers=outliers, residual=i == 1)
        args = validate_inputs(
            OP, kwargs["q"], kwargs["q_weight"], 1e-6, kwargs["k"], kwargs["k_weight"], None, kwargs.get("residual"),
            128, transpose, "e4m3fn", "aiter", False,
        )  # fmt: skip
        outs = nq_launch.allocate_outputs(args, return_unquantized=True)
        outs.q_bytes.fill_(0xFF)
        outs.scale.fill_(float("nan"))
        for t in (outs.k_out, outs.q_unquantized, outs.residual_sum):
            if t is not None:
                t.fill_(float("nan"))
        nq_launch.make_launch(args, outs)()
        torch.cuda.synchronize()
        ref = TORCH(**kwargs, transpose_scale=transpose, return_unquantized=True)
        assert not torch.isnan(outs.scale).any(), "a scale was left unwritten"
        assert bool((outs.q_bytes == ref.q_quant.data.view(torch.uint8)).all()), (
            f"{differing_bytes(outs.q_bytes, ref.q_quant.data, FN)} fp8 bytes differ"
        )
        assert torch.equal(outs.scale.view(torch.int32), ref.q_quant.scale.view(torch.int32))
        assert ulps(outs.k_out, ref.k_normed) <= 1 and ulps(outs.q_unquantized, ref.q_unquantized) <= 1
        if outs.residual_sum is not None:
            assert torch.equal(outs.residual_sum.view(torch.int16), ref.residual_sum.view(torch.int16))
        # and through the public API, which allocates its own outputs
        label = f"M={m} {n1}/{n2} {'col' if transpose else 'row'}"
        compare(label, TRITON(**kwargs, transpose_scale=transpose), TORCH(**kwargs, transpose_scale=transpose), FN)


@pytest.mark.parametrize("flavor", ["aiter", "vllm", "deepseek"])
@pytest.mark.parametrize("fmt", ["e4m3fn", "e4m3fnuz"])
def test_every_flavor_and_format_bitwise(flavor, fmt):
    # e4m3fnuz has no NVIDIA type: the kernel emulates it, the torch backend uses torch's own cast;
    # deepseek on e4m3fnuz overflows to NaN (counted on both sides)
    _support()
    dtype = FNUZ if fmt == "e4m3fnuz" else FN
    for m, outliers in ((3, True), (1000, False), (1000, True)):
        kwargs = qkv_inputs(m, 1536, 512, seed=7 * m + outliers, outliers=outliers, residual=True)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ours = TRITON(**kwargs, fmt=fmt, flavor=flavor, transpose_scale=True, return_unquantized=True)
            ref = TORCH(**kwargs, fmt=fmt, flavor=flavor, transpose_scale=True, return_unquantized=True)
        compare(f"{flavor}/{fmt} M={m} outliers={outliers}", ours, ref, dtype)


@pytest.mark.parametrize(
    ("block_m", "warps", "k_with_q", "short_chain"),
    [(2, 4, False, False), (4, 8, False, True), (8, 16, False, False), (1, 1, True, False), (1, 2, True, True)],
)
@pytest.mark.parametrize(("n1", "n2"), SHAPES, ids=SHAPE_IDS)
def test_several_rows_per_program(n1, n2, block_m, warps, k_with_q, short_chain):
    # the heuristic puts several rows in a program only for large M; force it at M = 1001 (a partial
    # last block), poisoned outputs, for the fused kernel and the three unfused launches
    support = _support()
    from mla_debug.gpu.normquant import launch as nq_launch

    config = support.RowLaunch(block_m, warps, k_with_q, short_chain)
    kwargs = qkv_inputs(1001, n1, n2, seed=block_m, outliers=True)
    args = validate_inputs(OP, kwargs["q"], kwargs["q_weight"], 1e-6, kwargs["k"], kwargs["k_weight"], None, None,
                           128, True, "e4m3fn", "aiter", False)  # fmt: skip
    outs = nq_launch.allocate_outputs(args, True)
    outs.q_bytes.fill_(0xFF)
    outs.scale.fill_(float("nan"))
    outs.k_out.fill_(float("nan"))
    nq_launch.make_launch(args, outs, config)()
    ref = TORCH(**kwargs, transpose_scale=True, return_unquantized=True)
    assert differing_bytes(outs.q_bytes, ref.q_quant.data, FN) == 0
    assert torch.equal(outs.scale.view(torch.int32), ref.q_quant.scale.view(torch.int32))
    assert ulps(outs.k_out, ref.k_normed) <= 1 and ulps(outs.q_unquantized, ref.q_unquantized) <= 1
    launch, norm, quants = nq_launch.make_v4_launch(args, config)
    for out in quants:
        out.q_bytes.fill_(0xFF)
    launch()
    ref_v4 = norm_then_quant_for_v4(**kwargs, transpose_scale=True)
    assert torch.equal(norm.q_normed.view(torch.int16), ref_v4.q_bf16.view(torch.int16))
    for out in quants:
        assert differing_bytes(out.q_bytes, ref_v4.q_for_wq_b.data, FN) == 0
        assert torch.equal(out.scale.view(torch.int32), ref_v4.q_for_wq_b.scale.view(torch.int32))


@pytest.mark.parametrize("m", [1, 64])
def test_widest_rows(m):
    # 8192-wide rows: one row per program, the largest register tile the heuristic makes
    _support()
    kwargs = qkv_inputs(m, 8192, 8192, seed=m, outliers=True, residual=True)
    compare(f"8192/8192 M={m}", TRITON(**kwargs, return_unquantized=True), TORCH(**kwargs, return_unquantized=True), FN)


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32], ids=["fp16", "fp32"])
def test_other_activation_dtypes_and_gemma(dtype):
    _support()
    kwargs = qkv_inputs(64, 1024, 512, seed=5, outliers=True, residual=True)
    kwargs = {key: (v.to(dtype) if key in ("q", "k", "residual") else v) for key, v in kwargs.items()}
    ours = TRITON(**kwargs, gemma_norm=True, return_unquantized=True)
    ref = TORCH(**kwargs, gemma_norm=True, return_unquantized=True)
    compare(f"{dtype} gemma", ours, ref, FN)


def test_hardware_conversions_equal_the_integer_ones_and_torch():
    # the conversions the compiled kernels use (cvt.rn.satfinite) against the integer path the
    # interpreter tests check, and against torch's CUDA casts
    support = _support()
    x = conversion_probe_values(1 << 20, (-20, 12)).cuda()
    for dtype in (FN, FNUZ):
        hard, hard_bf16 = support.convert_values(x, fnuz=dtype == FNUZ, soft=False)
        soft, soft_bf16 = support.convert_values(x, fnuz=dtype == FNUZ, soft=True)
        torch_bytes = x.to(dtype).view(torch.uint8)
        # Beyond the format's range torch's CUDA cast gives NaN where cvt.satfinite saturates; the kernels
        # clamp to +-max before converting, so only values that round into range are compared with torch.
        top = 464.0 if dtype == FN else 248.0
        in_range = ~(x.abs() >= top)  # keeps NaN
        counts = (
            differing_bytes(hard, soft, dtype),
            differing_bytes(hard.view(torch.uint8)[in_range], torch_bytes[in_range], dtype),
        )
        print(f"{dtype}: hardware vs integer {counts[0]}, hardware vs torch {counts[1]} of {int(in_range.sum())}")
        assert counts == (0, 0)
        assert ulps(hard_bf16, soft_bf16) == 0 and ulps(hard_bf16, x.to(torch.bfloat16)) == 0


@pytest.mark.parametrize(("n1", "n2"), SHAPES, ids=SHAPE_IDS)
def test_rows_of_extreme_finite_values(n1, n2):
    # the float64 sum of squares at its edges, at V4 widths (see nq_cases.extreme_rows)
    _support()
    q, residual = extreme_rows(n1 + n2, torch.device("cuda"))
    w = (1.0 + 0.3 * torch.randn(n1 + n2, device="cuda")).to(torch.bfloat16)
    for eps in (1e-6, 1e-30):
        for res in (None, residual[:, :n1]):
            kwargs = dict(
                q=q[:, :n1],
                q_weight=w[:n1],
                q_eps=eps,
                k=q[:, n1:],
                k_weight=w[n1:],
                residual=res,
                return_unquantized=True,
            )
            compare(f"extreme rows eps={eps} residual={res is not None}", TRITON(**kwargs), TORCH(**kwargs), FN)


def test_soft_conversion_kernel_matches_hardware_kernel():
    _support()
    from mla_debug.gpu.normquant import launch as nq_launch

    kwargs = qkv_inputs(1000, 1536, 512, seed=11, outliers=True)
    for fmt in ("e4m3fn", "e4m3fnuz"):
        args = validate_inputs(OP, kwargs["q"], kwargs["q_weight"], 1e-6, kwargs["k"], kwargs["k_weight"], None, None,
                               128, True, fmt, "aiter", False)  # fmt: skip
        hard, soft = (nq_launch.allocate_outputs(args, True) for _ in range(2))
        nq_launch.make_launch(args, hard, soft_cvt=False)()
        nq_launch.make_launch(args, soft, soft_cvt=True)()
        for name in ("q_bytes", "scale", "k_out", "q_unquantized"):
            a, b = getattr(hard, name), getattr(soft, name)
            assert torch.equal(a.view(torch.uint8), b.view(torch.uint8)), f"{fmt}: {name}"


@pytest.mark.parametrize("m", [1, 64, 1000])
def test_unfused_triton_bitwise_vs_torch_unfused(m):
    _support()
    kwargs = qkv_inputs(m, 1024, 512, seed=3 * m, outliers=True)
    ours = triton_norm_then_quant_for_v4(**kwargs, transpose_scale=True)
    ref = norm_then_quant_for_v4(**kwargs, transpose_scale=True)
    for a, b in ((ours.q_for_wq_b, ref.q_for_wq_b), (ours.q_for_indexer, ref.q_for_indexer)):
        assert differing_bytes(a.data, b.data, FN) == 0
        assert torch.equal(a.scale.view(torch.int32), b.scale.view(torch.int32))
    assert torch.equal(ours.q_bf16.view(torch.int16), ref.q_bf16.view(torch.int16))
    assert ulps(ours.k_normed, ref.k_normed) <= 1
    kwargs = qkv_inputs(m, 1536, 512, seed=3 * m + 1, outliers=False, residual=True)
    compare(
        f"unfused M={m}",
        triton_norm_then_quant(**kwargs, fmt="e4m3fnuz", return_unquantized=True),
        norm_then_quant(**kwargs, fmt="e4m3fnuz", return_unquantized=True),
        FNUZ,
    )


def test_launch_replays_in_a_cuda_graph():
    _support()
    from mla_debug.gpu.normquant import launch as nq_launch

    kwargs = qkv_inputs(64, 1536, 512, seed=9, outliers=False)
    args = validate_inputs(OP, kwargs["q"], kwargs["q_weight"], 1e-6, kwargs["k"], kwargs["k_weight"], None, None,
                           128, True, "e4m3fn", "aiter", False)  # fmt: skip
    outs = nq_launch.allocate_outputs(args, False)
    fused = nq_launch.make_launch(args, outs)
    v4, norm_outs, quant_outs = nq_launch.make_v4_launch(args)
    fused()
    v4()  # compile outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fused()
        v4()
    outs.q_bytes.zero_()
    quant_outs[1].q_bytes.zero_()
    graph.replay()
    torch.cuda.synchronize()
    ref = TORCH(**kwargs, transpose_scale=True)
    assert torch.equal(outs.q_bytes, ref.q_quant.data.view(torch.uint8))
    unfused_ref = norm_then_quant_for_v4(**kwargs, transpose_scale=True)
    assert torch.equal(quant_outs[1].q_bytes, unfused_ref.q_for_indexer.data.view(torch.uint8))
    assert torch.equal(norm_outs.q_normed.view(torch.int16), unfused_ref.q_bf16.view(torch.int16))


def test_auto_picks_triton_for_cuda_tensors():
    _support()
    from mla_debug.normquant import resolve_backend

    assert resolve_backend("auto", torch.device("cuda")) == "triton"
