"""Independent references for the numerics tests.

Written from the format definitions and the quantization recipes of docs/semantics.md §2-3 (their constants in
fp8_recipes.py), sharing no code with ``mla_debug.numerics``: fp8 values come from the bit fields, rounding to
fp8 is a nearest-value search on the value grid with ties to the even byte, and every fp32 operation of a
recipe is done in float64 followed by an explicit rounding to fp32. That emulation is exact: a product of two fp32 values is
exact in float64, and a quotient rounded first to float64 and then to fp32 is the correctly rounded
fp32 quotient (53 >= 2*24 + 2, so double rounding is innocuous).
"""

from __future__ import annotations

import math

import torch
from fp8_recipes import (  # noqa: F401  (FLAVOR_NAMES, BLOCK_FLAVOR_NAMES: for the tests that import them here)
    AMAX_IGNORES_NAN,
    BIAS,
    BLOCK_FLAVOR_NAMES,
    BLOCK_FLOOR,
    CLAMPS,
    DIVIDES,
    DTYPES,
    FLAVOR_NAMES,
    FN,
    FNUZ,
    GROUP_FLOOR,
    TIMES_INVERSE_MAX,
    ZERO_SCALE,
    fmt_max,
)

# The largest finite byte of each format and its value (from the bit fields: 0x7E = 1.110b * 2^8,
# 0x7F = 1.111b * 2^7).
_MAX_BYTE = {FN: 0x7E, FNUZ: 0x7F}
# Magnitude from which an unbounded round-to-nearest-even no longer lands on the format's max:
# max + half the spacing of the top binade (fn: 448 + 16; fnuz: 240 + 8).
OVERFLOW_AT = {FN: 464.0, FNUZ: 248.0}


def is_nan_byte(byte: int, dtype: torch.dtype) -> bool:
    if dtype == FNUZ:
        return byte == 0x80
    return byte & 0x7F == 0x7F


def decode_byte(byte: int, dtype: torch.dtype) -> float:
    """Value of one fp8 byte from its sign, 4-bit exponent and 3-bit mantissa."""
    if is_nan_byte(byte, dtype):
        return math.nan
    bias = BIAS[dtype]
    negative = bool(byte & 0x80)
    exponent = (byte >> 3) & 0xF
    mantissa = byte & 0x7
    if exponent == 0:
        magnitude = mantissa * 2.0 ** (1 - bias - 3)
    else:
        magnitude = (8 + mantissa) * 2.0 ** (exponent - bias - 3)
    return -magnitude if negative else magnitude


def all_values(dtype: torch.dtype) -> list[float]:
    """decode_byte for bytes 0..255."""
    return [decode_byte(b, dtype) for b in range(256)]


def finite_sorted_unique(dtype: torch.dtype) -> list[float]:
    """The distinct finite values of the format, ascending (+0 and -0 counted once)."""
    return sorted({v for v in all_values(dtype) if not math.isnan(v)})


def f32(t: torch.Tensor) -> torch.Tensor:
    """Round float64 values to fp32 (round to nearest even), kept in float64."""
    return t.to(torch.float32).to(torch.float64)


def round_to_fp8_bytes(y: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Round float64 values to fp8 bytes: nearest grid value, ties to the even byte.

    Out of range, the fn cast saturates to +-448 (torch's CPU cast saturates, infinities included) and
    the fnuz cast gives NaN from 248 up (248 is the tie between 240 = 0x7F and the next step, whose
    virtual byte 0x80 is even). NaN inputs give a NaN byte (0x7F for fn, 0x80 for fnuz).
    """
    y = y.to(torch.float64).flatten()
    max_byte = _MAX_BYTE[dtype]
    grid = torch.tensor([decode_byte(b, dtype) for b in range(max_byte + 1)], dtype=torch.float64)
    magnitude = y.abs()
    finite_part = torch.where(torch.isfinite(magnitude), magnitude, torch.zeros_like(magnitude))
    hi = torch.searchsorted(grid, finite_part.clamp_max(grid[-1].item())).clamp(0, max_byte)
    lo = (hi - 1).clamp_min(0)
    d_lo = finite_part - grid[lo]
    d_hi = grid[hi] - finite_part
    pick_hi = (d_hi < d_lo) | ((d_hi == d_lo) & (hi % 2 == 0))
    pick_hi |= grid[hi] == finite_part
    mag_byte = torch.where(pick_hi, hi, lo)

    if dtype == FN:
        above = magnitude > grid[-1].item()
        mag_byte = torch.where(above, torch.full_like(mag_byte, max_byte), mag_byte)
        negative = torch.signbit(y)
        out = mag_byte | torch.where(negative, 0x80, 0)
        out = torch.where(torch.isnan(y), torch.full_like(out, 0x7F), out)
    else:
        overflow = magnitude >= OVERFLOW_AT[FNUZ]
        negative = torch.signbit(y) & (mag_byte != 0)
        out = mag_byte | torch.where(negative, 0x80, 0)
        out = torch.where(overflow | torch.isnan(y), torch.full_like(out, 0x80), out)
    return out.to(torch.uint8)


def ceil_pow2_ref(s: torch.Tensor) -> torch.Tensor:
    """2^ceil(log2 s) for positive finite float64 values; others pass through."""
    s = s.to(torch.float64)
    ok = torch.isfinite(s) & (s > 0)
    safe = torch.where(ok, s, torch.ones_like(s))
    power = torch.exp2(torch.ceil(torch.log2(safe)))
    return torch.where(ok, power, s)


def _quotient(x64: torch.Tensor, scale: torch.Tensor, flavor: str, dtype: torch.dtype):
    """The fp32 quotient of a recipe, clamped if the flavor clamps; also the overflow mask."""
    if DIVIDES[flavor]:
        y = f32(x64 / scale)
    else:
        y = f32(x64 * f32(1.0 / scale))
    if CLAMPS[flavor]:
        m = fmt_max(flavor, dtype)
        y = y.clamp(-m, m)
    overflow = torch.isfinite(y) & (y.abs() >= OVERFLOW_AT[dtype])
    return y, overflow


def _scale(amax: torch.Tensor, floor: float, flavor: str, dtype: torch.dtype, ue8m0: bool) -> torch.Tensor:
    floor32 = f32(torch.tensor(floor, dtype=torch.float64)).item()
    amax = torch.where(torch.isnan(amax), amax, amax.clamp_min(floor32))
    if flavor in TIMES_INVERSE_MAX:
        scale = f32(amax * f32(torch.tensor(1.0 / fmt_max(flavor, dtype), dtype=torch.float64)))
    else:
        scale = f32(amax / fmt_max(flavor, dtype))
    if flavor in ZERO_SCALE:
        scale = torch.where(scale == 0, torch.full_like(scale, ZERO_SCALE[flavor]), scale)
    return ceil_pow2_ref(scale) if ue8m0 else scale


def group_quant_ref(x: torch.Tensor, group: int, dtype: torch.dtype, flavor: str, ue8m0: bool = False):
    """(bytes uint8 like x, scale float64 (..., G), overflow mask like x, quotient float64 like x)."""
    x64 = x.to(torch.float32).to(torch.float64)
    k = x64.shape[-1]
    groups = x64.reshape(*x64.shape[:-1], k // group, group)
    magnitude = groups.abs()
    if flavor in AMAX_IGNORES_NAN:
        magnitude = torch.where(torch.isnan(magnitude), torch.zeros_like(magnitude), magnitude)
    amax = magnitude.amax(dim=-1)
    scale = _scale(amax, GROUP_FLOOR[flavor], flavor, dtype, ue8m0)
    y, overflow = _quotient(groups, scale.unsqueeze(-1), flavor, dtype)
    q = round_to_fp8_bytes(y, dtype).reshape(x.shape)
    return q, scale, overflow.reshape(x.shape), y.reshape(x.shape)


def block_quant_ref(w: torch.Tensor, block: tuple[int, int], dtype: torch.dtype, flavor: str, ue8m0: bool = False):
    """Block by block, on the actual (unpadded) elements of each block."""
    w64 = w.to(torch.float32).to(torch.float64)
    n, k = w64.shape
    bn, bk = block
    nb, kb = -(-n // bn), -(-k // bk)
    q = torch.empty((n, k), dtype=torch.uint8)
    scale = torch.empty((nb, kb), dtype=torch.float64)
    overflow = torch.empty((n, k), dtype=torch.bool)
    for i in range(nb):
        for j in range(kb):
            rows, cols = slice(i * bn, (i + 1) * bn), slice(j * bk, (j + 1) * bk)
            part = w64[rows, cols]
            s = _scale(part.abs().max(), BLOCK_FLOOR[flavor], flavor, dtype, ue8m0)
            y, over = _quotient(part, s, flavor, dtype)
            q[rows, cols] = round_to_fp8_bytes(y, dtype).reshape(part.shape)
            scale[i, j] = s
            overflow[rows, cols] = over
    return q, scale, overflow


def bytes_of(t: torch.Tensor) -> torch.Tensor:
    return t.view(torch.uint8)


def assert_same_fp8(actual: torch.Tensor, expected_bytes: torch.Tensor, dtype: torch.dtype) -> None:
    """Bitwise equality, except that any NaN byte matches any NaN byte (fn has two)."""
    assert actual.dtype == dtype
    got = bytes_of(actual)
    got_nan = torch.tensor([is_nan_byte(b, dtype) for b in range(256)])[got.long()]
    exp_nan = torch.tensor([is_nan_byte(b, dtype) for b in range(256)])[expected_bytes.long()]
    assert torch.equal(got_nan, exp_nan), f"NaN positions differ: {int((got_nan != exp_nan).sum())} elements"
    mismatch = (got != expected_bytes) & ~got_nan
    if mismatch.any():
        idx = mismatch.nonzero()[0].tolist()
        raise AssertionError(
            f"{int(mismatch.sum())} fp8 bytes differ; first at {idx}: "
            f"got 0x{int(got[tuple(idx)]):02x}, expected 0x{int(expected_bytes[tuple(idx)]):02x}"
        )


def assert_same_f32(actual: torch.Tensor, expected: torch.Tensor) -> None:
    """Bitwise fp32 equality (sign of zero included; NaN matches NaN)."""
    assert actual.dtype == torch.float32, actual.dtype
    expected = expected.to(torch.float32)
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    a_nan, e_nan = torch.isnan(actual), torch.isnan(expected)
    assert torch.equal(a_nan, e_nan), "NaN positions differ"
    a_bits = torch.where(a_nan, 0, actual.view(torch.int32))
    e_bits = torch.where(e_nan, 0, expected.view(torch.int32))
    if not torch.equal(a_bits, e_bits):
        idx = (a_bits != e_bits).nonzero()[0].tolist()
        raise AssertionError(
            f"{int((a_bits != e_bits).sum())} fp32 values differ; first at {idx}: "
            f"got {actual[tuple(idx)].item()!r}, expected {expected[tuple(idx)].item()!r}"
        )
