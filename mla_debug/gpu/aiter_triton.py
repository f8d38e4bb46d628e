"""aiter's own Triton kernels, launched by the GPU wing: the block-scale GEMM and the fused RMSNorm + quant.

The code is AMD's (amd-aiter 0.1.7.post2.dev18, loaded by `mla_debug.real_aiter` without running
``aiter/__init__.py``); what this module adds is where it may run and how it is launched off ROCm:

- ``gemm_a8w8_blockscale`` (aiter/ops/triton/gemm_a8w8_blockscale.py) with aiter's own config choice
  (``_get_config(M, N, K)``: the JSON tuned for the GPU the code stands for - MI300X for gfx942, MI350X
  for gfx950). On an NVIDIA GPU the AMD-only launch options of those configs (``waves_per_eu``,
  ``matrix_instr_nonkdim``, ``kpack``) are dropped, as the CUDA backend rejects them; everything else
  (tile sizes, warps, stages, split-K, cache modifiers) is aiter's. Each call gets a fresh copy of the
  config, because aiter's wrapper edits the dict it is given (``SPLITK_BLOCK_SIZE``, a smaller
  ``BLOCK_SIZE_K`` for short K) and, called without one, would edit its cached dict for later calls.
- ``fused_rms_fp8_group_quant`` (aiter/ops/triton/fused_fp8_quant.py), which allocates its own outputs.

Both run compiled on CUDA (and ROCm) GPUs and, on the CPU, only under Triton's interpreter
(``TRITON_INTERPRET=1``), which is slow (tiny shapes only) and rounds fp32 -> bf16/fp8 differently from
compiled Triton (tests/aiter_reference/interpreter_casts.py works around that in the tests). On NVIDIA
GPUs e4m3fnuz is not available (Triton has no fp8e4b8 there).
"""

from __future__ import annotations

from types import ModuleType

import torch

from .. import real_aiter
from . import triton_env

# Launch options the AMD backend of Triton understands and the CUDA backend rejects.
AMD_ONLY_LAUNCH_OPTIONS = ("waves_per_eu", "matrix_instr_nonkdim", "kpack")
GEMM_MODULE = "aiter.ops.triton.gemm_a8w8_blockscale"
GEMM_CONFIGS = "aiter.ops.triton._triton_kernels.gemm_a8w8_blockscale"
FUSED_MODULE = "aiter.ops.triton.fused_fp8_quant"
# The architecture whose fp8 type a quantized output has (aiter picks its configs and dtype by arch).
ARCH_OF_FP8 = {torch.float8_e4m3fn: "gfx950", torch.float8_e4m3fnuz: "gfx942"}


def unavailable_reason(device: torch.device, interpreter_allowed: bool = True) -> str | None:
    """None when aiter's Triton kernels can run on tensors on `device` in this process, else why not."""
    why = real_aiter.unavailable_reason()
    if why is not None:
        return why
    why = triton_env.import_error()
    if why is not None:
        return why
    if device.type == "cuda":
        if triton_env.interpreting():
            return "TRITON_INTERPRET=1 is set: Triton interprets on the CPU and cannot launch on the GPU"
        return None
    if device.type == "cpu" and interpreter_allowed:
        if not triton_env.interpreting():
            return "aiter's Triton kernels run on CPU tensors only under Triton's interpreter (TRITON_INTERPRET=1)"
        return triton_env.interpreter_error()
    return f"aiter's Triton kernels run on GPU tensors, not on {device}"


def require(device: torch.device, what: str) -> None:
    why = unavailable_reason(device)
    if why is not None:
        raise RuntimeError(f"{what}: {why}")


def _on_nvidia(device: torch.device) -> bool:
    return device.type == "cuda" and not getattr(torch.version, "hip", None)


def gemm_config(m: int, n: int, k: int, arch: str, device: torch.device) -> dict:
    """aiter's config for an (M, N, K) GEMM on `arch`'s GPU, as a fresh dict; AMD-only launch options
    dropped for an NVIDIA device."""
    config = dict(real_aiter.load_module(GEMM_CONFIGS, arch)._get_config(m, n, k))
    if _on_nvidia(device):
        for option in AMD_ONLY_LAUNCH_OPTIONS:
            config.pop(option, None)
    return config


def gemm_a8w8_blockscale(
    x: torch.Tensor,
    w: torch.Tensor,
    x_scale: torch.Tensor,
    w_scale: torch.Tensor,
    arch: str,
    config: dict | None = None,
) -> torch.Tensor:
    """aiter's Triton block-scale GEMM: y (M, N) bf16 = x (M, K) @ w (N, K)^T with x_scale (M, K/128) and
    w_scale (N/128, K/128) read by their strides; `config` defaults to aiter's choice for `arch`."""
    require(x.device, "aiter gemm_a8w8_blockscale (Triton)")
    if x.dtype == torch.float8_e4m3fnuz and _on_nvidia(x.device):
        raise ValueError("aiter gemm_a8w8_blockscale (Triton): e4m3fnuz does not exist on NVIDIA GPUs (use e4m3fn)")
    m, k = x.shape
    n = w.shape[0]
    chosen = dict(config) if config is not None else gemm_config(m, n, k, arch, x.device)
    module: ModuleType = real_aiter.load_module(GEMM_MODULE, arch)
    return module.gemm_a8w8_blockscale(x, w, x_scale, w_scale, dtype=torch.bfloat16, config=chosen)


def fused_rms_fp8_group_quant(
    q: torch.Tensor,
    q_weight: torch.Tensor,
    q_eps: float,
    k: torch.Tensor | None,
    k_weight: torch.Tensor | None,
    k_eps: float | None,
    group_size: int,
    fp8: torch.dtype,
    residual: torch.Tensor | None,
    return_unquantized: bool,
    transpose_scale: bool,
):
    """aiter's Triton ``fused_rms_fp8_group_quant``; returns aiter's own
    ``((q_fp8, q_scale), q_unquantized, k_normed, residual_sum)``."""
    require(q.device, "aiter fused_rms_fp8_group_quant (Triton)")
    if fp8 == torch.float8_e4m3fnuz and _on_nvidia(q.device):
        raise ValueError("aiter fused_rms_fp8_group_quant (Triton): e4m3fnuz does not exist on NVIDIA GPUs")
    module = real_aiter.load_module(FUSED_MODULE, ARCH_OF_FP8[fp8])
    return module.fused_rms_fp8_group_quant(
        q,
        q_weight,
        q_eps,
        k,
        k_weight,
        k_eps,
        group_size,
        fp8,
        residual,
        return_unquantized,
        transpose_scale,
    )
