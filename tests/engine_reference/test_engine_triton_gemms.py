"""The engines' own Triton block-scaled GEMMs, loaded from the released wheels, against the emulations of
their contracts: vLLM 0.33's ``w8a8_triton_block_scaled_mm`` (and its gfx1250 torch reference) for
``vllm-triton-blockscale``, SGLang 0.5.23's ``w8a8_block_fp8_matmul_triton`` behind its
``as_strided (1, M)`` re-layout for ``sglang-triton-blockscale``.

Operands are exact (small integer fp8 codes, power-of-two scales), so every product and partial sum is
exact in fp32 and one bf16 rounding remains: any difference would be a different reading of the bytes.
On a CPU-only machine the kernels run under Triton's interpreter with compiled Triton's rounding
(tests/aiter_reference/interpreter_casts.py); on a CUDA GPU, compiled.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import types

import pytest
import torch
from aiter_reference.aiter_ref import triton_device, triton_semantics
from engine_source import load

import mla_debug as md

VLLM_FP8_UTILS = "vllm/model_executor/layers/quantization/utils/fp8_utils.py"
SGLANG_FP8_KERNEL = "sglang/kernels/ops/gemm/fp8_kernel.py"
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


def exact_operands(m: int, n: int, k: int, seed: int):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randint(-4, 5, (m, k), generator=gen).float().to(torch.float8_e4m3fn)
    w = torch.randint(-4, 5, (n, k), generator=gen).float().to(torch.float8_e4m3fn)
    xs = torch.exp2(torch.randint(-6, 3, (m, k // 128), generator=gen).float())
    ws = torch.exp2(torch.randint(-6, 3, (-(-n // 128), k // 128), generator=gen).float())
    return x, w, xs, ws


def linear_of(w, ws, kernel: md.kernels.Kernel, platform: str | None = None) -> md.kernels.BlockScaledLinear:
    linear = md.kernels.BlockScaledLinear("proj", md.QuantizedWeight(w, ws, md.E4M3FN))
    linear.platform = md.platform(platform) if platform else None
    return linear.attach(kernel)


def vllm_gemm(on_gfx1250: bool):
    """vLLM's w8a8_triton_block_scaled_mm with what it imports from vLLM: its kernel, its config lookup (no
    tuned JSON for this device, so the default config), the e8m0 upcast, and the platform it asks."""
    torch_fns = {"torch": torch, "triton": pytest.importorskip("triton")}
    import triton.language as tl

    platform = types.SimpleNamespace(is_rocm=lambda: on_gfx1250)
    configs = load(
        "vllm",
        VLLM_FP8_UTILS,
        ["get_w8a8_block_fp8_configs"],
        {
            "functools": functools,
            "os": os,
            "json": json,
            "logger": logging.getLogger("vllm"),
            "get_device_name_as_file_name": lambda: "CPU",
            # the lookup reads configs/ beside the file; none is named for this device
            "__file__": VLLM_FP8_UTILS,
            "Any": object,
        },
    )
    return load(
        "vllm",
        VLLM_FP8_UTILS,
        ["_w8a8_triton_block_scaled_mm", "_upcast_e8m0_to_fp32", "w8a8_triton_block_scaled_mm"],
        {
            **torch_fns,
            "tl": tl,
            "current_platform": platform,
            "envs": types.SimpleNamespace(VLLM_BATCH_INVARIANT=False),
            "get_w8a8_block_fp8_configs": configs["get_w8a8_block_fp8_configs"],
        },
    )["w8a8_triton_block_scaled_mm"]


@pytest.mark.parametrize("layout", list(md.ScaleLayout))
@pytest.mark.parametrize(("m", "n", "k"), [(1, 128, 256), (3, 256, 384)])
def test_vllm_triton_gemm_reads_scales_by_strides_like_the_emulation(monkeypatch, layout, m, n, k):
    device = triton_device()
    gemm = vllm_gemm(on_gfx1250=False)
    x, w, xs, ws = exact_operands(m, n, k, seed=m + n)
    buffer = md.layouts.present_scale(xs, layout)
    with triton_semantics():
        theirs = gemm(x.to(device), w.to(device), buffer.to(device), ws.to(device), [128, 128], torch.bfloat16).cpu()
    kernel = md.get_kernel("vllm-triton-blockscale")
    qa = md.QuantizedActivation(x, buffer, layout, md.E4M3FN)
    call = linear_of(w, ws, kernel).run(qa)
    assert torch.equal(call.output.view(torch.int16), theirs.view(torch.int16))
    # It is right exactly when the emulation records no effective violation.
    right = torch.equal(theirs, linear_of(w, ws, md.get_kernel("torch-reference")).run(qa).output)
    assert right == (not any(v.effective for v in call.violations))


@pytest.mark.parametrize("layout", list(md.ScaleLayout))
def test_vllm_gfx1250_reference_has_the_same_contract(monkeypatch, layout):
    import sys

    monkeypatch.setitem(sys.modules, "vllm", types.ModuleType("vllm"))
    monkeypatch.setitem(sys.modules, "vllm.platforms", types.ModuleType("vllm.platforms"))
    monkeypatch.setitem(sys.modules, "vllm.platforms.rocm", types.SimpleNamespace(on_gfx1250=lambda: True))
    gemm = vllm_gemm(on_gfx1250=True)
    x, w, xs, ws = exact_operands(5, 256, 512, seed=11)
    buffer = md.layouts.present_scale(xs, layout)
    theirs = gemm(x, w, buffer, ws, [128, 128], torch.bfloat16)
    kernel = md.get_kernel("vllm-triton-blockscale")
    ours = linear_of(w, ws, kernel, platform="gfx1250").run(md.QuantizedActivation(x, buffer, layout, md.E4M3FN))
    assert kernel.accumulation_for(linear_of(w, ws, kernel, platform="gfx1250")) == "dequant"
    assert torch.equal(ours.output.view(torch.int16), theirs.view(torch.int16))


def sglang_gemm():
    """SGLang's w8a8_block_fp8_matmul_triton with what it imports from SGLang: its kernel, input checks and
    config lookup (no tuned JSON here: the default config) on a device that is not Hopper, ROCm nor gfx1250."""
    triton = pytest.importorskip("triton")
    import triton.language as tl

    names = [
        "_w8a8_block_fp8_matmul",
        "select_w8a8_block_fp8_matmul_kernel",
        "prepare_block_fp8_matmul_inputs",
        "w8a8_block_fp8_matmul_triton",
    ]
    namespace = {
        "torch": torch,
        "triton": triton,
        "tl": tl,
        "Tuple": tuple,
        "List": list,
        "get_w8a8_block_fp8_configs": lambda *args: None,
        "get_platform": lambda: types.SimpleNamespace(is_sm90=False),
        "_is_gfx1250": False,
        "_is_hip": False,
    }
    return load("sglang", SGLANG_FP8_KERNEL, names, namespace)["w8a8_block_fp8_matmul_triton"]


@pytest.mark.parametrize("layout", list(md.ScaleLayout))
def test_sglang_consumer_is_its_relayout_then_its_stride_reading_gemm(layout):
    device = triton_device()
    gemm = sglang_gemm()
    view = load(
        "sglang",
        "sglang/srt/layers/quantization/fp8_utils.py",
        ["view_aiter_fused_rms_transposed_fp8_scale"],
        {"torch": torch},
    )["view_aiter_fused_rms_transposed_fp8_scale"]
    x, w, xs, ws = exact_operands(4, 256, 384, seed=5)
    buffer = md.layouts.present_scale(xs, layout)
    qa = md.QuantizedActivation(x, buffer, layout, md.E4M3FN)
    with triton_semantics():
        relaid = gemm(x.to(device), w.to(device), view(buffer).to(device), ws.to(device), [128, 128], torch.bfloat16)
        plain = gemm(x.to(device), w.to(device), buffer.to(device), ws.to(device), [128, 128], torch.bfloat16)
    consumer = linear_of(w, ws, md.get_kernel("sglang-triton-blockscale", selection="any")).run(qa)
    assert torch.equal(consumer.output.view(torch.int16), relaid.cpu().view(torch.int16))
    function = linear_of(w, ws, md.get_kernel("sglang-triton-blockscale", selection="any", relayout=False)).run(qa)
    assert torch.equal(function.output.view(torch.int16), plain.cpu().view(torch.int16))
