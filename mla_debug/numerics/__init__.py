"""FP8 formats, quantization flavors, group/block quantization math and error metrics."""

from .flavors import AITER, DEEPSEEK, FLAVORS, VLLM, QuantFlavor, quant_flavor
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
    "DEEPSEEK",
    "E4M3FN",
    "E4M3FNUZ",
    "FLAVORS",
    "FORMATS",
    "VLLM",
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
