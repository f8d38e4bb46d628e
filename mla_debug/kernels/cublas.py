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
from ..layouts import QuantizedActivation, ScaleLayout
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

    def contract(self, linear: BlockScaledLinear) -> Contract:
        return Contract(scale=ScaleLayout.COL_MAJOR_STRIDED, weight=None)

    def compute(self, linear: BlockScaledLinear, qa: QuantizedActivation, contract: Contract) -> torch.Tensor:
        from torch.nn.functional import ScalingType, scaled_mm

        weight = linear.weight
        device = weight.data.device
        if qa.data.device != device:
            raise ValueError(
                f"{linear.name}: input on {qa.data.device} but the weight on {device}; move both to one CUDA device"
            )
        try:
            return scaled_mm(
                qa.data,
                weight.data.t(),
                qa.scale,
                ScalingType.BlockWise1x128,
                weight.scale.t(),
                ScalingType.BlockWise128x128,
                output_dtype=torch.bfloat16,
            )
        except (RuntimeError, ValueError) as err:
            raise ValueError(
                f"{linear.name}: cublas-blockwise rejected the call: input scale {describe(qa.scale)} with "
                f"strides {tuple(qa.scale.stride())} written {qa.scale_layout.name}; scaled_mm BlockWise1x128 "
                f"needs COL_MAJOR_STRIDED strides (1, M={qa.m}). torch said: {err}"
            ) from err
