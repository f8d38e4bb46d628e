"""The Triton norm + quant kernels compile for Hopper with the installed triton, on any machine.

The GPU tests run the kernels on one triton version; compiling them here for sm_90a catches a break with
the version CI installs (the scale store is inline PTX, outside triton's usual API), and checks what the
inline store is for: triton would move the scales through shared memory, behind barriers, before storing
them; with it, a quant program needs no barrier at all.
"""

from __future__ import annotations

import importlib.util
import os

import pytest

triton = pytest.importorskip("triton")

from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402

from mla_debug.normquant import _triton_support as support  # noqa: E402
from mla_debug.numerics import AITER, E4M3FN  # noqa: E402


def compiled_module():
    """The kernel source decorated for compiling, even where TRITON_INTERPRET=1 (tests/conftest.py sets it
    on machines without CUDA; triton.jit reads it when it decorates)."""
    saved = os.environ.pop("TRITON_INTERPRET", None)
    try:
        origin = importlib.util.find_spec("mla_debug.normquant._triton_kernels").origin
        spec = importlib.util.spec_from_file_location("nq_kernels_for_sm90", origin)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        if saved is not None:
            os.environ["TRITON_INTERPRET"] = saved
    return module


def quant_ptx(in_place: bool) -> str:
    """group_quant_kernel for V4-Pro rows (1536 = 12 groups of 128), one row per 4-warp program, the aiter
    recipe on e4m3fn, compiled for sm_90a."""
    constants = dict(N=1536, GS=128, BLOCK_M=1, NG=16, SOFT=False, SCALES_IN_PLACE=in_place)
    constants.update(support.quant_constants(E4M3FN, AITER).kwargs())
    pointers = {"x_ptr": "*bf16", "out_ptr": "*u8", "scale_ptr": "*fp32", "ovf_ptr": "*i32"}
    signature = dict(pointers, M="i32", stride_x="i32", stride_sm="i32", stride_sg="i32")
    signature.update({name: "constexpr" for name in constants})
    names = list(signature)
    attrs = {(names.index(name),): [["tt.divisibility", 16]] for name in (*pointers, "stride_x")}
    kernel = compiled_module().group_quant_kernel
    source = ASTSource(fn=kernel, signature=signature, constexprs=constants, attrs=attrs)
    return triton.compile(source, target=GPUTarget("cuda", 90, 32), options=dict(num_warps=4)).asm["ptx"]


def test_the_scale_store_needs_no_barrier():
    inline, plain = quant_ptx(in_place=True), quant_ptx(in_place=False)
    assert "st.global.b32" in inline
    assert plain.count("bar.sync") >= 1, "triton no longer converts the scales' layout: drop the inline store"
    assert inline.count("bar.sync") == 0
