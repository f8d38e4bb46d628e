"""A test kernel whose whole body is aiter's ``_fp8_quant_op`` (the quant step of its fused RMSNorm +
group quant) on rows of fp32 values, so that step is checked on any values, not only normalized ones.
Imported only after the pinned amd-aiter was found (it loads aiter's Triton module at import)."""

from __future__ import annotations

import triton
import triton.language as tl

from mla_debug.real_aiter import load_module

aiter_fp8_quant_op = load_module("aiter.ops.triton._triton_kernels.fused_fp8_quant")._fp8_quant_op


@triton.jit
def quant_rows(x_ptr, q_ptr, s_ptr, BLOCK: tl.constexpr, GROUP: tl.constexpr, DMAX: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * BLOCK + offs)[None, :]
    q, scale = aiter_fp8_quant_op(x, 1, BLOCK, GROUP, DMAX, -DMAX)
    tl.store(q_ptr + row * BLOCK + offs, tl.reshape(q, (BLOCK,)).to(q_ptr.dtype.element_ty))
    tl.store(s_ptr + row * (BLOCK // GROUP) + tl.arange(0, BLOCK // GROUP), tl.reshape(scale, (BLOCK // GROUP,)))
