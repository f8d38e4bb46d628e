"""The large-M block-scaled FP8 GEMM for Hopper: persistent, promotion overlapped (Gluon; imported when it runs).

Same contract, arithmetic and bytes as ``gluon_gemm_kernel`` with OVERLAP (and so as the Triton kernel for
the same tiles), for wgmma tiles without split-K, over an even number of K blocks at least STAGES - 1.

Why persistent: at 230+ registers per thread an SM holds one program, so a grid of one program per tile
leaves every SM idle while a finished tile's last stores drain and the next program fills its pipeline
from HBM - a quarter of the time of a 128 x 128 tile over K = 512 (4 blocks). Here each program takes
tiles pid, pid + P, pid + 2P, ... (P programs, one per SM), and its copy pipeline runs on across tiles:
the first blocks of the next tile are fetched while the current tile's last blocks multiply and its
result is stored. Tiles are numbered in the grouped order of the other kernels, so the P tiles in
flight at once are the ones a one-tile-per-program grid would run side by side.

On an H200 it beat one program per tile over K = 512 but ran slower over longer K (RESULTS.md,
"Persistence"), so the heuristic runs it over short K only.
"""

from __future__ import annotations

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import async_copy
from triton.experimental.gluon.language.nvidia.hopper import warpgroup_mma_wait

from .gluon_kernel import (
    _copy,
    _start_mma,
    _weight_tile,
    activation_copy_layout,
    block_scale,
    overlapped_blocks,
    stage_buffers,
    store_tile,
    tile_coordinates,
    weight_copy_layout,
)


@gluon.jit
def persistent_gemm_kernel(
    a_ptr, a_scale_ptr, w_ptr, w_scale_ptr, out_ptr,
    M, N, K, KP, stride_am, stride_sm, stride_sk, stride_wsn, stride_wsk, stride_om,
    SHUFFLED: gl.constexpr, STAGGER: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, GROUP_M: gl.constexpr,
    STAGES: gl.constexpr, W_WARPS_N: gl.constexpr,
):  # fmt: skip
    BLOCK_K: gl.constexpr = 128
    NUM_WARPS: gl.constexpr = gl.num_warps()
    gl.static_assert(BLOCK_M >= 64, "wgmma tiles")
    gl.static_assert(STAGES >= 2, "one block landing while one multiplies")

    # Copy layouts and shared memory as in gluon_gemm_kernel.
    a_copy: gl.constexpr = activation_copy_layout(NUM_WARPS)
    w_copy: gl.constexpr = weight_copy_layout(SHUFFLED, NUM_WARPS, W_WARPS_N)
    rows_copy: gl.constexpr = gl.BlockedLayout([1], [32], [NUM_WARPS], [0])
    acc_layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[NUM_WARPS, 1], instr_shape=[16, BLOCK_N, 32]
    )
    rows_layout: gl.constexpr = gl.SliceLayout(1, acc_layout)

    pid = gl.program_id(0)
    programs = gl.num_programs(0)
    tiles = ((M + BLOCK_M - 1) // BLOCK_M) * ((N + BLOCK_N - 1) // BLOCK_N)
    my_tiles = (tiles - pid + programs - 1) // programs
    n_blocks = K // BLOCK_K
    # Steps are numbered across this program's tiles: step g is block g % n_blocks of its tile g //
    # n_blocks, in pipeline slot g % STAGES, and every step commits one group of copies.
    total = my_tiles * n_blocks

    bufs = stage_buffers(SHUFFLED, STAGES, BLOCK_M, BLOCK_N)
    a_bufs, w_bufs, a_scale_bufs, w_scale_bufs = bufs
    operands = (M, N, KP, stride_am, stride_sm, stride_sk, stride_wsn, stride_wsk)
    # Pointers to K block 0 of the tile at row 0 and column 0, and the row indices masks compare; a
    # tile's copies add its offsets (loop invariants: the compiler keeps only what the copies use).
    a_rows = gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, a_copy))
    a_ptrs = a_ptr + (a_rows * stride_am)[:, None] + gl.arange(0, 128, layout=gl.SliceLayout(0, a_copy))[None, :]
    w_rows = gl.arange(0, BLOCK_N, layout=gl.SliceLayout(1, w_copy))
    w_k = gl.arange(0, 128, layout=gl.SliceLayout(0, w_copy))
    if SHUFFLED:  # 16-row bands of KP x 16 bytes, each 16-byte K chunk of the band's rows together
        w_row_offs = (w_rows // 16) * 16 * KP + (w_rows % 16) * 16
        w_col_offs = gl.max_contiguous(gl.multiple_of((w_k // 16) * 256 + w_k % 16, 16), 16)
    else:  # KP is the plain weight's row stride
        w_row_offs = w_rows * KP
        w_col_offs = w_k
    w_ptrs = w_ptr + w_row_offs[:, None] + w_col_offs[None, :]
    s_rows = gl.arange(0, BLOCK_M, layout=rows_copy)
    s_ptrs = a_scale_ptr + s_rows * stride_sm
    ws_ptrs = w_scale_ptr + gl.zeros_like(s_rows)
    pointers = (a_ptrs, w_ptrs, s_ptrs, ws_ptrs)
    within = (a_rows, w_rows, s_rows)
    # What every copy of this program reads (`_fetch`); each tile adds its first step and coordinates.
    fixed = (total, n_blocks, bufs, pointers, within, operands)

    # Prologue: STAGES - 1 blocks in flight (the launcher guarantees they lie within the first tile).
    here_m, here_n = tile_coordinates(pid, M, N, BLOCK_M, BLOCK_N, GROUP_M)
    for s in gl.static_range(STAGES - 1):
        _fetch(s, (0, (here_m, here_n, here_m, here_n), fixed), STAGES, SHUFFLED, STAGGER, BLOCK_M, BLOCK_N)

    for t in range(0, my_tiles):
        tile = pid + t * programs
        here_m, here_n = tile_coordinates(tile, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        # The next tile's coordinates, for the refills that run ahead into it (clamped to a real tile: the
        # refills past this program's last tile are empty anyway).
        next_m, next_n = tile_coordinates(gl.minimum(tile + programs, tiles - 1), M, N, BLOCK_M, BLOCK_N, GROUP_M)
        coords = (here_m, here_n, next_m, next_n)
        g0 = t * n_blocks
        # The overlapped loop of gluon_gemm_kernel, steps offset by g0 (see there for why it is shaped so).
        fetching = (g0, coords, fixed)
        acc = gl.zeros((BLOCK_M, BLOCK_N), gl.float32, acc_layout)
        acc, part_a, part_b = overlapped_blocks(
            g0, n_blocks, acc, bufs, _fetch, fetching, rows_layout, STAGES, SHUFFLED, STAGGER, BLOCK_M, BLOCK_N
        )
        last = g0 + n_blocks - 1
        scale = block_scale(last - 1, a_scale_bufs, w_scale_bufs, STAGES, rows_layout)
        part_b = _start_mma(last, a_bufs, w_bufs, part_b, STAGES, SHUFFLED, BLOCK_N)
        acc += part_a * scale[:, None]
        _fetch(last + STAGES - 1, fetching, STAGES, SHUFFLED, STAGGER, BLOCK_M, BLOCK_N)
        part_b = warpgroup_mma_wait(0, deps=[part_b])
        acc += part_b * block_scale(last, a_scale_bufs, w_scale_bufs, STAGES, rows_layout)[:, None]
        store_tile(acc, out_ptr, here_m, here_n, M, N, stride_om, BLOCK_M, BLOCK_N)
    async_copy.wait_group(0)


@gluon.jit
def _fetch(
    g, fetching, STAGES: gl.constexpr, SHUFFLED: gl.constexpr, STAGGER: gl.constexpr, BLOCK_M: gl.constexpr,
    BLOCK_N: gl.constexpr,
):  # fmt: skip
    """Start the copies of step g - a block of the tile that starts at step g0 (at `coords`' first row and
    column tile), or of the next one (at the second) - into slot g % STAGES, and commit them as one group
    (empty past the program's last step). `pointers`: the tiles' and scales' pointers for the tile at
    row and column 0, K block 0; `within`: the row indices of the activation tile, the weight tile and
    the scales, compared with the rows the tile has: rows past M or N are not copied (never stored).
    Only scalars change from copy to copy (tensors carried along the loop would hold every element's
    registers, and per-element addresses took issue slots the promotion needed). `fetching`: (g0, coords,
    what the kernel fixed for every copy)."""
    g0, coords, fixed = fetching
    total, n_blocks, bufs, pointers, within, operands = fixed
    M, N, KP, stride_am, stride_sm, stride_sk, stride_wsn, stride_wsk = operands
    here_m, here_n, next_m, next_n = coords
    a_bufs, w_bufs, a_scale_bufs, w_scale_bufs = bufs
    a_ptrs, w_ptrs, s_ptrs, ws_ptrs = pointers
    a_rows, w_rows, s_rows = within
    if g < total:
        block = g - g0
        ahead = block >= n_blocks
        row0 = gl.where(ahead, next_m, here_m) * BLOCK_M
        pid_n = gl.where(ahead, next_n, here_n)
        col0 = pid_n * BLOCK_N
        kb = gl.where(ahead, block - n_blocks, block)
        if STAGGER:  # column tile j starts at block j (see the Triton kernel)
            kb += pid_n % n_blocks
            kb = gl.where(kb >= n_blocks, kb - n_blocks, kb)
        slot = g % STAGES
        # A shuffled weight's 16-row bands are runs of 16 x KP bytes and a tile starts at a band, a plain
        # weight's rows are KP bytes apart: either way the tile starts col0 x KP bytes in.
        w_step: gl.constexpr = 128 * 16 if SHUFFLED else 128  # bytes from one K block to the next
        a_offset = row0.to(gl.int64) * stride_am + kb * 128
        w_offset = col0.to(gl.int64) * KP + kb * w_step
        s_offset = row0.to(gl.int64) * stride_sm + kb * stride_sk
        ws_offset = (col0 // 128).to(gl.int64) * stride_wsn + kb * stride_wsk
        _copy(a_bufs.index(slot), a_ptrs + a_offset, mask=(a_rows < M - row0)[:, None])
        _copy(_weight_tile(w_bufs, slot, SHUFFLED, BLOCK_N), w_ptrs + w_offset, mask=(w_rows < N - col0)[:, None])
        _copy(a_scale_bufs.index(slot), s_ptrs + s_offset, mask=s_rows < M - row0)
        _copy(w_scale_bufs.index(slot), ws_ptrs + ws_offset)
    async_copy.commit_group()
