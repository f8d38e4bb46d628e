"""A triage whose diverging step is consumed by aiter's own kernel, not by an emulation of it.

SGLang 0.5.23's Triton shapes on gfx95 hand aiter's Triton ``gemm_a8w8_blockscale`` an ``as_strided(scale, shape,
(1, M))`` view of a pre-quantized activation scale; aiter's GEMM reads that view by its strides. With the kernel
option ``gemm="aiter-triton"`` the SGLang consumer calls aiter's real kernel (amd-aiter 0.1.7.post2.dev18) with
that view, so in the what-if of a row-major producer (data/engines/hazards/sglang-triton-row-major-scale.yaml)
the first divergent step is a real aiter launch reading the misread scale. Here on CPU tensors under Triton's
interpreter with a small model whose q_b_proj (3072 x 1536) is on SGLang's Triton list; on a GPU with
DeepSeek-V3 itself (fused_qkv_a_proj, 2112 x 7168, on the list at every TP size).

And what the earlier check of this kind showed, in numbers: with aiter's GEMM in vLLM PR #51692's plain-kernel
slot, aiter's kernel runs only the layers the preshuffled kernel refuses - none at TP4 and TP8, where the
kv_b_proj defect is found - so that defect comes from our kernel, not aiter's.
"""

from __future__ import annotations

import pytest
import torch
from aiter_ref import require_aiter, triton_semantics

import mla_debug as md
from mla_debug.gpu import aiter_triton

HAZARD = md.scenarios.data_folder() / "engines" / "hazards" / "sglang-triton-row-major-scale.yaml"
THROUGH_AITER = "sglang-triton-blockscale (aiter's Triton gemm_a8w8_blockscale behind the view)"


def through_aiter() -> md.Scenario:
    """The hazard, with aiter's real GEMM behind SGLang's view (the rules keep selection and re-layout)."""
    hazard = md.scenario(HAZARD)
    assert hazard.reachable.what_if
    data = {
        "name": "row-major-scale-into-aiters-gemm",
        "base": "sglang-0.5.23",
        "settings": {"SGLANG_USE_AITER": "1", "hip_version": "7.2"},
        "kernel_options": {"sglang-triton-blockscale": {"input_scale_layout": "row_major", "gemm": "aiter-triton"}},
    }
    return md.scenario(data)


@pytest.fixture
def launches(monkeypatch) -> list[tuple]:
    """Every launch of aiter's GEMM: (x shape, w shape, the strides of the scale it was handed)."""
    seen: list[tuple] = []
    real = aiter_triton.gemm_a8w8_blockscale

    def spy(x, w, x_scale, w_scale, arch, config=None):
        seen.append((tuple(x.shape), tuple(w.shape), tuple(x_scale.stride())))
        return real(x, w, x_scale, w_scale, arch, config)

    monkeypatch.setattr(aiter_triton, "gemm_a8w8_blockscale", spy)
    return seen


def check(result, step: str, layer: str, n: int, k: int, launches: list[tuple], tokens: int) -> None:
    for config in result.configs:
        assert config.verdict == "diverged" and config.diff.first_divergent_step == step
        record = config.diff.run.records[step]
        assert record.kernel == THROUGH_AITER
        assert md.layouts.ViolationKind.SCALE_ORDER in {v.kind for v in record.violations if v.effective}
    # aiter's kernel ran that layer, handed SGLang's (1, M)-strided view of the row-major bytes
    assert ((tokens, k), (n, k), (1, tokens)) in launches
    assert {c.layer for c in result.culprits} == {layer}


@pytest.mark.slow
def test_on_cpu_tensors_under_the_interpreter_aiters_gemm_consumes_the_misread_scale(launches):
    require_aiter()
    if torch.cuda.is_available():
        pytest.skip("the interpreted form; on a GPU test_on_a_gpu_... runs aiter's compiled kernel")
    if aiter_triton.unavailable_reason(torch.device("cpu")) is not None:
        pytest.skip(aiter_triton.unavailable_reason(torch.device("cpu")))
    model = md.MLAConfig.preset("tiny").with_(name="tiny-q1536", q_lora_rank=1536)  # q_b_proj: 3072 x 1536
    with triton_semantics():
        result = md.triage(model, "mi355x", through_aiter(), tp_sizes=(1,), tokens=4, device="cpu", progress=False)
    check(result, "q_b_proj", "q_b_proj", 3072, 1536, launches, 4)


@pytest.mark.gpu
def test_on_a_gpu_deepseek_v3s_first_gemm_is_aiters_and_reads_the_misread_scale(launches):
    require_aiter()
    # an AMD platform triages on the CPU by default: the GPU is asked for, to run aiter's compiled kernel
    result = md.triage(
        "deepseek-v3", "mi355x", through_aiter(), tp_sizes=(1, 8), tokens=8, device="cuda", progress=False
    )
    assert result.device == "cuda"
    check(result, "fused_qkv_a", "fused_qkv_a_proj", 2112, 7168, launches, 8)


def test_in_pr51692s_plain_slot_aiters_gemm_runs_only_what_the_preshuffled_kernel_refuses():
    """The kernel choice of the earlier GPU check, per TP size (the policy decides it, on any device)."""
    scen = md.scenario(
        {
            "name": "pr51692-aiter-triton-gemm",
            "base": "vllm-pr51692",
            "priority": ["triton-bpreshuffle", "aiter-triton-blockscale", "torch-reference"],
        }
    )
    policy, h200 = scen.policy("h200"), md.platform("h200")
    shapes = {
        "fused_qkv_a_proj": (2112, 7168),
        "q_b_proj": (24576, 1536),
        "kv_b_proj": (32768, 512),
        "o_proj": (7168, 16384),
    }
    aiters = {}
    for tp in (1, 2, 4, 8):
        chosen = {}
        for name, (n, k) in shapes.items():
            n, k = (n // tp, k) if name in ("q_b_proj", "kv_b_proj") else (n, k // tp if name == "o_proj" else k)
            chosen[name] = policy.choose(name, n, k, h200, fmt=md.E4M3FN)[0].name
        aiters[tp] = sorted(name for name, kernel in chosen.items() if kernel == "aiter-triton-blockscale")
    assert aiters == {1: ["kv_b_proj", "q_b_proj"], 2: ["kv_b_proj", "o_proj", "q_b_proj"], 4: [], 8: []}
