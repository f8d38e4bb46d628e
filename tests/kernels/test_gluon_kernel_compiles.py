"""The Gluon GEMM compiles for Hopper with the installed triton, on any machine.

Gluon is triton's experimental dialect and its API moves between releases (``async_copy_global_to_shared``
became ``async_load``, ``thread_barrier`` became ``barrier``); the GPU tests run it on one triton version
only. Compiling it here for sm_90a - no GPU needed - catches a break with the version CI installs, and
the compiled code is checked for what the kernel is for: a preshuffled weight tile staged unswizzled
(a plain one 128-byte swizzled), 16-byte tile copies (4-byte ones for the scales), the tensor-core
instruction each tile shape is meant to use (the plain Triton kernel's, so that both give the same
bytes), and, for the overlapped loop, MMAs that ptxas does not serialize and no spilled registers. The
compiling runs in a clean process (tests/offline_compile.py: an interpreted kernel earlier in the session
leaves triton unable to compile).
"""

from __future__ import annotations

import re
import subprocess

import pytest

from mla_debug.gpu.gemm.launcher import (
    LaunchConfig,
    gluon_constants,
    gluon_fits,
    overlap_fits,
    persistent_constants,
)

pytest.importorskip("triton")
pytest.importorskip("triton.experimental.gluon.language.nvidia.hopper", reason="this triton has no Gluon")
pytest.importorskip("triton.experimental.gluon._runtime", reason="this triton has no Gluon runtime")

POINTERS = {
    "a_ptr": "*fp8e4nv",
    "a_scale_ptr": "*fp32",
    "w_ptr": "*fp8e4nv",
    "w_scale_ptr": "*fp32",
    "out_ptr": "*bf16",
    "partial_ptr": "*fp32",
    "arrivals_ptr": "*i32",
}
SCALARS = ("M", "N", "K", "KP", "stride_am", "stride_sm", "stride_sk", "stride_wsn", "stride_wsk", "stride_om")


def compile_for_hopper(compiler, cfg: LaunchConfig, shuffled: bool = True, k: int = 7168):
    """The kernel the launcher runs for `cfg` (persistent or not), compiled for sm_90a with the launcher's
    compile-time arguments and the alignments torch's allocations give."""
    if cfg.persistent:
        kernel = "mla_debug.gpu.gemm.gluon_persistent:persistent_gemm_kernel"
        constexprs = persistent_constants(cfg, shuffled)
        pointers, extra = {name: POINTERS[name] for name in list(POINTERS)[:5]}, {}
    else:
        kernel, constexprs = "mla_debug.gpu.gemm.gluon_kernel:gluon_gemm_kernel", gluon_constants(cfg, k, shuffled)
        pointers, extra = POINTERS, {"stride_split": "i32"}
    signature = dict(pointers, **{name: "i32" for name in SCALARS}, **extra)
    signature.update({name: "constexpr" for name in constexprs})
    aligned = (*pointers, "N", "K", "KP", "stride_am", "stride_om", *extra)
    return compiler.compile(kernel, signature, constexprs, aligned, gluon=True, num_warps=cfg.num_warps)


@pytest.mark.parametrize(
    "cfg",
    [LaunchConfig(16, 64, 4, 4, 8, 8), LaunchConfig(64, 128, 4, 4, 8, 1), LaunchConfig(128, 128, 8, 3, 8, 1)],
    ids=str,
)
def test_compiles_for_sm90_with_the_weight_tile_unswizzled(cfg, offline_compiler):
    assert gluon_fits(cfg)
    kernel = compile_for_hopper(offline_compiler, cfg)
    ttgir, ptx = kernel.asm["ttgir"], kernel.asm["ptx"]
    # The weight buffer: an unswizzled MMA layout (the activation one keeps the 128-byte swizzle).
    assert re.search(r"nvmma_shared<\{swizzlingByteWidth = 0,", ttgir)
    assert re.search(r"nvmma_shared<\{swizzlingByteWidth = 128,", ttgir)
    # The tiles in 16-byte copies; the scales (staged through the same pipeline) in 4-byte ones, the only
    # other size.
    copies = re.findall(r"cp\.async\.(c[ag])\.shared\.global \[[^]]*\], \[[^]]*\], (0x10|16|0x4|4)\b", ptx)
    assert len(copies) == len(re.findall(r"cp\.async\.c[ag]\.", ptx))
    sizes = {kind: {int(size, 0) for k, size in copies if k == kind} for kind in ("cg", "ca")}
    assert sizes == {"cg": {16}, "ca": {4}}
    if cfg.block_m >= 64:
        assert "wgmma.mma_async" in ptx and "mma.sync" not in ptx
    else:  # 16-row tiles: mma.sync on fp16 copies, as Triton compiles the plain kernel's tl.dot there
        assert "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32" in ptx and "wgmma" not in ptx


def test_tiles_the_copies_do_not_cover_are_left_to_the_triton_kernel():
    assert not gluon_fits(LaunchConfig(16, 64, 8, 4))  # 8 warps x 4 rows > 16 rows
    assert not gluon_fits(LaunchConfig(64, 8, 4, 4))  # narrower than one 16-row band
    assert gluon_fits(LaunchConfig(16, 32, 4, 4))


def mangle(desc) -> str:
    """A TMA descriptor's signature type: ``__mangle__`` from triton 3.7 on, the runtime's mangler before."""
    if hasattr(desc, "__mangle__"):
        return desc.__mangle__()
    from triton.runtime.jit import mangle_type

    return mangle_type(desc)


def assert_ptxas_keeps_it_asynchronous(ptx: str, tmp_path) -> None:
    """Assemble `ptx` for sm_90a with the ptxas triton ships and check its report: no serialized wgmma, no
    wait it had to inject, no spilled register."""
    from triton.backends.nvidia.compiler import get_ptxas

    source = tmp_path / "kernel.ptx"
    source.write_text(ptx)
    run = subprocess.run(
        [get_ptxas(90).path, "-v", "--gpu-name", "sm_90a", str(source), "-o", str(tmp_path / "kernel.cubin")],
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, run.stderr
    assert "Potential Performance Loss" not in run.stderr, run.stderr
    assert "wgmma.wait_group is injected" not in run.stderr, run.stderr
    assert re.search(r"\b0 bytes spill stores, 0 bytes spill loads", run.stderr), run.stderr


OVERLAPPED = [
    LaunchConfig(128, 128, 8, 4, overlap=True),
    LaunchConfig(64, 128, 4, 4, overlap=True),
    LaunchConfig(128, 128, 8, 4, persistent=True),
    LaunchConfig(64, 128, 4, 4, persistent=True),
]


@pytest.mark.parametrize("shuffled", [True, False], ids=["shuffled", "plain"])
@pytest.mark.parametrize("cfg", OVERLAPPED, ids=str)
def test_overlapped_loop_keeps_its_mmas_asynchronous(cfg, shuffled, tmp_path, offline_compiler):
    """Two products in turn, one promoted under the other's MMA: ptxas must neither serialize the wgmmas
    nor inject waits (either would put the promotion back on the tensor cores' path), nor spill (the
    persistent kernel's copy state is kept to scalars for that)."""
    kernel = compile_for_hopper(offline_compiler, cfg, shuffled)
    ttgir, ptx = kernel.asm["ttgir"], kernel.asm["ptx"]
    assert re.search(r"nvmma_shared<\{swizzlingByteWidth = 0,", ttgir) or not shuffled
    if not shuffled:  # a plain weight tile in the 128-byte swizzle, like the activation tile
        assert not re.search(r"nvmma_shared<\{swizzlingByteWidth = 0,", ttgir)
    # Four wgmma (k32) per block: the peeled first block, two per loop body, the last block.
    assert ptx.count("wgmma.mma_async") == 16
    assert_ptxas_keeps_it_asynchronous(ptx, tmp_path)


def test_overlap_needs_wgmma_tiles_one_k_range_and_an_even_block_count():
    assert overlap_fits(LaunchConfig(128, 128, 8, 4, overlap=True), 7168)
    assert not overlap_fits(LaunchConfig(128, 128, 8, 4, overlap=True), 7168 + 128)  # 57 blocks
    assert not overlap_fits(LaunchConfig(16, 64, 4, 4, overlap=True), 7168)  # mma.sync tiles
    assert not overlap_fits(LaunchConfig(64, 128, 4, 4, 8, 2, overlap=True), 7168)  # split-K
    # Constants reach the kernel only where it can run them.
    assert gluon_constants(LaunchConfig(128, 128, 8, 4, overlap=True), 7168)["OVERLAP"]
    assert not gluon_constants(LaunchConfig(128, 128, 8, 4, overlap=True), 7168 + 128)["OVERLAP"]


def test_plain_weight_tiles_the_copies_cover():
    assert gluon_fits(LaunchConfig(128, 128, 8, 4), shuffled=False)
    assert not gluon_fits(LaunchConfig(128, 16, 8, 4), shuffled=False)  # 8 warps x 4 rows > 16 rows


@pytest.mark.parametrize("scale_tma", [False, True], ids=["scales-cp.async", "scales-tma"])
@pytest.mark.parametrize("shuffled", [False, True], ids=["plain", "shuffled"])
@pytest.mark.parametrize("tma_store", [False, True], ids=["direct-store", "tma-store"])
def test_the_warp_specialized_kernel_compiles_to_a_producer_and_two_consumers(
    tma_store, shuffled, scale_tma, tmp_path, offline_compiler
):
    """Twelve warps (two consumer warpgroups, one producer warp rounded up to a warpgroup) sharing 65536
    registers through setmaxnreg, TMA copies, and no spill or serialized MMA; with tma_store, each
    consumer's rows leave through shared memory and a TMA store."""
    import torch

    from mla_debug.gpu.gemm.launcher import scale_descriptor, tma_descriptors

    a, w = (torch.empty(rows, 7168, dtype=torch.float8_e4m3fn) for rows in (4096, 2112))
    descs = tma_descriptors(a, w, torch.empty(4096, 2112, dtype=torch.bfloat16), shuffled)
    descs += (scale_descriptor(torch.empty(56 * 4096), 4096, 56) if scale_tma else descs[0],)
    signature = {name: mangle(desc) for name, desc in zip(("a_desc", "w_desc", "out_desc", "s_desc"), descs)}
    signature.update(a_scale_ptr="*fp32", w_scale_ptr="*fp32", out_ptr="*bf16")
    signature.update(
        {name: "i32" for name in ("M", "N", "K", "stride_sm", "stride_sk", "stride_wsn", "stride_wsk", "stride_om")}
    )
    constexprs = dict(SHUFFLED=shuffled, STAGGER=True, GROUP_M=8, STAGES=4, TMA_STORE=tma_store, SCALE_TMA=scale_tma)
    signature.update({name: "constexpr" for name in constexprs})
    kernel = offline_compiler.compile(
        "mla_debug.gpu.gemm.gluon_specialized:specialized_gemm_kernel",
        signature,
        constexprs,
        ("a_scale_ptr", "w_scale_ptr", "out_ptr", "N", "K"),
        gluon=True,
        num_warps=4,
        maxnreg=168,
    )
    ptx = kernel.asm["ptx"]
    assert kernel.num_warps == 12 and "setmaxnreg" in ptx and "cp.async.bulk.tensor" in ptx
    assert ptx.count("wgmma.mma_async") == 8  # k32 steps of one block, once per consumer
    assert ("cp.async.bulk.tensor.2d.global.shared" in ptx) == tma_store
    # The scales: one more TMA copy, or copies that complete on the stage's barrier.
    assert ("cp.async.mbarrier.arrive.noinc" in ptx) != scale_tma
    assert_ptxas_keeps_it_asynchronous(ptx, tmp_path)
