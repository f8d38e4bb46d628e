"""The new kernels' layout transforms and load-time steps against the engines' own functions, byte for byte.

Each engine function is loaded from the released wheel (`engine_source`) and run here on the CPU; what it
imports from the rest of its engine is given by the test: other functions of the same releases, loaded the
same way, or - where the engine asks its platform - a stand-in naming the platform modelled
(``current_platform`` of a CUDA machine with e4m3fn), never a re-implementation of the function under test.

- SGLang 0.5.23 ``view_aiter_fused_rms_transposed_fp8_scale`` is `layouts.relay_column_major`.
- SGLang 0.5.23 ``create_per_token_group_quant_fp8_output_scale`` allocates the TMA-aligned and packed
  buffers `layouts.tma_aligned_column_major` / `layouts.pack_ue8m0` make (shape and strides).
- DeepGEMM's torch packing (SGLang's ``_get_mn_major_tma_aligned_packed_ue8m0_tensor_torch_impl``, its inverse
  ``_inverse_transform_scale_ue8m0_impl``, and the ``pack_ue8m0_to_int`` of the DeepGEMM vLLM vendors) is
  `layouts.pack_ue8m0` / `unpack_ue8m0`.
- DeepGEMM's ``per_token_cast_to_fp8(use_ue8m0=True)`` (vendored in vLLM) is the ``deepgemm`` kernel's
  default input quantization (and, without ue8m0, the "deepseek" flavor).
- vLLM's ``requant_weight_ue8m0_inplace`` and SGLang's ``requant_weight_ue8m0`` recipe are
  `deepgemm_weights.requant_ue8m0` with the matching recipe.
"""

from __future__ import annotations

import sys
import types

import pytest
import torch
from engine_source import load

import mla_debug as md
from mla_debug.kernels.deepgemm_weights import SGLANG_0_5_23, VLLM_0_33, requant_ue8m0
from mla_debug.layouts import pack_ue8m0, present_scale, relay_column_major, tma_aligned_column_major, unpack_ue8m0

SGLANG_FP8_UTILS = "sglang/srt/layers/quantization/fp8_utils.py"
SGLANG_QUANT_KERNEL = "sglang/kernels/ops/quantization/fp8_kernel.py"
SGLANG_COMMON = "sglang/srt/utils/common.py"
VLLM_DEEP_GEMM = "vllm/utils/deep_gemm.py"
VLLM_MATH = "vllm/utils/math_utils.py"
VLLM_FP8_UTILS = "vllm/model_executor/layers/quantization/utils/fp8_utils.py"
VLLM_QUANT_UTILS = "vllm/model_executor/layers/quantization/utils/quant_utils.py"
VENDORED_DEEPGEMM_MATH = "vllm/third_party/deep_gemm/utils/math.py"

SHAPES = [(1, 1), (1, 7), (3, 4), (5, 9), (8, 5), (13, 17)]


def cuda_e4m3fn_platform() -> types.SimpleNamespace:
    """vLLM's ``current_platform`` as a CUDA machine answers the questions these functions ask."""
    return types.SimpleNamespace(
        fp8_dtype=lambda: torch.float8_e4m3fn,
        is_fp8_fnuz=lambda: False,
        is_rocm=lambda: False,
        simple_compile_backend="inductor",
    )


def torch_running_compiled_functions_eagerly() -> types.ModuleType:
    """torch, with ``torch.compile(...)`` returning the function itself: vLLM compiles
    ``per_block_cast_to_fp8`` with ``backend=current_platform.simple_compile_backend``, whose result is the
    function's eager semantics; dynamo cannot trace a function compiled outside an importable module."""
    eager = types.ModuleType("torch")
    eager.__dict__.update(torch.__dict__)
    eager.compile = lambda *args, **kwargs: lambda fn: fn
    return eager


def powers_of_two(m: int, g: int, seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.exp2(torch.randint(-30, 10, (m, g), generator=gen).float())


def deep_gemm_utils() -> types.ModuleType:
    """A ``deep_gemm.utils`` holding DeepGEMM's own ``align`` (vendored by vLLM) and ``get_tma_aligned_size``
    (vLLM's copy of DeepGEMM's), which SGLang's copied torch implementation imports."""
    math_fns = load("vllm", VENDORED_DEEPGEMM_MATH, ["ceil_div", "align"], {"torch": torch})
    cdiv = load("vllm", VLLM_MATH, ["cdiv"], {})["cdiv"]
    sizes = load("vllm", VLLM_DEEP_GEMM, ["_align", "get_tma_aligned_size"], {"cdiv": cdiv})
    module = types.ModuleType("deep_gemm.utils")
    module.align = math_fns["align"]
    module.get_tma_aligned_size = sizes["get_tma_aligned_size"]
    return module


# -- SGLang's re-layout ------------------------------------------------------------------------------


@pytest.mark.parametrize(("m", "g"), SHAPES)
@pytest.mark.parametrize("layout", list(md.ScaleLayout))
def test_relayout_is_sglangs_view(m, g, layout):
    view = load("sglang", SGLANG_FP8_UTILS, ["view_aiter_fused_rms_transposed_fp8_scale"], {"torch": torch})[
        "view_aiter_fused_rms_transposed_fp8_scale"
    ]
    buffer = present_scale(powers_of_two(m, g, m * 31 + g), layout)
    theirs, ours = view(buffer), relay_column_major(buffer)
    assert theirs.stride() == ours.stride() and theirs.data_ptr() == ours.data_ptr()
    assert torch.equal(theirs, ours)


# -- DeepGEMM's buffers ------------------------------------------------------------------------------


@pytest.mark.parametrize(("m", "g"), SHAPES)
def test_tma_aligned_and_packed_buffers_have_sglangs_allocation_strides(m, g):
    common = load("sglang", SGLANG_COMMON, ["ceil_div", "ceil_align"], {})
    allocate = load(
        "sglang",
        SGLANG_QUANT_KERNEL,
        ["create_per_token_group_quant_fp8_output_scale"],
        {"torch": torch, "ceil_align": common["ceil_align"]},
    )["create_per_token_group_quant_fp8_output_scale"]
    x_shape = (m, g * 128)
    fp32 = allocate(x_shape, "cpu", 128, column_major_scales=True, scale_tma_aligned=True, scale_ue8m0=False)
    packed = allocate(x_shape, "cpu", 128, column_major_scales=True, scale_tma_aligned=True, scale_ue8m0=True)
    scales = powers_of_two(m, g, 5)
    ours_fp32, ours_packed = tma_aligned_column_major(scales), pack_ue8m0(scales)
    assert (fp32.shape, fp32.stride(), fp32.dtype) == (ours_fp32.shape, ours_fp32.stride(), ours_fp32.dtype)
    assert (packed.shape, packed.stride(), packed.dtype) == (ours_packed.shape, ours_packed.stride(), ours_packed.dtype)


@pytest.mark.parametrize(("m", "g"), SHAPES)
def test_packing_is_deepgemms_torch_implementation(monkeypatch, m, g):
    monkeypatch.setitem(sys.modules, "deep_gemm", types.ModuleType("deep_gemm"))
    monkeypatch.setitem(sys.modules, "deep_gemm.utils", deep_gemm_utils())
    pack = load(
        "sglang", SGLANG_FP8_UTILS, ["_get_mn_major_tma_aligned_packed_ue8m0_tensor_torch_impl"], {"torch": torch}
    )["_get_mn_major_tma_aligned_packed_ue8m0_tensor_torch_impl"]
    scales = powers_of_two(m, g, m + 100 * g)
    theirs, ours = pack(scales), pack_ue8m0(scales)
    assert theirs.shape == ours.shape and theirs.stride() == ours.stride() and torch.equal(theirs, ours)
    # The exponent bytes are DeepGEMM's whatever the scale (a non-power-of-two is truncated alike).
    odd = scales * 1.37
    assert torch.equal(pack(odd), pack_ue8m0(odd))


@pytest.mark.parametrize(("n_blocks", "g"), [(1, 4), (2, 8), (3, 12)])
def test_unpacking_is_sglangs_inverse_transform(n_blocks, g):
    inverse = load("sglang", SGLANG_FP8_UTILS, ["_inverse_transform_scale_ue8m0_impl"], {"torch": torch})[
        "_inverse_transform_scale_ue8m0_impl"
    ]
    block_scales = powers_of_two(n_blocks, g, 9)
    # A weight's packed scale holds one row per weight row (DeepGEMM's transform repeats each block's row).
    rows = pack_ue8m0(block_scales.repeat_interleave(128, 0))
    assert torch.equal(inverse(rows), block_scales)
    assert torch.equal(unpack_ue8m0(rows, g)[::128], block_scales)


def test_packed_words_are_vendored_deepgemms_pack_ue8m0_to_int():
    pack_to_int = load("vllm", VENDORED_DEEPGEMM_MATH, ["pack_ue8m0_to_int"], {"torch": torch})["pack_ue8m0_to_int"]
    scales = powers_of_two(6, 8, 3)
    assert torch.equal(pack_to_int(scales), pack_ue8m0(scales))


# The kernel's default ("deepgemm" flavor, ue8m0 on) is the vendored DeepGEMM function; without ue8m0 that
# function forms x * (1 / (amax / 448)), the "deepseek" flavor - the "deepgemm" flavor then follows the
# x * (448 / amax) of the copy SGLang ships, one rounding apart.
@pytest.mark.parametrize(("ue8m0", "flavor"), [(True, "deepgemm"), (False, "deepseek")])
@pytest.mark.parametrize(("m", "k"), [(1, 128), (5, 384), (8, 1024)])
def test_deepgemm_input_quant_is_deepgemms_per_token_cast(m, k, ue8m0, flavor):
    fns = load(
        "vllm",
        VENDORED_DEEPGEMM_MATH,
        ["ceil_div", "align", "ceil_to_ue8m0", "per_token_cast_to_fp8"],
        {"torch": torch},
    )
    gen = torch.Generator().manual_seed(m * k)
    x = (torch.randn(m, k, generator=gen) * torch.logspace(-3, 3, m)[:, None]).to(torch.bfloat16)
    x[0, :128] = 0  # an all-zero group: the amax floor decides its scale
    q, scale = fns["per_token_cast_to_fp8"](x, use_ue8m0=ue8m0)
    qa = md.get_kernel("deepgemm", ue8m0=ue8m0, flavor=flavor).quantize_input(x, md.E4M3FN)
    assert torch.equal(qa.data.view(torch.uint8), q.view(torch.uint8))
    assert torch.equal(qa.logical_scale(), scale)


# -- re-quantizing weights to ue8m0 --------------------------------------------------------------------


def checkpoint_weight(n: int, k: int, seed: int) -> md.QuantizedWeight:
    gen = torch.Generator().manual_seed(seed)
    w = torch.randn(n, k, generator=gen) * torch.logspace(-4, 1, n)[:, None]
    return md.layouts.quantize_blocks(w, fmt=md.E4M3FN, flavor="deepseek")


def wheel_requant(monkeypatch):
    """vLLM's requant_weight_ue8m0_inplace, with the per_block_cast_to_fp8 it imports when it runs."""
    platform = cuda_e4m3fn_platform()
    limits = load("vllm", VLLM_QUANT_UTILS, ["get_fp8_min_max"], {"torch": torch, "current_platform": platform})
    cdiv = load("vllm", VLLM_MATH, ["cdiv"], {})["cdiv"]
    deep_gemm = load(
        "vllm",
        VLLM_DEEP_GEMM,
        ["_ceil_to_ue8m0", "_align", "per_block_cast_to_fp8"],
        {
            "torch": torch_running_compiled_functions_eagerly(),
            "cdiv": cdiv,
            "current_platform": platform,
            "get_fp8_min_max": limits["get_fp8_min_max"],
            "DEFAULT_BLOCK_SIZE": [128, 128],
        },
    )
    # requant_weight_ue8m0_inplace imports per_block_cast_to_fp8 from vllm.utils.deep_gemm when it runs.
    for name in ("vllm", "vllm.utils"):
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    monkeypatch.setitem(
        sys.modules,
        "vllm.utils.deep_gemm",
        types.SimpleNamespace(per_block_cast_to_fp8=deep_gemm["per_block_cast_to_fp8"]),
    )
    return load("vllm", VLLM_FP8_UTILS, ["requant_weight_ue8m0_inplace"], {"torch": torch, "Sequence": list})[
        "requant_weight_ue8m0_inplace"
    ]



@pytest.mark.parametrize(("n", "k"), [(128, 128), (256, 384), (200, 300)])
def test_vllm_requant_is_requant_weight_ue8m0_inplace(monkeypatch, n, k):
    requant = wheel_requant(monkeypatch)
    weight = checkpoint_weight(n, k, n + k)
    theirs_w, theirs_s = weight.data.clone(), weight.scale.clone()
    requant(theirs_w, theirs_s, (128, 128))
    ours = requant_ue8m0(weight, VLLM_0_33)
    assert torch.equal(ours.data.view(torch.uint8), theirs_w.view(torch.uint8))
    assert torch.equal(ours.scale, theirs_s)


@pytest.mark.parametrize(("n", "k"), [(128, 128), (256, 384), (200, 300)])
def test_sglang_requant_is_its_requant_weight_ue8m0_recipe(n, k):
    common = load("sglang", SGLANG_COMMON, ["ceil_div", "ceil_align"], {})
    fns = load(
        "sglang",
        SGLANG_FP8_UTILS,
        ["block_quant_dequant", "ceil_to_ue8m0", "per_block_cast_to_fp8", "quant_weight_ue8m0"],
        {"torch": torch, "List": list, **common},
    )
    weight = checkpoint_weight(n, k, 7 * n + k)
    # requant_weight_ue8m0 minus its last step (DeepGEMM's scale packing, checked above).
    dequant = fns["block_quant_dequant"](weight.data, weight.scale, [128, 128], torch.bfloat16)
    theirs_w, theirs_s = fns["quant_weight_ue8m0"](weight_dequant=dequant, weight_block_size=[128, 128])
    ours = requant_ue8m0(weight, SGLANG_0_5_23)
    assert torch.equal(ours.data.view(torch.uint8), theirs_w.view(torch.uint8))
    assert torch.equal(ours.scale, theirs_s)
