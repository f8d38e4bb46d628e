"""cuBLAS block-scaled FP8 GEMM through ``torch.nn.functional.scaled_mm`` (CUDA, sm90+).

Its activation-scale contract is the same column-major order the preshuffled aiter GEMM reads, but
enforced through strides: it wants COL_MAJOR_STRIDED (M, K/128) scales with strides (1, M) and REJECTS a
row-major buffer with an error. It is the loud counterpart of the silent ROCm bug; this adapter turns
torch's rejection into an error that names the layer, the buffer and the rule.

It is what vLLM 0.33.0's ``BlockWiseTorchFP8ScaledMMLinearKernel`` (``scaled_mm/pytorch.py``, last on CUDA's
block-FP8 list) runs: ``torch._scaled_mm`` with (1x128, 128x128) block scales and a column-major activation
scale, supported on CUDA only for compute capability 9.0 (its ``is_supported``); hence its vLLM name.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from .._checks import describe
from ..implementations import Check
from ..layouts import QuantizedActivation, ScaleLayout, present_scale, read_scale
from ..numerics import E4M3FN
from .base import Contract, GemmProblem, Kernel, register_kernel
from .block_gemm import same_tensor_key

if TYPE_CHECKING:
    from .block_scaled_linear import BlockScaledLinear


@register_kernel
class CublasBlockwiseKernel(Kernel):
    name = "cublas-blockwise"
    description = "torch F.scaled_mm BlockWise1x128 x BlockWise128x128 (cuBLAS, CUDA sm90+)"
    vllm_name = "BlockWiseTorchFP8ScaledMMLinearKernel"
    wants_transposed_act_scale = True
    act_scale_layout = ScaleLayout.COL_MAJOR_STRIDED

    def availability(self, device: torch.device | None = None) -> Check:
        if not hasattr(torch.nn.functional, "scaled_mm"):
            return Check(False, f"torch {torch.__version__} has no torch.nn.functional.scaled_mm")
        if not torch.cuda.is_available() or getattr(torch.version, "hip", None):
            return Check(False, "needs an NVIDIA CUDA GPU (none visible to torch)")
        if device is not None and torch.device(device).type != "cuda":
            return Check(False, f"cuBLAS multiplies CUDA tensors, not {torch.device(device).type} ones")
        major, minor = torch.cuda.get_device_capability(device)
        if major < 9:
            return Check(False, f"needs compute capability 9.0+ (this GPU is {major}.{minor})")
        return Check(True, f"CUDA GPU sm{major}{minor}")

    def can_implement(self, problem: GemmProblem) -> Check:
        if not problem.platform.is_cuda:
            return Check(False, f"cuBLAS runs on NVIDIA platforms, not {problem.platform.name}")
        if problem.fmt != E4M3FN:
            return Check(False, f"cuBLAS blockwise takes e4m3fn, the weight is {problem.fmt.name}")
        if problem.platform.arch != "sm90":
            return Check(
                False,
                "vLLM 0.33.0 scaled_mm/pytorch.py BlockWiseTorchFP8ScaledMMLinearKernel: block-scaled "
                f"torch._scaled_mm on CUDA requires compute capability 9.0, not {problem.platform.arch}",
            )
        return super().can_implement(problem)

    def compute(self, linear: BlockScaledLinear, qa: QuantizedActivation, contract: Contract) -> torch.Tensor:
        from torch.nn.functional import ScalingType, scaled_mm

        weight = linear.weight
        device = weight.data.device
        if qa.data.device != device:
            raise ValueError(
                f"{linear.name}: input on {qa.data.device} but the weight on {device}; move both to one CUDA device"
            )
        data, scale = _padded_input(qa)
        try:
            w_data, w_scale = _dense_weight(linear)
            out = scaled_mm(
                data,
                w_data.t(),
                scale,
                ScalingType.BlockWise1x128,
                w_scale.t(),
                ScalingType.BlockWise128x128,
                output_dtype=torch.bfloat16,
            )
            return out[: qa.m]
        except (RuntimeError, ValueError) as err:
            raise ValueError(
                f"{linear.name}: cublas-blockwise rejected the call: input scale {describe(qa.scale)} with "
                f"strides {tuple(qa.scale.stride())} written {qa.scale_layout.name}; scaled_mm BlockWise1x128 "
                f"needs COL_MAJOR_STRIDED strides (1, M={qa.m}). torch said: {err}"
            ) from err


# cuBLAS (CUDA 13, H200; measured by benchmarks/gpu_probe.py and the GPU tests) refuses BlockWise1x128 unless
# M % 4 == 0 (CUBLAS_STATUS_NOT_SUPPORTED for M = 1, 2, 3, 5, 7, 15, 17, ...) and wants the K-block
# count of both scales padded to a multiple of 4 ("scale_b must have shape 4 x 12" for K = 256).
# Zero data with unit scales adds nothing to the products, so padding is exact.
ROW_MULTIPLE = 4
K_BLOCK_MULTIPLE = 4
BLOCK = 128


def _round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


def _padded_input(qa: QuantizedActivation) -> tuple[torch.Tensor, torch.Tensor]:
    """The activation padded to M % 4 == 0 and K blocks % 4 == 0 with a correctly strided scale - only
    when the caller honoured the stride contract; a wrongly strided scale goes to torch unchanged so it
    is rejected loudly."""
    m, groups = qa.m, qa.groups
    rows, blocks = _round_up(m, ROW_MULTIPLE), _round_up(groups, K_BLOCK_MULTIPLE)
    honoured = tuple(qa.scale.stride()) == ScaleLayout.COL_MAJOR_STRIDED.strides(m, groups)
    if (rows, blocks) == (m, groups) or not honoured:
        return qa.data, qa.scale
    data = torch.zeros((rows, blocks * BLOCK), dtype=torch.uint8, device=qa.data.device)
    data[:m, : qa.k] = qa.data.view(torch.uint8)
    logical = torch.ones((rows, blocks), dtype=torch.float32, device=qa.scale.device)
    logical[:m, :groups] = read_scale(qa.scale, ScaleLayout.COL_MAJOR_STRIDED)
    return data.view(qa.data.dtype), present_scale(logical, ScaleLayout.COL_MAJOR_STRIDED)


def _dense_weight(linear: BlockScaledLinear) -> tuple[torch.Tensor, torch.Tensor]:
    """The weight bytes and block scale as gap-free row-major tensors (a row-parallel shard is a strided
    view, which cuBLAS's leading-dimension contract rejects), K padded like the input's; cached until
    either changes."""
    weight = linear.weight
    groups = weight.scale.shape[1]
    blocks = _round_up(groups, K_BLOCK_MULTIPLE)
    if weight.data.is_contiguous() and weight.scale.is_contiguous() and blocks == groups:
        return weight.data, weight.scale
    key = (weight.data, weight.data._version, weight.scale, weight.scale._version)
    cached = linear.read_cache.get("cublas-dense")
    if cached is None or not same_tensor_key(cached[0], key):
        data = torch.zeros((weight.n, blocks * BLOCK), dtype=torch.uint8, device=weight.data.device)
        data[:, : weight.data.shape[1]] = weight.data.view(torch.uint8)
        scale = torch.ones((weight.scale.shape[0], blocks), dtype=torch.float32, device=weight.scale.device)
        scale[:, :groups] = weight.scale
        cached = (key, (data.view(weight.data.dtype), scale))
        linear.read_cache["cublas-dense"] = cached
    return cached[1]
