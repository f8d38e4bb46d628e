"""The Triton norm + quant kernels compile for Hopper with the installed triton, on any machine.

The GPU tests run the kernels on one triton version; compiling them here for sm_90a catches a break with
the version CI installs (the scale store is inline PTX, outside triton's usual API), and checks what the
inline store is for: triton would move the scales through shared memory, behind barriers, before storing
them; with it, a quant program needs no barrier at all. The compiling runs in a clean process
(tests/offline_compile.py: an interpreted kernel earlier in the session leaves triton unable to compile).
"""

from __future__ import annotations

import os

import pytest
import torch

triton = pytest.importorskip("triton")

import triton.language as tl  # noqa: E402
from offline_compile import OfflineCompiler  # noqa: E402

from mla_debug.gpu.normquant import support  # noqa: E402
from mla_debug.numerics import AITER, E4M3FN  # noqa: E402


def quant_ptx(compiler, in_place: bool) -> str:
    """group_quant_kernel for V4-Pro rows (1536 = 12 groups of 128), one row per 4-warp program, the aiter
    recipe on e4m3fn, compiled for sm_90a."""
    constants = dict(N=1536, GS=128, BLOCK_M=1, NG=16, SOFT=False, SCALES_IN_PLACE=in_place)
    constants.update(QUANT=support.quant_constants(E4M3FN, AITER))
    pointers = {"x_ptr": "*bf16", "out_ptr": "*u8", "scale_ptr": "*fp32", "ovf_ptr": "*i32"}
    signature = dict(pointers, M="i32", stride_x="i32", stride_sm="i32", stride_sg="i32")
    signature.update({name: "constexpr" for name in constants})
    compiled = compiler.compile(
        "mla_debug.gpu.normquant.kernels:group_quant_kernel",
        signature,
        constants,
        divisible_by_16=(*pointers, "stride_x"),
        num_warps=4,
    )
    return compiled.asm["ptx"]


def test_the_scale_store_needs_no_barrier(offline_compiler):
    inline, plain = quant_ptx(offline_compiler, in_place=True), quant_ptx(offline_compiler, in_place=False)
    assert "st.global.b32" in inline
    assert plain.count("bar.sync") >= 1, "triton no longer converts the scales' layout: drop the inline store"
    assert inline.count("bar.sync") == 0


@triton.jit
def _row_sum(x_ptr, out_ptr, N: tl.constexpr):
    tl.store(out_ptr, tl.sum(tl.load(x_ptr + tl.arange(0, N)), axis=0))


@pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1", reason="the interpreter runs on CPU-only machines")
def test_compiles_after_an_interpreted_kernel_with_nothing_cached(tmp_path):
    # tl.sum is a jitted library function: interpreting it leaves this process's triton unable to compile.
    out = torch.empty(1)
    _row_sum[(1,)](torch.arange(8, dtype=torch.float32), out, N=8)
    assert out.item() == 28
    # An empty cache, so the kernel really goes through code generation (a cached one never would).
    with OfflineCompiler(env={"TRITON_CACHE_DIR": str(tmp_path)}) as compiler:
        assert "st.global.b32" in quant_ptx(compiler, in_place=True)
    assert any(tmp_path.rglob("group_quant_kernel.ptx"))
