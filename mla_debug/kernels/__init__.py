"""Block-scaled FP8 GEMM kernels behind one interface; platforms, tuned tables and kernel selection."""

from . import (  # noqa: F401  (register the kernels)
    aiter_emulated,
    aiter_native,
    aiter_triton,
    aiter_triton_bpreshuffle,
    cublas,
    deepgemm,
    flashinfer_deepgemm,
    miscompiled,
    reference,
    sglang_triton,
    triton_kernels,
    vllm_cpu,
    vllm_triton,
)
from .base import (
    GEMM,
    KERNELS,
    Contract,
    GemmCall,
    GemmProblem,
    Kernel,
    get_kernel,
    kernel_class,
    kernel_names,
    kernels_of_vllm_class,
    register_kernel,
    vllm_class_of,
)
from .block_gemm import ACCUMULATIONS
from .block_scaled_linear import BlockScaledLinear
from .choice import KernelChoice, SkippedKernel
from .platforms import PLATFORMS, Platform, detect_platform, platform, platform_names
from .policy import KernelPolicy, parse_disabled
from .prequantized import apply_pre_quantized_block_scaled_mm, wanted_scale_layout
from .triton_configs import TritonConfig, TritonConfigTable
from .tuned import ENV_VAR as TUNED_ENV_VAR
from .tuned import TableOrigin, TableSource, TunedRow, TunedTable, padded_m, padded_m_candidates

__all__ = [
    "ACCUMULATIONS",
    "GEMM",
    "KERNELS",
    "PLATFORMS",
    "TUNED_ENV_VAR",
    "BlockScaledLinear",
    "Contract",
    "GemmCall",
    "GemmProblem",
    "Kernel",
    "KernelChoice",
    "KernelPolicy",
    "Platform",
    "SkippedKernel",
    "TableOrigin",
    "TableSource",
    "TritonConfig",
    "TritonConfigTable",
    "TunedRow",
    "TunedTable",
    "apply_pre_quantized_block_scaled_mm",
    "detect_platform",
    "get_kernel",
    "kernel_class",
    "kernel_names",
    "kernels_of_vllm_class",
    "padded_m",
    "padded_m_candidates",
    "parse_disabled",
    "platform",
    "platform_names",
    "register_kernel",
    "vllm_class_of",
    "wanted_scale_layout",
]
