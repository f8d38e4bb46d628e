"""Each engine quantizer a flavor models, called as the engine calls it: ``run(x, fp8 dtype, ue8m0) -> (q, scale)``.

The functions come out of the released wheels through `engine_source` (the C++ one, which is not in the
wheel, through `vllm_cuda_oracle`). The only stubs stand for the GPU the engine would run on:

- vLLM's ``current_platform`` (vllm/platforms): its fp8 dtype (e4m3fnuz on gfx942, else e4m3fn), and
  ``is_cuda_alike() == False`` so ``per_token_group_quant_fp8`` takes its Triton path rather than the C++ op
  (which needs a GPU; it is the vllm-cuda flavor, checked against the oracle).
- SGLang's device checks in fp8_kernel.py: ``_is_hip = True`` (its Triton group quant is what runs on ROCm;
  on CUDA ``per_token_group_quant_fp8`` is a JIT CUDA kernel) and ``is_fp8_fnuz()`` (a query of
  ``torch.cuda.get_device_properties(0).gcnArchName``) answered by the format under test.

Everything else the loaded code uses is the real module: torch, triton, typing, and the engines' own
helpers (vLLM's ``get_fp8_min_max``, SGLang's ``create_per_token_group_quant_fp8_output_scale``). DeepGEMM's
casts (SGLang's benchmark/deepseek_utils.py, vLLM's vendored third_party/deep_gemm/utils/math.py) import only
torch, typing and triton, so those files run whole.
"""

from __future__ import annotations

import typing
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import Literal

import torch
from engine_source import load, load_file, load_methods
from vllm_cuda_oracle import per_token_group_fp8_quant

FN, FNUZ = torch.float8_e4m3fn, torch.float8_e4m3fnuz
GROUP = 128

VLLM_QUANT_UTILS = "vllm/model_executor/layers/quantization/utils/quant_utils.py"
VLLM_INPUT_QUANT = "vllm/model_executor/layers/quantization/input_quant_fp8.py"
VLLM_FP8_UTILS = "vllm/model_executor/layers/quantization/utils/fp8_utils.py"
VLLM_DEEP_GEMM_MATH = "vllm/third_party/deep_gemm/utils/math.py"
SGLANG_FP8_KERNEL = "sglang/kernels/ops/quantization/fp8_kernel.py"
SGLANG_DEEPSEEK_UTILS = "sglang/benchmark/deepseek_utils.py"

Runner = Callable[[torch.Tensor, torch.dtype, bool], tuple[torch.Tensor, torch.Tensor]]


class VllmPlatform:
    """Stands in for vllm.platforms.current_platform: the GPU whose fp8 dtype is `fp8_dtype`, seen from a
    process where neither CUDA nor ROCm is (so the Triton fallbacks run)."""

    def __init__(self, fp8_dtype: torch.dtype) -> None:
        self._fp8_dtype = fp8_dtype

    def fp8_dtype(self) -> torch.dtype:
        return self._fp8_dtype

    def is_fp8_fnuz(self) -> bool:
        return self._fp8_dtype == FNUZ

    def is_cuda_alike(self) -> bool:
        return False

    def is_xpu(self) -> bool:
        return False


def _triton() -> dict:
    import triton
    import triton.language as tl

    return {"triton": triton, "tl": tl}


@cache
def _vllm_get_fp8_min_max(dtype: torch.dtype) -> Callable[[], tuple[float, float]]:
    given = {"torch": torch, "current_platform": VllmPlatform(dtype)}
    return load("vllm", VLLM_QUANT_UTILS, ["get_fp8_min_max"], given)["get_fp8_min_max"]


def vllm_fp8_min_max(dtype: torch.dtype) -> tuple[float, float]:
    """vLLM's own get_fp8_min_max() on a GPU whose fp8 dtype is `dtype` (224 on e4m3fnuz)."""
    return _vllm_get_fp8_min_max(dtype)()


@cache
def _vllm_quant_fp8(dtype: torch.dtype) -> type:
    """QuantFP8's forward_native and _quantize_group_native with the module constants they read."""
    given = {"torch": torch, "current_platform": VllmPlatform(dtype), "get_fp8_min_max": _vllm_get_fp8_min_max(dtype)}
    constants = load("vllm", VLLM_INPUT_QUANT, ["_FP8_DTYPE", "_FP8_MAX", "_FP8_MIN_SCALING_FACTOR"], given)
    methods = load_methods(
        "vllm",
        VLLM_INPUT_QUANT,
        "QuantFP8",
        ["forward_native", "_quantize_group_native"],
        {**constants, "F": torch.nn.functional},
    )
    return type("QuantFP8", (), methods)


def vllm_native(x: torch.Tensor, dtype: torch.dtype, ue8m0: bool) -> tuple[torch.Tensor, torch.Tensor]:
    # The attributes QuantFP8.__init__ sets for dynamic 1x128 group quant (GroupShape(1, 128)); __init__
    # itself asks the platform, aiter and DeepGEMM what is available, which only a GPU can answer.
    op = _vllm_quant_fp8(dtype)()
    op.__dict__.update(is_group_quant=True, static=False, group_size=GROUP, use_ue8m0=ue8m0, column_major_scales=False)
    return op.forward_native(x)


@cache
def _vllm_fp8_utils(dtype: torch.dtype) -> dict:
    given = {
        "torch": torch,
        **_triton(),
        "current_platform": VllmPlatform(dtype),
        "get_fp8_min_max": _vllm_get_fp8_min_max(dtype),
    }
    names = ["_per_token_group_quant_fp8", "_per_token_group_quant_fp8_colmajor", "per_token_group_quant_fp8"]
    return load("vllm", VLLM_FP8_UTILS, names, given)


def vllm_triton(column_major: bool) -> Runner:
    def run(x: torch.Tensor, dtype: torch.dtype, ue8m0: bool) -> tuple[torch.Tensor, torch.Tensor]:
        quantize = _vllm_fp8_utils(dtype)["per_token_group_quant_fp8"]
        return quantize(x, GROUP, dtype=dtype, column_major_scales=column_major, use_ue8m0=ue8m0)

    return run


def vllm_cuda(x: torch.Tensor, dtype: torch.dtype, ue8m0: bool) -> tuple[torch.Tensor, torch.Tensor]:
    # per_token_group_quant_fp8's arguments to torch.ops._C.per_token_group_fp8_quant: its eps default
    # (1e-10) and get_fp8_min_max() (test_engine_flavors checks the wrapper still passes them).
    fp8_min, fp8_max = vllm_fp8_min_max(dtype)
    return per_token_group_fp8_quant(x, GROUP, 1e-10, fp8_min, fp8_max, ue8m0, dtype)


@cache
def _sglang_fp8_kernel(dtype: torch.dtype) -> dict:
    given = {
        "torch": torch,
        **_triton(),
        "Optional": typing.Optional,
        "Tuple": typing.Tuple,  # noqa: UP006 - the name the engine's annotations use
        "_is_hip": True,
        "is_fp8_fnuz": lambda: dtype == FNUZ,
    }
    names = [
        "fp8_dtype",
        "fp8_min",
        "_per_token_group_quant_8bit",
        "_per_token_group_quant_8bit_colmajor",
        "create_per_token_group_quant_fp8_output_scale",
        "_per_token_group_quant_8bit_raw",
    ]
    return load("sglang", SGLANG_FP8_KERNEL, names, given)


def sglang_triton(column_major: bool) -> Runner:
    def run(x: torch.Tensor, dtype: torch.dtype, ue8m0: bool) -> tuple[torch.Tensor, torch.Tensor]:
        module = _sglang_fp8_kernel(dtype)
        if ue8m0 and column_major:
            return _sglang_colmajor_ue8m0(module, x)
        raw = module["_per_token_group_quant_8bit_raw"]
        return raw(x, GROUP, column_major_scales=column_major, scale_ue8m0=ue8m0)

    return run


def _sglang_colmajor_ue8m0(module: dict, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The column-major kernel with SCALE_UE8M0, launched with the arguments _per_token_group_quant_8bit_raw
    gives it. _raw would then hand the fp32 scales to deep_gemm's transform_sf_into_required_layout (a
    DeepGEMM memory layout, not arithmetic; DeepGEMM is not installed here), so the launch is repeated."""
    scale = module["create_per_token_group_quant_fp8_output_scale"](
        x_shape=x.shape,
        device=x.device,
        group_size=GROUP,
        column_major_scales=True,
        scale_tma_aligned=False,
        scale_ue8m0=False,
    )
    q = torch.empty_like(x, dtype=module["fp8_dtype"])
    module["_per_token_group_quant_8bit_colmajor"][(x.numel() // GROUP,)](
        x,
        q,
        scale,
        GROUP,
        x.shape[1],
        scale.stride(1),
        1e-10,
        bit8_min=module["fp8_min"],
        bit8_max=module["fp8_max"],
        BLOCK=GROUP,
        num_warps=1,
        num_stages=1,
        SCALE_UE8M0=True,
    )
    return q, scale


@cache
def _deepgemm_sglang() -> dict:
    return load_file("sglang", SGLANG_DEEPSEEK_UTILS)


@cache
def _deepgemm_vllm() -> dict:
    return load_file("vllm", VLLM_DEEP_GEMM_MATH)


def deepgemm(x: torch.Tensor, dtype: torch.dtype, ue8m0: bool) -> tuple[torch.Tensor, torch.Tensor]:
    if ue8m0:
        return _deepgemm_vllm()["per_token_cast_to_fp8"](x, use_ue8m0=True)
    return _deepgemm_sglang()["per_token_cast_to_fp8"](x)


def deepseek(x: torch.Tensor, dtype: torch.dtype, ue8m0: bool) -> tuple[torch.Tensor, torch.Tensor]:
    return _deepgemm_vllm()["per_token_cast_to_fp8"](x, use_ue8m0=ue8m0)


def deepgemm_blocks(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return _deepgemm_sglang()["per_block_cast_to_fp8"](w)


def deepseek_blocks(w: torch.Tensor, ue8m0: bool) -> tuple[torch.Tensor, torch.Tensor]:
    return _deepgemm_vllm()["per_block_cast_to_fp8"](w, use_ue8m0=ue8m0)


@dataclass(frozen=True)
class EngineQuantizer:
    """One engine function and what it takes: where it runs (torch on the CPU, Triton's interpreter, or the
    oracle of C++), the formats it writes, its ue8m0 settings, and the ue8m0 settings under which its NaN/Inf
    behaviour is defined and the flavor's (torch and C++ define it; a Triton max reduction leaves NaN to the
    backend; DeepGEMM's ceil_to_ue8m0 turns a non-finite scale into 2^127, which the flavors do not model)."""

    id: str
    flavor: str
    run: Runner
    runs_on: Literal["torch", "triton", "oracle"]
    formats: tuple[torch.dtype, ...]
    ue8m0: tuple[bool, ...]
    nonfinite_ue8m0: tuple[bool, ...]


_BOTH = (False, True)
QUANTIZERS = (
    EngineQuantizer("vllm-native", "vllm-native", vllm_native, "torch", (FN, FNUZ), _BOTH, _BOTH),
    EngineQuantizer("vllm-triton", "vllm-triton", vllm_triton(False), "triton", (FN, FNUZ), _BOTH, ()),
    EngineQuantizer("vllm-triton-colmajor", "vllm-triton", vllm_triton(True), "triton", (FN, FNUZ), _BOTH, ()),
    EngineQuantizer("vllm-cuda", "vllm-cuda", vllm_cuda, "oracle", (FN, FNUZ), _BOTH, _BOTH),
    EngineQuantizer("sglang-triton", "sglang-triton", sglang_triton(False), "triton", (FN, FNUZ), (False,), ()),
    EngineQuantizer(
        "sglang-triton-colmajor", "sglang-triton-colmajor", sglang_triton(True), "triton", (FN, FNUZ), _BOTH, ()
    ),
    EngineQuantizer("deepgemm", "deepgemm", deepgemm, "torch", (FN,), _BOTH, (False,)),
    EngineQuantizer("deepseek", "deepseek", deepseek, "torch", (FN,), _BOTH, (False,)),
)
BY_ID = {q.id: q for q in QUANTIZERS}
