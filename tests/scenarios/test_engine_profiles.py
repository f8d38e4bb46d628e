"""The shipped engine profiles (data/engines/*.yaml): each loads, is a named scenario, round-trips through
plain data, and resolves per platform and settings to what the release does (the rules read from the
wheels; their sources are checked in test_profile_sources.py). The hazard files' divergences are reproduced
in test_hazards.py."""

from __future__ import annotations

import pytest

import mla_debug as md
from mla_debug.scenarios import engine_profile_files

PROFILES = engine_profile_files()


def resolved(name: str, platform: str, **sets) -> md.Scenario:
    scen = md.scenario(name)
    return (scen.with_settings(sets) if sets else scen).resolve(platform)


def rules(scen: md.Scenario) -> list[str]:
    return [r.id for r in scen.resolution.rules]


def test_the_releases_are_shipped():
    assert {"vllm-0.33", "sglang-0.5.23"} <= set(PROFILES)


@pytest.mark.parametrize("name", sorted(PROFILES))
def test_a_profile_loads_by_name_and_round_trips(name):
    scen = md.scenario(name)
    assert scen.name == name and scen.engine is not None and scen.rules
    assert all(rule.source is not None for rule in scen.rules)
    assert all(setting.source is not None for setting in scen.settings.values())
    data = scen.to_dict()
    assert md.Scenario.from_dict(data) == scen
    assert md.Scenario.from_file(PROFILES[name]) == scen


# -- vLLM 0.33 ---------------------------------------------------------------------------------------


def test_vllm_on_rocm_runs_its_own_triton_gemm_while_aiter_is_off():
    scen = resolved("vllm-0.33", "mi355x")
    assert scen.priority == ("vllm-triton-blockscale", "torch-reference")
    assert rules(scen) == [
        "rocm-block-fp8-list",
        "mla-rope-pairs-interleaved",
        "mla-absorbed-weights-at-activation-dtype",
    ]
    assert not scen.behaviour.honours_rope_interleave
    assert scen.behaviour.absorbed_weight_dtype == "bf16"
    assert not scen.behaviour.v3_fused_norm_quant


def test_vllm_with_aiter_on_gfx950_picks_aiters_triton_or_ck_gemm_and_fuses_the_v3_producer():
    scen = resolved("vllm-0.33", "mi355x", VLLM_ROCM_USE_AITER="1")
    assert scen.priority == ("aiter-triton-blockscale", "aiter-blockscale", "vllm-triton-blockscale", "torch-reference")
    assert scen.kernel_options["aiter-triton-blockscale"] == {"selection": "vllm-0.33"}
    assert (scen.behaviour.v3_fused_norm_quant, scen.behaviour.v3_fused_transpose_scale) == (True, False)
    assert scen.behaviour.v4_model_preshuffle and scen.behaviour.skip_model_shuffle_if_kernel_preshuffles
    assert "aiter-triton-bpreshuffle" not in scen.priority  # gfx1250 only
    unfused = resolved("vllm-0.33", "mi355x", VLLM_ROCM_USE_AITER="1", **{"--optimization-level": "0"})
    assert not unfused.behaviour.v3_fused_norm_quant
    linear_off = resolved("vllm-0.33", "mi355x", VLLM_ROCM_USE_AITER="1", VLLM_ROCM_USE_AITER_LINEAR="0")
    assert linear_off.priority == ("vllm-triton-blockscale", "torch-reference")


def test_vllm_with_aiter_on_gfx1250_puts_the_preshuffled_triton_gemm_first_honouring_only_is_bmm():
    scen = resolved("vllm-0.33", "gfx1250", VLLM_ROCM_USE_AITER="1")
    assert scen.priority[0] == "aiter-triton-bpreshuffle"
    assert scen.kernel_options["aiter-triton-bpreshuffle"] == {"honour_layer_flags": False}
    assert not scen.behaviour.v4_model_preshuffle


@pytest.mark.parametrize(("platform", "e8m0"), [("h200", "1"), ("h200", "0"), ("b200", "1")])
def test_vllm_on_nvidia_runs_deepgemm_with_ue8m0_scales_by_default(platform, e8m0):
    scen = resolved("vllm-0.33", platform, VLLM_USE_DEEP_GEMM_E8M0=e8m0)
    first = "flashinfer-deepgemm" if platform == "h200" else "deepgemm"
    assert scen.priority[0] == first
    assert scen.kernel_options[first] == {"ue8m0": e8m0 == "1", "flavor": "vllm-cuda"}
    without = resolved("vllm-0.33", platform, VLLM_USE_DEEP_GEMM="0")
    assert without.priority[0] == "cublas-blockwise"
    assert without.behaviour.absorbed_weights_via == "direct-read"


@pytest.mark.parametrize(
    "sets",
    [{}, {"VLLM_BLOCKSCALE_FP8_GEMM_FLASHINFER": "0"}, {"flashinfer_kernels": "false"}, {"VLLM_BATCH_INVARIANT": "1"}],
)
def test_vllm_on_hopper_sends_small_m_to_flashinfer_unless_it_is_off(sets):
    scen = resolved("vllm-0.33", "h200", **sets)
    assert scen.behaviour.absorbed_weights_via == "kernel-identity"
    if not sets:
        assert scen.priority[:2] == ("flashinfer-deepgemm", "deepgemm")
        assert "swap_ab_below" not in scen.kernel_options["flashinfer-deepgemm"]
    elif "VLLM_BATCH_INVARIANT" in sets:
        assert scen.kernel_options["flashinfer-deepgemm"]["swap_ab_below"] == 0
    else:
        assert scen.priority[0] == "deepgemm"


def test_vllm_fp8_bmm_re_quantizes_w_uk_w_uv_per_tensor_on_rocm_with_aiter():
    assert resolved("vllm-0.33", "mi300x", VLLM_ROCM_USE_AITER_FP8BMM="1").behaviour.absorbed_weight_dtype == "bf16"
    for platform in ("mi300x", "mi355x"):
        scen = resolved("vllm-0.33", platform, VLLM_ROCM_USE_AITER="1", VLLM_ROCM_USE_AITER_FP8BMM="1")
        assert (scen.behaviour.absorbed_weight_dtype, scen.behaviour.absorbed_bmm) == (
            "fp8-per-tensor-from-bf16",
            "fp8-group-quant",
        )
        assert "rocm-aiter-fp8-bmm" in rules(scen)


# -- SGLang 0.5.23 -----------------------------------------------------------------------------------


def test_sglang_on_rocm_without_aiter_runs_its_triton_consumer_and_per_tensor_absorbed_weights():
    scen = resolved("sglang-0.5.23", "mi355x")
    assert scen.priority == ("sglang-triton-blockscale", "torch-reference")
    # triton_w8a8_block_fp8_linear reads its own row-major scale by strides: no re-layout, every shape
    assert scen.kernel_options["sglang-triton-blockscale"] == {"selection": "any", "relayout": False}
    assert scen.behaviour.absorbed_weight_dtype == "fp8-per-tensor"
    assert scen.behaviour.load_order == "standard"


def test_sglang_with_aiter_on_gfx950_preshuffles_from_hip_7_2_on():
    new = resolved("sglang-0.5.23", "mi355x", SGLANG_USE_AITER="1")
    # the hard-coded Triton shapes first, through the as_strided (1, M) view of a pre-quantized scale
    assert new.priority[:3] == ("sglang-triton-blockscale", "aiter-bpreshuffle", "aiter-blockscale")
    assert new.kernel_options["sglang-triton-blockscale"] == {"selection": "sglang-0.5.23", "relayout": True}
    assert new.kernel_options["aiter-bpreshuffle"] == {"selection": "sglang-0.5.23"}
    old = resolved("sglang-0.5.23", "mi355x", SGLANG_USE_AITER="1", hip_version="7.0")
    assert "aiter-bpreshuffle" not in old.priority
    assert old.kernel_options["aiter-triton-blockscale"] == {"selection": "sglang-0.5.23"}
    forced = resolved("sglang-0.5.23", "mi355x", SGLANG_USE_AITER="1", **{"--fp8-gemm-backend": "triton"})
    assert forced.priority == ("sglang-triton-blockscale", "torch-reference")
    assert forced.kernel_options["sglang-triton-blockscale"]["relayout"] is False


def test_sglang_with_aiter_on_gfx942_runs_aiters_triton_gemm_unless_ck_is_asked_for():
    assert resolved("sglang-0.5.23", "mi300x", SGLANG_USE_AITER="1").priority[0] == "aiter-triton-blockscale"
    ck = resolved("sglang-0.5.23", "mi300x", SGLANG_USE_AITER="1", SGLANG_AITER_GFX942_BLOCKSCALE_USE_CK="1")
    assert ck.priority[0] == "aiter-blockscale"


@pytest.mark.parametrize(("platform", "ue8m0"), [("h200", False), ("b200", True)])
def test_sglang_on_nvidia_runs_deepgemm_and_bf16_absorbed_weights(platform, ue8m0):
    scen = resolved("sglang-0.5.23", platform)
    # DeepGEMM's input quant follows a ue8m0 checkpoint's scale format (Fp8LinearMethod's act_scale_ue8m0).
    assert scen.priority[0] == "deepgemm"
    assert scen.kernel_options["deepgemm"] == {"ue8m0": ue8m0, "follow_scale_fmt": True}
    assert scen.behaviour.absorbed_weight_dtype == "bf16"


def test_sglang_remote_kv_loading_is_a_load_order():
    scen = resolved("sglang-0.5.23", "mi355x", **{"--load-format": "remote", "remote_connector": "kv"})
    assert scen.behaviour.load_order == "remote-kv" and rules(scen)[-1] == "remote-kv-load-order"
    assert resolved("sglang-0.5.23", "mi355x", **{"--load-format": "remote"}).behaviour.load_order == "standard"


@pytest.mark.parametrize(
    ("load_format", "rule"),
    [("sharded_state", "sharded-state-load-order"), ("remote_instance", "remote-instance-load-order")],
)
def test_sglang_loaders_that_copy_a_processed_state_in_take_the_remote_kv_order(load_format, rule):
    scen = resolved("sglang-0.5.23", "mi355x", **{"--load-format": load_format})
    assert scen.behaviour.load_order == "remote-kv" and rules(scen)[-1] == rule


def test_sglang_on_gfx942_multiplies_w_uk_in_fp8_under_cuda_graphs_with_or_without_aiter():
    for aiter in ("0", "1"):
        scen = resolved("sglang-0.5.23", "mi300x", SGLANG_USE_AITER=aiter)
        assert scen.behaviour.absorbed_bmm == "fp8-group-quant-uk"
        assert "mla-absorbed-fp8-bmm-gfx942-cuda-graph" in rules(scen)
    eager = resolved("sglang-0.5.23", "mi300x", **{"--disable-decode-cuda-graph": "true"})
    assert eager.behaviour.absorbed_bmm == "dequantized"
    assert resolved("sglang-0.5.23", "mi355x", SGLANG_USE_AITER="1").behaviour.absorbed_bmm == "fp8-group-quant"
    assert resolved("sglang-0.5.23", "mi355x").behaviour.absorbed_bmm == "dequantized"


@pytest.mark.parametrize(
    ("name", "platform", "sets"),
    [
        ("vllm-0.33", "mi355x", {}),
        ("vllm-0.33", "mi355x", {"VLLM_ROCM_USE_AITER": "1"}),
        ("sglang-0.5.23", "mi355x", {"SGLANG_USE_AITER": "1"}),
        ("vllm-0.33", "h200", {}),
    ],
)
def test_a_triage_under_a_profile_records_its_resolution(name, platform, sets):
    scen = resolved(name, platform, **sets)
    result = md.triage(
        "mini", platform, md.scenario(name).with_settings(sets) if sets else name, tp_sizes=(2,), device="cpu"
    )
    report = result.report()
    assert report.profile == scen.resolution
    assert md.triage.TriageReport.from_dict(report.to_dict()) == report
