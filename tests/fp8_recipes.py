"""The fp8 formats' and quant flavors' constants as the independent oracles model them.

Transcribed from docs/semantics.md §2-3, the flavor descriptions, and for the aiter-* flavors from aiter's
sources (amd-aiter 0.1.7.post2.dev18): csrc/kernels/quant_kernels.cu (hip),
ops/triton/_triton_kernels/quant.py (triton), ops/triton/_triton_kernels/fused_fp8_quant.py (fused),
ops/quant.py pertoken_quant (torch). Shared by the numerics oracle (numerics/fp8_oracle.py) and the
norm + quant oracle (normquant/nq_oracle.py); like them, it shares no code with ``mla_debug``.
"""

from __future__ import annotations

import torch

FN = torch.float8_e4m3fn
FNUZ = torch.float8_e4m3fnuz
DTYPES = (FN, FNUZ)
# Block quantizers exist for these; the aiter-* flavors are aiter's 1x128 activation quantizers only.
BLOCK_FLAVOR_NAMES = ("aiter", "vllm", "deepseek")
FLAVOR_NAMES = (*BLOCK_FLAVOR_NAMES, "aiter-hip", "aiter-triton", "aiter-fused", "aiter-torch")

# Exponent bias and largest finite value of each element format.
BIAS = {FN: 7, FNUZ: 8}
FORMAT_MAX = {FN: 448.0, FNUZ: 240.0}

# The max each flavor maps amax to; every aiter quantizer uses the dtype max: 448 fn, 240 fnuz.
FMT_MAX = {
    ("vllm", FN): 448.0,
    ("vllm", FNUZ): 224.0,
    ("deepseek", FN): 448.0,
    ("deepseek", FNUZ): 448.0,
    **{(name, dtype): FORMAT_MAX[dtype] for name in FLAVOR_NAMES if name.startswith("aiter") for dtype in DTYPES},
}
# The amax floors of 1xG groups and of blocks (hip: absMax starts at 1e-10f; aiter's Triton per-token quant
# has no floor; the fused _fp8_quant_op floors at 1e-10).
GROUP_FLOOR = {
    "aiter": 1e-10,
    "vllm": 1e-10,
    "deepseek": 1e-4,
    "aiter-hip": 1e-10,
    "aiter-triton": 0.0,
    "aiter-fused": 1e-10,
    "aiter-torch": 0.0,
}
BLOCK_FLOOR = {"aiter": 1e-10, "vllm": 1e-12, "deepseek": 1e-4}
# Whether a flavor divides by the scale (else multiplies by its reciprocal), and whether it clamps before the cast.
DIVIDES = {name: name in ("vllm", "aiter-torch") for name in FLAVOR_NAMES}
CLAMPS = {name: name not in ("deepseek", "aiter-triton", "aiter-torch") for name in FLAVOR_NAMES}
# aiter's HIP kernel: scale = amax * (float)(1.0 / max), not amax / max
TIMES_INVERSE_MAX = {"aiter-hip"}
# aiter's torch reference: an all-zero group's scale becomes 1
ZERO_SCALE = {"aiter-torch": 1.0}
# aiter's HIP kernel reduces |x| with fmaxf, which drops NaN
AMAX_IGNORES_NAN = {"aiter-hip"}


def fmt_max(flavor: str, dtype: torch.dtype) -> float:
    return FMT_MAX[(flavor, dtype)]
