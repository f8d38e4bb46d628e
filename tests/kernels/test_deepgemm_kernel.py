"""``deepgemm`` as the engines drive it: where it is chosen, ue8m0 scales (inputs rounded up, weights
re-quantized at load), the packed int32 form on Blackwell, and what a TP-sharded requant does."""

from __future__ import annotations

import pytest
import torch
from helpers import accumulation_bound, assert_within_accumulation_bound, random_tokens, random_weight

import mla_debug as md
from mla_debug.kernels.deepgemm_weights import ceil_bits_pow2, ceil_log2_pow2, requant_ue8m0


def is_power_of_two(t: torch.Tensor) -> bool:
    mantissa, _ = torch.frexp(t)
    return bool((mantissa == 0.5).all())


@pytest.mark.parametrize(
    ("plat", "n", "k", "ok", "words"),
    [
        ("h200", 4096, 512, True, "takes (N=4096, K=512) on sm90"),
        ("b200", 4096, 512, True, "on sm100"),
        ("h200", 4104, 512, False, "N % 64 == 0 and K % 128 == 0 (N=4104"),
        ("mi355x", 4096, 512, False, "DeepGEMM runs on CUDA platforms, not mi355x"),
        ("cpu", 4096, 512, False, "not cpu"),
    ],
)
def test_where_deepgemm_is_chosen(plat, n, k, ok, words):
    problem = md.kernels.GemmProblem("kv_b_proj", n, k, md.platform(plat).fp8, md.platform(plat))
    check = md.get_kernel("deepgemm").can_implement(problem)
    assert check.ok is ok and words in check.reason


def test_packed_scales_are_blackwells_and_need_ue8m0():
    problem = md.kernels.GemmProblem("p", 256, 512, md.E4M3FN, md.platform("h200"))
    assert (
        "Blackwell's (sm100) format, not sm90's" in md.get_kernel("deepgemm", packed=True).can_implement(problem).reason
    )
    with pytest.raises(ValueError, match="packed scales hold ue8m0 exponents; they need ue8m0=True"):
        md.get_kernel("deepgemm", ue8m0=False, packed=True)
    with pytest.raises(TypeError, match="ue8m0 must be true or false"):
        md.get_kernel("deepgemm", ue8m0="yes")
    with pytest.raises(ValueError, match="requant 'exact' is not one of vllm-0.33, sglang-0.5.23"):
        md.get_kernel("deepgemm", requant="exact")


@pytest.mark.parametrize("plat", ["h200", "b200"])
def test_ue8m0_requantizes_the_weight_at_load_and_rounds_input_scales_up(plat, gen):
    weight = random_weight(256, 512, gen)
    linear = md.kernels.BlockScaledLinear("proj", weight).load(md.KernelPolicy(["deepgemm"]), plat)
    assert is_power_of_two(linear.weight.scale) and linear.weight.layout.plain
    assert not torch.equal(linear.weight.data.view(torch.uint8), weight.data.view(torch.uint8))
    assert any("re-quantized to ue8m0" in event for event in linear.events)
    assert linear.kernel.packs_for(linear) is (plat == "b200")
    # The caller's bytes are untouched (shards are views of shared full weights).
    assert torch.equal(
        weight.data.view(torch.uint8),
        random_weight(256, 512, torch.Generator().manual_seed(1234)).data.view(torch.uint8),
    )
    call = linear.run(random_tokens(6, 512, gen))
    assert is_power_of_two(call.input.logical_scale()) and call.violations == []
    expected = md.kernels.BlockScaledLinear("proj", linear.weight).attach(md.get_kernel("torch-reference"))
    assert_within_accumulation_bound(call.output, expected(call.input), accumulation_bound(call.input, linear.weight))


def test_requantized_weight_stays_close_to_the_checkpoint(gen):
    weight = random_weight(256, 512, gen)
    for recipe in ("vllm-0.33", "sglang-0.5.23"):
        requant = requant_ue8m0(weight, recipe)
        assert is_power_of_two(requant.scale)
        before, after = weight.dequantize_plain(), requant.dequantize_plain()
        # A power-of-two scale at most doubles the step: within one e4m3 step of the old scale's
        # ulp (2^-3 relative) of each block's amax, plus the original rounding.
        amax = before.abs().view(2, 128, 4, 128).amax(dim=(1, 3)).repeat_interleave(128, 0).repeat_interleave(128, 1)
        assert bool(((after - before).abs() <= amax * 2.0**-3).all()), recipe


def test_requant_of_a_shard_is_the_shard_of_the_requant(gen):
    """Blocks are requantized independently, so TP sharding cannot make ranks disagree."""
    weight = random_weight(512, 256, gen)
    whole = requant_ue8m0(weight)
    half = md.QuantizedWeight(weight.data[256:], weight.scale[2:], weight.fmt)
    part = requant_ue8m0(half)
    assert torch.equal(part.data.view(torch.uint8), whole.data[256:].view(torch.uint8))
    assert torch.equal(part.scale, whole.scale[2:])


def test_requant_refuses_what_it_cannot_read(gen):
    weight = random_weight(256, 256, gen)
    with pytest.raises(ValueError, match="proj: re-quantization reads a plain \\(N, K\\) weight"):
        requant_ue8m0(weight.shuffled((16, 16)), name="proj")
    fnuz = md.layouts.quantize_blocks(torch.randn(128, 128), fmt=md.E4M3FNUZ)
    with pytest.raises(TypeError, match="DeepGEMM re-quantizes e4m3fn weights, this one is e4m3fnuz"):
        requant_ue8m0(fnuz)


def test_the_two_round_up_rules_differ_only_where_log2_rounds():
    just_above = 2.0**-20 * (1 + 2.0**-23)
    scales = torch.tensor([1.0, 0.75, 2.0**-20 * 1.5, 3.0, just_above])
    assert torch.equal(ceil_bits_pow2(scales), torch.tensor([1.0, 1.0, 2.0**-19, 4.0, 2.0**-19]))
    # fp32 log2 of a scale one ulp above 2^-20 rounds to -20: vLLM's rule lands below the scale there.
    assert torch.equal(ceil_log2_pow2(scales), torch.tensor([1.0, 1.0, 2.0**-19, 4.0, 2.0**-20]))


def test_packed_form_truncates_scales_that_are_not_powers_of_two(gen):
    """ue8m0=True with a producer that did not round its scales: the packed bytes keep only exponents."""
    weight = random_weight(256, 512, gen)
    linear = md.kernels.BlockScaledLinear("proj", weight).load(md.KernelPolicy(["deepgemm"]), "b200")
    qa = md.quantize_groups(random_tokens(4, 512, gen), flavor="deepseek").presented_as(
        md.ScaleLayout.COL_MAJOR_STRIDED
    )
    assert not is_power_of_two(qa.logical_scale())
    truncated = md.layouts.unpack_ue8m0(md.layouts.pack_ue8m0(qa.logical_scale()), qa.groups)
    as_read = md.QuantizedActivation(qa.data, truncated.t().contiguous().t(), md.ScaleLayout.COL_MAJOR_STRIDED, qa.fmt)
    reference = md.kernels.BlockScaledLinear("proj", linear.weight).attach(md.get_kernel("deepgemm", packed=False))
    assert torch.equal(linear.run(qa).output, reference.run(as_read).output)
