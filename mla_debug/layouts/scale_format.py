"""How a block scale is represented in memory, and the ways a reader can take one representation for another.

A 1x128 / 128x128 block scale reaches a GEMM in one of three representations:

- **fp32 values** (``torch.float32``): the scale itself, any positive number.
- **E8M0 codes** (``torch.uint8`` or ``torch.float8_e8m0fnu``): one byte per scale, the biased exponent of a
  power of two, value ``2^(code - 127)``; code 0xFF is NaN (OCP Microscaling Formats (MX) v1.0, E8M0). The
  form DeepSeek-V4 checkpoints store their block scales in.
- **packed ue8m0 words** (``torch.int32``): four E8M0 codes per little-endian int32, group 4j + b in byte
  b of word j - DeepGEMM's Blackwell form (`tma_scales.pack_ue8m0` lays the words out TMA-aligned).

Only powers of two survive the trip from fp32 to a code: a packer keeps the exponent field and drops the
mantissa, so a scale that was not rounded up first is read as the power of two *below* it. DeepGEMM's
CUDA packers (``transpose_and_pack_fp32_into_ue8m0`` / ``pack_fp32_into_ue8m0`` before DeepGEMM PR #337,
2026-05) did not even mask: they OR the four shifted fp32 words together (``v0 >> 23 | v1 >> 15 | v2 >> 7 |
v3 << 1``), so the mantissa bits of a non-power-of-two scale leak into the neighbouring exponent bytes
(four copies of 0.006975, exponent 0x77, pack to 0x77ffffff, not 0x77777777: three of the four scales
read as NaN).

The misreads modelled here are each one incident's contract (see ``data/incidents``): codes copied into
an fp32 parameter as numbers (code 120, meaning 2^-7, read as 120.0), packed words read as fp32 values,
non-power-of-two scales truncated by a packer, and the unmasked packer's leak. A grouped GEMM's
per-(token, group) scales written in one flattening order and read in the other is the last one.
"""

from __future__ import annotations

import torch

from .._checks import describe, require_ndim, require_tensor

E8M0_BIAS = 127
E8M0_NAN = 0xFF
CODES_PER_WORD = 4
_MASK32 = 0xFFFFFFFF
_CODE0_BITS = 0x00400000  # 2^-127 as a float32 (subnormal): what code 0 means
_CODE_DTYPES = (torch.uint8,) + ((torch.float8_e8m0fnu,) if hasattr(torch, "float8_e8m0fnu") else ())


def _require_fp32(name: str, scale: torch.Tensor) -> None:
    require_tensor(name, scale)
    if scale.dtype != torch.float32:
        raise TypeError(f"{name}: {describe(scale)} must be float32 scale values")


def is_power_of_two(scale: torch.Tensor, name: str = "scale") -> torch.Tensor:
    """Elementwise: a value an E8M0 code holds exactly - a positive normal float32 with a zero mantissa, or
    2^-127 (code 0, a float32 subnormal)."""
    _require_fp32(name, scale)
    bits = scale.contiguous().view(torch.int32)
    normal = (scale > 0) & torch.isfinite(scale) & ((bits & 0x007FFFFF) == 0) & ((bits >> 23) & 0xFF != 0)
    return normal | (bits == _CODE0_BITS)


def e8m0_codes(scale: torch.Tensor, name: str = "scale") -> torch.Tensor:
    """The E8M0 code (uint8) of each power-of-two fp32 scale; refuses any other value, since a code cannot
    hold it (round it up first: `numerics.quantize.ceil_pow2`)."""
    ok = is_power_of_two(scale, name)
    if not bool(ok.all()):
        bad = scale[~ok]
        raise ValueError(
            f"{name}: {describe(scale)} holds {bad.numel()} value(s) that are not positive powers of two "
            f"(first {float(bad.flatten()[0])!r}); an E8M0 code holds only 2^(code - 127)"
        )
    return ((scale.contiguous().view(torch.int32) >> 23) & 0xFF).to(torch.uint8)  # 2^-127 -> exponent 0


def as_codes(codes: torch.Tensor, name: str = "codes") -> torch.Tensor:
    """E8M0 codes as uint8, from uint8 or float8_e8m0fnu storage (the byte is the code in both)."""
    require_tensor(name, codes)
    if codes.dtype not in _CODE_DTYPES:
        allowed = ", ".join(str(d) for d in _CODE_DTYPES)
        raise TypeError(f"{name}: {describe(codes)} is not E8M0 codes; codes are stored as {allowed}")
    return codes.contiguous().view(torch.uint8)


def e8m0_values(codes: torch.Tensor, name: str = "codes") -> torch.Tensor:
    """What E8M0 codes mean: fp32 2^(code - 127), NaN for 0xFF. Code 0 (2^-127) is a float32 subnormal,
    built from its bit pattern so no arithmetic flushes it."""
    c = as_codes(codes, name).to(torch.int32)
    normal = (c << 23).view(torch.float32)
    subnormal = torch.full_like(c, _CODE0_BITS).view(torch.float32)
    values = torch.where(c == 0, subnormal, normal)
    return torch.where(c == E8M0_NAN, torch.full_like(values, float("nan")), values)


def codes_read_as_values(codes: torch.Tensor, name: str = "codes") -> torch.Tensor:
    """The misread of vLLM issue #43416: each code byte copied into a float32 parameter as a number
    (code 120, which means 2^-7, becomes 120.0)."""
    return as_codes(codes, name).to(torch.float32)


def truncate_to_power_of_two(scale: torch.Tensor, name: str = "scale") -> torch.Tensor:
    """What an exponent-only (masked) ue8m0 conversion keeps of each positive fp32 scale: its exponent field
    with the mantissa cleared, i.e. the power of two at or below it (NaN and Inf keep their all-ones
    exponent and read as NaN, as the code 0xFF does)."""
    _require_fp32(name, scale)
    return e8m0_values(((scale.contiguous().view(torch.int32) >> 23) & 0xFF).to(torch.uint8), name)


def _uint32(scale: torch.Tensor) -> torch.Tensor:
    return scale.contiguous().view(torch.int32).to(torch.int64) & _MASK32


def _to_int32(words: torch.Tensor) -> torch.Tensor:
    words = words & _MASK32
    return torch.where(words >= 2**31, words - 2**32, words).to(torch.int32)


def pack_exponents(scale: torch.Tensor, masked: bool = True, name: str = "scale") -> torch.Tensor:
    """(MN, G) fp32 scales -> (MN, ceil(G/4)) int32 words, four exponent bytes per word (group 4j + b in byte
    b; missing groups are zero bytes), in logical row-major order.

    ``masked`` keeps each exponent byte alone (``(bits >> 23) & 0xFF``): DeepGEMM's torch packer and its CUDA
    packers after PR #337. ``masked=False`` is the CUDA packers before it, ``v0 >> 23 | v1 >> 15 | v2 >> 7 |
    v3 << 1`` on the raw fp32 words, where the mantissa of a non-power-of-two scale spills into the bytes of
    its lower neighbours. For powers of two the two agree bit for bit."""
    _require_fp32(name, scale)
    require_ndim(name, scale, 2)
    mn, groups = scale.shape
    words_per_row = -(-groups // CODES_PER_WORD)
    padded = torch.zeros((mn, words_per_row * CODES_PER_WORD), dtype=torch.int64, device=scale.device)
    padded[:, :groups] = _uint32(scale)
    quads = padded.view(mn, words_per_row, CODES_PER_WORD)
    if masked:
        exponents = (quads >> 23) & 0xFF
        words = exponents[..., 0] | exponents[..., 1] << 8 | exponents[..., 2] << 16 | exponents[..., 3] << 24
    else:
        v = quads
        words = (v[..., 0] >> 23) | (v[..., 1] >> 15) | (v[..., 2] >> 7) | (v[..., 3] << 1)
    return _to_int32(words)


def unpack_exponents(words: torch.Tensor, groups: int, name: str = "packed scale") -> torch.Tensor:
    """(MN, ceil(G/4)) int32 words (logical row-major; read by strides) -> the (MN, `groups`) fp32 values
    their bytes code for, E8M0 rules (0xFF is NaN)."""
    require_tensor(name, words)
    require_ndim(name, words, 2)
    if words.dtype != torch.int32:
        raise TypeError(f"{name}: {describe(words)} must be int32 (four E8M0 codes per word)")
    mn, per_row = words.shape
    if -(-groups // CODES_PER_WORD) != per_row:
        raise ValueError(
            f"{name}: {describe(words)} holds {per_row} words per row; {groups} groups pack into "
            f"{-(-groups // CODES_PER_WORD)}"
        )
    rows = torch.empty((mn, per_row), dtype=torch.int32, device=words.device).copy_(words)
    codes = rows.view(torch.uint8).view(mn, per_row * CODES_PER_WORD)[:, :groups]
    return e8m0_values(codes, name)


def words_read_as_fp32(words: torch.Tensor, name: str = "packed scale") -> torch.Tensor:
    """The misread of packed ue8m0 words by a reader expecting fp32 values: each int32's bits taken as one
    float32 (vLLM PR #48052: an SM120 einsum handed the SM100 packed scales)."""
    require_tensor(name, words)
    if words.dtype != torch.int32:
        raise TypeError(f"{name}: {describe(words)} must be int32 packed words")
    return torch.empty(words.shape, dtype=torch.int32, device=words.device).copy_(words).view(torch.float32)


def packed_words_read_as_scales(words: torch.Tensor, groups: int, name: str = "packed scale") -> torch.Tensor:
    """The (MN, `groups`) fp32 scales a reader expecting fp32 takes from a packed (MN, ceil(G/4)) int32
    buffer, modelled as reading by the same (row, group) index: group g < ceil(G/4) of a row reads word g's
    bits as a float32 (four codes taken for one number: no scale at all); groups past the packed words read
    memory that holds no scale of this tensor, NaN here. Which bytes a real kernel reads past the words is
    not known, so only the outcome's kind (no finite, scale-like value) is claimed for them."""
    as_float = words_read_as_fp32(words, name)
    mn, per_row = as_float.shape
    out = torch.full((mn, groups), float("nan"), dtype=torch.float32, device=words.device)
    kept = min(per_row, groups)
    out[:, :kept] = as_float[:, :kept]
    return out


def grouped_scale_read(scale: torch.Tensor, read_as: str, name: str = "grouped scale") -> torch.Tensor:
    """A (T, G, k) per-(token, group) scale as a grouped GEMM reads it when its T * G rows were written in
    token-major order (row t * G + g, what quantizing ``o.reshape(T * G, D)`` gives): ``read_as``
    "token-major" reads each row where it was written; "group-major" takes row g * T + t for (t, g), as a
    reader that expects the groups' rows one batch after the other does (SGLang issue #29038)."""
    require_tensor(name, scale)
    require_ndim(name, scale, 3)
    if read_as not in ("token-major", "group-major"):
        raise ValueError(f"{name}: read_as {read_as!r} is not 'token-major' or 'group-major'")
    if read_as == "token-major":
        return scale
    t, g, k = scale.shape
    flat = scale.reshape(t * g, k)
    index = torch.arange(g).view(1, g) * t + torch.arange(t).view(t, 1)
    return flat[index.reshape(-1)].view(t, g, k)
