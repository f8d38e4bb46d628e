"""GPU checks (marked gpu; skipped without CUDA): cuBLAS scaled_mm blockwise and the emulations on CUDA.

cuBLAS enforces the column-major activation-scale contract through strides - the loud counterpart of
aiter's silent one: a ROW_MAJOR buffer, and equally a COL_MAJOR "view" buffer with row-major strides,
must be rejected with an error naming the layer, while COL_MAJOR_STRIDED must give the reference result.
"""

from __future__ import annotations

import pytest
import torch
from helpers import accumulation_bound, assert_within_accumulation_bound, random_tokens, random_weight

import mla_debug as md

pytestmark = pytest.mark.gpu

SHAPES = [(256, 512), (3072, 1536), (7168, 2048), (2112, 7168)]


def on_cuda(weight: md.QuantizedWeight) -> md.QuantizedWeight:
    return md.QuantizedWeight(weight.data.cuda(), weight.scale.cuda(), weight.fmt)


def to_cpu(qa: md.QuantizedActivation) -> md.QuantizedActivation:
    return md.QuantizedActivation(qa.data.cpu(), qa.scale.cpu(), qa.scale_layout, qa.fmt)


@pytest.mark.parametrize("n,k", SHAPES)
@pytest.mark.parametrize("m", [1, 3, 16, 17, 128, 1000])  # cuBLAS needs M % 4 == 0: the adapter pads
def test_cublas_matches_reference_with_col_major_strided_scales(m, n, k, gen):
    weight = random_weight(n, k, gen)
    lin = md.kernels.BlockScaledLinear("proj", on_cuda(weight)).attach(md.get_kernel("cublas-blockwise"))
    x = random_tokens(m, k, gen).cuda()
    call = lin.run(x)
    assert call.input.scale_layout is md.ScaleLayout.COL_MAJOR_STRIDED
    if m > 1:
        assert call.input.scale.stride() == (1, m)
    out = call.output.cpu()
    assert out.shape == (m, n) and torch.isfinite(out).all()
    qa = to_cpu(call.input)
    reference = md.kernels.BlockScaledLinear("proj", weight).attach(md.get_kernel("torch-reference"))(qa)
    assert_within_accumulation_bound(out, reference, accumulation_bound(qa, weight))


@pytest.mark.parametrize("m", [1, 16])
@pytest.mark.parametrize("written", [md.ScaleLayout.ROW_MAJOR, md.ScaleLayout.COL_MAJOR])
def test_cublas_rejects_row_major_strides_loudly(written, m, gen):
    """Even at M=1, where the bytes coincide, a row-major-strided scale is refused (never padded)."""
    weight = random_weight(256, 512, gen)
    lin = md.kernels.BlockScaledLinear("q_b_proj", on_cuda(weight)).attach(md.get_kernel("cublas-blockwise"))
    qa = md.quantize_groups(random_tokens(m, 512, gen).cuda(), scale_layout=written)
    with pytest.raises(ValueError, match=r"q_b_proj: cublas-blockwise rejected .*strides \(4, 1\) written"):
        lin(qa)


def test_quantizers_agree_bitwise_on_cpu_and_gpu(gen):
    for fmt in (md.E4M3FN, md.E4M3FNUZ):
        x = random_tokens(64, 1024, gen)
        cpu = md.quantize_groups(x, fmt=fmt)
        gpu = md.quantize_groups(x.cuda(), fmt=fmt)
        assert torch.equal(cpu.data.view(torch.uint8), gpu.data.cpu().view(torch.uint8))
        assert torch.equal(cpu.scale, gpu.scale.cpu())
        w = torch.randn(384, 1024, generator=gen)
        assert torch.equal(
            md.layouts.quantize_blocks(w, fmt=fmt).scale, md.layouts.quantize_blocks(w.cuda(), fmt=fmt).scale.cpu()
        )


@pytest.mark.parametrize("kernel", ["aiter-blockscale", "aiter-bpreshuffle"])
def test_emulations_run_on_cuda_tensors(kernel, gen):
    weight = random_weight(3072, 1536, gen)
    gpu = md.kernels.BlockScaledLinear("proj", on_cuda(weight)).attach(md.get_kernel(kernel))
    cpu = md.kernels.BlockScaledLinear("proj", weight).attach(md.get_kernel(kernel))
    x = random_tokens(16, 1536, gen)
    call = gpu.run(x.cuda())
    qa = to_cpu(call.input)
    assert_within_accumulation_bound(call.output.cpu(), cpu(qa), accumulation_bound(qa, weight))


def test_policy_picks_cublas_on_a_cuda_machine():
    kernel, reason = md.scenario("nvidia-cublas").policy("h200").select("o_proj", 7168, 2048, "h200")
    assert kernel.name == "cublas-blockwise", reason
