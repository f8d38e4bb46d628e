"""The large-M block-scaled FP8 GEMM for Hopper, warp-specialized (Gluon; imported only when it runs).

Same contract, arithmetic and bytes as the Triton kernel with 128 x 128 tiles (plain or preshuffled
weight, e4m3fn): per 128-wide K block an fp32 wgmma product, times ``x_scale * w_scale``, added to an fp32
accumulator.

Why: in the other kernels every warp waits at a CTA-wide barrier once per K block, so the two
warpgroups that share a tile start their MMAs together and then both wait, and the tensor cores idle
between blocks, busy far less of the time than in cuBLAS (RESULTS.md, "Why the rest of the gap stays").
Here the tile's rows are split between two consumer warpgroups that never wait for each other - each
waits only for its block's tiles to land and releases the slot when its MMA is done - and one producer
warp copies the tiles with the tensor memory accelerator, so one warpgroup's MMA runs while the other
promotes. The producer
also copies each block's activation scales into the stage: column-major ones (a block's 128 rows
contiguous) by TMA where M is a multiple of 4, otherwise by cp.async from its 32 threads. Loaded by the
consumers from global memory one block ahead, column-major scales (a new line per block) had run slower
than row-major ones; by TMA they run as fast or faster (RESULTS.md, "The activation scales in the
stages").

Each program takes tiles pid, pid + P, pid + 2P, ... of the grouped order (P programs). With one program
per SM (persistent) the producer runs on into the next tile while the consumers store the last one, so
a short K loop no longer pays a pipeline fill per tile; with one program per tile the loop runs once.
With TMA_STORE each consumer writes its bf16 rows to shared memory and the tensor memory accelerator
stores them, so the consumer goes on to the next tile's MMAs while the store drains.
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

from .gluon_kernel import _copy, tile_coordinates

# TMA copies: async_load / async_store from triton 3.7 on, async_copy_global_to_shared / _shared_to_global
# before.
_tma_load = getattr(tma, "async_load", None) or tma.async_copy_global_to_shared
_tma_store = getattr(tma, "async_store", None) or tma.async_copy_shared_to_global

BLOCK: gl.constexpr = gl.constexpr(128)
HALF: gl.constexpr = gl.constexpr(64)


@gluon.jit
def specialized_gemm_kernel(
    a_desc, w_desc, out_desc, s_desc, a_scale_ptr, w_scale_ptr, out_ptr,
    M, N, K, stride_sm, stride_sk, stride_wsn, stride_wsk, stride_om,
    SHUFFLED: gl.constexpr, STAGGER: gl.constexpr, GROUP_M: gl.constexpr, STAGES: gl.constexpr, TMA_STORE: gl.constexpr,
    SCALE_TMA: gl.constexpr,
):  # fmt: skip
    a_bufs = gl.allocate_shared_memory(a_desc.dtype, [STAGES] + a_desc.block_type.shape, a_desc.layout)
    w_bufs = gl.allocate_shared_memory(w_desc.dtype, [STAGES] + w_desc.block_type.shape, w_desc.layout)
    if TMA_STORE:  # one 64 x 128 bf16 staging tile per consumer
        out_bufs = gl.allocate_shared_memory(out_desc.dtype, [2] + out_desc.block_type.shape, out_desc.layout)
    else:
        out_bufs = a_bufs  # never touched
    # The activation's row scales of each stage's K block: with SCALE_TMA (column-major scales: a block's
    # are 128 contiguous floats) one more TMA copy, else copied by the producer warp's 32 threads.
    if SCALE_TMA:
        s_bufs = gl.allocate_shared_memory(gl.float32, [STAGES] + s_desc.block_type.shape, s_desc.layout)
    else:
        s_bufs = gl.allocate_shared_memory(gl.float32, [STAGES, BLOCK], gl.SwizzledSharedLayout(1, 1, 1, [0]))
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for s in gl.static_range(STAGES):
        # The producer's expect and the TMA copies' bytes, and each producer thread's scale copies.
        mbarrier.init(ready.index(s), count=1 if SCALE_TMA else 1 + 32)
        mbarrier.init(empty.index(s), count=2)  # both consumers done with the slot
    fence_async_shared()

    args = (
        a_desc, w_desc, out_desc, s_desc, a_bufs, w_bufs, out_bufs, s_bufs, ready, empty, a_scale_ptr, w_scale_ptr,
        out_ptr, M, N, K, stride_sm, stride_sk, stride_wsn, stride_wsk, stride_om,
    )  # fmt: skip
    # (The constants go to each partition one by one: a tuple of them would reach it as values, and the
    # branches they select would all be compiled.)
    gl.warp_specialize(
        [
            (_consume, (args, SHUFFLED, STAGGER, GROUP_M, STAGES, TMA_STORE, SCALE_TMA, 0)),
            (_worker, (args, SHUFFLED, STAGGER, GROUP_M, STAGES, TMA_STORE, SCALE_TMA, 1)),
            (_worker, (args, SHUFFLED, STAGGER, GROUP_M, STAGES, TMA_STORE, SCALE_TMA, 2)),
        ],
        [4, 1],
        [232, 40],
    )


@gluon.jit
def _worker(
    args, SHUFFLED: gl.constexpr, STAGGER: gl.constexpr, GROUP_M: gl.constexpr, STAGES: gl.constexpr,
    TMA_STORE: gl.constexpr, SCALE_TMA: gl.constexpr, ROLE: gl.constexpr,
):  # fmt: skip
    """The worker partitions (one signature for all): the second consumer, or the producer."""
    if ROLE == 1:
        _consume(args, SHUFFLED, STAGGER, GROUP_M, STAGES, TMA_STORE, SCALE_TMA, 1)
    else:
        _produce(args, SHUFFLED, STAGGER, GROUP_M, STAGES, SCALE_TMA)


@gluon.jit
def _tile(tile, M, N, n_blocks, STAGGER: gl.constexpr, GROUP_M: gl.constexpr):
    """(row tile, column tile, first K block) of a tile: column tile j starts at block j (the Triton kernel's
    stagger) when STAGGER."""
    pid_m, pid_n = tile_coordinates(tile, M, N, BLOCK, BLOCK, GROUP_M)
    shift = 0
    if STAGGER:
        shift = pid_n % n_blocks
    return pid_m, pid_n, shift


@gluon.jit
def _produce(
    args, SHUFFLED: gl.constexpr, STAGGER: gl.constexpr, GROUP_M: gl.constexpr, STAGES: gl.constexpr,
    SCALE_TMA: gl.constexpr,
):  # fmt: skip
    """One warp: for each K block of each of the program's tiles (in the tile's staggered order), wait until
    both consumers released its slot, then copy the tile's activation scales into it (TMA with SCALE_TMA,
    else cp.async, 4 per thread) and both tiles (TMA), all completing on the slot's ready barrier. Steps
    are numbered across tiles: step g uses slot g % STAGES in phase (g // STAGES) & 1.

    A shuffled weight's descriptor (`launcher.tma_descriptors`) addresses it as [K chunk, 16-row band,
    256 bytes]: its box of 8 chunks x 8 bands lands chunk-major, [K chunk, row, 16 bytes], the unswizzled
    layout wgmma reads."""
    (a_desc, w_desc, _, s_desc, a_bufs, w_bufs, _, s_bufs, ready, empty, a_scale_ptr, _, _, M, N, K, stride_sm,
     stride_sk, _, _, _) = args  # fmt: skip
    scale_layout: gl.constexpr = gl.BlockedLayout([BLOCK // 32], [32], [1], [0])
    n_blocks = K // BLOCK
    tiles = gl.cdiv(M, BLOCK) * gl.cdiv(N, BLOCK)
    step = 0
    for tile in range(gl.program_id(0), tiles, gl.num_programs(0)):
        pid_m, pid_n, shift = _tile(tile, M, N, n_blocks, STAGGER, GROUP_M)
        rows = gl.minimum(pid_m * BLOCK + gl.arange(0, BLOCK, layout=scale_layout), M - 1)
        s_ptrs = a_scale_ptr + rows.to(gl.int64) * stride_sm
        for i in range(n_blocks):
            slot = step % STAGES
            # A fresh barrier counts as having completed the phase before its first: the first pass waits
            # for nothing.
            mbarrier.wait(empty.index(slot), ((step // STAGES) & 1) ^ 1)
            kb = i + shift
            kb = gl.where(kb >= n_blocks, kb - n_blocks, kb)
            bar = ready.index(slot)
            if SCALE_TMA:
                mbarrier.expect(bar, a_desc.block_type.nbytes + w_desc.block_type.nbytes + s_desc.block_type.nbytes)
                _tma_load(s_desc, [kb, pid_m * BLOCK], bar, s_bufs.index(slot))  # rows past M read as zeros
            else:
                # Each thread's scale copies arrive on the barrier when they land.
                _copy(s_bufs.index(slot), s_ptrs + kb * stride_sk)
                async_copy.mbarrier_arrive(bar, increment_count=False)
                mbarrier.expect(bar, a_desc.block_type.nbytes + w_desc.block_type.nbytes)
            _tma_load(a_desc, [pid_m * BLOCK, kb * BLOCK], bar, a_bufs.index(slot))
            if SHUFFLED:
                _tma_load(w_desc, [kb * 8, pid_n * 8, 0], bar, w_bufs.index(slot))
            else:
                _tma_load(w_desc, [pid_n * BLOCK, kb * BLOCK], bar, w_bufs.index(slot))
            step += 1


@gluon.jit
def _consume(
    args, SHUFFLED: gl.constexpr, STAGGER: gl.constexpr, GROUP_M: gl.constexpr, STAGES: gl.constexpr,
    TMA_STORE: gl.constexpr, SCALE_TMA: gl.constexpr, PART: gl.constexpr,
):  # fmt: skip
    """One warpgroup: rows PART x 64 .. + 64 of each tile. Per K block, wait for its tiles, multiply, release
    the slot as soon as the MMA is done, then scale the product into the accumulator (the activation
    scales read from the stage, the weight's loaded from global memory one block ahead); at the tile's
    end, store the rows as bf16."""
    (_, _, out_desc, _, a_bufs, w_bufs, out_bufs, s_bufs, ready, empty, _, w_scale_ptr, out_ptr, M, N, K, _, _,
     stride_wsn, stride_wsk, stride_om) = args  # fmt: skip
    acc_layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, BLOCK, 32]
    )
    rows_layout: gl.constexpr = gl.SliceLayout(1, acc_layout)
    cols_layout: gl.constexpr = gl.SliceLayout(0, acc_layout)
    zeros = gl.zeros((HALF, BLOCK), gl.float32, acc_layout)
    n_blocks = K // BLOCK
    tiles = gl.cdiv(M, BLOCK) * gl.cdiv(N, BLOCK)
    step = 0
    for tile in range(gl.program_id(0), tiles, gl.num_programs(0)):
        pid_m, pid_n, kb = _tile(tile, M, N, n_blocks, STAGGER, GROUP_M)
        rows = pid_m * BLOCK + PART * HALF + gl.arange(0, HALF, layout=rows_layout)
        ws_ptr = w_scale_ptr + pid_n.to(gl.int64) * stride_wsn
        acc = gl.zeros((HALF, BLOCK), gl.float32, acc_layout)
        w_s = gl.load(ws_ptr + kb * stride_wsk)
        for _block in range(n_blocks):
            slot = step % STAGES
            following = kb + 1
            following = gl.where(following >= n_blocks, following - n_blocks, following)
            w_s_next = gl.load(ws_ptr + following * stride_wsk)
            mbarrier.wait(ready.index(slot), (step // STAGES) & 1)
            a_tile = a_bufs.index(slot).slice(PART * HALF, HALF)
            w_tile = w_bufs.index(slot)
            if SHUFFLED:  # [K chunk, band, 256 bytes] = [K chunk, row, 16 bytes], read as [row, K]
                w_tile = w_tile.reshape((8, BLOCK, 16)).permute((1, 0, 2)).reshape((BLOCK, BLOCK))
            part = warpgroup_mma(a_tile, w_tile.permute((1, 0)), zeros, use_acc=False, is_async=True)
            # Read under the MMA, before the slot is released.
            scales = s_bufs.index(slot)
            if SCALE_TMA:  # [1, 128] as landed
                scales = scales.reshape((BLOCK,))
            a_s = scales.slice(PART * HALF, HALF).load(rows_layout)
            part = warpgroup_mma_wait(0, deps=[part])
            mbarrier.arrive(empty.index(slot), count=1)
            acc += part * (a_s * w_s)[:, None]
            w_s = w_s_next
            kb = following
            step += 1

        if TMA_STORE:
            staging = out_bufs.index(PART)
            tma.store_wait(0)  # the previous tile's store has read the staging tile
            staging.store(acc.to(out_desc.dtype))
            fence_async_shared()
            _tma_store(out_desc, [pid_m * BLOCK + PART * HALF, pid_n * BLOCK], staging)  # clipped to M x N
        else:
            cols = pid_n * BLOCK + gl.arange(0, BLOCK, layout=cols_layout)
            mask = (rows < M)[:, None] & (cols < N)[None, :]
            offsets = rows[:, None].to(gl.int64) * stride_om + cols[None, :]
            gl.store(out_ptr + offsets, acc.to(gl.bfloat16), mask=mask)
    if TMA_STORE:
        tma.store_wait(0)  # shared memory must outlive the last store's reads
