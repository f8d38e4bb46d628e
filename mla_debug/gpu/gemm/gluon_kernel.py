"""The block-scaled FP8 GEMM for Hopper in Triton's Gluon dialect (imported only when it runs).

Same contract, same arithmetic and same bytes as ``block_scaled_gemm_kernel`` (e4m3fn operands): per
128-wide K block an fp32 product of raw fp8 values, times ``x_scale * w_scale``, added to an fp32
accumulator, bf16 once at the end; split-K reduced in the launch in split order. It serves two purposes.

A preshuffled weight (SHUFFLED): where a copy lands in shared memory. In the (16, 16) preshuffled order a
32-byte sector of the weight holds two weight ROWS (n, n + 1) of one 16-byte K chunk. Triton's kernel
stages the weight tile in the 128-byte-swizzled layout it picks for every fp8 MMA operand, where rows n
and n + 1 are 128 bytes apart, so every 16-byte copy of the weight becomes a request of its own and
fetches a whole 32-byte sector for half of it: the hardware counters show twice the weight bytes
crossing from L2 in several times the requests, and the kernel trails the plain one (RESULTS.md, "Why the
preshuffled order was slow"). Here the weight tile is staged
unswizzled, chunk-major (``NVMMASharedLayout`` with no swizzle: row n of K chunk c at byte
``(c * BLOCK_N + n) * 16``, the MMA's own "interleaved" core-matrix layout), so each sector lands in 32
contiguous bytes and a 16-row band's 256-byte chunk in 256 contiguous bytes, read by the tensor cores as
it is. (A plain weight is staged 128-byte swizzled, as Triton does.)

Large M, either weight (OVERLAP): Triton waits for each block's MMA and then promotes it (scales it into
the accumulator), so the tensor cores idle while the CUDA cores multiply-add. The overlapped loop
multiplies the blocks into two register tiles in turn and promotes one while the other's MMA runs.

Tiles of 64 or more rows multiply with wgmma (fp8 operands from shared memory), tiles of 16 rows with
mma.sync on fp16 copies of the fp8 values, each exactly as Triton compiles ``tl.dot`` for the plain
kernel at those tile shapes, so that the two kernels give the same bytes for the same launch config.
"""

from __future__ import annotations

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import async_copy, mma_v2
from triton.experimental.gluon.language.nvidia.hopper import warpgroup_mma, warpgroup_mma_wait

# The cp.async copy into shared memory: async_load from triton 3.7 on, async_copy_global_to_shared before.
_copy = getattr(async_copy, "async_load", None) or async_copy.async_copy_global_to_shared
# The CTA-wide barrier: gl.barrier from triton 3.7 on, gl.thread_barrier before.
_barrier = getattr(gl, "barrier", None) or gl.thread_barrier


@gluon.jit
def gluon_gemm_kernel(
    a_ptr, a_scale_ptr, w_ptr, w_scale_ptr, out_ptr, partial_ptr, arrivals_ptr,
    M, N, K, KP, stride_am, stride_sm, stride_sk, stride_wsn, stride_wsk, stride_om, stride_split,
    SHUFFLED: gl.constexpr, OVERLAP: gl.constexpr, SPLIT_K: gl.constexpr, STAGGER: gl.constexpr,
    BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, GROUP_M: gl.constexpr, STAGES: gl.constexpr, W_WARPS_N: gl.constexpr,
):  # fmt: skip
    BLOCK_K: gl.constexpr = 128
    NUM_WARPS: gl.constexpr = gl.num_warps()
    WGMMA: gl.constexpr = BLOCK_M >= 64

    gl.static_assert(not OVERLAP or (WGMMA and SPLIT_K == 1), "overlapped promotion: wgmma tiles, no split-K")

    a_copy: gl.constexpr = activation_copy_layout(NUM_WARPS)
    w_copy: gl.constexpr = weight_copy_layout(SHUFFLED, NUM_WARPS, W_WARPS_N)
    # The per-block scales ride the same pipeline: one 4-byte copy per row (rows_copy covers BLOCK_M).
    rows_copy: gl.constexpr = gl.BlockedLayout([1], [32], [NUM_WARPS], [0])
    if WGMMA:
        acc_layout: gl.constexpr = gl.NVMMADistributedLayout(
            version=[3, 0], warps_per_cta=[NUM_WARPS, 1], instr_shape=[16, BLOCK_N, 32]
        )
    else:
        acc_layout: gl.constexpr = gl.NVMMADistributedLayout(
            version=[2, 0], warps_per_cta=[1, NUM_WARPS], instr_shape=[16, 8]
        )
    rows_layout: gl.constexpr = gl.SliceLayout(1, acc_layout)
    STORE_COLS: gl.constexpr = BLOCK_N // 8
    store_layout: gl.constexpr = gl.BlockedLayout([1, 8], [32 // STORE_COLS, STORE_COLS], [NUM_WARPS, 1], [1, 0])

    pid = gl.program_id(0)
    split = gl.program_id(1)
    pid_m, pid_n = tile_coordinates(pid, M, N, BLOCK_M, BLOCK_N, GROUP_M)

    # Rows past M and columns past N are clamped to row 0: in bounds without masks, never stored.
    offs_am = pid_m * BLOCK_M + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, a_copy))
    rows_am = gl.where(offs_am < M, offs_am, 0)
    offs_ak = gl.arange(0, BLOCK_K, layout=gl.SliceLayout(0, a_copy))
    a_ptrs = a_ptr + rows_am[:, None].to(gl.int64) * stride_am + offs_ak[None, :]
    offs_wn = pid_n * BLOCK_N + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(1, w_copy))
    rows_wn = gl.where(offs_wn < N, offs_wn, 0)
    offs_wk = gl.arange(0, BLOCK_K, layout=gl.SliceLayout(0, w_copy))
    if SHUFFLED:
        w_rows = (rows_wn // 16).to(gl.int64) * 16 * KP + (rows_wn % 16) * 16
        w_cols = gl.max_contiguous(gl.multiple_of((offs_wk // 16) * 256 + offs_wk % 16, 16), 16)
    else:  # KP is the plain weight's row stride
        w_rows = rows_wn.to(gl.int64) * KP
        w_cols = offs_wk
    w_ptrs = w_ptr + w_rows[:, None] + w_cols[None, :]

    # Scale pointers, one per tile row: the row's activation scale, and the tile's weight scale (the same
    # address in every row, so that both land in shared memory in the layout they are multiplied in).
    offs_sm = pid_m * BLOCK_M + gl.arange(0, BLOCK_M, layout=rows_copy)
    s_ptrs = a_scale_ptr + gl.where(offs_sm < M, offs_sm, 0).to(gl.int64) * stride_sm
    ws_ptrs = w_scale_ptr + ((pid_n * BLOCK_N) // 128).to(gl.int64) * stride_wsn + gl.zeros_like(offs_sm)

    k_blocks = (K + BLOCK_K - 1) // BLOCK_K
    per_split = (k_blocks + SPLIT_K - 1) // SPLIT_K
    kb_start = split * per_split
    kb_end = gl.minimum(kb_start + per_split, k_blocks)
    n_blocks = kb_end - kb_start
    shift = 0
    if STAGGER:  # column tile j starts at block j of its range (see the Triton kernel)
        shift = pid_n % gl.maximum(n_blocks, 1)

    bufs = stage_buffers(SHUFFLED, STAGES, BLOCK_M, BLOCK_N)
    a_bufs, w_bufs, a_scale_bufs, w_scale_bufs = bufs
    # What every copy of this program's K range reads (`_fetch`).
    fetching = (n_blocks, shift, kb_start, bufs, (a_ptrs, w_ptrs, s_ptrs, ws_ptrs), stride_sk, stride_wsk)

    # Prologue: STAGES - 1 blocks in flight, one commit group each (empty past the range, so the count of
    # groups per iteration stays fixed).
    for s in gl.static_range(STAGES - 1):
        _fetch(s, fetching, STAGES, SHUFFLED, STAGGER, BLOCK_M, BLOCK_N)

    acc = gl.zeros((BLOCK_M, BLOCK_N), gl.float32, acc_layout)
    if OVERLAP:
        # Block i's product goes to one of two register tiles (by parity) and is scaled into the
        # accumulator while the tensor cores multiply block i + 1 into the other, so the promotion's
        # multiply-adds no longer leave them idle. Each MMA is waited for before the next barrier: one in
        # flight at a time, never across the loop's back edge. (ptxas serializes every MMA of a loop that
        # reads one product while another's MMA runs across the back edge; and keeping two in flight within
        # an unrolled body, refills then two blocks behind, ran slower: RESULTS.md.) Unrolled by two so that
        # each product keeps its registers; the launcher passes an even block count (2+).
        acc, part_a, part_b = overlapped_blocks(
            0, n_blocks, acc, bufs, _fetch, fetching, rows_layout, STAGES, SHUFFLED, STAGGER, BLOCK_M, BLOCK_N
        )
        # Block n - 2 is in part_a; the last one goes to part_b.
        scale = block_scale(n_blocks - 2, a_scale_bufs, w_scale_bufs, STAGES, rows_layout)
        part_b = _start_mma(n_blocks - 1, a_bufs, w_bufs, part_b, STAGES, SHUFFLED, BLOCK_N)
        acc += part_a * scale[:, None]
        part_b = warpgroup_mma_wait(0, deps=[part_b])
        acc += part_b * block_scale(n_blocks - 1, a_scale_bufs, w_scale_bufs, STAGES, rows_layout)[:, None]
    else:
        zeros = gl.zeros((BLOCK_M, BLOCK_N), gl.float32, acc_layout)
        for i in range(0, n_blocks):
            # Block i has landed for this thread; the barrier makes every thread's copies visible and
            # retires block i - 1's readers, whose buffer is refilled next. (No proxy fence: it cost time
            # (RESULTS.md) and Triton's own cp.async -> wgmma pipelines run without one.)
            async_copy.wait_group(STAGES - 2)
            _barrier()
            a_tile = a_bufs.index(i % STAGES)
            w_tile = _weight_tile(w_bufs, i % STAGES, SHUFFLED, BLOCK_N).permute((1, 0))
            if WGMMA:
                # Started first and waited for after the refill below, so the refill's address arithmetic
                # and copies are issued while the tensor cores work (they read slot i, the refill writes
                # i - 1).
                part = warpgroup_mma(a_tile, w_tile, zeros, use_acc=False, is_async=True)
            else:
                a_f16 = a_tile.load(gl.DotOperandLayout(0, acc_layout, 4)).to(gl.float16)
                w_f16 = w_tile.load(gl.DotOperandLayout(1, acc_layout, 4)).to(gl.float16)
                part = mma_v2(a_f16, w_f16, zeros)
            _fetch(i + STAGES - 1, fetching, STAGES, SHUFFLED, STAGGER, BLOCK_M, BLOCK_N)
            if WGMMA:
                part = warpgroup_mma_wait(0, deps=[part])
            acc += part * block_scale(i, a_scale_bufs, w_scale_bufs, STAGES, rows_layout)[:, None]
    async_copy.wait_group(0)

    if SPLIT_K == 1:
        store_tile(acc, out_ptr, pid_m, pid_n, M, N, stride_om, BLOCK_M, BLOCK_N)
    else:
        # In-launch split-K reduction, exactly as the Triton kernel: the last split to arrive adds the
        # fp32 partials in split order.
        acc = gl.convert_layout(acc, store_layout)
        offs_om = pid_m * BLOCK_M + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, store_layout))
        offs_n = pid_n * BLOCK_N + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, store_layout))
        out_offs = offs_om[:, None].to(gl.int64) * stride_om + offs_n[None, :]
        mask = (offs_om < M)[:, None] & (offs_n < N)[None, :]
        gl.store(partial_ptr + split * stride_split + out_offs, acc, mask=mask)
        _barrier()
        arrived = gl.atomic_add(arrivals_ptr + pid, 1, sem="acq_rel")
        if arrived == SPLIT_K - 1:
            total = gl.load(partial_ptr + out_offs, mask=mask, other=0.0, cache_modifier=".cg")
            for other in gl.static_range(1, SPLIT_K):
                total += gl.load(
                    partial_ptr + other * stride_split + out_offs, mask=mask, other=0.0, cache_modifier=".cg"
                )
            gl.store(out_ptr + out_offs, total.to(gl.bfloat16), mask=mask)


@gluon.constexpr_function
def activation_copy_layout(num_warps):
    """Register layout of the activation tile's copies: rows of 128 bytes, 8 lanes of 16 bytes per row."""
    return gl.BlockedLayout([1, 16], [4, 8], [num_warps, 1], [1, 0])


@gluon.constexpr_function
def weight_copy_layout(shuffled, num_warps, w_warps_n):
    """Register layout of the weight tile's copies: a plain weight's rows as the activation's; a shuffled
    weight by 16-row bands, 16 lanes over a band's 256-byte chunk, so a warp copies 512 contiguous bytes."""
    if not shuffled:
        return activation_copy_layout(num_warps)
    return gl.BlockedLayout([1, 16], [16, 2], [w_warps_n, num_warps // w_warps_n], [0, 1])


@gluon.constexpr_function
def weight_smem_layout(shuffled):
    """Shared layout of a weight tile: a shuffled one unswizzled and chunk-major (see the module
    docstring), a plain one 128-byte swizzled."""
    if shuffled:
        return gl.NVMMASharedLayout(swizzle_byte_width=0, element_bitwidth=8, rank=3)
    return gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=8, rank=2)


@gluon.constexpr_function
def weight_buffer_shape(shuffled, stages, block_n):
    """The weight buffer's shape: STAGES tiles, [K chunk, row, 16 bytes] if shuffled, else [row, K]."""
    return [stages, 8, block_n, 16] if shuffled else [stages, block_n, 128]


@gluon.jit
def stage_buffers(SHUFFLED: gl.constexpr, STAGES: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr):
    """The pipeline's shared memory, STAGES slots of each: the activation tile (128-byte swizzled), the
    weight tile (`weight_smem_layout`), and a block's activation and weight scales, one per tile row.

    Why the scales are staged too: read COL_MAJOR (the preshuffled contract), a block's activation scales
    are a fresh 4 x BLOCK_M-byte run M x 4 bytes from the previous block's, a trip to HBM per block;
    loaded one block ahead they stalled every iteration (RESULTS.md, "the activation scales' byte
    order"). STAGES - 1 blocks ahead they arrive with the tiles."""
    a_smem: gl.constexpr = gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=8, rank=2)
    w_shape: gl.constexpr = weight_buffer_shape(SHUFFLED, STAGES, BLOCK_N)
    scale_smem: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, [0])
    a_bufs = gl.allocate_shared_memory(gl.float8e4nv, [STAGES, BLOCK_M, 128], a_smem)
    w_bufs = gl.allocate_shared_memory(gl.float8e4nv, w_shape, weight_smem_layout(SHUFFLED))
    a_scale_bufs = gl.allocate_shared_memory(gl.float32, [STAGES, BLOCK_M], scale_smem)
    w_scale_bufs = gl.allocate_shared_memory(gl.float32, [STAGES, BLOCK_M], scale_smem)
    return a_bufs, w_bufs, a_scale_bufs, w_scale_bufs


@gluon.jit
def _weight_tile(w_bufs, slot, SHUFFLED: gl.constexpr, BLOCK_N: gl.constexpr):
    """Pipeline slot `slot` of the weight buffer as BLOCK_N rows of 128 K bytes, whatever its staging."""
    if SHUFFLED:  # stored chunk-major: [K chunk, row, 16 bytes]
        return w_bufs.index(slot).permute((1, 0, 2)).reshape((BLOCK_N, 128))
    else:
        return w_bufs.index(slot)


@gluon.jit
def _fetch(
    i, fetching, STAGES: gl.constexpr, SHUFFLED: gl.constexpr, STAGGER: gl.constexpr, BLOCK_M: gl.constexpr,
    BLOCK_N: gl.constexpr,
):  # fmt: skip
    """Start the copies of the i-th block of this program's K range (in its staggered order) into slot
    i % STAGES - the activation and weight tiles and both blocks' scales - and commit them as one group,
    an empty one past the range (so that every iteration commits one). `fetching`: what the kernel fixed
    for its copies; the constants are those every fetch of `overlapped_blocks` takes (the stagger is
    in the kernel's shift, the rows in its pointers)."""
    n_blocks, shift, kb_start, bufs, pointers, stride_sk, stride_wsk = fetching
    a_bufs, w_bufs, a_scale_bufs, w_scale_bufs = bufs
    a_ptrs, w_ptrs, s_ptrs, ws_ptrs = pointers
    BLOCK_K: gl.constexpr = 128
    if i < n_blocks:
        step = i + shift
        kb = kb_start + gl.where(step >= n_blocks, step - n_blocks, step)
        slot = i % STAGES
        w_step: gl.constexpr = BLOCK_K * 16 if SHUFFLED else BLOCK_K  # bytes from one K block to the next
        _copy(a_bufs.index(slot), a_ptrs + kb * BLOCK_K)
        _copy(_weight_tile(w_bufs, slot, SHUFFLED, BLOCK_N), w_ptrs + kb * w_step)
        _copy(a_scale_bufs.index(slot), s_ptrs + kb * stride_sk)
        _copy(w_scale_bufs.index(slot), ws_ptrs + kb * stride_wsk)
    async_copy.commit_group()


@gluon.jit
def overlapped_blocks(
    first, n_blocks, acc, bufs, FETCH: gl.constexpr, fetching, rows_layout: gl.constexpr, STAGES: gl.constexpr,
    SHUFFLED: gl.constexpr, STAGGER: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr,
):  # fmt: skip
    """The overlapped loop (see gluon_gemm_kernel) over steps `first` .. `first + n_blocks - 1`, up to its
    last block: returns (`acc` with every block but the last two promoted, block n - 2's product, the
    register tile the last block's MMA goes to). ``FETCH(i, fetching, <the constants>)`` refills the slot
    of step i.

    Block 0 is peeled off, so that a product is only ever read after an MMA wrote it (ptxas injects a
    wait, serializing, where one read may meet the zeros a tile starts as). Each step reads block i - 1's
    scales, starts block i's MMA (the barrier: no refill of block i - 1's slot before every thread has
    read them), promotes block i - 1 under it, then refills block i - 1's slot."""
    a_bufs, w_bufs, a_scale_bufs, w_scale_bufs = bufs
    part_a = gl.zeros_like(acc)  # even blocks
    part_b = gl.zeros_like(acc)  # odd blocks
    part_a = _start_mma(first, a_bufs, w_bufs, part_a, STAGES, SHUFFLED, BLOCK_N)
    FETCH(first + STAGES - 1, fetching, STAGES, SHUFFLED, STAGGER, BLOCK_M, BLOCK_N)
    part_a = warpgroup_mma_wait(0, deps=[part_a])
    for j in range(first, first + n_blocks - 2, 2):
        scale = block_scale(j, a_scale_bufs, w_scale_bufs, STAGES, rows_layout)
        part_b = _start_mma(j + 1, a_bufs, w_bufs, part_b, STAGES, SHUFFLED, BLOCK_N)
        acc += part_a * scale[:, None]
        FETCH(j + STAGES, fetching, STAGES, SHUFFLED, STAGGER, BLOCK_M, BLOCK_N)
        part_b = warpgroup_mma_wait(0, deps=[part_b])
        scale = block_scale(j + 1, a_scale_bufs, w_scale_bufs, STAGES, rows_layout)
        part_a = _start_mma(j + 2, a_bufs, w_bufs, part_a, STAGES, SHUFFLED, BLOCK_N)
        acc += part_b * scale[:, None]
        FETCH(j + 1 + STAGES, fetching, STAGES, SHUFFLED, STAGGER, BLOCK_M, BLOCK_N)
        part_a = warpgroup_mma_wait(0, deps=[part_a])
    return acc, part_a, part_b


@gluon.jit
def _start_mma(i, a_bufs, w_bufs, part, STAGES: gl.constexpr, SHUFFLED: gl.constexpr, BLOCK_N: gl.constexpr):
    """Wait for block i's copies, then start its wgmma into `part`'s registers (not waited for). The
    barrier makes every thread's copies of block i visible and, every warpgroup having waited for block
    i - 1's MMA, frees that block's slot for the refill that follows."""
    async_copy.wait_group(STAGES - 2)
    _barrier()
    a_tile = a_bufs.index(i % STAGES)
    w_tile = _weight_tile(w_bufs, i % STAGES, SHUFFLED, BLOCK_N).permute((1, 0))
    return warpgroup_mma(a_tile, w_tile, part, use_acc=False, is_async=True)


@gluon.jit
def block_scale(i, a_scale_bufs, w_scale_bufs, STAGES: gl.constexpr, rows_layout: gl.constexpr):
    """Block i's per-row scale, activation times weight (staged in slot i % STAGES), that its raw product
    is multiplied by before it is added to the accumulator (fused into one multiply-add per element, as
    in the Triton kernel)."""
    a_s = a_scale_bufs.index(i % STAGES).load(rows_layout)
    w_s = w_scale_bufs.index(i % STAGES).load(rows_layout)
    return a_s * w_s


@gluon.jit
def tile_coordinates(tile, M, N, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, GROUP_M: gl.constexpr):
    """(row tile, column tile) of output tile number `tile` in grouped order, as in the Triton kernel:
    GROUP_M row tiles share each weight column tile while it is in L2."""
    tiles_m = (M + BLOCK_M - 1) // BLOCK_M
    tiles_n = (N + BLOCK_N - 1) // BLOCK_N
    per_group = GROUP_M * tiles_n
    first_m = (tile // per_group) * GROUP_M
    group_rows = gl.minimum(tiles_m - first_m, GROUP_M)
    return first_m + (tile % per_group) % group_rows, (tile % per_group) // group_rows


@gluon.jit
def store_tile(acc, out_ptr, pid_m, pid_n, M, N, stride_om, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr):
    """The fp32 tile as bf16 at (pid_m, pid_n), masked to M x N. Stored from a row-major layout (16-byte
    runs along a row) rather than the MMA's (4-byte pieces of 8 rows per warp): a K = 512 GEMM at M = 4096
    writes more output than it reads."""
    STORE_COLS: gl.constexpr = BLOCK_N // 8
    store_layout: gl.constexpr = gl.BlockedLayout([1, 8], [32 // STORE_COLS, STORE_COLS], [gl.num_warps(), 1], [1, 0])
    acc = gl.convert_layout(acc, store_layout)
    offs_m = pid_m * BLOCK_M + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, store_layout))
    offs_n = pid_n * BLOCK_N + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, store_layout))
    mask = (offs_m < M)[:, None] & (offs_n < N)[None, :]
    gl.store(out_ptr + offs_m[:, None].to(gl.int64) * stride_om + offs_n[None, :], acc.to(gl.bfloat16), mask=mask)
