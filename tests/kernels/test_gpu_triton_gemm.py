"""The compiled Triton GEMMs on a CUDA GPU (marked gpu; skipped without CUDA).

Against the fp32 reference of the same quantized operands within the bound of fp32 accumulation order
(`helpers.accumulation_bound`); exactly the emulation's documented wrong result when fed the other scale
order; plain and preshuffled variants bitwise equal when each reads its own layout. Every check uses
fresh random data, and the memory the output lands in is poisoned with NaN first, so a tile the kernel
forgot to write shows up.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from helpers import accumulation_bound, assert_within_accumulation_bound, random_tokens, random_weight

import mla_debug as md
from mla_debug.gpu import triton_env
from mla_debug.gpu.gemm.launcher import LaunchConfig, gluon_fits, launch_config, triton_block_scaled_mm

pytestmark = pytest.mark.gpu

SHAPES = [(256, 512), (3072, 1536), (4096, 512), (7168, 2048), (2112, 7168)]
MS = [1, 3, 16, 17, 128, 1000]


def poison_allocator() -> None:
    """Fill a large freed block with NaN, so torch.empty in the kernel launcher hands out NaN memory."""
    junk = torch.full((1 << 26,), float("nan"), device="cuda")
    del junk


def on_cuda(weight: md.QuantizedWeight) -> md.QuantizedWeight:
    return md.QuantizedWeight(weight.data.cuda(), weight.scale.cuda(), weight.fmt)


def to_cpu(qa: md.QuantizedActivation) -> md.QuantizedActivation:
    return md.QuantizedActivation(qa.data.cpu(), qa.scale.cpu(), qa.scale_layout, qa.fmt)


def gpu_linear(weight: md.QuantizedWeight, kernel: str, **options) -> md.kernels.BlockScaledLinear:
    return md.kernels.BlockScaledLinear("proj", on_cuda(weight)).attach(
        md.get_kernel(kernel, backend="triton", **options)
    )


def reference(weight: md.QuantizedWeight, qa: md.QuantizedActivation) -> torch.Tensor:
    return md.kernels.BlockScaledLinear("proj", weight).attach(md.get_kernel("torch-reference"))(qa)


@pytest.mark.parametrize("kernel", ["triton-blockscale", "triton-bpreshuffle"])
@pytest.mark.parametrize("n,k", SHAPES)
@pytest.mark.parametrize("m", MS)
def test_matches_the_fp32_reference(kernel, m, n, k, gen):
    weight = random_weight(n, k, gen)
    lin = gpu_linear(weight, kernel)
    poison_allocator()
    call = lin.run(random_tokens(m, k, gen).cuda())
    out = call.output.cpu()
    assert out.shape == (m, n) and torch.isfinite(out).all() and not call.violations
    qa = to_cpu(call.input)
    assert_within_accumulation_bound(out, reference(weight, qa), accumulation_bound(qa, weight))


@pytest.mark.parametrize("m", [1, 16, 1000])
def test_plain_and_preshuffled_agree_bitwise(m, gen):
    weight = random_weight(3072, 1536, gen)
    plain, shuffled = gpu_linear(weight, "triton-blockscale"), gpu_linear(weight, "triton-bpreshuffle")
    assert shuffled.weight.layout.shuffle_count == 1
    qa = md.quantize_groups(random_tokens(m, 1536, gen).cuda())
    poison_allocator()
    a = plain(qa)
    poison_allocator()
    assert torch.equal(a, shuffled(qa.presented_as("col_major")))


@pytest.mark.parametrize("m", [1, 16, 128])
def test_the_other_scale_order_gives_the_emulated_wrong_result(m, gen):
    weight = random_weight(2112, 7168, gen)
    lin = gpu_linear(weight, "triton-bpreshuffle")
    qa = md.quantize_groups(random_tokens(m, 7168, gen).cuda(), scale_layout="row_major")
    poison_allocator()
    call = lin.run(qa)
    assert [v.kind for v in call.violations] == [md.layouts.ViolationKind.SCALE_ORDER]
    emulated = md.kernels.BlockScaledLinear("proj", weight).attach(md.get_kernel("aiter-bpreshuffle"))(to_cpu(qa))
    # The products use the scales as READ (column-major bytes), so the bound is taken over those.
    as_read = md.layouts.read_scale(qa.scale.cpu(), md.ScaleLayout.COL_MAJOR)
    read = md.QuantizedActivation(qa.data.cpu(), as_read.contiguous(), md.ScaleLayout.ROW_MAJOR, qa.fmt)
    assert_within_accumulation_bound(call.output.cpu(), emulated, accumulation_bound(read, weight))
    right = lin(qa.presented_as("col_major")).cpu()
    if m == 1:
        assert torch.equal(call.output.cpu(), right)  # one token: the two orders are the same bytes
    else:
        assert (call.output.cpu() - right).abs().max() > 0


def test_e4m3fnuz_runs_through_the_exact_bf16_decode(gen):
    weight = random_weight(3072, 1536, gen, fmt=md.E4M3FNUZ)
    lin = gpu_linear(weight, "triton-blockscale")
    poison_allocator()
    call = lin.run(random_tokens(64, 1536, gen).cuda())
    assert call.input.fmt == md.E4M3FNUZ
    qa = to_cpu(call.input)
    assert_within_accumulation_bound(call.output.cpu(), reference(weight, qa), accumulation_bound(qa, weight))


@pytest.mark.parametrize("split_k", [1, 2, 8])
def test_every_tile_and_split_configuration_is_within_the_bound(split_k, gen):
    weight = on_cuda(random_weight(2112, 7168, gen))
    qa = md.quantize_groups(random_tokens(40, 7168, gen).cuda())
    expected = reference(md.QuantizedWeight(weight.data.cpu(), weight.scale.cpu(), weight.fmt), to_cpu(qa))
    bound = accumulation_bound(to_cpu(qa), md.QuantizedWeight(weight.data.cpu(), weight.scale.cpu(), weight.fmt))
    for bm, bn in ((16, 32), (64, 64), (128, 128)):
        config = LaunchConfig(bm, bn, 4, 3, 8, split_k)
        poison_allocator()
        out = triton_block_scaled_mm(
            qa.data, qa.scale, md.ScaleLayout.ROW_MAJOR, weight.data, weight.scale, 7168, config=config
        )
        assert_within_accumulation_bound(out.cpu(), expected, bound)
        if split_k > 1:  # the last split to finish adds the partials in split order: same bytes every time
            for _ in range(3):
                again = triton_block_scaled_mm(
                    qa.data, qa.scale, md.ScaleLayout.ROW_MAJOR, weight.data, weight.scale, 7168, config=config
                )
                assert torch.equal(again, out)


# Tiles of 16 rows (mma.sync), 32 (mma.sync, 8 warps), 64 and 128 (wgmma); 32- to 128-wide; split-K.
STAGING_CONFIGS = [
    LaunchConfig(16, 32, 4, 4, 8, 1),
    LaunchConfig(16, 64, 4, 6, 8, 8),
    LaunchConfig(32, 64, 8, 4, 8, 1),
    LaunchConfig(64, 64, 4, 6, 8, 2),
    LaunchConfig(64, 128, 4, 4, 8, 1),
    LaunchConfig(128, 128, 8, 3, 8, 1),
]


@pytest.mark.skipif(
    not torch.cuda.is_available() or not triton_env.hopper_gluon(torch.device("cuda")),
    reason="the interleaved staging (Gluon kernel) runs on sm_90 GPUs",
)
@pytest.mark.parametrize("config", STAGING_CONFIGS, ids=str)
@pytest.mark.parametrize("m", [1, 40, 300])
def test_both_stagings_of_a_preshuffled_weight_give_the_plain_kernels_bytes(config, m, gen):
    # N = 2112 leaves a partial 128-wide column tile; M = 40 and 300 partial row tiles.
    weight = on_cuda(random_weight(2112, 7168, gen))
    shuffled = weight.shuffled((16, 16), by="test")
    qa = md.quantize_groups(random_tokens(m, 7168, gen).cuda())
    col = qa.presented_as("col_major")
    assert gluon_fits(config)
    outs = {}
    for staging in ("interleaved", "swizzled"):
        poison_allocator()
        outs[staging] = triton_block_scaled_mm(
            col.data,
            col.scale,
            md.ScaleLayout.COL_MAJOR,
            shuffled.data,
            shuffled.scale,
            7168,
            shuffled=True,
            config=config,
            staging=staging,
        )
    poison_allocator()
    plain = triton_block_scaled_mm(
        qa.data, qa.scale, md.ScaleLayout.ROW_MAJOR, weight.data, weight.scale, 7168, config=config
    )
    assert torch.isfinite(plain).all()
    assert torch.equal(outs["interleaved"], plain) and torch.equal(outs["swizzled"], plain)


OVERLAPPED_CONFIGS = [
    LaunchConfig(128, 128, 8, 4, overlap=True),
    LaunchConfig(64, 128, 4, 4, overlap=True),
    LaunchConfig(128, 128, 8, 4, persistent=True),
    LaunchConfig(64, 128, 4, 4, persistent=True),
    LaunchConfig(128, 128, 8, 3, 8, 1, stagger=False, persistent=True),
]


@pytest.mark.skipif(
    not torch.cuda.is_available() or not triton_env.hopper_gluon(torch.device("cuda")),
    reason="the overlapped loop (Gluon kernels) runs on sm_90 GPUs",
)
@pytest.mark.parametrize("config", OVERLAPPED_CONFIGS, ids=str)
@pytest.mark.parametrize("n,k,m", [(2112, 7168, 300), (4096, 512, 3000), (3072, 1536, 1000), (256, 512, 1)])
def test_overlapped_loops_give_the_triton_kernels_bytes(config, n, k, m, gen):
    # Partial row tiles (M = 300, 1000, 3000) and column tiles (N = 2112); 3000 x 4096 is 768 tiles of
    # 128 x 128, so a persistent program runs several, its copies crossing from tile to tile; M = 1 is one.
    weight = on_cuda(random_weight(n, k, gen))
    shuffled = weight.shuffled((16, 16), by="test")
    qa = md.quantize_groups(random_tokens(m, k, gen).cuda())
    col = qa.presented_as("col_major")
    triton_config = replace(config, overlap=False, persistent=False)
    poison_allocator()
    expected = triton_block_scaled_mm(
        qa.data, qa.scale, md.ScaleLayout.ROW_MAJOR, weight.data, weight.scale, k, config=triton_config
    )
    assert torch.isfinite(expected).all()
    poison_allocator()
    plain = triton_block_scaled_mm(
        qa.data, qa.scale, md.ScaleLayout.ROW_MAJOR, weight.data, weight.scale, k, config=config
    )
    poison_allocator()
    preshuffled = triton_block_scaled_mm(
        col.data, col.scale, md.ScaleLayout.COL_MAJOR, shuffled.data, shuffled.scale, k, shuffled=True, config=config
    )
    assert torch.equal(plain, expected) and torch.equal(preshuffled, expected)


@pytest.mark.skipif(
    not torch.cuda.is_available() or not triton_env.hopper_gluon(torch.device("cuda")),
    reason="the warp-specialized kernel (Gluon) runs on sm_90 GPUs",
)
@pytest.mark.parametrize(
    "config",
    [
        LaunchConfig(128, 128, 8, 4, specialized=True),
        LaunchConfig(128, 128, 8, 6, 8, 1, False, specialized=True),
        LaunchConfig(128, 128, 8, 4, persistent=True, specialized=True),
        LaunchConfig(128, 128, 8, 4, specialized=True, tma_store=True),
        LaunchConfig(128, 128, 8, 5, persistent=True, specialized=True, tma_store=True),
    ],
    ids=str,
)
@pytest.mark.parametrize("n,k,m", [(2112, 7168, 300), (4096, 512, 3000), (3072, 1536, 1000), (256, 512, 1)])
def test_the_warp_specialized_kernel_gives_the_triton_kernels_bytes(config, n, k, m, gen):
    # Plain and preshuffled weights (TMA boxes of 8 K chunks x 8 bands), either scale byte order.
    # Persistent: 3000 x 4096 is 768 tiles, several per program, the copies running on from tile to tile
    # and the TMA stores of one tile draining under the next; partial row and column tiles are clipped.
    weight = on_cuda(random_weight(n, k, gen))
    qa = md.quantize_groups(random_tokens(m, k, gen).cuda())
    poison_allocator()
    expected = triton_block_scaled_mm(
        qa.data, qa.scale, md.ScaleLayout.ROW_MAJOR, weight.data, weight.scale, k,
        config=replace(config, specialized=False, persistent=False, tma_store=False),
    )  # fmt: skip
    assert torch.isfinite(expected).all()
    shuffled = weight.shuffled((16, 16), by="test")
    for order, qx in ((md.ScaleLayout.ROW_MAJOR, qa), (md.ScaleLayout.COL_MAJOR, qa.presented_as("col_major"))):
        for w, is_shuffled in ((weight, False), (shuffled, True)):
            poison_allocator()
            out = triton_block_scaled_mm(
                qx.data, qx.scale, order, w.data, w.scale, k, shuffled=is_shuffled, config=config
            )
            assert torch.equal(out, expected), (order, is_shuffled)


def test_the_heuristic_overlaps_at_large_m_with_the_same_bytes(gen):
    device = torch.device("cuda")
    expect_gluon = triton_env.hopper_gluon(device)
    for n, k in ((4096, 512), (2112, 7168)):
        config = launch_config(4096, n, k, device)
        assert config.persistent == config.specialized == config.tma_store == expect_gluon
    assert launch_config(512, 24576, 1536, device).specialized == expect_gluon  # 768 tiles: every SM has some
    assert not launch_config(512, 3072, 1536, device).specialized  # 96 tiles: 64-row ones spread better
    weight = on_cuda(random_weight(4096, 512, gen))
    qa = md.quantize_groups(random_tokens(2500, 512, gen).cuda())
    plain = replace(
        launch_config(2500, 4096, 512, device), overlap=False, persistent=False, specialized=False, tma_store=False,
        num_stages=3,
    )  # fmt: skip
    expected = triton_block_scaled_mm(
        qa.data, qa.scale, md.ScaleLayout.ROW_MAJOR, weight.data, weight.scale, 512, config=plain
    )
    out = triton_block_scaled_mm(qa.data, qa.scale, md.ScaleLayout.ROW_MAJOR, weight.data, weight.scale, 512)
    assert torch.equal(out, expected)
    # An activation whose rows TMA cannot copy (a 520-byte row stride): the heuristic takes the next best
    # kernel, with the same bytes.
    wide = torch.zeros(2500, 520, dtype=qa.data.dtype, device=device)
    wide[:, :512] = qa.data
    out = triton_block_scaled_mm(wide[:, :512], qa.scale, md.ScaleLayout.ROW_MAJOR, weight.data, weight.scale, 512)
    assert torch.equal(out, expected)


def test_an_explicit_overlapped_config_it_cannot_run_is_refused(gen):
    weight = on_cuda(random_weight(256, 640, gen))  # 5 K blocks: the pairs need an even count
    qa = md.quantize_groups(random_tokens(4, 640, gen).cuda())
    with pytest.raises(ValueError, match="overlaps the promotion with the next MMA.*even number"):
        triton_block_scaled_mm(
            qa.data, qa.scale, md.ScaleLayout.ROW_MAJOR, weight.data, weight.scale, 640,
            config=LaunchConfig(128, 128, 8, 4, overlap=True),
        )  # fmt: skip


def test_interleaved_staging_refuses_what_it_cannot_run(gen):
    weight = on_cuda(random_weight(256, 512, gen, fmt=md.E4M3FNUZ))
    qa = md.quantize_groups(random_tokens(4, 512, gen).cuda(), fmt=md.E4M3FNUZ)
    shuffled = weight.shuffled((16, 16), by="test")
    with pytest.raises(ValueError, match="interleaved staging needs a preshuffled e4m3fn weight"):
        triton_block_scaled_mm(
            qa.data,
            qa.scale,
            md.ScaleLayout.ROW_MAJOR,
            shuffled.data,
            shuffled.scale,
            512,
            md.E4M3FNUZ,
            shuffled=True,
            staging="interleaved",
        )


def test_heuristic_keeps_every_sm_streaming_for_single_tokens():
    device = torch.device("cuda")
    sms = torch.cuda.get_device_properties(device).multi_processor_count
    config = launch_config(1, 2112, 7168, device)
    programs = -(-2112 // config.block_n) * config.split_k
    assert config.block_m == 16 and (programs >= 2 * sms or config.split_k == 8)
    assert launch_config(4096, 24576, 1536, device).block_m == 128


def test_triton_and_cublas_agree_within_the_bound(gen):
    weight = random_weight(7168, 2048, gen)
    tri = gpu_linear(weight, "triton-blockscale")
    cublas = md.kernels.BlockScaledLinear("proj", on_cuda(weight)).attach(md.get_kernel("cublas-blockwise"))
    x = random_tokens(256, 2048, gen).cuda()
    call = tri.run(x)
    qa = to_cpu(call.input)
    two_orders = 2 * accumulation_bound(qa, weight)
    # The same quantized operands for both: each kernel's caller quantizes with its own flavor (the
    # triton-* stand-ins with aiter's HIP quant, aiter-hip), so quantizing x twice would compare two inputs.
    same_input = call.input.presented_as(md.ScaleLayout.COL_MAJOR_STRIDED)
    assert_within_accumulation_bound(call.output.cpu(), cublas(same_input).cpu(), two_orders)


def test_triage_on_the_gpu_gives_the_cpu_verdicts():
    kwargs = dict(tp_sizes=(1, 4), progress=False)
    gpu = md.triage("mini", "h200", "vllm-pr51692", device="cuda", **kwargs)
    cpu = md.triage("mini", "h200", "vllm-pr51692", device="cpu", **kwargs)
    assert gpu.device == "cuda" and cpu.device == "cpu"
    assert [(c.tp, c.mode, c.verdict) for c in gpu.configs] == [(c.tp, c.mode, c.verdict) for c in cpu.configs]
    assert [c.explanation for c in gpu.culprits] == [c.explanation for c in cpu.culprits]
    assert any(c.verdict == "diverged" for c in gpu.configs)
    kernels = gpu.config(4, "decode").run.kernels
    assert kernels["kv_b_proj"].kernel == "triton-bpreshuffle"
