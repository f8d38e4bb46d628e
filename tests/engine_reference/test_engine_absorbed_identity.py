"""W_UK / W_UV of vLLM 0.33.0 on Hopper and Blackwell: the linear's kernel on an identity, from re-quantized bytes.

``Fp8LinearMethod.__init__`` sets ``use_deep_gemm = is_deep_gemm_supported()`` (``layers/quantization/fp8.py``),
and ``get_and_maybe_dequant_weights`` (``utils/quant_utils.py``) then skips ``scaled_dequantize`` and returns
``quant_method.apply(layer, eye(K, dtype=out_dtype)).T`` - after the kernel re-quantized kv_b_proj to ue8m0 at
load (``requant_weight_ue8m0_inplace``). Checked here against the released functions:

- the engine's ``get_and_maybe_dequant_weights``, run with the layer's quant method a stand-in whose ``apply``
  is the emulated kernel, takes the identity branch for a ``use_deep_gemm`` layer (and ``scaled_dequantize``
  otherwise), and returns exactly what `model.absorbed.identity_read` returns;
- on Hopper (FlashInfer/DeepGEMM, the identity's 512 rows take DeepGEMM) and Blackwell (DeepGEMM), that is
  the bf16 of the weight the wheel's ``requant_weight_ue8m0_inplace`` leaves, bit for bit - not the bf16 of
  the checkpoint's bytes the direct read gives.

The stand-ins: ``vllm.model_executor.layers.{linear,quantization.fp8,quantization.online.fp8}``, which the
function imports only to ask ``isinstance`` of the quant method; the requant's platform (test_kernel_layouts_vs_engines).
"""

from __future__ import annotations

import sys
import types

import pytest
import torch
from engine_source import load
from engine_wheels import require, source
from test_kernel_layouts_vs_engines import VLLM_QUANT_UTILS, wheel_requant

import mla_debug as md
from mla_debug.model.absorbed import identity_read
from mla_debug.model.linear import QuantizedLinear
from mla_debug.numerics.quantize import block_dequantize

VLLM_FP8 = "vllm/model_executor/layers/quantization/fp8.py"
HEADS, NOPE, V_DIM, LORA = 2, 128, 128, 512  # kv_b_proj of two heads: N = 512, K = kv_lora_rank


def kv_b_proj(seed: int) -> md.QuantizedWeight:
    gen = torch.Generator().manual_seed(seed)
    w = torch.randn(HEADS * (NOPE + V_DIM), LORA, generator=gen) * torch.logspace(-3, 0, LORA)
    return md.layouts.quantize_blocks(w, fmt=md.E4M3FN, flavor="deepseek")


class Fp8LinearMethod:
    """Stands in for vLLM's class (only isinstance is asked of it): its flags, and ``apply`` by the emulated
    kernel of the loaded linear, recording what the engine handed it."""

    def __init__(self, linear: QuantizedLinear, use_deep_gemm: bool) -> None:
        self.linear, self.use_deep_gemm, self.use_marlin, self.block_quant = linear, use_deep_gemm, False, True
        self.inputs: list[torch.Tensor] = []

    def apply(self, layer, x: torch.Tensor, bias=None) -> torch.Tensor:
        assert bias is None
        self.inputs.append(x)
        return self.linear.run(x).output


def wheel_get_and_maybe_dequant_weights(monkeypatch):
    for name in ("vllm", "vllm.model_executor", "vllm.model_executor.layers"):
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    unquantized = type("UnquantizedLinearMethod", (), {})
    online = type("Fp8PerTensorOnlineLinearMethod", (), {})
    stand_ins = {
        "vllm.model_executor.layers.linear": types.SimpleNamespace(UnquantizedLinearMethod=unquantized),
        "vllm.model_executor.layers.quantization.fp8": types.SimpleNamespace(Fp8LinearMethod=Fp8LinearMethod),
        "vllm.model_executor.layers.quantization.online.fp8": types.SimpleNamespace(
            Fp8PerTensorOnlineLinearMethod=online
        ),
    }
    for name, module in stand_ins.items():
        monkeypatch.setitem(sys.modules, name, module)
    names = ["group_broadcast", "prep_scale_for_group_broadcast", "scaled_dequantize", "get_attribute_fallback"]
    fns = load(
        "vllm", VLLM_QUANT_UTILS, [*names, "get_and_maybe_dequant_weights"], {"torch": torch, "GroupShape": list}
    )
    return fns["get_and_maybe_dequant_weights"]


def loaded(platform: str, scenario: str = "vllm-0.33") -> QuantizedLinear:
    linear = QuantizedLinear("kv_b_proj", kv_b_proj(3), skip_weight_relayout=True)
    return linear.load(md.scenario(scenario).policy(platform), platform)


def layer_of(linear: QuantizedLinear, method: Fp8LinearMethod) -> types.SimpleNamespace:
    weight = linear.block.weight
    return types.SimpleNamespace(
        weight=weight.data,
        weight_scale_inv=weight.scale,
        weight_block_size=[128, 128],
        quant_method=method,
        input_size_per_partition=linear.k,
    )


def bits(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view(torch.int16 if t.element_size() == 2 else torch.int32)


def test_fp8_linear_method_asks_for_deep_gemm_and_the_dequant_skips_it():
    require("vllm")
    init = source("vllm", VLLM_FP8)
    assert "self.use_deep_gemm = is_deep_gemm_supported()" in init
    text = source("vllm", VLLM_QUANT_UTILS)
    body = text[text.index("def get_and_maybe_dequant_weights(") :][:4000]
    assert "and not layer.quant_method.use_deep_gemm" in body
    assert "dequant_weights = layer.quant_method.apply(layer, eye, bias=None).to(out_dtype)" in body


@pytest.mark.parametrize("platform", ["h200", "b200"])
def test_the_engines_dequant_runs_the_kernel_on_an_identity_for_a_deep_gemm_layer(monkeypatch, platform):
    engine = wheel_get_and_maybe_dequant_weights(monkeypatch)
    linear = loaded(platform)
    method = Fp8LinearMethod(linear, use_deep_gemm=True)
    theirs = engine(layer_of(linear, method), out_dtype=torch.bfloat16)
    (eye,) = method.inputs
    assert eye.dtype == torch.bfloat16 and torch.equal(eye, torch.eye(LORA, dtype=torch.bfloat16))
    ours, call = identity_read(linear)
    assert theirs.dtype == torch.bfloat16
    assert torch.equal(bits(theirs.float()), bits(ours))
    if platform == "h200":
        assert call.kernel == "flashinfer-deepgemm: DeepGEMM (M=512 >= 32)"
    else:
        assert call.kernel == "deepgemm"


def test_without_deep_gemm_the_engines_dequant_reads_the_bytes(monkeypatch):
    engine = wheel_get_and_maybe_dequant_weights(monkeypatch)
    linear = loaded("h200")
    method = Fp8LinearMethod(linear, use_deep_gemm=False)
    theirs = engine(layer_of(linear, method), out_dtype=torch.bfloat16)
    assert method.inputs == []  # scaled_dequantize, no kernel
    weight = linear.block.weight
    assert torch.equal(bits(theirs), bits(block_dequantize(weight.data, weight.scale).to(torch.bfloat16)))


@pytest.mark.parametrize("platform", ["h200", "b200"])
def test_the_identity_gives_the_bf16_of_the_wheels_ue8m0_requantized_weight(monkeypatch, platform):
    requant = wheel_requant(monkeypatch)
    checkpoint = kv_b_proj(3)
    data, scale = checkpoint.data.clone(), checkpoint.scale.clone()
    requant(data, scale, (128, 128))
    requantized = block_dequantize(data, scale).to(torch.bfloat16).float()
    ours, _ = identity_read(loaded(platform))
    # bit for bit, but for the sign of zero: the kernel's sum starts at +0, so a -0 weight comes out +0
    # (adding 0.0 maps -0 to +0 and changes nothing else)
    assert torch.equal(bits(ours + 0.0), bits(requantized + 0.0))
    assert torch.equal(bits(ours), bits(ours + 0.0))
    raw = block_dequantize(checkpoint.data, checkpoint.scale).to(torch.bfloat16).float()
    assert not torch.equal(ours, raw), "the re-quantization should change some of these weights"


def test_the_profile_derives_w_uk_w_uv_through_the_kernel_where_deep_gemm_is_supported():
    for platform, via in (("h200", "kernel-identity"), ("b200", "kernel-identity"), ("mi355x", "direct-read")):
        assert md.scenario("vllm-0.33").resolve(platform).behaviour.absorbed_weights_via == via, platform
    off = md.scenario("vllm-0.33").with_settings({"VLLM_USE_DEEP_GEMM": "0"}).resolve("h200")
    assert off.behaviour.absorbed_weights_via == "direct-read"
