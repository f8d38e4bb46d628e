"""The triton-* kernels as scenarios use them: flags, selection, stand-in options, and where they compute."""

from __future__ import annotations

import pytest
import torch
from helpers import linear, random_tokens, random_weight

import mla_debug as md

PAIRS = [("triton-blockscale", "aiter-blockscale"), ("triton-bpreshuffle", "aiter-bpreshuffle")]


@pytest.mark.parametrize(("triton", "aiter"), PAIRS)
def test_capability_flags_equal_the_aiter_kernels(triton, aiter):
    t, a = md.kernels.kernel_class(triton), md.kernels.kernel_class(aiter)
    for flag in ("wants_transposed_act_scale", "preshuffles_weight", "act_scale_layout"):
        assert getattr(t, flag) == getattr(a, flag), flag
    assert t.stands_in_for == aiter


@pytest.mark.parametrize(("triton", "aiter"), PAIRS)
def test_without_triton_on_cpu_tensors_they_compute_exactly_as_the_emulation(triton, aiter, gen):
    weight = random_weight(256, 512, gen)
    copy = md.QuantizedWeight(weight.data.clone(), weight.scale.clone(), weight.fmt)
    tri, emu = linear("proj", weight, triton), linear("proj", copy, aiter)
    x = random_tokens(7, 512, gen)
    assert torch.equal(tri(x), emu(x))
    assert torch.equal(tri.weight.data.view(torch.uint8), emu.weight.data.view(torch.uint8))  # same load step


def test_scenario_options_of_the_aiter_kernel_reach_its_stand_in():
    policy = md.scenario("vllm-pr51692").policy("h200")
    assert policy.kernel("triton-bpreshuffle").honour_layer_flags is False
    assert md.scenario("vllm-pr56433").policy("h200").kernel("triton-bpreshuffle").honour_layer_flags is True
    own = md.KernelPolicy(
        ["triton-bpreshuffle"],
        kernel_options={"aiter-bpreshuffle": {"honour_layer_flags": False}, "triton-bpreshuffle": {}},
    )
    assert own.kernel("triton-bpreshuffle").honour_layer_flags is True  # its own options win


def test_disabling_the_aiter_kernel_disables_its_stand_in():
    policy = md.KernelPolicy.for_platform(
        "h200", tuned=md.kernels.TunedTable.embedded(), disabled="AiterPreshuffledFp8BlockScaledMMKernel"
    )
    kernel, reason = policy.select("o_proj", 7168, 16384, "h200")
    assert kernel.name == "triton-blockscale" and "triton-bpreshuffle disabled" in reason


def test_pr51692_on_h200_reproduces_the_kv_b_proj_bug_through_the_stand_in():
    result = md.triage("mini", "h200", "vllm-pr51692", tp_sizes=(1, 4), progress=False, device="cpu")
    assert result.device == "cpu"
    assert [(c.tp, c.mode) for c in result.configs if c.verdict == "diverged"] == [(4, "decode")]
    (culprit,) = result.culprits
    assert culprit.layer == "kv_b_proj"
    assert "triton-bpreshuffle re-laid out the weight" in culprit.explanation
    assert "honouring skip_weight_relayout in triton-bpreshuffle (as aiter-bpreshuffle)" in culprit.explanation


def test_selection_reasons_name_the_rocm_card_the_table_belongs_to():
    kernel = md.get_kernel("triton-bpreshuffle", tuned_as="mi308x")
    problem = md.kernels.GemmProblem(
        "o_proj", 7168, 7168, md.E4M3FN, md.platform("h200"), tuned=md.kernels.TunedTable.embedded()
    )
    ok, why = kernel.can_implement(problem)
    assert ok and "gfx942/cu80" in why and "selection as on mi308x" in why
    with pytest.raises(ValueError, match="tuned_as='h200' must name a ROCm platform"):
        md.get_kernel("triton-bpreshuffle", tuned_as="h200")


@pytest.mark.parametrize(
    ("n", "k", "platform", "message"),
    [
        (7000, 1024, "h200", "N=7000 is not a multiple of 16"),
        (7168, 1000, "h200", "K=1000 is not a multiple of 128"),
        (7168, 1024, "cpu", "model GPU serving platforms, not cpu"),
    ],
)
def test_shapes_and_platforms_they_refuse_say_why(n, k, platform, message):
    ok, why = md.get_kernel("triton-blockscale").can_implement(
        md.kernels.GemmProblem("p", n, k, md.E4M3FN, md.platform(platform))
    )
    assert not ok and message in why


def test_backend_option(gen, monkeypatch):
    with pytest.raises(ValueError, match="backend 'cuda' is not one of auto, triton, emulation"):
        md.get_kernel("triton-blockscale", backend="cuda")
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    lin = linear("q_b_proj", random_weight(32, 256, gen), "triton-blockscale", backend="triton")
    with pytest.raises(RuntimeError, match=r"q_b_proj|backend='triton' but tensors on cpu cannot go through Triton"):
        lin(random_tokens(2, 256, gen))
    assert md.get_kernel("triton-blockscale", backend="emulation").availability()[0]
