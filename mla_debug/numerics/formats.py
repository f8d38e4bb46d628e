"""The two FP8 element formats that block-scaled kernels use, and their byte-level facts.

e4m3fn (OCP) is what gfx950 (MI350/MI355) and NVIDIA Hopper/Blackwell compute in; e4m3fnuz is what
gfx942 (MI300/MI308/MI325) computes in. Their bit patterns are not interchangeable: fnuz has exponent
bias 8 instead of 7, a single NaN (0x80), no negative zero and no infinities.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Fp8Format:
    """An FP8 element format: ``md.E4M3FN`` or ``md.E4M3FNUZ``.

    >>> md.E4M3FNUZ.max
    240.0
    """

    name: str
    dtype: torch.dtype
    max: float
    exponent_bias: int
    nan_bytes: tuple[int, ...]
    has_negative_zero: bool

    def __repr__(self) -> str:
        return f"md.{self.name.upper()}"

    def __str__(self) -> str:
        return self.name

    @property
    def min_subnormal(self) -> float:
        """Smallest positive value (2^(1 - bias - 3))."""
        return 2.0 ** (1 - self.exponent_bias - 3)

    def decode(self, data: torch.Tensor) -> torch.Tensor:
        """Exact float32 values of fp8 bytes.

        Every e4m3 value is exactly representable in bfloat16, and torch's fp8->bf16 conversion on
        the CPU is several times faster than fp8->fp32, so decode through bf16 (lossless).
        """
        if data.dtype != self.dtype:
            raise TypeError(f"decode: tensor of dtype {data.dtype} is not {self.name} ({self.dtype})")
        return data.to(torch.bfloat16).to(torch.float32)

    def ordinal(self, data: torch.Tensor) -> torch.Tensor:
        """Signed position of each value on the format's number line (int32); NaN bytes map to 0.

        Adjacent representable values differ by exactly 1, and +0/-0 share ordinal 0, so the ULP
        distance of two values is the difference of their ordinals.
        """
        b = data.view(torch.uint8).to(torch.int32)
        magnitude = b & 0x7F
        ordinal = torch.where((b & 0x80) != 0, -magnitude, magnitude)
        return torch.where(self.is_nan_bytes(data), torch.zeros_like(ordinal), ordinal)

    def is_nan_bytes(self, data: torch.Tensor) -> torch.Tensor:
        b = data.view(torch.uint8)
        mask = torch.zeros(b.shape, dtype=torch.bool, device=b.device)
        for nan in self.nan_bytes:
            mask |= b == nan
        return mask


E4M3FN = Fp8Format(
    name="e4m3fn",
    dtype=torch.float8_e4m3fn,
    max=448.0,
    exponent_bias=7,
    nan_bytes=(0x7F, 0xFF),
    has_negative_zero=True,
)

E4M3FNUZ = Fp8Format(
    name="e4m3fnuz",
    dtype=torch.float8_e4m3fnuz,
    max=240.0,
    exponent_bias=8,
    nan_bytes=(0x80,),
    has_negative_zero=False,
)

FORMATS: dict[str, Fp8Format] = {"e4m3fn": E4M3FN, "e4m3fnuz": E4M3FNUZ}

_ALIASES = {
    "fn": "e4m3fn",
    "ocp": "e4m3fn",
    "float8_e4m3fn": "e4m3fn",
    "torch.float8_e4m3fn": "e4m3fn",
    "fnuz": "e4m3fnuz",
    "float8_e4m3fnuz": "e4m3fnuz",
    "torch.float8_e4m3fnuz": "e4m3fnuz",
}


def fp8_format(spec: str | torch.dtype | Fp8Format) -> Fp8Format:
    """Look up a format by name ("e4m3fn", "fnuz", ...), torch dtype, or pass a format through."""
    if isinstance(spec, Fp8Format):
        return spec
    if isinstance(spec, torch.dtype):
        for fmt in FORMATS.values():
            if fmt.dtype == spec:
                return fmt
        raise ValueError(f"fp8_format: {spec} is not a supported fp8 dtype; valid: {sorted(FORMATS)}")
    if isinstance(spec, str):
        key = spec.strip().lower()
        key = _ALIASES.get(key, key)
        if key in FORMATS:
            return FORMATS[key]
        valid = sorted(FORMATS) + sorted(_ALIASES)
        raise ValueError(f"fp8_format: unknown format {spec!r}; valid names: {', '.join(valid)}")
    raise TypeError(f"fp8_format: expected a name, torch dtype or Fp8Format, got {type(spec).__name__}")


def format_of(t: torch.Tensor, name: str) -> Fp8Format:
    """The format of an fp8 tensor, or a TypeError naming the tensor."""
    for fmt in FORMATS.values():
        if fmt.dtype == t.dtype:
            return fmt
    raise TypeError(
        f"{name}: shape {tuple(t.shape)}, dtype {t.dtype} is not an fp8 tensor "
        f"(expected torch.float8_e4m3fn or torch.float8_e4m3fnuz)"
    )


def e4m3fn_to_e4m3fnuz(data: torch.Tensor, scale: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Reinterpret e4m3fn checkpoint bytes as e4m3fnuz, as vLLM does when loading on gfx942.

    The same bits mean half the value under fnuz's exponent bias 8, so the block scale doubles; 0x80
    (-0 in fn, NaN in fnuz) becomes +0. Exact for every finite value; fn's NaN bytes (0x7F, 0xFF) turn
    into +-240 (x2 = 480), as in vLLM - checkpoints hold no NaN weights.
    """
    if data.dtype != torch.float8_e4m3fn:
        raise TypeError(f"e4m3fn_to_e4m3fnuz: data has dtype {data.dtype}, expected torch.float8_e4m3fn")
    bits = data.view(torch.uint8).clone()
    bits[bits == 0x80] = 0
    return bits.view(torch.float8_e4m3fnuz), scale * 2.0
