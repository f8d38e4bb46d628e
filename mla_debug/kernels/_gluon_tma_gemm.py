"""The large-M block-scaled FP8 GEMM for Hopper with TMA tile copies (Gluon; imported only when it runs).

Same contract, arithmetic and bytes as ``gluon_gemm_kernel`` with OVERLAP (and so as the Triton kernel for
the same tiles): wgmma tiles, no split-K, an even number of K blocks.

Why TMA: in the overlapped loop the tensor cores wait for the CUDA cores. An H200's counters on
7168x16384 M = 4096 (ncu, RESULTS.md) show the tensor pipe busy 54% of the time and each warp issuing an
instruction only every 5.5 cycles, two warps per scheduler: a warp's share of a K block - 64 multiply-adds
of the promotion, the address arithmetic and the ten 16-byte ``cp.async`` of its part of the next tiles -
takes longer than the block's MMA, and the next MMA waits at the barrier for the slowest warp. Here one
thread starts each tile's copy with the tensor memory accelerator (one instruction for 16 KB, rows past M
or N filled with zeros), and the other threads only promote and copy the per-row scales.

A preshuffled (16, 16) weight is copied through a 4-D view - (K chunk, 16-row band, row, byte) with
strides (256, 16 x KP, 16, 1) - whose box lands in shared memory chunk-major, exactly the unswizzled
"interleaved" layout gluon_gemm_kernel stages it in and the wgmma reads.
"""

from __future__ import annotations

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import async_copy
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared,
    mbarrier,
    tma,
    warpgroup_mma,
    warpgroup_mma_wait,
)

from ._gluon_gemm import _barrier, _copy, block_scale, store_tile, tile_coordinates

# The TMA copy into shared memory: async_load from triton 3.7 on, async_copy_global_to_shared before.
_tma_load = getattr(tma, "async_load", None) or tma.async_copy_global_to_shared


@gluon.jit
def tma_gemm_kernel(
    a_desc,
    a_scale_ptr,
    w_desc,
    w_scale_ptr,
    out_ptr,
    M,
    N,
    K,
    stride_sm,
    stride_sk,
    stride_wsn,
    stride_wsk,
    stride_om,
    SHUFFLED: gl.constexpr,
    STAGGER: gl.constexpr,
    BLOCK_M: gl.constexpr,
    BLOCK_N: gl.constexpr,
    GROUP_M: gl.constexpr,
    STAGES: gl.constexpr,
):
    BLOCK_K: gl.constexpr = 128
    NUM_WARPS: gl.constexpr = gl.num_warps()
    gl.static_assert(BLOCK_M >= 64, "wgmma tiles")
    rows_copy: gl.constexpr = gl.BlockedLayout([1], [32], [NUM_WARPS], [0])
    scale_smem: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, [0])
    acc_layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[NUM_WARPS, 1], instr_shape=[16, BLOCK_N, 32]
    )
    rows_layout: gl.constexpr = gl.SliceLayout(1, acc_layout)

    pid_m, pid_n = tile_coordinates(gl.program_id(0), M, N, BLOCK_M, BLOCK_N, GROUP_M)
    n_blocks = K // BLOCK_K
    shift = 0
    if STAGGER:  # column tile j starts at block j (see the Triton kernel)
        shift = pid_n % n_blocks

    # Buffers in the descriptors' block layouts; each slot's tile copies complete on its barrier.
    a_bufs = gl.allocate_shared_memory(a_desc.dtype, [STAGES] + a_desc.block_type.shape, a_desc.layout)
    w_bufs = gl.allocate_shared_memory(w_desc.dtype, [STAGES] + w_desc.block_type.shape, w_desc.layout)
    a_scale_bufs = gl.allocate_shared_memory(gl.float32, [STAGES, BLOCK_M], scale_smem)
    w_scale_bufs = gl.allocate_shared_memory(gl.float32, [STAGES, BLOCK_M], scale_smem)
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for s in gl.static_range(STAGES):
        mbarrier.init(ready.index(s), count=1)
    fence_async_shared()
    _barrier()

    # Scale pointers, one per tile row (past M: the last row's, never stored), as in gluon_gemm_kernel.
    offs_sm = gl.minimum(pid_m * BLOCK_M + gl.arange(0, BLOCK_M, layout=rows_copy), M - 1)
    s_ptrs = a_scale_ptr + offs_sm.to(gl.int64) * stride_sm
    ws_ptrs = w_scale_ptr + ((pid_n * BLOCK_N) // 128).to(gl.int64) * stride_wsn + gl.zeros_like(offs_sm)
    bufs = (a_bufs, w_bufs, a_scale_bufs, w_scale_bufs, ready)
    place = (pid_m, pid_n, shift, n_blocks)
    scales = (s_ptrs, ws_ptrs, stride_sk, stride_wsk)

    for s in gl.static_range(STAGES - 1):
        _fetch(s, a_desc, w_desc, bufs, place, scales, STAGES, SHUFFLED, BLOCK_M, BLOCK_N)

    # The overlapped loop of gluon_gemm_kernel (see there for why it is shaped so).
    acc = gl.zeros((BLOCK_M, BLOCK_N), gl.float32, acc_layout)
    part_a = gl.zeros((BLOCK_M, BLOCK_N), gl.float32, acc_layout)
    part_b = gl.zeros((BLOCK_M, BLOCK_N), gl.float32, acc_layout)
    part_a = _start_mma(0, bufs, part_a, STAGES, SHUFFLED, BLOCK_N)
    _fetch(STAGES - 1, a_desc, w_desc, bufs, place, scales, STAGES, SHUFFLED, BLOCK_M, BLOCK_N)
    part_a = warpgroup_mma_wait(0, deps=[part_a])
    for j in range(0, n_blocks - 2, 2):
        scale = block_scale(j, a_scale_bufs, w_scale_bufs, STAGES, rows_layout)
        part_b = _start_mma(j + 1, bufs, part_b, STAGES, SHUFFLED, BLOCK_N)
        acc += part_a * scale[:, None]
        _fetch(j + STAGES, a_desc, w_desc, bufs, place, scales, STAGES, SHUFFLED, BLOCK_M, BLOCK_N)
        part_b = warpgroup_mma_wait(0, deps=[part_b])
        scale = block_scale(j + 1, a_scale_bufs, w_scale_bufs, STAGES, rows_layout)
        part_a = _start_mma(j + 2, bufs, part_a, STAGES, SHUFFLED, BLOCK_N)
        acc += part_b * scale[:, None]
        _fetch(j + 1 + STAGES, a_desc, w_desc, bufs, place, scales, STAGES, SHUFFLED, BLOCK_M, BLOCK_N)
        part_a = warpgroup_mma_wait(0, deps=[part_a])
    scale = block_scale(n_blocks - 2, a_scale_bufs, w_scale_bufs, STAGES, rows_layout)
    part_b = _start_mma(n_blocks - 1, bufs, part_b, STAGES, SHUFFLED, BLOCK_N)
    acc += part_a * scale[:, None]
    part_b = warpgroup_mma_wait(0, deps=[part_b])
    acc += part_b * block_scale(n_blocks - 1, a_scale_bufs, w_scale_bufs, STAGES, rows_layout)[:, None]
    async_copy.wait_group(0)
    for s in gl.static_range(STAGES):
        mbarrier.invalidate(ready.index(s))
    store_tile(acc, out_ptr, pid_m, pid_n, M, N, stride_om, BLOCK_M, BLOCK_N)


@gluon.jit
def _weight_tile(w_bufs, slot, SHUFFLED: gl.constexpr, BLOCK_N: gl.constexpr):
    """Slot `slot` of the weight buffer as BLOCK_N rows of 128 K bytes, whatever its staging."""
    if SHUFFLED:  # [K chunk, band, row, 16 bytes], chunk-major
        return w_bufs.index(slot).reshape((8, BLOCK_N, 16)).permute((1, 0, 2)).reshape((BLOCK_N, 128))
    else:
        return w_bufs.index(slot)


@gluon.jit
def _start_mma(i, bufs, part, STAGES: gl.constexpr, SHUFFLED: gl.constexpr, BLOCK_N: gl.constexpr):
    """Wait for block i's tiles (its slot's barrier, in the phase of its pass over the slots) and this
    thread's scale copies, then start its wgmma into `part`'s registers (not waited for). The CTA
    barrier makes every thread's scale copies visible and, every warpgroup having waited for block
    i - 1's MMA and read its scales, frees that block's slot for the refill that follows."""
    a_bufs, w_bufs, a_scale_bufs, w_scale_bufs, ready = bufs
    slot = i % STAGES
    async_copy.wait_group(STAGES - 2)
    mbarrier.wait(ready.index(slot), (i // STAGES) & 1)
    _barrier()
    w_tile = _weight_tile(w_bufs, slot, SHUFFLED, BLOCK_N).permute((1, 0))
    return warpgroup_mma(a_bufs.index(slot), w_tile, part, use_acc=False, is_async=True)


@gluon.jit
def _fetch(
    i, a_desc, w_desc, bufs, place, scales, STAGES: gl.constexpr, SHUFFLED: gl.constexpr, BLOCK_M: gl.constexpr,
    BLOCK_N: gl.constexpr,
):  # fmt: skip
    """Start the copies of this tile's i-th block (in its staggered order) into slot i % STAGES: both
    tiles by TMA, completing on the slot's barrier, and both blocks' scales by cp.async, committed as one
    group (an empty one past the range, so that every step commits one)."""
    a_bufs, w_bufs, a_scale_bufs, w_scale_bufs, ready = bufs
    pid_m, pid_n, shift, n_blocks = place
    s_ptrs, ws_ptrs, stride_sk, stride_wsk = scales
    if i < n_blocks:
        step = i + shift
        kb = gl.where(step >= n_blocks, step - n_blocks, step)
        slot = i % STAGES
        bar = ready.index(slot)
        mbarrier.expect(bar, a_desc.block_type.nbytes + w_desc.block_type.nbytes)
        _tma_load(a_desc, [pid_m * BLOCK_M, kb * 128], bar, a_bufs.index(slot))
        if SHUFFLED:  # (K chunk, band, row, byte)
            _tma_load(w_desc, [kb * 8, pid_n * (BLOCK_N // 16), 0, 0], bar, w_bufs.index(slot))
        else:
            _tma_load(w_desc, [pid_n * BLOCK_N, kb * 128], bar, w_bufs.index(slot))
        _copy(a_scale_bufs.index(slot), s_ptrs + kb * stride_sk)
        _copy(w_scale_bufs.index(slot), ws_ptrs + kb * stride_wsk)
    async_copy.commit_group()
