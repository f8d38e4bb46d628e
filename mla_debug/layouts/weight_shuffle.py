"""aiter's weight pre-shuffle for the preshuffled ("bpreshuffle") GEMMs, its inverse, and its period.

Layout (IN, IK): in each band of IN rows, regard the band as an IN x U matrix of 16-byte units
(U = K * element_size / 16) and store it transposed (U x IN). The result has the same shape and dtype
as the input, so nothing downstream can tell a shuffled weight from a plain one (docs/semantics.md §6).
Requirements: N % IN == 0 and K % (2 * IK) == 0 (elements). (16, 16) is the FP8 block-scale layout;
(32, 16) belongs to the int8 ASM GEMM.
"""

from __future__ import annotations

import torch

from .._checks import describe, require_min_ndim, require_multiple, require_tensor

ShuffleLayout = tuple[int, int]
LAYOUTS: tuple[ShuffleLayout, ...] = ((16, 16), (32, 16))
UNIT_BYTES = 16


def _geometry(w: torch.Tensor, layout: ShuffleLayout, name: str) -> tuple[int, int, int]:
    """(rows per band, elements per K block, elements per 16-byte unit), after validating `w`."""
    require_tensor(name, w)
    require_min_ndim(name, w, 2)
    if tuple(layout) not in LAYOUTS:
        raise ValueError(f"{name}: shuffle layout {tuple(layout)} is not one of {list(LAYOUTS)}")
    size = w.element_size()
    if size not in (1, 2, 4):
        raise TypeError(f"{name}: {describe(w)} has {size}-byte elements; shuffles take 1, 2 or 4-byte elements")
    band, ik = layout
    k_block = 2 * ik
    unit = UNIT_BYTES // size
    n, k = w.shape[-2], w.shape[-1]
    require_multiple(name, w, "N", n, band, f"shuffle_weight{tuple(layout)}")
    require_multiple(name, w, "K", k, k_block, f"shuffle_weight{tuple(layout)}")
    return band, k_block, unit


def _as_bits(w: torch.Tensor) -> torch.Tensor:
    """Same bytes under an integer dtype, so every dtype (fp8 included) permutes on every device."""
    bits = {1: torch.uint8, 2: torch.int16, 4: torch.int32}[w.element_size()]
    return w.view(bits)


def pad_k(w: torch.Tensor, multiple: int, name: str = "weight") -> torch.Tensor:
    """Zero-pad the last dimension up to a multiple of `multiple` (a no-op when already aligned)."""
    if multiple <= 0:
        raise ValueError(f"{name}: pad_k_to={multiple} must be positive")
    k = w.shape[-1]
    extra = (-k) % multiple
    if extra == 0:
        return w
    bits = _as_bits(w)
    padded = torch.zeros((*w.shape[:-1], k + extra), dtype=bits.dtype, device=w.device)
    padded[..., :k] = bits
    return padded.view(w.dtype)


def shuffle_weight(
    w: torch.Tensor, layout: ShuffleLayout = (16, 16), pad_k_to: int | None = None, name: str = "weight"
) -> torch.Tensor:
    """Pre-shuffle `w` (..., N, K) the way aiter's ``shuffle_weight`` does; leading dims are a batch.

    `pad_k_to` zero-pads K up to that multiple first (newer aiter), so the result is wider than `w`.
    """
    if pad_k_to is not None:
        require_tensor(name, w)
        w = pad_k(w, pad_k_to, name)
    band, k_block, unit = _geometry(w, layout, name)
    n, k = w.shape[-2], w.shape[-1]
    bits = _as_bits(w)
    view = bits.reshape(-1, n // band, band, k // k_block, k_block // unit, unit)
    shuffled = view.permute(0, 1, 3, 4, 2, 5).contiguous()
    return shuffled.view(w.shape).view(w.dtype)


def unshuffle_weight(
    w: torch.Tensor, layout: ShuffleLayout = (16, 16), k: int | None = None, name: str = "weight"
) -> torch.Tensor:
    """Invert `shuffle_weight` (aiter has no public inverse); `k` crops K padding added by `pad_k_to`."""
    band, k_block, unit = _geometry(w, layout, name)
    n, width = w.shape[-2], w.shape[-1]
    bits = _as_bits(w)
    view = bits.reshape(-1, n // band, width // k_block, k_block // unit, band, unit)
    plain = view.permute(0, 1, 4, 2, 3, 5).contiguous().view(w.shape).view(w.dtype)
    if k is not None:
        if not 0 < k <= width:
            raise ValueError(f"{name}: k={k} must be in 1..{width} to crop padding from {describe(w)}")
        plain = plain[..., :k].contiguous()
    return plain


def shuffle_period(k: int, element_size: int, layout: ShuffleLayout = (16, 16)) -> int:
    """How many shuffles of a K-wide weight give back the original bytes.

    Shuffling transposes each band's IN x U unit matrix, which moves unit i to i*IN mod (IN*U - 1);
    its period is the multiplicative order of IN modulo IN*U - 1. It is 2 (an involution) exactly when
    U == IN, i.e. a row of 256 bytes for (16, 16): fp8 K=256, bf16 K=128.
    """
    band = layout[0]
    units = k * element_size // UNIT_BYTES
    modulus = band * units - 1
    if modulus <= 1:
        return 1
    order, x = 1, band % modulus
    while x != 1:
        x = (x * band) % modulus
        order += 1
    return order


def is_involution(k: int, element_size: int, layout: ShuffleLayout = (16, 16)) -> bool:
    """True when shuffling twice restores the bytes (a double shuffle is then invisible)."""
    return shuffle_period(k, element_size, layout) <= 2
