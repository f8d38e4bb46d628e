"""RMSNorm + FP8 group quant: the fused op (aiter ``fused_qk_rmsnorm_group_quant``) and its unfused baselines.

`fused_qk_rmsnorm_group_quant` quantizes q from the fp32 normalized values (one rounding);
`norm_then_quant` / `aiter_test_reference` round to bf16 first (two roundings);
`norm_then_quant_for_v4` is DeepSeek-V4's pre-fusion path, which quantizes the bf16 qr twice.
Backends: "torch" (reference), "triton" (`triton_fused`, with the unfused Triton baseline in
`triton_unfused`), "aiter" (`aiter_backend`: aiter itself on ROCm), "aiter-triton"
(`aiter_triton_backend`: aiter's Triton op run off ROCm by the real-aiter loader); neither Triton nor
aiter is imported until used. They are registered in `NORM_QUANT_BACKENDS`, an `implementations.Registry`
like the GEMM kernels' `KERNELS`.
"""

from __future__ import annotations

from . import aiter_backend, aiter_triton_backend, triton_fused  # noqa: F401  (register "aiter", "aiter-triton", "triton")
from ._inputs import MAX_WIDTH, NormQuantArgs, validate_inputs
from .reference import (
    AUTO_ORDER,
    NORM_QUANT_BACKENDS,
    NormQuantBackend,
    NormQuantResult,
    available_backends,
    fused_qk_rmsnorm_group_quant,
    register_backend,
    resolve_backend,
    unregister_backend,
)
from .rmsnorm import rmsnorm_fp32
from .triton_unfused import triton_norm_then_quant, triton_norm_then_quant_for_v4
from .unfused import V4UnfusedResult, aiter_test_reference, norm_then_quant, norm_then_quant_for_v4

__all__ = [
    "AUTO_ORDER",
    "MAX_WIDTH",
    "NORM_QUANT_BACKENDS",
    "NormQuantArgs",
    "NormQuantBackend",
    "NormQuantResult",
    "V4UnfusedResult",
    "aiter_test_reference",
    "available_backends",
    "fused_qk_rmsnorm_group_quant",
    "norm_then_quant",
    "norm_then_quant_for_v4",
    "register_backend",
    "resolve_backend",
    "rmsnorm_fp32",
    "triton_norm_then_quant",
    "triton_norm_then_quant_for_v4",
    "unregister_backend",
    "validate_inputs",
]
