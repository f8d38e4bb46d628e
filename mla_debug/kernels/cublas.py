"""cuBLAS block-scaled FP8 GEMM through ``torch.nn.functional.scaled_mm`` (CUDA, sm90+).

Its activation-scale contract is the same column-major order the preshuffled aiter GEMM reads, but
enforced through strides: it wants COL_MAJOR_STRIDED (M, K/128) scales with strides (1, M) and REJECTS a
row-major buffer with an error. It is the loud counterpart of the silent ROCm bug; this adapter turns
torch's rejection into an error that names the layer, the buffer and the rule.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from .._checks import describe
from ..layouts import QuantizedActivation, ScaleLayout, present_scale, read_scale
from ..numerics import E4M3FN
from .base import Contract, GemmProblem, Kernel, register_kernel

if TYPE_CHECKING:
    from .linear import BlockScaledLinear
    from .platforms import Platform


@register_kernel
class CublasBlockwiseKernel(Kernel):
    name = "cublas-blockwise"
    description = "torch F.scaled_mm BlockWise1x128 x BlockWise128x128 (cuBLAS, CUDA sm90+)"
    wants_transposed_act_scale = True
    act_scale_layout = ScaleLayout.COL_MAJOR_STRIDED

    def availability(self) -> tuple[bool, str]:
        if not hasattr(torch.nn.functional, "scaled_mm"):
            return False, f"torch {torch.__version__} has no torch.nn.functional.scaled_mm"
        if not torch.cuda.is_available() or getattr(torch.version, "hip", None):
            return False, "needs an NVIDIA CUDA GPU (none visible to torch)"
        major, minor = torch.cuda.get_device_capability()
        if major < 9:
            return False, f"needs compute capability 9.0+ (this GPU is {major}.{minor})"
        return True, f"CUDA GPU sm{major}{minor}"

    def can_implement(self, problem: GemmProblem, platform: Platform) -> tuple[bool, str]:
        if not platform.is_cuda:
            return False, f"cuBLAS runs on NVIDIA platforms, not {platform.name}"
        if problem.fmt != E4M3FN:
            return False, f"cuBLAS blockwise takes e4m3fn, the weight is {problem.fmt.name}"
        return super().can_implement(problem, platform)

    def compute(self, linear: BlockScaledLinear, qa: QuantizedActivation, contract: Contract) -> torch.Tensor:
        from torch.nn.functional import ScalingType, scaled_mm

        weight = linear.weight
        device = weight.data.device
        if qa.data.device != device:
            raise ValueError(
                f"{linear.name}: input on {qa.data.device} but the weight on {device}; move both to one CUDA device"
            )
        data, scale = qa.data, qa.scale
        padded = _padded_rows(qa)
        if padded is not None:
            data, scale = padded
        try:
            out = scaled_mm(
                data,
                weight.data.t(),
                scale,
                ScalingType.BlockWise1x128,
                weight.scale.t(),
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


# cuBLAS (CUDA 13, H200; measured by benchmarks/gpu_probe.py) refuses BlockWise1x128 unless M % 4 == 0
# (CUBLAS_STATUS_NOT_SUPPORTED for M = 1, 2, 3, 5, 7, 15, 17, ...).
ROW_MULTIPLE = 4


def _padded_rows(qa: QuantizedActivation) -> tuple[torch.Tensor, torch.Tensor] | None:
    """Zero rows appended up to a multiple of 4, with a correctly strided scale - only when the caller
    honoured the stride contract; a wrongly strided scale goes to torch unchanged so it is rejected."""
    m, groups = qa.m, qa.groups
    if m % ROW_MULTIPLE == 0 or tuple(qa.scale.stride()) != ScaleLayout.COL_MAJOR_STRIDED.strides(m, groups):
        return None
    rows = -(-m // ROW_MULTIPLE) * ROW_MULTIPLE
    data = torch.zeros((rows, qa.k), dtype=torch.uint8, device=qa.data.device)
    data[:m] = qa.data.view(torch.uint8)
    logical = torch.ones((rows, groups), dtype=torch.float32, device=qa.scale.device)
    logical[:m] = read_scale(qa.scale, ScaleLayout.COL_MAJOR_STRIDED)
    return data.view(qa.data.dtype), present_scale(logical, ScaleLayout.COL_MAJOR_STRIDED)
