"""DeepSeek-V4's ROCm model-side preshuffle asks the layer's ``aiter_bpreshuffled`` flag whether a kernel
already shuffled the weight at load (vLLM 0.33 ``models/deepseek_v4/amd/rocm.py``), when the behaviour
``skip_model_shuffle_if_kernel_preshuffles`` is on; otherwise it shuffles regardless."""

from __future__ import annotations

import pytest
import torch

import mla_debug as md
from mla_debug.model.attention_v4 import MODEL_SHUFFLED, prepare_model_side
from mla_debug.model.linear import QuantizedLinear
from mla_debug.scenarios import ModelBehaviour


def linears(kernel: str, **options) -> dict[str, QuantizedLinear]:
    gen = torch.Generator().manual_seed(0)
    out = {}
    for name in MODEL_SHUFFLED:
        weight = md.layouts.quantize_blocks(torch.randn(256, 512, generator=gen) * 0.05)
        linear = QuantizedLinear(name, weight)
        linear.block.attach(md.get_kernel(kernel, **options))
        out[name] = linear
    return out


@pytest.mark.parametrize(
    ("kernel", "options", "kernel_shuffled"),
    [
        ("aiter-bpreshuffle", {"honour_layer_flags": True}, True),
        ("aiter-triton-bpreshuffle", {}, True),
        ("aiter-blockscale", {}, False),
    ],
)
@pytest.mark.parametrize("skip", [True, False])
def test_the_model_skips_its_shuffle_exactly_when_the_flag_says_a_kernel_shuffled(
    kernel, options, kernel_shuffled, skip
):
    layers = linears(kernel, **options)
    behaviour = ModelBehaviour(v4_model_preshuffle=True, skip_model_shuffle_if_kernel_preshuffles=skip)
    prepare_model_side(layers, behaviour, is_rocm=True)
    for linear in layers.values():
        assert linear.block.aiter_bpreshuffled is kernel_shuffled
        model_shuffles = 0 if (skip and kernel_shuffled) else 1
        assert linear.weight_layout.shuffle_count == int(kernel_shuffled) + model_shuffles
        assert linear.weight_layout.shufflers.count("model prepare_attn_preshuffle") == model_shuffles
