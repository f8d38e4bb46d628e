"""Triton source of the norm + quant kernels (loaded by `support.kernels`, never imported directly).

One file holds the fused kernel and the two kernels of the unfused baseline, because they share the
device functions that fix the numerics - the same rounding steps as the torch reference
(`normquant/rmsnorm.py`, `numerics/quantize.py`), so results agree bit for bit:

- squares summed in float64 and the mean rounded once to fp32; ``sqrt_rn`` and ``div_rn`` give the
  correctly rounded root and reciprocal (plain ``/`` and ``rsqrt`` are approximate on NVIDIA GPUs);
- ``y = (s * r) * w`` in that order; the group amax propagates NaN like torch's ``amax``;
- fp8 bytes from the fp32 quotient; e4m3fnuz has no NVIDIA type and is made from the e4m3fn byte of
  twice the value (fnuz bits b encode half the fn value of b), with the few codes that differ fixed up.

SOFT switches the fp32 -> fp8/bf16 conversions (and the bf16 -> fp32 load) from the hardware's to
integer arithmetic with the same round-to-nearest-even result. The Triton interpreter needs it: its
numpy conversions truncate to bf16 and round fp8 wrongly (1.97 -> 1.0, NaN -> 384). On a GPU it is a
cross-check of the hardware path. SCALES_IN_PLACE (NVIDIA GPUs) stores the scales with inline PTX from
the layout they are computed in (`_store_scales`).
"""

from __future__ import annotations

import triton
import triton.language as tl

# ------------------------------------------------------------------------------------------------
# conversions


@triton.jit
def _load_f32(ptrs, mask, SOFT: tl.constexpr):
    """Load and widen to fp32 (exact for every input dtype)."""
    x = tl.load(ptrs, mask=mask, other=0.0)
    y = x.to(tl.float32)
    if SOFT:
        if x.dtype == tl.bfloat16:
            # bf16 is the top half of an fp32 word
            y = (x.to(tl.uint16, bitcast=True).to(tl.uint32) << 16).to(tl.float32, bitcast=True)
    return y


@triton.jit
def _round_to(y, dtype: tl.constexpr, SOFT: tl.constexpr):
    """fp32 -> `dtype`, round to nearest even."""
    out = y.to(dtype)
    if SOFT:
        if dtype == tl.bfloat16:
            bits = y.to(tl.uint32, bitcast=True)
            rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16  # a carry into the exponent is right
            rounded = tl.where(y != y, (bits >> 16) | 0x40, rounded)  # NaN stays (quiet) NaN
            out = rounded.to(tl.uint16).to(tl.bfloat16, bitcast=True)
    return out


@triton.jit
def _soft_e4m3fn(v):
    """fp32 -> e4m3fn byte (int32), round to nearest even, saturating to +-448 (cvt.rn.satfinite)."""
    bits = v.to(tl.uint32, bitcast=True)
    sign = (bits >> 31).to(tl.int32)
    mag = (bits & 0x7FFFFFFF).to(tl.int32)
    # normal range (>= 2^-6): round the fp32 mantissa to 3 bits by integer addition, then rebias
    # the exponent from 127 to 7 (120 << 3 = 960)
    normal = ((mag + 0x7FFFF + ((mag >> 20) & 1)) >> 20) - 960
    # subnormal range: a count of 2^-9 quanta, rounded to nearest even by the 2^23 trick (exact)
    scaled = tl.abs(v) * 512.0
    sub = ((scaled + 8388608.0) - 8388608.0).to(tl.int32)
    byte = tl.where(mag >= 0x3C800000, normal, sub)
    byte = tl.where(mag >= 0x43E00000, 0x7E, byte)  # |v| >= 448 (Inf included) saturates
    byte = tl.where(mag > 0x7F800000, 0x7F, byte)  # NaN
    return byte | (sign << 7)


@triton.jit
def _fp8_bytes(v, FNUZ: tl.constexpr, SOFT: tl.constexpr):
    """fp32 quotients -> fp8 bytes (uint8): e4m3fn saturating, or e4m3fnuz like torch's cast."""
    w = v
    if FNUZ:
        w = v * 2.0  # exact; the fn byte of 2v is the fnuz byte of v for |v| <= 232
    if SOFT:
        byte = _soft_e4m3fn(w)
    else:
        byte = w.to(tl.float8e4nv).to(tl.uint8, bitcast=True).to(tl.int32)
    if FNUZ:
        a = tl.abs(v)
        byte = tl.where(byte == 0x80, 0, byte)  # fnuz has no -0 (0x80 is its NaN)
        # (232, 248) rounds to 240, which fn cannot hold as 480; 232 itself ties to even (224)
        byte = tl.where(a > 232.0, tl.where(v < 0, 0xFF, 0x7F), byte)
        byte = tl.where((a >= 248.0) | (v != v), 0x80, byte)  # beyond 240 (Inf included) and NaN
    return byte.to(tl.uint8)


# ------------------------------------------------------------------------------------------------
# norm and quant


@triton.jit
def _max_propagating_nan(a, b):
    return tl.maximum(a, b, propagate_nan=tl.PropagateNan.ALL)


@triton.jit
def _add_pairs(x, AXES: tl.constexpr):
    """x with adjacent pairs along its last axis added (half as long). The pairs lie in one thread's
    registers: loads give each thread at least 16 contiguous bytes, 4 fp32 or 8 bf16 values."""
    if AXES == 2:
        a, b = tl.reshape(x, (x.shape[0], x.shape[1], x.shape[2] // 2, 2)).split()
    else:
        a, b = tl.reshape(x, (x.shape[0], x.shape[1] // 2, 2)).split()
    return a + b


@triton.jit
def _inv_rms(s, N: tl.constexpr, eps, AXES: tl.constexpr, SHORT_CHAIN: tl.constexpr):
    """1 / sqrt(fp32(sum(s^2) / N) + eps) per row; squares of fp32 are exact in float64."""
    s64 = s.to(tl.float64)
    sq = s64 * s64
    if SHORT_CHAIN and sq.shape[AXES] >= 8:
        # A reduction adds a thread's own values one after another: 16 dependent fp64 adds when a thread
        # holds 16. Two rounds of pair sums first make that chain 2 + 4 long (the result is a sum in
        # another order, as any reduction's is; see normquant/rmsnorm.py on why the fp32 mean does not depend on it).
        sq = _add_pairs(_add_pairs(sq, AXES), AXES)
    if AXES == 2:
        total = tl.sum(tl.sum(sq, axis=2), axis=1)
    else:
        total = tl.sum(sq, axis=1)
    mean = (total / N).to(tl.float32)
    return tl.div_rn(tl.full(mean.shape, 1.0, tl.float32), tl.sqrt_rn(mean + eps))


@triton.jit
def _weight_f32(w_ptrs, mask, GEMMA: tl.constexpr, SOFT: tl.constexpr):
    w = _load_f32(w_ptrs, mask, SOFT)
    if GEMMA:
        w = w + 1.0
    return w


@triton.jit
def _inv_rms_and_weight(
    s, w_ptrs, w_mask, N: tl.constexpr, eps, AXES: tl.constexpr, GEMMA: tl.constexpr, SOFT: tl.constexpr,
    SHORT_CHAIN: tl.constexpr,
):  # fmt: skip
    """(1 / rms per row, the weights as fp32). SHORT_CHAIN is for launches with few rows, whose time is one
    thread's chain of dependent steps: the weights are loaded before the sum's reduction (a load written
    after it stays behind its barrier, a second memory round trip in the chain) and the fp64 sum adds
    pairs first. Both cost registers, which launches with many rows need for occupancy."""
    if SHORT_CHAIN:
        w = _weight_f32(w_ptrs, w_mask, GEMMA, SOFT)
    r = _inv_rms(s, N, eps, AXES, SHORT_CHAIN)
    if not SHORT_CHAIN:
        w = _weight_f32(w_ptrs, w_mask, GEMMA, SOFT)
    return r, w


@triton.jit
def _store_scales(ptrs, scale, mask, IN_PLACE: tl.constexpr):
    """Store the (rows, groups) scales from the layout the group amax reduction left them in.

    Triton gives every ``tl.store`` a layout of its own (one scale per thread, for coalescing) and moves
    the values there through shared memory, behind barriers, at the end of every program: a measurable
    part of a launch at decode sizes (RESULTS.md). IN_PLACE (inline PTX) has every thread store the
    scales it holds instead; the lanes that share a group write the same value to the same address,
    which the memory system merges. With one warp per row a thread then issues several stores where tl.store needs one,
    which launches with many rows (bound by instruction issue) pay for, so they keep tl.store.
    """
    if IN_PLACE:
        tl.inline_asm_elementwise(
            "{ .reg .pred p; setp.ne.b32 p, $3, 0; @p st.global.b32 [$1], $2; mov.b32 $0, 0; }",
            "=r,l,r,r",
            [ptrs.to(tl.int64), scale, mask.to(tl.int32)],
            dtype=tl.int32,
            is_pure=False,
            pack=1,
        )
    else:
        tl.store(ptrs, scale, mask=mask)


@triton.jit
def _quantize_store(
    y,
    mask,
    rows,
    groups,
    out_ptrs,
    scale_ptr,
    stride_sm,
    stride_sg,
    ovf_ptr,
    M,
    G: tl.constexpr,
    QUANT: tl.constexpr,
    SOFT: tl.constexpr,
    SCALES_IN_PLACE: tl.constexpr,
):
    """Quantize fp32 y (BLOCK_M, groups, group size) per group; store bytes, scales, overflow count."""
    magnitude = tl.abs(y)
    if QUANT.AMAX_DROPS_NAN:
        magnitude = tl.where(magnitude != magnitude, 0.0, magnitude)  # fmaxf's reduction (aiter's HIP quant)
    amax = tl.reduce(magnitude, 2, _max_propagating_nan)
    amax = tl.where(amax < QUANT.FLOOR, QUANT.FLOOR, amax)  # NaN stays NaN, as with torch's clamp_min
    if QUANT.INV_MAX > 0:
        scale = amax * QUANT.INV_MAX  # amax * fp32(1/max): aiter's HIP quant
    else:
        scale = tl.div_rn(amax, tl.full(amax.shape, QUANT.FMT_MAX, tl.float32))
    if QUANT.MUL_RECIP:
        inv = tl.div_rn(tl.full(scale.shape, 1.0, tl.float32), scale)
        t = y * inv[:, :, None]
    else:
        t = tl.div_rn(y, tl.broadcast_to(scale[:, :, None], y.shape))
    if QUANT.CLAMP:
        # comparisons, not min/max: NaN must pass through
        t = tl.where(t > QUANT.FMT_MAX, QUANT.FMT_MAX, t)
        t = tl.where(t < -QUANT.FMT_MAX, -QUANT.FMT_MAX, t)
    tl.store(out_ptrs, _fp8_bytes(t, QUANT.FNUZ, SOFT), mask=mask)
    scale_mask = (rows[:, None] < M) & (groups[None, :] < G)
    scale_offs = rows[:, None].to(tl.int64) * stride_sm + groups[None, :].to(tl.int64) * stride_sg
    _store_scales(scale_ptr + scale_offs, scale, scale_mask, SCALES_IN_PLACE)
    if QUANT.COUNT_OVF:
        # finite quotients the cast cannot represent (NaN on e4m3fnuz, saturated on e4m3fn)
        a = tl.abs(t)
        beyond = a > QUANT.OVF_AT
        if QUANT.OVF_TIE_UP:
            beyond = a >= QUANT.OVF_AT
        hits = beyond & (a < float("inf")) & mask
        tl.atomic_add(ovf_ptr, tl.sum(hits.to(tl.int32), axis=None))


@triton.jit
def _group_tile(pid, M, N: tl.constexpr, GS: tl.constexpr, BLOCK_M: tl.constexpr, NG: tl.constexpr):
    """A quant program's (rows, groups, lanes) tile - a group's amax is a reduction over the last axis, no
    reshapes: (row indices, group indices, each lane's column, the rows as int64 offsets (they can pass
    2^31 elements), the mask of the lanes inside (M, N))."""
    rows = pid * BLOCK_M + tl.arange(0, BLOCK_M)
    groups = tl.arange(0, NG)
    cols = groups[None, :, None] * GS + tl.arange(0, GS)[None, None, :]
    r = rows[:, None, None].to(tl.int64)
    return rows, groups, cols, r, (r < M) & (cols < N)


@triton.jit
def _load_rows(x_ptr, res_ptr, res_out_ptr, r, cols, mask, stride_x, stride_res, N, HAS_RES: tl.constexpr, SOFT):
    """Rows `r` (int64, broadcasting against `cols`) of x as fp32; with HAS_RES the residual's rows added
    and the sum stored, rounded, to the contiguous res_out (N wide)."""
    s = _load_f32(x_ptr + r * stride_x + cols, mask, SOFT)
    if HAS_RES:
        s = s + _load_f32(res_ptr + r * stride_res + cols, mask, SOFT)
        tl.store(res_out_ptr + r * N + cols, _round_to(s, res_out_ptr.dtype.element_ty, SOFT), mask=mask)
    return s


@triton.jit
def _norm_rows(
    pid,
    x_ptr,
    w_ptr,
    out_ptr,
    M,
    stride_x,
    eps,
    N: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    GEMMA: tl.constexpr,
    SOFT: tl.constexpr,
    SHORT_CHAIN: tl.constexpr,
    res_ptr=None,
    res_out_ptr=None,
    stride_res=0,
    HAS_RES: tl.constexpr = False,
):
    """Normalize rows of x (plus the residual: `_load_rows`) into the contiguous out, rounded to out's dtype
    (k; the unfused q)."""
    rows = (pid * BLOCK_M + tl.arange(0, BLOCK_M)).to(tl.int64)
    cols = tl.arange(0, BLOCK_N)
    mask = (rows[:, None] < M) & (cols[None, :] < N)
    s = _load_rows(
        x_ptr, res_ptr, res_out_ptr, rows[:, None], cols[None, :], mask, stride_x, stride_res, N, HAS_RES, SOFT
    )
    # The weights are (1, BLOCK_N), the row's layout: a 1-D vector would be moved into it through shared
    # memory.
    r, w = _inv_rms_and_weight(s, w_ptr + cols[None, :], cols[None, :] < N, N, eps, 1, GEMMA, SOFT, SHORT_CHAIN)
    y = (s * r[:, None]) * w
    tl.store(out_ptr + rows[:, None] * N + cols[None, :], _round_to(y, out_ptr.dtype.element_ty, SOFT), mask=mask)


# ------------------------------------------------------------------------------------------------
# kernels


@triton.jit
def fused_norm_quant_kernel(
    q_ptr,
    q_w_ptr,
    res_ptr,
    k_ptr,
    k_w_ptr,
    q_out_ptr,
    scale_ptr,
    unq_ptr,
    res_out_ptr,
    k_out_ptr,
    ovf_ptr,
    M,
    stride_q,
    stride_res,
    stride_k,
    stride_sm,
    stride_sg,
    q_eps,
    k_eps,
    N1: tl.constexpr,
    N2: tl.constexpr,
    GS: tl.constexpr,
    BLOCK_M: tl.constexpr,
    NG: tl.constexpr,
    BLOCK_N2: tl.constexpr,
    HAS_K: tl.constexpr,
    HAS_RES: tl.constexpr,
    HAS_UNQ: tl.constexpr,
    GEMMA: tl.constexpr,
    QUANT: tl.constexpr,
    SOFT: tl.constexpr,
    SCALES_IN_PLACE: tl.constexpr,
    K_WITH_Q: tl.constexpr,
    SHORT_CHAIN: tl.constexpr,
):
    """One launch for q and k: program (i, 0) normalizes and quantizes q rows [i*BLOCK_M, ...),
    program (i, 1) normalizes the same k rows - or, with K_WITH_Q, program i does both, one after the
    other (fewer programs, each paying its fixed costs once: faster when rows are many)."""
    pid = tl.program_id(0)
    run_q = True
    run_k = HAS_K
    if not K_WITH_Q:
        run_q = tl.program_id(1) == 0
        run_k = tl.program_id(1) == 1  # axis 1 has size 2 only when there is a k
    if run_q:
        rows, groups, cols, r3, mask = _group_tile(pid, M, N1, GS, BLOCK_M, NG)
        s = _load_rows(q_ptr, res_ptr, res_out_ptr, r3, cols, mask, stride_q, stride_res, N1, HAS_RES, SOFT)
        r, w = _inv_rms_and_weight(s, q_w_ptr + cols, cols < N1, N1, q_eps, 2, GEMMA, SOFT, SHORT_CHAIN)
        y = (s * r[:, None, None]) * w
        if HAS_UNQ:
            tl.store(unq_ptr + r3 * N1 + cols, _round_to(y, unq_ptr.dtype.element_ty, SOFT), mask=mask)
        _quantize_store(
            y, mask, rows, groups, q_out_ptr + r3 * N1 + cols, scale_ptr, stride_sm, stride_sg, ovf_ptr, M, N1 // GS,
            QUANT, SOFT, SCALES_IN_PLACE,
        )  # fmt: skip
    if HAS_K:
        if run_k:
            _norm_rows(
                pid, k_ptr, k_w_ptr, k_out_ptr, M, stride_k, k_eps, N2, BLOCK_M, BLOCK_N2, GEMMA, SOFT, SHORT_CHAIN
            )


@triton.jit
def rmsnorm_kernel(
    q_ptr,
    q_w_ptr,
    res_ptr,
    k_ptr,
    k_w_ptr,
    q_normed_ptr,
    res_out_ptr,
    k_out_ptr,
    M,
    stride_q,
    stride_res,
    stride_k,
    q_eps,
    k_eps,
    N1: tl.constexpr,
    N2: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N1: tl.constexpr,
    BLOCK_N2: tl.constexpr,
    HAS_K: tl.constexpr,
    HAS_RES: tl.constexpr,
    GEMMA: tl.constexpr,
    SOFT: tl.constexpr,
    SHORT_CHAIN: tl.constexpr,
):
    """The unfused path's first launch: q (plus residual) and k rows normalized and stored rounded."""
    pid = tl.program_id(0)
    if tl.program_id(1) == 0:
        # the residual added once, the rounded sum stored, then the fp32 sum normalized
        _norm_rows(
            pid, q_ptr, q_w_ptr, q_normed_ptr, M, stride_q, q_eps, N1, BLOCK_M, BLOCK_N1, GEMMA, SOFT, SHORT_CHAIN,
            res_ptr, res_out_ptr, stride_res, HAS_RES,
        )  # fmt: skip
    elif HAS_K:
        _norm_rows(pid, k_ptr, k_w_ptr, k_out_ptr, M, stride_k, k_eps, N2, BLOCK_M, BLOCK_N2, GEMMA, SOFT, SHORT_CHAIN)


@triton.jit
def group_quant_kernel(
    x_ptr,
    out_ptr,
    scale_ptr,
    ovf_ptr,
    M,
    stride_x,
    stride_sm,
    stride_sg,
    N: tl.constexpr,
    GS: tl.constexpr,
    BLOCK_M: tl.constexpr,
    NG: tl.constexpr,
    QUANT: tl.constexpr,
    SOFT: tl.constexpr,
    SCALES_IN_PLACE: tl.constexpr,
):
    """Per-1xGS group quant of stored (bf16) rows: the unfused path's second and third launches."""
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    groups = tl.arange(0, NG)
    cols = groups[None, :, None] * GS + tl.arange(0, GS)[None, None, :]
    r3 = rows[:, None, None].to(tl.int64)
    mask = (r3 < M) & (cols < N)
    y = _load_f32(x_ptr + r3 * stride_x + cols, mask, SOFT)
    _quantize_store(
        y, mask, rows, groups, out_ptr + r3 * N + cols, scale_ptr, stride_sm, stride_sg, ovf_ptr, M, N // GS,
        QUANT, SOFT, SCALES_IN_PLACE,
    )  # fmt: skip


@triton.jit
def convert_kernel(x_ptr, fp8_ptr, bf16_ptr, N, FNUZ: tl.constexpr, SOFT: tl.constexpr, BLOCK: tl.constexpr):
    """The kernels' fp32 -> fp8 byte and fp32 -> bf16 conversions on a flat array (for tests)."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < N
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    tl.store(fp8_ptr + offs, _fp8_bytes(x, FNUZ, SOFT), mask=mask)
    tl.store(bf16_ptr + offs, _round_to(x, tl.bfloat16, SOFT), mask=mask)
