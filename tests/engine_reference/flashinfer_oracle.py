"""An oracle of the bf16 input quant inside FlashInfer 0.7.2.post1's ``fp8_blockscale_gemm_sm90``, written from
its source (tests only).

The kernel - TensorRT-LLM's ``scale_1x128_kernel`` in
``flashinfer/data/csrc/nv_internal/tensorrt_llm/kernels/cutlass_kernels/fp8_blockscale_gemm/
fp8_blockscale_gemm_kernel.cuh`` - is JIT-compiled for Hopper and cannot run here; this restates it
statement by statement for one row of ``dim_x`` values, sharing no code with ``mla_debug.numerics``:

- ``input_amax = __hmax(input_amax, __hmax(__habs(x), __habs(y)))`` over the group's bf16 values, then a warp
  max: the largest |x|, exact (a bf16 value);
- ``ScaleType scale = amax != InputType(0.f) ? 448.f / ScaleType(amax) : 1.f``;
- ``scales[...] = ScaleType(1.f / scale)``;
- ``ScaleType value = ScaleType(x) * scale; output = OutputType(value)``: the ``__nv_fp8_e4m3`` constructor
  from float (CUDA's cuda_fp8.hpp: ``__nv_cvt_float_to_fp8(f, __NV_SATFINITE, __NV_E4M3)``) rounds to nearest
  even and saturates to +-448.

fp32 operations are done in float64 and rounded to fp32: the correctly rounded results. FlashInfer compiles
the kernel with ``-use_fast_math`` (flashinfer/jit/core.py ``gen_jit_spec``), so on the GPU its two divisions
are approximate (within 2 ulps); the oracle, like the flavor it checks, keeps the source's exact arithmetic.
Finite input only: the bf16 ``__hmax`` and the warp's ``std::max`` leave NaN to the hardware.
"""

from __future__ import annotations

import torch

GROUP = 128
MAX = 448.0


def _f32(t: torch.Tensor) -> torch.Tensor:
    return t.to(torch.float32).to(torch.float64)


def scale_1x128(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(e4m3fn (M, K), fp32 logical scales (M, K / 128)) for a bf16 (M, K) input."""
    if x.dtype != torch.bfloat16:
        raise TypeError(f"scale_1x128_kernel reads bf16 (InputType __nv_bfloat16 in vLLM's call), got {x.dtype}")
    m, k = x.shape
    groups = x.to(torch.float64).reshape(m, k // GROUP, GROUP)
    amax = groups.abs().amax(dim=-1)
    scale = torch.where(amax != 0, _f32(MAX / torch.where(amax != 0, amax, 1.0)), torch.ones_like(amax))
    stored = _f32(1.0 / scale)
    values = _f32(groups * scale.unsqueeze(-1)).clamp(-MAX, MAX)  # the satfinite conversion saturates
    q = values.to(torch.float32).to(torch.float8_e4m3fn)  # in range: torch's cast rounds to nearest even
    return q.reshape(m, k), stored.to(torch.float32)
