"""The Triton block-scaled GEMMs on the CPU under TRITON_INTERPRET=1 (tiny shapes; the GPU tests cover size).

The interpreter evaluates the kernel with numpy: the fp8 bytes are decoded exactly and products are
exact in fp32, so only the fp32 summation order can differ from the emulation; comparisons use the fp32
accumulation bound of `helpers.accumulation_bound`, and are bitwise where the same kernel reads the same
logical values in the same order.
"""

from __future__ import annotations

import pytest
import torch
from helpers import accumulation_bound, assert_within_accumulation_bound, linear, random_tokens, random_weight

import mla_debug as md
from mla_debug.gpu.gemm.launcher import LaunchConfig, triton_block_scaled_mm

pytest.importorskip("triton")
# tests/conftest.py switched the interpreter on (it must happen before triton is imported).
if torch.cuda.is_available():
    pytest.skip(
        "the GPU tests run the compiled kernels; the interpreter is for CPU-only machines", allow_module_level=True
    )

N, K = 32, 256


def pair(kernel: str, weight: md.QuantizedWeight, **options):
    """(Triton linear, emulation linear) over copies of the same weight, each with its own load step."""
    emulated = {"triton-blockscale": "aiter-blockscale", "triton-bpreshuffle": "aiter-bpreshuffle"}[kernel]
    copy = md.QuantizedWeight(weight.data.clone(), weight.scale.clone(), weight.fmt)
    return linear("proj", weight, kernel, backend="triton", **options), linear("proj", copy, emulated, **options)


@pytest.mark.parametrize("kernel", ["triton-blockscale", "triton-bpreshuffle"])
@pytest.mark.parametrize("m", [1, 3, 17])
def test_matches_the_emulation_within_the_accumulation_bound(kernel, m, gen):
    weight = random_weight(N, K, gen)
    tri, emu = pair(kernel, weight)
    x = random_tokens(m, K, gen)
    call = tri.run(x)
    assert call.output.dtype == torch.bfloat16 and call.output.shape == (m, N)
    assert_within_accumulation_bound(call.output, emu(call.input), accumulation_bound(call.input, weight))


def test_plain_and_preshuffled_agree_bitwise_given_their_own_layouts(gen):
    weight = random_weight(N, K, gen)
    plain, _ = pair("triton-blockscale", weight)
    shuffled, _ = pair("triton-bpreshuffle", md.QuantizedWeight(weight.data.clone(), weight.scale.clone(), weight.fmt))
    assert shuffled.weight.layout.shuffle_count == 1  # the load step really re-laid out the bytes
    x = random_tokens(5, K, gen)
    for _ in range(2):  # fresh poisoned outputs are the kernel's own; the result must not depend on history
        assert torch.equal(plain(x), shuffled(x))


def test_the_other_scale_order_gives_exactly_the_emulated_wrong_result(gen):
    weight = random_weight(N, K, gen)
    tri, emu = pair("triton-bpreshuffle", weight)
    x = random_tokens(4, K, gen)
    row_major = md.quantize_groups(x, 128, fmt=weight.fmt, scale_layout="row_major")
    wrong = tri.run(row_major)
    assert [v.kind for v in wrong.violations] == [md.layouts.ViolationKind.SCALE_ORDER]
    assert_within_accumulation_bound(wrong.output, emu(row_major), accumulation_bound(row_major, weight))
    right = tri(row_major.presented_as("col_major"))
    assert not torch.equal(wrong.output, right)  # M > 1: the scales of different tokens were mixed up


def test_single_token_scale_bytes_are_the_same_in_both_orders(gen):
    weight = random_weight(N, K, gen)
    tri, _ = pair("triton-bpreshuffle", weight)
    x = random_tokens(1, K, gen)
    row_major = md.quantize_groups(x, 128, fmt=weight.fmt, scale_layout="row_major")
    assert torch.equal(tri(row_major), tri(row_major.presented_as("col_major")))


def test_strided_col_major_scales_are_read_through_their_bytes(gen):
    weight = random_weight(N, K, gen)
    tri, _ = pair("triton-bpreshuffle", weight)
    x = random_tokens(3, K, gen)
    col = md.quantize_groups(x, 128, fmt=weight.fmt, scale_layout="col_major")
    strided = col.presented_as("col_major_strided")
    assert strided.scale.stride() == (1, 3)
    assert torch.equal(tri(col), tri(strided))


def test_a_double_shuffled_weight_reads_as_the_emulation_reads_it(gen):
    weight = random_weight(N, K, gen)
    tri, emu = pair("triton-bpreshuffle", weight)
    tri.shuffle_weight(by="model")
    emu.shuffle_weight(by="model")
    x = random_tokens(2, K, gen)
    call = tri.run(x)
    assert any(v.kind == md.layouts.ViolationKind.DOUBLE_SHUFFLE for v in call.violations)
    assert_within_accumulation_bound(call.output, emu(call.input), accumulation_bound(call.input, weight))


def test_e4m3fnuz_bytes_are_decoded_exactly(gen):
    weight = random_weight(N, K, gen, fmt=md.E4M3FNUZ)
    # Every fnuz byte but NaN, including +-240 (0x7F / 0xFF), whose e4m3fn reading would be NaN.
    codes = torch.tensor([b for b in range(256) if b != 0x80], dtype=torch.uint8)
    weight.data.view(torch.uint8).view(-1)[: codes.numel()] = codes
    tri, emu = pair("triton-blockscale", weight)
    x = random_tokens(3, K, gen)
    call = tri.run(x)
    assert call.input.fmt == md.E4M3FNUZ
    assert_within_accumulation_bound(call.output, emu(call.input), accumulation_bound(call.input, weight))


def test_split_k_is_deterministic_and_within_the_bound(gen):
    weight = random_weight(N, 512, gen)
    x = md.quantize_groups(random_tokens(3, 512, gen), 128)
    reference = linear("proj", weight, "aiter-blockscale")(x)
    config = LaunchConfig(block_m=16, block_n=16, num_warps=4, num_stages=2, group_m=1, split_k=2)
    args = (x.data, x.scale, md.ScaleLayout.ROW_MAJOR, weight.data, weight.scale, 512)
    first = triton_block_scaled_mm(*args, config=config)
    assert torch.equal(first, triton_block_scaled_mm(*args, config=config))
    assert_within_accumulation_bound(first, reference, accumulation_bound(x, weight))


def test_row_parallel_shards_are_read_through_their_row_stride(gen):
    full = random_weight(N, 512, gen)
    shard = md.QuantizedWeight(full.data[:, 256:], full.scale[:, 2:], full.fmt)
    assert not shard.data.is_contiguous()
    tri, emu = pair("triton-blockscale", shard)
    x = random_tokens(2, 256, gen)
    call = tri.run(x)
    assert_within_accumulation_bound(call.output, emu(call.input), accumulation_bound(call.input, shard))


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda a, s, w, ws: (a[:, :128], s, w, ws), "must equal the weight's K=256"),
        (lambda a, s, w, ws: (a, s[:, :1], w, ws), "gap-free fp32 buffer of M x K/128 = 2 x 2"),
        (lambda a, s, w, ws: (a, s, w[:24], ws), "N=24 must be a multiple of 16"),
        (lambda a, s, w, ws: (a, s, w, ws[:, :1]), r"weight scale .* must be fp32 of shape \(1, 2\)"),
        (lambda a, s, w, ws: (a.float(), s, w, ws), "must be 2-D one-byte fp8 data"),
    ],
)
def test_bad_operands_are_named(change, message, gen):
    weight = random_weight(N, K, gen)
    x = md.quantize_groups(random_tokens(2, K, gen), 128)
    a, s, w, ws = change(x.data, x.scale, weight.data, weight.scale)
    with pytest.raises((ValueError, TypeError), match=message):
        triton_block_scaled_mm(a, s, md.ScaleLayout.ROW_MAJOR, w, ws, K, name="q_b_proj")


def test_the_staging_of_a_preshuffled_weight_is_checked(gen):
    qw = md.layouts.quantize_blocks(torch.randn(N, K, generator=gen) * 0.02).shuffled((16, 16), by="test")
    qa = md.quantize_groups(random_tokens(2, K, gen), scale_layout="col_major")
    args = (qa.data, qa.scale, md.ScaleLayout.COL_MAJOR, qw.data, qw.scale, K)
    with pytest.raises(ValueError, match="staging must be 'auto', 'interleaved' or 'swizzled', not 'tma'"):
        triton_block_scaled_mm(*args, shuffled=True, staging="tma")
    # The interleaved staging is a Gluon kernel for sm_90 GPUs: asked for here, it says so.
    with pytest.raises(ValueError, match="interleaved staging needs .* an sm_90 GPU"):
        triton_block_scaled_mm(*args, shuffled=True, staging="interleaved")
    auto = triton_block_scaled_mm(*args, shuffled=True)
    assert torch.equal(auto, triton_block_scaled_mm(*args, shuffled=True, staging="swizzled"))


@pytest.mark.parametrize("flag", ["overlap", "persistent"])
def test_an_overlapped_config_is_refused_where_the_gluon_kernels_cannot_run(flag, gen):
    weight = random_weight(N, K, gen)
    qa = md.quantize_groups(random_tokens(2, K, gen), 128)
    config = LaunchConfig(64, 32, 4, 4, **{flag: True})
    with pytest.raises(ValueError, match=rf"q_b_proj: BM64-BN32-w4-s4-g8-sk1-{flag} overlaps .* an sm_90 GPU"):
        triton_block_scaled_mm(
            qa.data, qa.scale, md.ScaleLayout.ROW_MAJOR, weight.data, weight.scale, K, config=config, name="q_b_proj"
        )
    # Without the flag the same tiles run through the Triton kernel.
    plain = triton_block_scaled_mm(
        qa.data, qa.scale, md.ScaleLayout.ROW_MAJOR, weight.data, weight.scale, K, config=LaunchConfig(64, 32, 4, 4)
    )
    assert torch.isfinite(plain).all()


def test_the_warp_specialized_kernel_is_refused_where_it_cannot_run(gen):
    weight = random_weight(N, K, gen)
    qa = md.quantize_groups(random_tokens(2, K, gen), 128)
    config = LaunchConfig(128, 128, 8, 4, specialized=True)
    with pytest.raises(ValueError, match=r"q_b_proj: .*-specialized is the warp-specialized kernel: it needs an sm_90"):
        triton_block_scaled_mm(
            qa.data, qa.scale, md.ScaleLayout.ROW_MAJOR, weight.data, weight.scale, K, config=config, name="q_b_proj"
        )
