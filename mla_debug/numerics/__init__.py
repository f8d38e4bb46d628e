"""FP8 formats, quantization flavors, group/block quantization math and error metrics.

A quantization flavor (`flavor_recipe.QuantFlavor`) is one engine's recipe as data; `FLAVORS` names every
one: aiter's four 1x128 quantizers and its generic recipe (`flavors`), the serving engines' own - vLLM 0.33.0
``vllm-native`` / ``vllm-triton`` / ``vllm-cuda``, SGLang 0.5.23 ``sglang-triton`` / ``sglang-triton-colmajor``,
DeepGEMM ``deepgemm``, FlashInfer ``flashinfer-sm90`` (`engine_flavors`) - and the older ``vllm`` and ``deepseek``.
"""

from .engine_flavors import (
    DEEPGEMM,
    FLASHINFER_SM90,
    SGLANG_TRITON,
    SGLANG_TRITON_COLMAJOR,
    VLLM_CUDA,
    VLLM_NATIVE,
    VLLM_TRITON,
)
from .flavor_recipe import QuantFlavor
from .flavors import AITER, AITER_FUSED, AITER_HIP, AITER_TORCH, AITER_TRITON, DEEPSEEK, FLAVORS, VLLM, quant_flavor
from .formats import E4M3FN, E4M3FNUZ, FORMATS, Fp8Format, e4m3fn_to_e4m3fnuz, format_of, fp8_format
from .metrics import (
    cosine,
    deepgemm_diff,
    error_metrics,
    fp8_ulp_distance,
    max_abs,
    nonfinite,
    rel_l2,
    snr_db,
)
from .quantize import (
    Fp8OverflowWarning,
    block_dequantize,
    block_quantize,
    ceil_pow2,
    group_dequantize,
    group_quantize,
    overflow_threshold,
)

__all__ = [
    "AITER",
    "AITER_FUSED",
    "AITER_HIP",
    "AITER_TORCH",
    "AITER_TRITON",
    "DEEPGEMM",
    "DEEPSEEK",
    "FLASHINFER_SM90",
    "E4M3FN",
    "E4M3FNUZ",
    "FLAVORS",
    "FORMATS",
    "SGLANG_TRITON",
    "SGLANG_TRITON_COLMAJOR",
    "VLLM",
    "VLLM_CUDA",
    "VLLM_NATIVE",
    "VLLM_TRITON",
    "Fp8Format",
    "Fp8OverflowWarning",
    "QuantFlavor",
    "block_dequantize",
    "block_quantize",
    "ceil_pow2",
    "cosine",
    "deepgemm_diff",
    "e4m3fn_to_e4m3fnuz",
    "error_metrics",
    "format_of",
    "fp8_format",
    "fp8_ulp_distance",
    "group_dequantize",
    "group_quantize",
    "max_abs",
    "nonfinite",
    "overflow_threshold",
    "quant_flavor",
    "rel_l2",
    "snr_db",
]
