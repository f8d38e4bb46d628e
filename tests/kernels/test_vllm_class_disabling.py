"""Disabling by vLLM class name, as ``VLLM_DISABLED_KERNELS`` does: a class several kernels model (vLLM 0.33's
AiterFp8BlockScaledMMKernel and its three aiter backends) takes all of them, whichever of its names is
given; the seed scenarios' workaround settings stay what they were."""

from __future__ import annotations

import pytest

import mla_debug as md
from mla_debug.kernels import KernelChoice
from mla_debug.triage.changes import candidate_workarounds, vllm_class_name

AITER_BACKENDS = ["aiter-blockscale", "aiter-triton-blockscale", "aiter-triton-bpreshuffle"]


def test_each_vllm_class_and_the_kernels_that_model_it():
    assert set(AITER_BACKENDS) <= set(md.kernels.kernels_of_vllm_class("AiterFp8BlockScaledMMKernel"))
    assert md.kernels.kernels_of_vllm_class("TritonFp8BlockScaledMMKernel") == ["vllm-triton-blockscale"]
    assert md.kernels.kernels_of_vllm_class("DeepGemmFp8BlockScaledMMKernel") == ["deepgemm"]
    assert md.kernels.kernels_of_vllm_class("BlockWiseTorchFP8ScaledMMLinearKernel") == ["cublas-blockwise"]
    assert md.kernels.vllm_class_of("sglang-triton-blockscale") is None  # SGLang's; no vLLM class
    # The class name is an alias of exactly one kernel (the one a vLLM user means by it).
    assert md.kernels.kernel_class("AiterFp8BlockScaledMMKernel").name == "aiter-blockscale"


@pytest.mark.parametrize("spelling", ["AiterFp8BlockScaledMMKernel", "aiter-blockscale"])
def test_disabling_the_class_disables_every_backend(spelling):
    policy = md.KernelPolicy([*AITER_BACKENDS, "vllm-triton-blockscale"], disabled=spelling)
    assert all(policy.is_disabled(name) for name in AITER_BACKENDS)
    assert not policy.is_disabled("vllm-triton-blockscale")
    kernel, reason = policy.select("kv_b_proj", 4096, 512, "gfx1250")
    assert kernel.name == "vllm-triton-blockscale"
    assert reason.endswith(
        "skipped aiter-blockscale disabled, aiter-triton-blockscale disabled, aiter-triton-bpreshuffle disabled"
    )


def test_disabling_one_backend_by_its_own_name_leaves_the_others():
    policy = md.KernelPolicy(AITER_BACKENDS, disabled="aiter-triton-bpreshuffle")
    assert [policy.is_disabled(name) for name in AITER_BACKENDS] == [False, False, True]


def test_seed_workarounds_keep_their_settings():
    pr51692 = md.scenario("vllm-pr51692")
    kernels = {
        "q_b_proj": KernelChoice("aiter-bpreshuffle", "tuned"),
        "o_proj": KernelChoice("aiter-blockscale", "plain"),
        "kv_b_proj": KernelChoice("triton-bpreshuffle", "tuned"),
    }
    changes = candidate_workarounds(pr51692, kernels)
    assert [(c.target, c.setting) for c in changes] == [
        ("aiter-bpreshuffle", "AiterPreshuffledFp8BlockScaledMMKernel"),
        ("aiter-blockscale", "AiterFp8BlockScaledMMKernel"),
    ]


def test_a_backend_is_disabled_through_its_class():
    kernels = {"kv_b_proj": KernelChoice("aiter-triton-bpreshuffle", "tuned")}
    (change,) = candidate_workarounds(md.scenario("vllm-baseline"), kernels)
    assert (change.target, change.setting) == ("aiter-blockscale", "AiterFp8BlockScaledMMKernel")
    assert change.description == (
        "disabling aiter-triton-bpreshuffle (as aiter-blockscale) (VLLM_DISABLED_KERNELS=AiterFp8BlockScaledMMKernel)"
    )
    assert vllm_class_name("deepgemm") == "DeepGemmFp8BlockScaledMMKernel"
