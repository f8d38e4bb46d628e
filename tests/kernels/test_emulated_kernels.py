"""The aiter emulations against the reference, right and wrong.

With accumulation="dequant" an emulation performs exactly the reference's arithmetic once it has
read its bytes, so given the layout it expects it must match the reference BITWISE, and given the
other layout it must equal the reference applied to the misread values, bitwise. With the kernels'
own "blockwise" order they differ only by fp32 summation order (bound in helpers.py).
"""

from __future__ import annotations

import pytest
import torch
from helpers import (
    accumulation_bound,
    assert_within_accumulation_bound,
    linear,
    random_tokens,
    random_weight,
)

import mla_debug as md
from mla_debug.layouts import ViolationKind

SHAPES = [(256, 512), (144, 384), (64, 1024)]  # 144: a partial 128-row weight block


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and torch.equal(a.view(torch.int16), b.view(torch.int16))


@pytest.mark.parametrize("n,k", SHAPES)
@pytest.mark.parametrize("m", [1, 3, 16])
@pytest.mark.parametrize("kernel", ["aiter-blockscale", "aiter-bpreshuffle"])
def test_dequant_order_matches_reference_bitwise(kernel, m, n, k, gen):
    weight = random_weight(n, k, gen)
    emulated = linear("proj", weight, kernel, accumulation="dequant")
    reference = linear("proj", weight, "torch-reference")
    x = random_tokens(m, k, gen)
    call = emulated.run(x)
    assert call.violations == []
    assert same_bits(call.output, reference(call.input))
    assert call.output.dtype == torch.bfloat16 and call.output.shape == (m, n)


@pytest.mark.parametrize("n,k", SHAPES)
@pytest.mark.parametrize("kernel", ["aiter-blockscale", "aiter-bpreshuffle"])
def test_blockwise_order_within_fp32_accumulation_bound(kernel, n, k, gen):
    weight = random_weight(n, k, gen)
    emulated = linear("proj", weight, kernel, accumulation="blockwise")
    reference = linear("proj", weight, "torch-reference")
    qa = emulated.kernel.quantize_input(random_tokens(16, k, gen), md.E4M3FN, emulated.kernel.contract(emulated).scale)
    out = emulated(qa)
    assert_within_accumulation_bound(out, reference(qa), accumulation_bound(qa, weight))


@pytest.mark.parametrize("k", [256, 1024])
def test_blockwise_matches_torch_scaled_mm_per_block(k, gen):
    """Oracle: torch's own scaled_mm (RowWise, one call per 128-wide K block, fp32 out) summed in fp32."""
    from torch.nn.functional import ScalingType, scaled_mm

    n, m = 256, 8
    weight = random_weight(n, k, gen)
    emulated = linear("proj", weight, "aiter-blockscale", accumulation="blockwise")
    qa = md.quantize_groups(random_tokens(m, k, gen))
    xs = qa.logical_scale()
    ws = weight.scale.repeat_interleave(128, 0)[:n]
    oracle = torch.zeros(m, n)
    for kb in range(k // 128):
        cols = slice(kb * 128, (kb + 1) * 128)
        oracle += scaled_mm(
            qa.data[:, cols].contiguous(),
            weight.data[:, cols].contiguous().t(),
            xs[:, kb : kb + 1].contiguous(),
            ScalingType.RowWise,
            ws[:, kb].reshape(1, n).contiguous(),
            ScalingType.RowWise,
            output_dtype=torch.float32,
        )
    assert_within_accumulation_bound(emulated(qa), oracle.to(torch.bfloat16), accumulation_bound(qa, weight))


def misread(qa: md.QuantizedActivation, read_as: md.ScaleLayout) -> md.QuantizedActivation:
    """What a kernel reading `read_as` bytes effectively multiplies by, as a correctly labelled input."""
    values = md.layouts.read_scale(qa.scale, read_as)
    return md.QuantizedActivation(qa.data, values.contiguous(), md.ScaleLayout.ROW_MAJOR, qa.fmt)


@pytest.mark.parametrize(
    "kernel,written",
    [("aiter-bpreshuffle", md.ScaleLayout.ROW_MAJOR), ("aiter-blockscale", md.ScaleLayout.COL_MAJOR)],
)
def test_wrong_scale_order_is_exactly_the_misread(kernel, written, gen):
    n, k = 256, 512
    weight = random_weight(n, k, gen)
    emulated = linear("q_b_proj", weight, kernel, accumulation="dequant")
    reference = linear("q_b_proj", weight, "torch-reference")
    read_as = emulated.kernel.contract(emulated).scale
    for m in (1, 16):
        qa = md.quantize_groups(random_tokens(m, k, gen), scale_layout=written, producer="fused norm quant")
        call = md.kernels.apply_pre_quantized_block_scaled_mm(emulated, qa)
        (violation,) = call.violations
        assert violation.kind is ViolationKind.SCALE_ORDER
        assert (violation.module, violation.found, violation.rows) == ("q_b_proj", written, m)
        assert same_bits(call.output, reference(misread(qa, read_as)))
        if m == 1:
            assert not violation.effective
            assert same_bits(call.output, reference(qa)), "at M=1 both orders are the same bytes"
        else:
            assert violation.effective
            assert md.numerics.error_metrics(call.output, reference(qa))["rel_l2"] > 0.1


def test_col_major_strided_scale_is_read_correctly_by_bpreshuffle(gen):
    weight = random_weight(128, 256, gen)
    emulated = linear("proj", weight, "aiter-bpreshuffle", accumulation="dequant")
    reference = linear("proj", weight, "torch-reference")
    qa = md.quantize_groups(random_tokens(9, 256, gen), scale_layout=md.ScaleLayout.COL_MAJOR_STRIDED)
    call = emulated.run(qa)
    assert call.violations == []
    assert same_bits(call.output, reference(qa))


def test_bpreshuffle_shuffles_at_load_and_reads_shuffled_bytes(gen):
    weight = random_weight(256, 512, gen)
    lin = linear("o_proj", weight, "aiter-bpreshuffle")
    assert lin.weight.layout.shuffle_count == 1
    assert lin.weight.layout.shufflers == ("aiter-bpreshuffle.process_weights_after_loading",)
    assert torch.equal(lin.weight.data.view(torch.uint8), md.shuffle_weight(weight.data).view(torch.uint8))


def test_double_shuffle_reads_a_once_shuffled_matrix(gen):
    """A model-side shuffle plus the kernel's: the kernel un-shuffles once and multiplies garbage."""
    n, k = 256, 512
    weight = random_weight(n, k, gen)
    lin = md.kernels.BlockScaledLinear("wo_b", weight)
    lin.shuffle_weight(by="model prepare_attn_preshuffle")
    lin.attach(md.get_kernel("aiter-bpreshuffle", accumulation="dequant"))
    assert lin.weight.layout.shuffle_count == 2
    qa = md.quantize_groups(random_tokens(4, k, gen), scale_layout=md.ScaleLayout.COL_MAJOR)
    call = lin.run(qa)
    (violation,) = call.violations
    assert violation.kind is ViolationKind.DOUBLE_SHUFFLE and violation.effective
    once = md.QuantizedWeight(md.shuffle_weight(weight.data), weight.scale, weight.fmt)
    assert same_bits(call.output, linear("wo_b", once, "torch-reference")(qa))


def test_double_shuffle_on_256_byte_rows_hides_from_bytes_not_from_the_kernel(gen):
    """On a 256-byte row the shuffle is an involution: twice-shuffled bytes ARE the plain bytes, so byte
    inspection sees a plain weight and a plain reader is right - but the preshuffled kernel, which
    un-shuffles once, reads a once-shuffled matrix."""
    weight = random_weight(128, 256, gen)
    lin = md.kernels.BlockScaledLinear("down", weight)
    lin.shuffle_weight(by="model")
    lin.attach(md.get_kernel("aiter-bpreshuffle", accumulation="dequant"))
    assert md.layouts.identify_weight_layout(lin.weight.data, weight.data).shuffles == 0
    qa = md.quantize_groups(random_tokens(4, 256, gen), scale_layout=md.ScaleLayout.COL_MAJOR)
    (violation,) = lin.run(qa).violations
    assert violation.kind is ViolationKind.DOUBLE_SHUFFLE and violation.effective

    plain_reader = md.kernels.BlockScaledLinear("down", weight.shuffled(by="model").shuffled(by="model"))
    plain_reader.attach(md.get_kernel("aiter-blockscale", accumulation="dequant"))
    row_qa = qa.presented_as(md.ScaleLayout.ROW_MAJOR)
    call = plain_reader.run(row_qa)
    (violation,) = call.violations
    assert violation.kind is ViolationKind.DOUBLE_SHUFFLE and not violation.effective
    assert same_bits(call.output, linear("down", weight, "torch-reference")(row_qa))


@pytest.mark.parametrize("flag", ["skip_weight_relayout", "is_bmm", "cpu_skip_gemm_dispatch"])
def test_honoured_flags_keep_the_weight_plain(flag, gen):
    weight = random_weight(256, 512, gen)
    lin = md.kernels.BlockScaledLinear("kv_b_proj", weight, **{flag: True})
    lin.attach(md.get_kernel("aiter-bpreshuffle", accumulation="dequant"))
    assert lin.weight.layout.plain and lin.plain_fallback
    x = random_tokens(8, 512, gen)
    call = lin.run(x)
    assert call.input.scale_layout is md.ScaleLayout.ROW_MAJOR and call.violations == []
    assert same_bits(call.output, linear("kv_b_proj", weight, "aiter-blockscale", accumulation="dequant")(x))


def test_ignored_flags_shuffle_under_the_direct_reader(gen):
    weight = random_weight(256, 512, gen)
    lin = md.kernels.BlockScaledLinear("kv_b_proj", weight, skip_weight_relayout=True)
    lin.attach(md.get_kernel("aiter-bpreshuffle", honour_layer_flags=False))
    assert lin.weight.layout.shuffle_count == 1 and not lin.plain_fallback


def test_leading_dims_and_input_validation(gen):
    weight = random_weight(128, 256, gen)
    lin = linear("proj", weight, "aiter-blockscale")
    assert lin(random_tokens(6, 256, gen).view(2, 3, 256)).shape == (2, 3, 128)
    with pytest.raises(ValueError, match=r"proj input: shape \(4, 384\).*K=256"):
        lin(torch.randn(4, 384))
    with pytest.raises(TypeError, match="proj input: .*int32"):
        lin(torch.ones(4, 256, dtype=torch.int32))
    fnuz = md.quantize_groups(torch.randn(2, 256), fmt=md.E4M3FNUZ)
    with pytest.raises(TypeError, match="e4m3fnuz.*e4m3fn"):
        lin(fnuz)
    with pytest.raises(RuntimeError, match="no kernel attached"):
        md.kernels.BlockScaledLinear("bare", weight)(torch.randn(1, 256))
    with pytest.raises(ValueError, match="accumulation"):
        md.get_kernel("aiter-blockscale", accumulation="fast")
    with pytest.raises(ValueError, match="registered kernels: .*aiter-blockscale"):
        md.get_kernel("aiter-gemm")


def test_weight_cache_follows_in_place_changes(gen):
    weight = random_weight(128, 256, gen)
    lin = linear("proj", weight, "aiter-blockscale")
    x = random_tokens(4, 256, gen)
    before = lin(x)
    lin.weight.scale.mul_(2)  # an in-place change bumps the version counter
    after = lin(x)
    assert not torch.equal(before, after)
    assert torch.equal(after, linear("proj", lin.weight, "aiter-blockscale")(x))


def test_fnuz_platform_kernels(gen):
    weight = random_weight(256, 512, gen, fmt=md.E4M3FNUZ)
    lin = linear("proj", weight, "aiter-blockscale", accumulation="dequant")
    call = lin.run(random_tokens(4, 512, gen))
    assert call.input.fmt is md.E4M3FNUZ
    assert same_bits(call.output, linear("proj", weight, "torch-reference")(call.input))


def test_unavailable_kernels_say_why():
    if not torch.cuda.is_available():
        ok, why = md.get_kernel("cublas-blockwise").availability()
        assert not ok and "CUDA" in why
    ok, why = md.get_kernel("aiter-native-bpreshuffle").availability()
    if not getattr(torch.version, "hip", None):
        assert not ok and "ROCm" in why
    assert md.get_kernel("aiter-native-bpreshuffle").preshuffles_weight
