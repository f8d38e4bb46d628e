"""vLLM 0.33.0's Hopper small-M GEMM, FlashInfer 0.7.2.post1's ``fp8_blockscale_gemm_sm90``, against its source.

vLLM hands it bf16 activations and the FP8 weight with its block scales; FlashInfer quantizes the input
itself and, for M < 32, runs DeepGEMM's swapAB kernel. Checked here, reading the released wheels:
- the ``flashinfer-sm90`` flavor is byte-exact with an oracle written from the kernel's source
  (flashinfer_oracle), on every kind of group and on drawn rows, and the source still says what the oracle
  restates;
- the facts the ``flashinfer-deepgemm`` kernel and the vLLM profile's rules rest on: the M < 32 switch on
  both sides, the bf16 input vLLM passes, the weight scale FlashInfer reads as a bare pointer of (N/128,
  K/128) or (N, K/128) floats, the version vLLM pins.
"""

from __future__ import annotations

import re

import pytest
import torch
from engine_checks import assert_byte_exact
from engine_inputs import activation_rows, edge_groups
from engine_wheels import RELEASES, require, source
from flashinfer_oracle import scale_1x128
from hypothesis import assume, given, settings

import mla_debug as md

FI = "flashinfer-python"
CSRC = "flashinfer/data/csrc"
KERNELS = f"{CSRC}/nv_internal/tensorrt_llm/kernels/cutlass_kernels/fp8_blockscale_gemm"


def _flat(text: str) -> str:
    return re.sub(r"\s+", " ", text)


def _function(text: str, signature: str) -> str:
    """The body of the first C++/Python function whose header starts with `signature` (to its closing brace or
    the next top-level def), so a check looks where the fact is, not anywhere in the file."""
    start = text.index(signature)
    end = text.find("\n}\n", start)
    return _flat(text[start : end if end > 0 else None])


def _kernel_text() -> str:
    require(FI)
    return source(FI, f"{KERNELS}/fp8_blockscale_gemm_kernel.cuh")


def test_vllm_pins_the_flashinfer_release_the_tests_read():
    require("vllm")
    metadata = source("vllm", "vllm-0.33.0.dist-info/METADATA")
    assert f"Requires-Dist: {FI}=={RELEASES[FI]}" in metadata.splitlines()


def test_the_kernel_source_says_what_the_oracle_restates():
    body = _function(_kernel_text(), "__global__ void scale_1x128_kernel(OutputType* output, ScaleType* scales,")
    for statement in (
        "ScaleType scale = amax != InputType(0.f) ? 448.f / ScaleType(amax) : 1.f;",
        "scales[(size_t)scales_idx_x * stride_scale_dim_y + scales_idx_y] = ScaleType(1.f / scale);",
        "ScaleType value_1 = ScaleType(input_frag2[i].x) * scale;",
        "output_line[lane_id] = OutputType(value_1);",
        "__hmax(input_amax, __hmax(__habs(input_frag2[i].x), __habs(input_frag2[i].y)))",
    ):
        assert statement in body, statement


def test_a_bf16_input_is_quantized_by_that_kernel_and_small_m_takes_swap_ab():
    text = _kernel_text()
    run = _function(text, "void fp8_gemm_run(__nv_bfloat16 const* mat_a, __nv_fp8_e4m3* fp8_mat_a,")
    assert "if (internal_quantize_a) { scale_1x128_kernel<<<" in run
    dispatch = _flat(text[text.index("uint32_t m_threshold = 32;") :][:3000])
    assert dispatch.startswith("uint32_t m_threshold = 32; if (shape_m >= m_threshold) {")
    assert "} else {" in dispatch and "deep_gemm::runGemmSwapAB(kernel, mat_b, ld_b, mat_a, ld_a" in dispatch
    # bf16 input with an FP8 weight: FlashInfer quantizes A only and reads the caller's weight scales
    gemm = _function(source(FI, f"{KERNELS}/fp8_blockscale_gemm.cu"), "void CutlassFp8BlockScaleGemmRunner")
    assert "if constexpr (internal_quantize_a && !internal_quantize_b) {" in gemm
    assert "const_cast<float*>(scales_b)" in gemm


def test_flashinfer_reads_the_weight_scale_as_a_bare_pointer_of_one_of_two_shapes():
    binding = _flat(source(FI, f"{CSRC}/fp8_blockscale_gemm_sm90_binding.cu"))
    assert "bool is_per_token = (scale_dim0 == shape_n && scale_dim1 == expected_scale_k);" in binding
    assert "bool is_per_block = (scale_dim0 == (shape_n + 127) / 128 && scale_dim1 == expected_scale_k);" in binding
    assert "reinterpret_cast<float const*>(scales_b.value().data_ptr())" in binding  # no strides read


def test_flashinfer_builds_the_kernel_with_fast_math():
    jit = source(FI, "flashinfer/jit/gemm/fp8_blockscale.py")
    spec = jit[jit.index("def gen_fp8_blockscale_gemm_sm90_module") :]
    spec = spec[: spec.index("\ndef ")] if "\ndef " in spec else spec
    assert "use_fast_math" not in spec  # the default stands
    core = source(FI, "flashinfer/jit/core.py")
    assert re.search(r"use_fast_math: bool = True,", core) and '"-use_fast_math"' in core


def test_vllm_sends_bf16_below_32_rows_to_flashinfer_and_the_rest_to_deepgemm():
    require("vllm")
    text = source("vllm", "vllm/model_executor/kernels/linear/scaled_mm/flashinfer.py")
    assert "apply_input_quant: ClassVar[bool] = False" in text
    impl = _function(text, "def _dynamic_flashinfer_deepgemm_blockscale_gemm_impl(")
    assert "condition = input.shape[0] < 32" in impl
    assert "return torch.cond( condition, run_flashinfer_deepgemm_swapAB, run_deepgemm," in impl
    assert "if envs.VLLM_BATCH_INVARIANT: return run_deepgemm(input, weight, weight_scale)" in impl
    assert "per_token_group_quant_fp8( input, group_size=group_size, column_major_scales=True, " in impl


@pytest.mark.parametrize("seed", range(3))
def test_the_flavor_is_byte_exact_with_the_oracle_on_every_kind_of_group(seed):
    x = edge_groups(torch.bfloat16)
    x = x * torch.exp2(torch.tensor(float(seed * 7 - 7))).to(torch.bfloat16)
    q, scale = scale_1x128(x)
    assert_byte_exact(md.quantize_groups(x, flavor="flashinfer-sm90"), q, scale, "flashinfer-sm90 on edge groups")


@settings(max_examples=80, deadline=None)
@given(x=activation_rows())
def test_the_flavor_is_byte_exact_with_the_oracle_on_drawn_rows(x):
    x = x.to(torch.bfloat16)
    assume(bool(torch.isfinite(x).all()))  # bf16 rounds the largest drawn fp32 values to Inf
    q, scale = scale_1x128(x)
    assert_byte_exact(md.quantize_groups(x, flavor="flashinfer-sm90"), q, scale, "flashinfer-sm90 on drawn rows")
