"""The large-M block-scaled FP8 GEMM for Hopper, warp-specialized (Gluon; imported only when it runs).

Same contract, arithmetic and bytes as the Triton kernel with 128 x 128 tiles (plain weight, e4m3fn):
per 128-wide K block an fp32 wgmma product, times ``x_scale * w_scale``, added to an fp32 accumulator.

Why: in the other kernels every warp waits at a CTA-wide barrier once per K block, so the two
warpgroups that share a tile start their MMAs together and then both wait, and the tensor cores idle
between blocks (54% busy at 7168x16384 M = 4096 against cuBLAS's 81%, RESULTS.md). Here the tile's rows
are split between two consumer warpgroups that never wait for each other - each waits only for its
block's tiles to land and releases the slot when its MMA is done - and one producer warp copies the tiles
with the tensor memory accelerator, so one warpgroup's MMA runs while the other promotes.
"""

from __future__ import annotations

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared,
    mbarrier,
    tma,
    warpgroup_mma,
    warpgroup_mma_wait,
)

from ._gluon_gemm import tile_coordinates

# The TMA copy into shared memory: async_load from triton 3.7 on, async_copy_global_to_shared before.
_tma_load = getattr(tma, "async_load", None) or tma.async_copy_global_to_shared

BLOCK: gl.constexpr = gl.constexpr(128)
HALF: gl.constexpr = gl.constexpr(64)


@gluon.jit
def specialized_gemm_kernel(
    a_desc,
    w_desc,
    a_scale_ptr,
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
    STAGGER: gl.constexpr,
    GROUP_M: gl.constexpr,
    STAGES: gl.constexpr,
):
    pid_m, pid_n = tile_coordinates(gl.program_id(0), M, N, BLOCK, BLOCK, GROUP_M)
    n_blocks = K // BLOCK
    shift = 0
    if STAGGER:  # column tile j starts at block j (see the Triton kernel)
        shift = pid_n % n_blocks

    a_bufs = gl.allocate_shared_memory(a_desc.dtype, [STAGES] + a_desc.block_type.shape, a_desc.layout)
    w_bufs = gl.allocate_shared_memory(w_desc.dtype, [STAGES] + w_desc.block_type.shape, w_desc.layout)
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for s in gl.static_range(STAGES):
        mbarrier.init(ready.index(s), count=1)  # the producer's expect, then the copies' bytes
        mbarrier.init(empty.index(s), count=2)  # both consumers done with the slot
    fence_async_shared()

    args = (
        a_desc, w_desc, a_bufs, w_bufs, ready, empty, a_scale_ptr, w_scale_ptr, out_ptr, M, N, pid_m, pid_n, shift,
        n_blocks, stride_sm, stride_sk, stride_wsn, stride_wsk, stride_om,
    )  # fmt: skip
    gl.warp_specialize(
        [(_consume, (args, 0, STAGES)), (_worker, (args, 1, STAGES)), (_worker, (args, 2, STAGES))],
        [4, 1],
        [232, 24],
    )


@gluon.jit
def _worker(args, ROLE: gl.constexpr, STAGES: gl.constexpr):
    """The worker partitions (one signature for all): the second consumer, or the producer."""
    if ROLE == 1:
        _consume(args, 1, STAGES)
    else:
        _produce(args, STAGES)


@gluon.jit
def _produce(args, STAGES: gl.constexpr):
    """One warp: for each K block (in the tile's staggered order), wait until both consumers released its
    slot, then copy both tiles into it by TMA, completing on the slot's ready barrier."""
    (a_desc, w_desc, a_bufs, w_bufs, ready, empty, _, _, _, _, _, pid_m, pid_n, shift, n_blocks, _, _, _, _, _) = args
    for i in range(n_blocks):
        slot = i % STAGES
        # A fresh barrier counts as having completed the phase before its first: the first pass waits for
        # nothing.
        mbarrier.wait(empty.index(slot), ((i // STAGES) & 1) ^ 1)
        kb = i + shift
        kb = gl.where(kb >= n_blocks, kb - n_blocks, kb)
        bar = ready.index(slot)
        mbarrier.expect(bar, a_desc.block_type.nbytes + w_desc.block_type.nbytes)
        _tma_load(a_desc, [pid_m * BLOCK, kb * BLOCK], bar, a_bufs.index(slot))
        _tma_load(w_desc, [pid_n * BLOCK, kb * BLOCK], bar, w_bufs.index(slot))


@gluon.jit
def _consume(args, PART: gl.constexpr, STAGES: gl.constexpr):
    """One warpgroup: rows PART x 64 .. + 64 of the tile. Per K block, wait for its tiles, multiply, release
    the slot as soon as the MMA is done, then scale the product into the accumulator (its scales loaded
    from global memory one block ahead)."""
    (_, _, a_bufs, w_bufs, ready, empty, a_scale_ptr, w_scale_ptr, out_ptr, M, N, pid_m, pid_n, shift, n_blocks,
     stride_sm, stride_sk, stride_wsn, stride_wsk, stride_om) = args  # fmt: skip
    acc_layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, BLOCK, 32]
    )
    rows_layout: gl.constexpr = gl.SliceLayout(1, acc_layout)
    cols_layout: gl.constexpr = gl.SliceLayout(0, acc_layout)

    rows = pid_m * BLOCK + PART * HALF + gl.arange(0, HALF, layout=rows_layout)
    s_ptrs = a_scale_ptr + gl.minimum(rows, M - 1).to(gl.int64) * stride_sm
    ws_ptr = w_scale_ptr + pid_n.to(gl.int64) * stride_wsn
    zeros = gl.zeros((HALF, BLOCK), gl.float32, acc_layout)
    acc = gl.zeros((HALF, BLOCK), gl.float32, acc_layout)
    kb = shift
    a_s = gl.load(s_ptrs + kb * stride_sk)
    w_s = gl.load(ws_ptr + kb * stride_wsk)
    for i in range(n_blocks):
        slot = i % STAGES
        following = kb + 1
        following = gl.where(following >= n_blocks, following - n_blocks, following)
        a_s_next = gl.load(s_ptrs + following * stride_sk)
        w_s_next = gl.load(ws_ptr + following * stride_wsk)
        mbarrier.wait(ready.index(slot), (i // STAGES) & 1)
        a_tile = a_bufs.index(slot).slice(PART * HALF, HALF)
        part = warpgroup_mma(a_tile, w_bufs.index(slot).permute((1, 0)), zeros, use_acc=False, is_async=True)
        part = warpgroup_mma_wait(0, deps=[part])
        mbarrier.arrive(empty.index(slot), count=1)
        acc += part * (a_s * w_s)[:, None]
        a_s = a_s_next
        w_s = w_s_next
        kb = following

    cols = pid_n * BLOCK + gl.arange(0, BLOCK, layout=cols_layout)
    mask = (rows < M)[:, None] & (cols < N)[None, :]
    offsets = rows[:, None].to(gl.int64) * stride_om + cols[None, :]
    gl.store(out_ptr + offsets, acc.to(gl.bfloat16), mask=mask)
