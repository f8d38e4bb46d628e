"""Triage under the vLLM 0.33 profile shows the paths the release takes: on an H200, FlashInfer's swapAB GEMM for
decode-sized calls and W_UK/W_UV read through kv_b_proj's own kernel from its ue8m0-re-quantized weight; on ROCm,
the aiter FP8 BMM setting is a candidate workaround in both directions where it changes what runs."""

from __future__ import annotations

import json

import pytest

import mla_debug as md
from mla_debug.triage.changes import setting_changes


@pytest.mark.slow
def test_deepseek_v3_under_vllm_0_33_on_h200_shows_flashinfer_decode_and_requantized_w_uk_w_uv():
    result = md.triage("deepseek-v3", "h200", "vllm-0.33", tp_sizes=(8,), modes=("decode",), tokens=8, progress=False)
    config = result.config(8, "decode")
    assert config.verdict == "ok"
    run = config.diff.run
    for step in ("fused_qkv_a", "q_b_proj", "o_proj"):
        assert run.records[step].kernel == "flashinfer-deepgemm: FlashInfer swapAB (M=8 < 32)", step
        assert run.kernels[step.replace("fused_qkv_a", "fused_qkv_a_proj")].kernel == "flashinfer-deepgemm"
    for step in ("absorb_uk", "absorb_uv"):
        assert run.records[step].kernel == (
            "bmm (W_UK/W_UV from kv_b_proj's kernel on an identity: flashinfer-deepgemm: DeepGEMM (M=512 >= 32), "
            "of the weight its kernel re-quantized at load (ue8m0 block scales))"
        )
    events = run.events["kv_b_proj"]
    assert "flashinfer-deepgemm: weight re-quantized to ue8m0 block scales at load (vllm-0.33)" in events
    assert any(e.startswith("W_UK/W_UV computed by kv_b_proj's own kernel on an identity matrix") for e in events)
    # the typed report, and its JSON, say the same
    report = result.report()
    steps = {s.name: s.kernel for s in report.runs[0].steps}
    assert steps["q_b_proj"].endswith("FlashInfer swapAB (M=8 < 32)") and "re-quantized" in steps["absorb_uk"]
    assert [r.id for r in report.profile.rules if r.id.startswith(("nvidia-hopper", "mla-absorbed"))] == [
        "nvidia-hopper-flashinfer-deepgemm",
        "mla-absorbed-weights-at-activation-dtype",
        "mla-absorbed-weights-through-the-kernel",
    ]
    again = type(report).from_dict(json.loads(json.dumps(report.to_dict())))
    assert {s.name: s.kernel for s in again.runs[0].steps} == steps


def test_the_aiter_fp8_bmm_is_offered_on_or_off_where_it_changes_what_runs():
    aiter = md.scenario("vllm-0.33").with_settings({"VLLM_ROCM_USE_AITER": "1"})
    assert ("VLLM_ROCM_USE_AITER_FP8BMM", "1") in {
        (c.target, c.value) for c in setting_changes(aiter.resolve("mi300x"))
    }
    on = aiter.with_settings({"VLLM_ROCM_USE_AITER_FP8BMM": "1"}).resolve("mi300x")
    assert ("VLLM_ROCM_USE_AITER_FP8BMM", "0") in {(c.target, c.value) for c in setting_changes(on)}
    # without aiter the setting does nothing, so it is not offered
    plain = md.scenario("vllm-0.33").resolve("mi300x")
    assert "VLLM_ROCM_USE_AITER_FP8BMM" not in {c.target for c in setting_changes(plain)}


def test_flashinfer_off_is_offered_on_hopper():
    offered = {(c.target, c.value) for c in setting_changes(md.scenario("vllm-0.33").resolve("h200"))}
    assert {("VLLM_BLOCKSCALE_FP8_GEMM_FLASHINFER", "0"), ("VLLM_BATCH_INVARIANT", "1")} <= offered
