"""The Triton source of the block-scaled FP8 GEMM (imported only when a Triton GEMM first runs).

One kernel covers both aiter contracts through compile-time switches:

- SHUFFLED: the weight bytes are read in aiter's (16, 16) preshuffled order - element (n, k) of a
  weight with rows of KP bytes lives at ``(n // 16) * 16 * KP + (k // 16) * 256 + (n % 16) * 16 + k % 16``
  (docs/semantics.md §6) - instead of ``n * stride_wn + k``.
- The activation scale of (m, kb) is read at ``m * stride_sm + kb * stride_sk`` from the raw buffer; the
  launcher passes (G, 1) for ROW_MAJOR bytes and (1, M) for COL_MAJOR bytes, whatever the tensor's own
  strides claim, exactly as aiter's CK/ASM kernels read raw pointers.
- e4m3fn operands arrive as fp8 pointers and feed the tensor cores directly (pointers typed uint8 and
  bitcast in registers defeat Triton's software pipelining, several times slower: RESULTS.md).
- FNUZ: inputs are e4m3fnuz bytes (uint8 pointers). NVIDIA tensor cores have no such type, so the bytes are decoded
  exactly to bf16 in registers (fnuz bits b encode half the e4m3fn value of b, except 0x7F/0xFF = +-240
  and 0x80 = NaN) and multiplied in bf16; every fp8 value is exact in bf16 and every product exact in
  fp32, so only the accumulation order differs from the fp8 path. (The interpreter has no bf16 dot -
  numpy lacks the type - so there the decoded values are multiplied as fp32, EXACT_FP32_DOT.)

Accumulation follows the real kernels: per 128-wide K block, an fp32 dot product of raw fp8 values,
times ``x_scale[m, kb] * w_scale[n // 128, kb]``, added to an fp32 accumulator; bf16 once at the end.
With SPLIT_K > 1 each program sums a contiguous range of K blocks into an fp32 workspace slice, and the
last split of a tile to finish adds the slices in split order and writes the bf16 output, in the same
launch (deterministic whatever the order the splits finish in).
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def _decode_fnuz(bits):
    """e4m3fnuz bytes (uint8) -> exact bf16 values."""
    as_fn = bits.to(tl.float8e4nv, bitcast=True).to(tl.float32) * 0.5
    value = tl.where((bits & 0x7F) == 0x7F, tl.where(bits >= 0x80, -240.0, 240.0), as_fn)
    value = tl.where(bits == 0x80, float("nan"), value)
    return value.to(tl.bfloat16)


@triton.jit
def block_scaled_gemm_kernel(
    a_ptr,
    a_scale_ptr,
    w_ptr,
    w_scale_ptr,
    out_ptr,
    partial_ptr,
    arrivals_ptr,
    M,
    N,
    K,
    KP,
    stride_am,
    stride_wn,
    stride_sm,
    stride_sk,
    stride_wsn,
    stride_wsk,
    stride_om,
    stride_split,
    SHUFFLED: tl.constexpr,
    FNUZ: tl.constexpr,
    EXACT_FP32_DOT: tl.constexpr,
    SPLIT_K: tl.constexpr,
    STAGGER: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    GROUP_M: tl.constexpr,
):
    BLOCK_K: tl.constexpr = 128
    pid = tl.program_id(0)
    split = tl.program_id(1)
    # Grouped ordering: GROUP_M row tiles share each weight column tile while it is in L2.
    tiles_m = (M + BLOCK_M - 1) // BLOCK_M
    tiles_n = (N + BLOCK_N - 1) // BLOCK_N
    per_group = GROUP_M * tiles_n
    group = pid // per_group
    first_m = group * GROUP_M
    group_rows = min(tiles_m - first_m, GROUP_M)
    pid_m = first_m + (pid % per_group) % group_rows
    pid_n = (pid % per_group) // group_rows

    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    mask_m = offs_m < M
    mask_n = offs_n < N
    rows_m = tl.where(mask_m, offs_m, 0)
    rows_n = tl.where(mask_n, offs_n, 0)

    k_blocks = (K + BLOCK_K - 1) // BLOCK_K
    per_split = (k_blocks + SPLIT_K - 1) // SPLIT_K
    kb_start = split * per_split
    kb_end = min(kb_start + per_split, k_blocks)
    a_ptrs = a_ptr + rows_m[:, None].to(tl.int64) * stride_am + offs_k[None, :]
    if SHUFFLED:
        w_rows = (rows_n // 16).to(tl.int64) * 16 * KP + (rows_n % 16) * 16
        w_cols = (offs_k // 16) * 256 + offs_k % 16
        w_step = 128 * 16
    else:
        w_rows = rows_n.to(tl.int64) * stride_wn
        w_cols = offs_k
        w_step = 128
    w_ptrs = w_ptr + w_cols[:, None] + w_rows[None, :]
    s_ptrs = a_scale_ptr + rows_m.to(tl.int64) * stride_sm
    # BLOCK_N divides 128, so a tile's columns share one 128-row weight block: its scale is a scalar per
    # K block, and the epilogue is one multiply-add per element.
    ws_ptr = w_scale_ptr + ((pid_n * BLOCK_N) // 128).to(tl.int64) * stride_wsn

    # STAGGER: column tile j starts its K loop at block j (mod the block count) and wraps around.
    # Tiles running side by side then read different K blocks - for a preshuffled weight, 2 KB runs
    # at different offsets of each 16-row band - instead of all hitting the same offsets at once.
    # Tiles of one column tile keep one order, so they still share each weight block in L2.
    n_blocks = kb_end - kb_start
    shift = 0
    if STAGGER:
        shift = pid_n % tl.maximum(n_blocks, 1)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    # The scales of the next block are loaded while this block multiplies (Triton pipelines only the
    # loads that feed tl.dot; faster for the preshuffled kernel at large M, the same for plain: RESULTS.md).
    # Indices are clamped into range instead of masked: an empty split - more splits than K blocks - loads
    # a valid block and never uses it.
    first = tl.minimum(kb_start + shift, k_blocks - 1)
    a_s = tl.load(s_ptrs + first * stride_sk, mask=mask_m, other=0.0)
    w_s = tl.load(ws_ptr + first * stride_wsk)
    for i in range(0, n_blocks):
        step = i + shift
        kb = kb_start + tl.where(step >= n_blocks, step - n_blocks, step)
        # Rows past M and columns past N were clamped to row 0 above: in bounds without a mask (masks cost
        # registers), and they only reach outputs never stored.
        a_bits = tl.load(a_ptrs + kb * BLOCK_K)
        w_bits = tl.load(w_ptrs + kb * w_step)
        if FNUZ and EXACT_FP32_DOT:
            a_val = _decode_fnuz(a_bits).to(tl.float32)
            w_val = _decode_fnuz(w_bits).to(tl.float32)
            part = tl.dot(a_val, w_val, input_precision="ieee", out_dtype=tl.float32)
        elif FNUZ:
            part = tl.dot(_decode_fnuz(a_bits), _decode_fnuz(w_bits), out_dtype=tl.float32)
        else:
            part = tl.dot(a_bits, w_bits, out_dtype=tl.float32)
        nxt = step + 1
        following = kb_start + tl.where(nxt >= n_blocks, nxt - n_blocks, nxt)
        following = tl.minimum(following, k_blocks - 1)
        a_s_next = tl.load(s_ptrs + following * stride_sk, mask=mask_m, other=0.0)
        w_s_next = tl.load(ws_ptr + following * stride_wsk)
        acc += part * (a_s * w_s)[:, None]
        a_s = a_s_next
        w_s = w_s_next

    out_offs = offs_m[:, None].to(tl.int64) * stride_om + offs_n[None, :]
    mask = mask_m[:, None] & mask_n[None, :]
    if SPLIT_K == 1:
        tl.store(out_ptr + out_offs, acc.to(tl.bfloat16), mask=mask)
    else:
        # Split-K, reduced in this launch: every split stores its fp32 partial, then counts itself in on
        # the tile's arrival counter; the split that arrives last adds the partials up in split order
        # (0, 1, ...), whatever the order of arrival, so the bytes are deterministic. The counter is
        # zeroed by the launcher; the barrier and the acq_rel atomic order the partial stores of every
        # thread before the count that the last split acquires.
        tl.store(partial_ptr + split * stride_split + out_offs, acc, mask=mask)
        tl.debug_barrier()
        arrived = tl.atomic_add(arrivals_ptr + pid, 1, sem="acq_rel")
        if arrived == SPLIT_K - 1:
            total = tl.load(partial_ptr + out_offs, mask=mask, other=0.0, cache_modifier=".cg")
            for other in tl.static_range(1, SPLIT_K):
                total += tl.load(
                    partial_ptr + other * stride_split + out_offs, mask=mask, other=0.0, cache_modifier=".cg"
                )
            tl.store(out_ptr + out_offs, total.to(tl.bfloat16), mask=mask)
