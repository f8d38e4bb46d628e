"""An independent, straightforward model of the fused RMSNorm + group quant, for bitwise comparisons.

Written from docs/semantics.md §2, §3 and §11 (the recipes' constants in fp8_recipes.py) and the rounding steps
the reference documents, sharing no code with ``mla_debug``. It loops over rows and groups; within a row every fp32 operation is done in float64 and
rounded to fp32 explicitly (``f32``). That emulation is exact for +, *, / and sqrt of fp32 operands:
float64 has 53 >= 2*24 + 2 bits, so rounding first to float64 and then to fp32 equals rounding once to
fp32. The sum of squares is taken with ``math.fsum`` (the correctly rounded float64 sum), while the
library sums in float64 in torch's order; both are then rounded to fp32, so they can only disagree when
the exact mean lies within ~2^-40 (relative) of an fp32 rounding midpoint - about one row in 10^7.

Rounding to fp8 is done from the definition: scale the magnitude to an integer count of the binade's
quantum, round half to even (torch.round), and build the byte from exponent and count. Rounding fp32 to
bf16/fp16 uses torch's IEEE conversion (round to nearest even), which is not part of the recipe.
"""

from __future__ import annotations

import math

import torch
from fp8_recipes import AMAX_IGNORES_NAN, BIAS, CLAMPS, DIVIDES, FN, FNUZ, FORMAT_MAX, GROUP_FLOOR, TIMES_INVERSE_MAX
from fp8_recipes import fmt_max as flavor_max

FP8_NAME = {FN: "e4m3fn", FNUZ: "e4m3fnuz"}
FLAVORS = ("aiter", "vllm", "deepseek")
# aiter's own 1x128 quantizers that the Triton kernels implement too (aiter-torch's device-dependent
# division they refuse).
AITER_FLAVORS = ("aiter-hip", "aiter-triton", "aiter-fused")


def min_subnormal(dtype: torch.dtype) -> float:
    return 2.0 ** (1 - BIAS[dtype] - 3)


def f32(t: torch.Tensor) -> torch.Tensor:
    """Round float64 values to fp32 (nearest even), kept as float64."""
    return t.to(torch.float32).to(torch.float64)


def f32s(x: float) -> float:
    """f32 for one Python float."""
    return torch.tensor(x, dtype=torch.float64).to(torch.float32).item()


# --- RMSNorm ---------------------------------------------------------------------------------------


def norm_rows(
    x: torch.Tensor,
    weight: torch.Tensor,
    eps: float,
    gemma: bool = False,
    residual: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(y, s) as fp32 values held in float64, row by row."""
    m, n = x.shape
    w = weight.to(torch.float64)
    if weight.dtype == torch.float64:
        w = f32(w)
    if gemma:
        w = f32(1.0 + w)
    eps32 = f32s(eps)
    y = torch.empty((m, n), dtype=torch.float64)
    s_all = torch.empty((m, n), dtype=torch.float64)
    for i in range(m):
        s = x[i].to(torch.float64)
        if residual is not None:
            s = f32(s + residual[i].to(torch.float64))
        s_all[i] = s
        squares = [v * v for v in s.tolist()]  # exact: a square of an fp32 value fits in 48 bits
        if all(math.isfinite(v) for v in squares):
            total = math.fsum(squares)
        else:
            total = sum(squares)  # fsum raises on inf - inf; plain summation gives inf or nan, as wanted
        mean_sq = f32s(total / n)
        root = f32s(math.sqrt(f32s(mean_sq + eps32)))
        r = f32s(1.0 / root) if root != 0.0 else math.inf  # IEEE 1/0; Python would raise
        y[i] = f32(f32(s * r) * w)
    return y, s_all


# --- fp8 rounding ----------------------------------------------------------------------------------


def fp8_quantum(v: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Spacing of the fp8 grid in the binade of |v| (2^(E-3) for 2^E <= |v| < 2^(E+1)); below the
    smallest normal the fixed subnormal spacing. float64, finite |v| only."""
    bias = BIAS[dtype]
    a = v.to(torch.float64).abs()
    _, exp = torch.frexp(a)
    subnormal = a < 2.0 ** (1 - bias)  # zero included: frexp(0) reports exponent 0, not -inf
    e = torch.where(subnormal, torch.full_like(exp, 1 - bias), exp - 1)
    return torch.pow(2.0, (e - 3).to(torch.float64))


def fp8_from_ordinal(ordinal: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """float64 value at a signed position of the fp8 number line (0 is zero, +-1 the smallest subnormals)."""
    ordinal = ordinal.to(torch.int64)
    byte = torch.where(ordinal >= 0, ordinal, 0x80 | -ordinal)
    return fp8_value(byte, dtype)


def fp8_bytes(v: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Round float64 values to fp8 bytes (uint8), nearest even; fn saturates, fnuz overflows to NaN.

    torch's CPU casts do exactly this out of range (docs/semantics.md §2): e4m3fn clamps to +-448, Inf included;
    e4m3fnuz gives its NaN byte for anything that rounds above 240.
    """
    bias = BIAS[dtype]
    v = v.to(torch.float64)
    a = v.abs()
    finite = torch.isfinite(a)
    a_fin = torch.where(finite, a, torch.zeros_like(a))
    quantum = fp8_quantum(a_fin, dtype)
    e = torch.log2(quantum).to(torch.int64) + 3  # the binade exponent (exact: quantum is a power of 2)
    count = torch.round(a_fin / quantum).to(torch.int64)  # half to even; a/quantum is exact
    # count is in [8, 16] for normals (16 carries into the next binade) and [0, 8] below them
    magnitude_byte = count + 8 * torch.clamp(e + bias - 1, min=0)
    value = count.to(torch.float64) * quantum
    fmt_max = FORMAT_MAX[dtype]
    negative = torch.signbit(v)
    if dtype == FN:
        max_byte = 0x7E
        magnitude_byte = torch.where(
            (value > fmt_max) | ~finite, torch.full_like(magnitude_byte, max_byte), magnitude_byte
        )
        out = magnitude_byte | torch.where(negative, 0x80, 0)
        out = torch.where(torch.isnan(v), torch.full_like(out, 0x7F), out)
    else:
        out = magnitude_byte | torch.where(negative & (magnitude_byte != 0), 0x80, 0)
        nan = torch.isnan(v) | ~finite | (value > fmt_max)
        out = torch.where(nan, torch.full_like(out, 0x80), out)
    return out.to(torch.uint8)


def is_nan_byte(b: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    b = b.to(torch.int64)
    return (b == 0x80) if dtype == FNUZ else ((b & 0x7F) == 0x7F)


def fp8_value(b: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """float64 value of fp8 bytes from the bit fields (NaN bytes give NaN)."""
    b = b.to(torch.int64)
    bias = BIAS[dtype]
    e_field, mant = (b >> 3) & 0xF, b & 0x7
    normal = (8 + mant).to(torch.float64) * torch.pow(2.0, (e_field - bias - 3).to(torch.float64))
    sub = mant.to(torch.float64) * min_subnormal(dtype)
    mag = torch.where(e_field == 0, sub, normal)
    val = torch.where((b & 0x80) != 0, -mag, mag)
    return torch.where(is_nan_byte(b, dtype), torch.full_like(val, math.nan), val)


# --- group quant -----------------------------------------------------------------------------------


def quant_rows(
    y: torch.Tensor, group: int, dtype: torch.dtype, flavor: str
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(bytes uint8 (M, n), logical scale float64 (M, G), fp32 quotient before the cast float64 (M, n))."""
    m, n = y.shape
    g_count = n // group
    fmax = flavor_max(flavor, dtype)
    floor32 = f32s(GROUP_FLOOR[flavor])
    out = torch.empty((m, n), dtype=torch.uint8)
    scales = torch.empty((m, g_count), dtype=torch.float64)
    quotients = torch.empty((m, n), dtype=torch.float64)
    for i in range(m):
        for g in range(g_count):
            part = y[i, g * group : (g + 1) * group].to(torch.float64)
            magnitudes = part.abs()
            if flavor in AMAX_IGNORES_NAN:
                magnitudes = torch.where(torch.isnan(magnitudes), torch.zeros_like(magnitudes), magnitudes)
            amax = math.nan if bool(torch.isnan(magnitudes).any()) else max(float(magnitudes.max()), floor32)
            scale = f32s(amax * f32s(1.0 / fmax)) if flavor in TIMES_INVERSE_MAX else f32s(amax / fmax)
            if DIVIDES[flavor]:
                t = f32(part / scale)
            else:
                # 1/0 is +inf in IEEE arithmetic (aiter-triton's all-zero groups); Python's float raises
                t = f32(part * f32s(1.0 / scale if scale else math.inf))
            if CLAMPS[flavor]:
                t = t.clamp(-fmax, fmax)
            scales[i, g] = scale
            quotients[i, g * group : (g + 1) * group] = t
            out[i, g * group : (g + 1) * group] = fp8_bytes(t, dtype)
    return out, scales, quotients


def fused_reference(
    q: torch.Tensor,
    q_weight: torch.Tensor,
    eps: float,
    group: int,
    dtype: torch.dtype,
    flavor: str,
    gemma: bool = False,
    residual: torch.Tensor | None = None,
    round_to: torch.dtype | None = None,
) -> dict[str, torch.Tensor]:
    """The whole q path. With `round_to`, y is rounded to that dtype before quantizing (unfused path)."""
    y, s = norm_rows(q, q_weight, eps, gemma, residual)
    y_quantized_from = y if round_to is None else y.to(torch.float32).to(round_to).to(torch.float64)
    data, scale, quotient = quant_rows(y_quantized_from, group, dtype, flavor)
    return {"y": y, "s": s, "data": data, "scale": scale, "quotient": quotient}


# --- assertions ------------------------------------------------------------------------------------


def assert_fp8_equal(actual: torch.Tensor, expected_bytes: torch.Tensor, dtype: torch.dtype, what: str = "q") -> None:
    """Bytes equal, except that any NaN byte matches any NaN byte (e4m3fn has two)."""
    assert actual.dtype == dtype, f"{what}: dtype {actual.dtype}, expected {dtype}"
    assert actual.shape == expected_bytes.shape, f"{what}: shape {tuple(actual.shape)} vs {tuple(expected_bytes.shape)}"
    got = actual.view(torch.uint8)
    got_nan, exp_nan = is_nan_byte(got, dtype), is_nan_byte(expected_bytes, dtype)
    assert torch.equal(got_nan, exp_nan), f"{what}: NaN positions differ in {int((got_nan != exp_nan).sum())} places"
    bad = (got != expected_bytes) & ~got_nan
    if bad.any():
        idx = tuple(bad.nonzero()[0].tolist())
        raise AssertionError(
            f"{what}: {int(bad.sum())} fp8 bytes differ; first at {idx}: got 0x{int(got[idx]):02x}, "
            f"expected 0x{int(expected_bytes[idx]):02x}"
        )


_INT_OF = {torch.float32: torch.int32, torch.bfloat16: torch.int16, torch.float16: torch.int16}


def assert_bits_equal(actual: torch.Tensor, expected: torch.Tensor, what: str) -> None:
    """`actual` equals `expected` (float64 values, rounded to actual's dtype) bit for bit; NaN matches NaN."""
    expected = expected.to(torch.float32).to(actual.dtype)
    assert actual.shape == expected.shape, f"{what}: shape {tuple(actual.shape)} vs {tuple(expected.shape)}"
    a_nan, e_nan = torch.isnan(actual), torch.isnan(expected)
    assert torch.equal(a_nan, e_nan), f"{what}: NaN positions differ"
    a_bits = torch.where(a_nan, 0, actual.contiguous().view(_INT_OF[actual.dtype]))
    e_bits = torch.where(e_nan, 0, expected.contiguous().view(_INT_OF[actual.dtype]))
    if not torch.equal(a_bits, e_bits):
        idx = tuple((a_bits != e_bits).nonzero()[0].tolist())
        raise AssertionError(
            f"{what}: {int((a_bits != e_bits).sum())} values differ; first at {idx}: "
            f"got {actual[idx].item()!r}, expected {expected[idx].item()!r}"
        )


def scale_memory_order(buffer: torch.Tensor) -> torch.Tensor:
    """The buffer's floats in memory order (what a raw-pointer kernel reads), from its storage."""
    storage = torch.empty(0, dtype=buffer.dtype).set_(buffer.untyped_storage())
    return storage[buffer.storage_offset() : buffer.storage_offset() + buffer.numel()].clone()


def conversion_probe_values(randoms: int, exponents: tuple[int, int]) -> torch.Tensor:
    """fp32 values that probe fp32 -> fp8 conversions: every finite fp8 value (both formats, times 1/2, 1
    and 2), its fp32 neighbours, the midpoints between them, `randoms` normal values scaled by 2^e with e
    drawn from [exponents), and the special cases."""
    codes = torch.arange(256, dtype=torch.int64).to(torch.uint8)
    grid = []
    for dtype in (FN, FNUZ):
        values = codes.view(dtype).float()
        values = values[torch.isfinite(values)]
        for factor in (0.5, 1.0, 2.0):
            v = values * factor
            grid += [
                v,
                torch.nextafter(v, torch.full_like(v, math.inf)),
                torch.nextafter(v, torch.full_like(v, -math.inf)),
            ]
    base = torch.cat(grid).sort().values
    gen = torch.Generator().manual_seed(0)
    rand = torch.randn(randoms, generator=gen) * torch.exp2(
        torch.randint(*exponents, (randoms,), generator=gen).float()
    )
    special = [0.0, -0.0, math.inf, -math.inf, math.nan, 1e30, -1e30, 232.0, -232.0, 247.9, 248.0, 464.0, 465.0]
    special += [1e-40, -1e-40, 3.4e38, -(2.0**-10), 2.0**-11, 1.5 * 2.0**-11]
    return torch.cat([base, (base[:-1] + base[1:]) / 2, rand, torch.tensor(special)])
