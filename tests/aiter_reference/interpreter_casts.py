"""The one workaround for Triton's CPU interpreter that the aiter cross-checks need (tests only).

aiter's Triton kernels are checked on CPU-only machines under ``TRITON_INTERPRET=1``, whose emulation
differs from compiled Triton in three ways that matter here (triton 3.x, ``runtime/interpreter.py``):

1. ``_convert_float`` rounds a downcast by adding the first dropped bit (ties away from zero, no sticky
   bits) and does not carry a mantissa overflow into the exponent: fp32 7.9 -> e4m3fn gives 4.0
   instead of 8.0. Compiled Triton converts fp32 -> fp8 round-to-nearest-even (``cvt.rn.satfinite`` on
   NVIDIA).
2. fp32 -> bf16 goes through the same function with no rounding mode: the mantissa is truncated.
   Compiled Triton rounds to nearest even.
3. ``tl.assume(cond)`` is an ``assert``; aiter's kernels assume ``pid > 0``, false for program 0, which
   compiled Triton only takes as an (unchecked) optimisation hint.

`compiled_semantics()` replaces, while active, the interpreter's float downcasts to the types torch
knows (fp32/fp16/bf16 -> fp16, bf16, e4m3fn, e4m3fnuz, e5m2) by torch's round-to-nearest-even casts, and
its ``create_assume`` by a no-op. torch's e4m3fn cast saturates finite overflow to +-448 like
``cvt.rn.satfinite``; aiter clamps before every such cast anyway. Nothing in the library patches Triton.
"""

from __future__ import annotations

import contextlib

import numpy as np
import pytest
import torch


def _torch_types(tl) -> dict:
    return {
        tl.float32: torch.float32,
        tl.float16: torch.float16,
        tl.bfloat16: torch.bfloat16,
        tl.float8e4nv: torch.float8_e4m3fn,
        tl.float8e4b8: torch.float8_e4m3fnuz,
        tl.float8e5: torch.float8_e5m2,
    }


_NP_UINT = {1: np.uint8, 2: np.uint16, 4: np.uint32}
_TORCH_UINT = {1: torch.uint8, 2: torch.uint16, 4: torch.uint32}


@contextlib.contextmanager
def compiled_semantics():
    """Within the block, interpreted kernels round downcasts to nearest even and ignore ``tl.assume``."""
    interpreter = pytest.importorskip("triton.runtime.interpreter")
    import triton.language as tl

    types = _torch_types(tl)
    original_convert = interpreter._convert_float
    original_assume = interpreter.InterpreterBuilder.create_assume

    def convert(values, input_dtype, output_dtype, rounding_mode):
        src, dst = types.get(input_dtype), types.get(output_dtype)
        downcast = src is not None and dst is not None and dst.itemsize < src.itemsize
        round_to_zero = rounding_mode is not None and "RTZ" in str(rounding_mode)
        if not downcast or round_to_zero:
            return original_convert(values, input_dtype, output_dtype, rounding_mode)
        raw = np.ascontiguousarray(values).view(_NP_UINT[src.itemsize])
        cast = torch.from_numpy(raw.copy()).view(src).to(dst)
        return cast.view(_TORCH_UINT[dst.itemsize]).numpy().reshape(raw.shape)

    interpreter._convert_float = convert
    interpreter.InterpreterBuilder.create_assume = lambda self, condition: None
    try:
        yield
    finally:
        interpreter._convert_float = original_convert
        interpreter.InterpreterBuilder.create_assume = original_assume
