"""The byte contracts of today's engines' kernels: given what their producers write they multiply like the
reference (within the fp32 accumulation bound of helpers.py, or bitwise in the reference's order); given a
producer layout that changes the values they read, the call records an effective violation - and only
then (M == 1 reads the same bytes in either order)."""

from __future__ import annotations

import pytest
import torch
from helpers import accumulation_bound, assert_within_accumulation_bound, random_tokens, random_weight

import mla_debug as md
from mla_debug.layouts import ScaleLayout, ViolationKind

# kernel -> (options, the layouts its producers hand it, a layout it misreads)
CONTRACTS = {
    "aiter-triton-bpreshuffle": ({}, (ScaleLayout.ROW_MAJOR, ScaleLayout.COL_MAJOR_STRIDED), ScaleLayout.COL_MAJOR),
    "vllm-triton-blockscale": ({}, (ScaleLayout.ROW_MAJOR, ScaleLayout.COL_MAJOR_STRIDED), ScaleLayout.COL_MAJOR),
    "sglang-triton-blockscale": (
        {"selection": "any"},
        (ScaleLayout.COL_MAJOR_STRIDED, ScaleLayout.COL_MAJOR),
        ScaleLayout.ROW_MAJOR,
    ),
    "deepgemm": ({"ue8m0": False}, (ScaleLayout.COL_MAJOR_STRIDED, ScaleLayout.ROW_MAJOR), ScaleLayout.COL_MAJOR),
}


def attached(kernel: str, weight, **options) -> md.kernels.BlockScaledLinear:
    return md.kernels.BlockScaledLinear("proj", weight).attach(md.get_kernel(kernel, **options))


def reference_of(linear: md.kernels.BlockScaledLinear) -> md.kernels.BlockScaledLinear:
    """The reference over the bytes the kernel's weight holds after its load step, read plainly."""
    weight = linear.weight
    if not weight.layout.plain:
        plain = md.layouts.unshuffle_weight(weight.data, (16, 16), k=weight.k)
        weight = md.QuantizedWeight(plain, weight.scale, weight.fmt)
    return attached("torch-reference", weight)


@pytest.mark.parametrize("kernel", sorted(CONTRACTS))
@pytest.mark.parametrize("m", [1, 5])
def test_right_layouts_multiply_like_the_reference(kernel, m, gen):
    options, right, _ = CONTRACTS[kernel]
    weight = random_weight(256, 512, gen)
    linear = attached(kernel, weight, **options)
    x = random_tokens(m, 512, gen)
    for layout in right:
        qa = linear.kernel.quantize_input(x, weight.fmt).presented_as(layout)
        call = linear.run(qa)
        assert call.violations == [], (kernel, layout)
        expected = reference_of(linear).run(qa).output
        assert_within_accumulation_bound(call.output, expected, accumulation_bound(qa, linear.weight))


@pytest.mark.parametrize("kernel", sorted(CONTRACTS))
def test_a_misread_layout_is_an_effective_violation_only_when_it_changes_the_values(kernel, gen):
    options, _, wrong = CONTRACTS[kernel]
    weight = random_weight(256, 512, gen)
    linear = attached(kernel, weight, **options)
    for m, effective in ((5, True), (1, False)):
        qa = linear.kernel.quantize_input(random_tokens(m, 512, gen), weight.fmt).presented_as(wrong)
        call = linear.run(qa)
        violations = [v for v in call.violations if v.kind is ViolationKind.SCALE_ORDER]
        assert len(violations) == 1 and violations[0].effective is effective, (kernel, m)
        correct = reference_of(linear).run(qa).output
        assert (not torch.equal(call.output, correct)) is effective


@pytest.mark.parametrize("kernel", sorted(CONTRACTS))
def test_all_are_cpu_emulations_that_run_anywhere(kernel):
    ok, why = md.get_kernel(kernel).availability()
    assert ok and why == "pure torch; runs anywhere"


def test_the_own_quantization_writes_what_each_producer_writes(gen):
    x = random_tokens(4, 256, gen)
    layouts = {
        name: md.get_kernel(name, **CONTRACTS[name][0]).quantize_input(x, md.E4M3FN).scale_layout for name in CONTRACTS
    }
    assert layouts == {
        "aiter-triton-bpreshuffle": ScaleLayout.ROW_MAJOR,  # aiter's HIP group quant through QuantFP8.forward_hip
        "vllm-triton-blockscale": ScaleLayout.ROW_MAJOR,  # QuantFP8(column_major_scales=False)
        "sglang-triton-blockscale": ScaleLayout.COL_MAJOR_STRIDED,  # what SGLang's producers hand it
        "deepgemm": ScaleLayout.COL_MAJOR_STRIDED,  # column-major (TMA-aligned when M % 4 == 0)
    }
    hazard = md.get_kernel("sglang-triton-blockscale", input_scale_layout="row_major", selection="any")
    linear = md.kernels.BlockScaledLinear("q_b_proj", random_weight(256, 256, gen)).attach(hazard)
    call = linear.run(x)
    assert call.input.scale_layout is ScaleLayout.ROW_MAJOR and call.violations[0].effective
    v = call.violations[0]
    assert (v.tensor, v.consumer, v.expected, v.found) == (
        "q_b_proj.input_scale",
        "sglang-triton-blockscale",
        ScaleLayout.COL_MAJOR,
        ScaleLayout.ROW_MAJOR,
    )


def test_preshuffled_weight_is_read_as_shuffled(gen):
    weight = random_weight(256, 512, gen)
    linear = attached("aiter-triton-bpreshuffle", weight)
    assert linear.weight.layout.shuffle_count == 1 and linear.kernel.contract(linear).weight == (16, 16)
    qa = linear.kernel.quantize_input(random_tokens(3, 512, gen), weight.fmt)
    out = linear.run(qa).output
    assert torch.equal(out, attached("aiter-triton-bpreshuffle", weight, accumulation="blockwise").run(qa).output)
    assert_within_accumulation_bound(
        out, attached("torch-reference", weight).run(qa).output, accumulation_bound(qa, weight)
    )
    # A weight someone else already shuffled is shuffled again and read wrongly (at K=512: 512-byte rows).
    twice = md.kernels.BlockScaledLinear("proj", weight.shuffled((16, 16), by="model"))
    twice.attach(md.get_kernel("aiter-triton-bpreshuffle"))
    kinds = [v.kind for v in twice.run(qa).violations]
    assert kinds == [ViolationKind.DOUBLE_SHUFFLE]


def test_vllm_triton_accumulates_like_the_gfx1250_reference_on_gfx1250(gen):
    kernel = md.get_kernel("vllm-triton-blockscale")
    loaded = md.kernels.BlockScaledLinear("proj", random_weight(256, 512, gen))
    policy = md.KernelPolicy(["vllm-triton-blockscale"])
    loaded.load(policy, "gfx1250")
    assert loaded.platform.name == "gfx1250" and kernel.accumulation_for(loaded) == "dequant"
    assert kernel.accumulation_for(md.kernels.BlockScaledLinear("p", random_weight(128, 128, gen))) == "blockwise"
    qa = loaded.kernel.quantize_input(random_tokens(4, 512, gen), md.E4M3FN)
    assert torch.equal(loaded.run(qa).output, attached("torch-reference", loaded.weight).run(qa).output)
    with pytest.raises(ValueError, match="accumulation 'fast' is not one of auto, blockwise, dequant"):
        md.get_kernel("vllm-triton-blockscale", accumulation="fast")


@pytest.mark.parametrize(
    ("kernel", "plat", "ok", "words"),
    [
        ("vllm-triton-blockscale", "mi300x", True, "TritonFp8BlockScaledMMKernel takes every"),
        ("vllm-triton-blockscale", "h200", True, "takes every"),
        ("vllm-triton-blockscale", "cpu", False, "not cpu"),
        ("aiter-triton-bpreshuffle", "h200", False, "aiter kernels run on ROCm platforms"),
        ("sglang-triton-blockscale", "mi355x", False, "does not list (N=4096, K=512)"),
        ("sglang-triton-blockscale", "gfx1250", False, "apply on gfx95, not gfx1250"),
    ],
)
def test_who_takes_a_kv_b_proj_shard(kernel, plat, ok, words):
    problem = md.kernels.GemmProblem("kv_b_proj", 4096, 512, md.platform(plat).fp8, md.platform(plat))
    check = md.get_kernel(kernel).can_implement(problem)
    assert check.ok is ok and words in check.reason
