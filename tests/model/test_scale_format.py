"""quantization_config.scale_fmt "ue8m0" (DeepSeek-V3.1): the checkpoint's weight scales must be powers of
two, and a layer's activations are quantized with power-of-two scales exactly where the engine does so -
SGLang 0.5.23's DeepGEMM path on Hopper for such a checkpoint only; vLLM 0.33's DeepGEMM for every
checkpoint unless VLLM_USE_DEEP_GEMM_E8M0=0 is set, which a ue8m0 checkpoint does not override."""

from __future__ import annotations

import pytest
import torch

import mla_debug as md
from mla_debug.parallel.build import LayerBuilder

V31 = md.MLAConfig.preset("tiny").with_(name="tiny-v3.1", scale_fmt="ue8m0")
PLAIN = md.MLAConfig.preset("tiny")


def powers_of_two(t: torch.Tensor) -> bool:
    mantissa, _ = torch.frexp(t)
    return bool((mantissa == 0.5).all())


@pytest.fixture(scope="module")
def checkpoints():
    return {"ue8m0": md.Checkpoint.synthetic(V31, seed=2), "plain": md.Checkpoint.synthetic(PLAIN, seed=2)}


def test_a_ue8m0_checkpoint_has_power_of_two_weight_scales_and_refuses_others(checkpoints):
    ue8m0, plain = checkpoints["ue8m0"], checkpoints["plain"]
    scales = [k for k in ue8m0.tensors if k.endswith(".weight_scale_inv")]
    assert scales and all(powers_of_two(ue8m0.tensors[k]) for k in scales)
    assert not all(powers_of_two(plain.tensors[k]) for k in scales)
    # The same weights declared ue8m0 with amax/448 scales: the first offending scale (by tensor name) is named.
    with pytest.raises(ValueError, match=r"kv_a_proj_with_mqa.weight_scale_inv\[0, 0\] = .* is not a power of two"):
        md.Checkpoint(V31, 0, plain.tensors, True)


def test_a_ue8m0_checkpoint_quantized_from_dense_weights_gets_power_of_two_scales():
    dense = md.Checkpoint.synthetic(V31, seed=3, quantize=False).tensors
    ckpt = md.Checkpoint.from_state_dict(V31, dense, quantize=True)
    assert all(powers_of_two(t) for k, t in ckpt.tensors.items() if k.endswith(".weight_scale_inv"))


def test_a_saved_ue8m0_checkpoint_reads_back_with_its_format(checkpoints, tmp_path):
    path = checkpoints["ue8m0"].save(tmp_path / "v31")
    loaded = md.Checkpoint.load(path)
    assert loaded.cfg.scale_fmt == "ue8m0"
    assert torch.equal(
        loaded.tensors["q_b_proj.weight_scale_inv"], checkpoints["ue8m0"].tensors["q_b_proj.weight_scale_inv"]
    )


def input_scales(ckpt, scenario, platform: str) -> dict[str, tuple[str, torch.Tensor]]:
    """Per quantized linear of rank 0 at TP 2: the kernel that runs it and the scale its own input quant
    writes for a fixed activation."""
    builder = LayerBuilder(ckpt.cfg, ckpt, 2, platform, scenario, torch.bfloat16)
    layer = builder.rank_layer(0)
    out = {}
    gen = torch.Generator().manual_seed(7)
    for name, linear in layer.linears.items():
        x = torch.randn(5, linear.k, generator=gen).to(torch.bfloat16)
        call = linear.block.run(x)
        out[name] = (call.kernel, call.input.logical_scale())
    return out


def sglang():
    return md.scenario("sglang-0.5.23")


def test_sglang_on_hopper_quantizes_a_ue8m0_checkpoints_activations_with_power_of_two_scales(checkpoints):
    for name, (kernel, scale) in input_scales(checkpoints["ue8m0"], sglang(), "h200").items():
        assert kernel == "deepgemm" and powers_of_two(scale), name


def test_sglang_on_hopper_keeps_fp32_activation_scales_for_other_checkpoints(checkpoints):
    scales = input_scales(checkpoints["plain"], sglang(), "h200")
    assert {kernel for kernel, _ in scales.values()} == {"deepgemm"}
    assert not all(powers_of_two(scale) for _, scale in scales.values())


def test_sglang_off_deepgemm_ignores_the_scale_format(checkpoints):
    # ROCm (aiter off: SGLang's Triton GEMM) and NVIDIA without DeepGEMM: no rule passes the format on.
    for scenario, platform in (
        (sglang(), "mi355x"),
        (sglang().with_settings({"SGLANG_ENABLE_JIT_DEEPGEMM": "0"}), "h200"),
    ):
        scales = input_scales(checkpoints["ue8m0"], scenario, platform)
        assert "deepgemm" not in {kernel for kernel, _ in scales.values()}
        assert not all(powers_of_two(scale) for _, scale in scales.values()), platform


def test_vllm_deepgemm_scales_follow_its_env_var_not_the_checkpoint(checkpoints):
    # These 5-row calls would go to FlashInfer's swapAB GEMM (M < 32, its own quantizer): DeepGEMM for every M.
    vllm = md.scenario("vllm-0.33").with_settings({"VLLM_BLOCKSCALE_FP8_GEMM_FLASHINFER": "0"})
    for ckpt in checkpoints.values():
        on = input_scales(ckpt, vllm, "h200")
        assert all(kernel == "deepgemm" and powers_of_two(scale) for kernel, scale in on.values())
        off = input_scales(ckpt, vllm.with_settings({"VLLM_USE_DEEP_GEMM_E8M0": "0"}), "h200")
        assert not all(powers_of_two(scale) for _, scale in off.values())


def test_the_reference_never_rounds_activation_scales(checkpoints):
    scales = input_scales(checkpoints["ue8m0"], md.scenario("reference"), "h200")
    assert not all(powers_of_two(scale) for _, scale in scales.values())
