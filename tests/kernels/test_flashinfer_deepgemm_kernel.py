"""``flashinfer-deepgemm``, vLLM 0.33's Hopper kernel: FlashInfer's own input quant and swapAB GEMM below 32 rows,
vLLM's column-major quant and DeepGEMM above, one load step (DeepGEMM's ue8m0 re-quantization) for both; Hopper only.
(Its quantizer against FlashInfer's source: tests/engine_reference/test_engine_flashinfer.py.)"""

from __future__ import annotations

import pytest
import torch
from helpers import accumulation_bound, assert_within_accumulation_bound, random_tokens, random_weight

import mla_debug as md
from mla_debug.kernels.deepgemm_weights import VLLM_0_33, requant_ue8m0


def loaded(weight: md.QuantizedWeight, **options) -> md.kernels.BlockScaledLinear:
    policy = md.KernelPolicy(["flashinfer-deepgemm"], kernel_options={"flashinfer-deepgemm": options})
    return md.kernels.BlockScaledLinear("proj", weight).load(policy, "h200")


@pytest.mark.parametrize(
    ("m", "branch", "flavor", "ue8m0"),
    [
        (1, "FlashInfer swapAB (M=1 < 32)", "flashinfer-sm90", False),
        (31, "FlashInfer swapAB (M=31 < 32)", "flashinfer-sm90", False),
        (32, "DeepGEMM (M=32 >= 32)", "vllm-cuda", True),
    ],
)
def test_the_branch_follows_the_row_count(gen, m, branch, flavor, ue8m0):
    weight = random_weight(256, 512, gen)
    linear = loaded(weight)
    call = linear.run(random_tokens(m, 512, gen))
    assert call.kernel == f"flashinfer-deepgemm: {branch}"
    assert (call.input.flavor, call.input.ue8m0) == (flavor, ue8m0)
    assert call.violations == []
    expected = md.kernels.BlockScaledLinear("proj", linear.weight).attach(md.get_kernel("torch-reference"))
    assert_within_accumulation_bound(call.output, expected(call.input), accumulation_bound(call.input, linear.weight))


def test_both_branches_multiply_the_weight_deepgemm_requantized_at_load(gen):
    weight = random_weight(256, 512, gen)
    linear = loaded(weight)
    ours = requant_ue8m0(weight, VLLM_0_33)
    assert torch.equal(linear.weight.data.view(torch.uint8), ours.data.view(torch.uint8))
    assert torch.equal(linear.weight.scale, ours.scale)
    assert loaded(weight, ue8m0=False).weight is weight  # without ue8m0 the checkpoint's weight stays


def test_batch_invariance_sends_every_row_count_to_deepgemm(gen):
    call = loaded(random_weight(256, 512, gen), swap_ab_below=0).run(random_tokens(4, 512, gen))
    assert call.kernel == "flashinfer-deepgemm: DeepGEMM (M=4 >= 0)" and call.input.flavor == "vllm-cuda"


@pytest.mark.parametrize(
    ("plat", "words"),
    [("b200", "FlashInfer's block-scale GEMM is Hopper's"), ("mi355x", "DeepGEMM runs on CUDA platforms")],
)
def test_it_is_hoppers_only(plat, words):
    problem = md.kernels.GemmProblem("p", 256, 512, md.platform(plat).fp8, md.platform(plat))
    check = md.get_kernel("flashinfer-deepgemm").can_implement(problem)
    assert not check.ok and words in check.reason


def test_bad_options_and_a_pre_quantized_small_input_are_refused(gen):
    with pytest.raises(ValueError, match="swap_ab_below must be a row count >= 0"):
        md.get_kernel("flashinfer-deepgemm", swap_ab_below=-1)
    linear = loaded(random_weight(256, 512, gen))
    qa = md.quantize_groups(random_tokens(4, 512, gen), flavor="vllm-cuda", scale_layout="col_major_strided")
    with pytest.raises(ValueError, match="proj: flashinfer-deepgemm takes bf16 input .* M=4 < 32 rows has no path"):
        linear.run(qa)


def test_it_is_vllms_class():
    assert md.kernels.vllm_class_of("flashinfer-deepgemm") == "FlashInferFp8DeepGEMMDynamicBlockScaledKernel"
    assert md.kernels.kernels_of_vllm_class("DeepGemmFp8BlockScaledMMKernel") == ["deepgemm"]
