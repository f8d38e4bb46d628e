"""The VNNI packing vLLM's CPU build gives FP8 and bf16 weights for its AMX kernels, and its inverse.

vLLM 0.32's CPU kernels (``torch.ops._C.convert_weight_packed``, called at load by
model_executor/kernels/linear/scaled_mm/cpu.py `CPUFp8BlockScaledMMKernel.process_weights_after_loading`
and by v1/attention/backends/mla/amx_mla.py `AMXMLAImpl.process_weights_after_loading`) re-lay a weight
(..., N, K) out in place of the plain one, same shape and dtype, so nothing downstream can tell a packed
weight from a plain one:

- rows are cut into bands of 32 (``block_size_n()``; the last band may hold 16);
- inside a band of n rows, K is cut into pairs (VNNI-2: two 16-bit lanes of one 32-bit dot-product lane,
  which the kernels keep for FP8 too, since they widen FP8 to bf16 pairwise) and the band is stored as
  (K/2, n, 2): pair k of row r lands at (k, r).

The packed bytes are the checkpoint's bytes permuted, nothing else (checked byte for byte against the
released op by the engine tier). The op's own limits are N a multiple of 16 and K a multiple of 32; it
takes 1- and 2-byte elements in pairs (FP8 e4m3 and bf16/fp16; int8 weights get another packing, not
modelled here).
"""

from __future__ import annotations

import torch

from .._checks import describe, require_min_ndim, require_multiple, require_tensor

BAND_ROWS = 32  # block_size_n() of the kernels: rows per packed band
PAIR = 2  # VNNI-2: K elements per 32-bit lane
N_MULTIPLE = 16  # the op refuses other N ("invalid weight out features")
K_MULTIPLE = 32  # the op refuses other K ("invalid weight input features")
PACKED_DTYPES = (torch.float8_e4m3fn, torch.bfloat16, torch.float16)


def _check(w: torch.Tensor, name: str, what: str) -> None:
    require_tensor(name, w)
    require_min_ndim(name, w, 2)
    if w.dtype not in PACKED_DTYPES:
        allowed = ", ".join(str(d) for d in PACKED_DTYPES)
        raise TypeError(f"{name}: {describe(w)} has the wrong dtype; {what} packs {allowed} in pairs along K")
    require_multiple(name, w, "N", w.shape[-2], N_MULTIPLE, f"{what} (rows in bands of {BAND_ROWS} or 16)")
    require_multiple(name, w, "K", w.shape[-1], K_MULTIPLE, what)


def _bands(n: int) -> list[tuple[int, int]]:
    """(first row, rows) of each band of a weight with n rows."""
    return [(start, min(BAND_ROWS, n - start)) for start in range(0, n, BAND_ROWS)]


def _bits(w: torch.Tensor) -> torch.Tensor:
    """Same bytes under an integer dtype, so every dtype (fp8 included) permutes on every device."""
    return w.view({1: torch.uint8, 2: torch.int16}[w.element_size()])


def vnni_pack(w: torch.Tensor, name: str = "weight") -> torch.Tensor:
    """Pack `w` (..., N, K) the way ``convert_weight_packed`` does; leading dims are a batch. Returns a
    new contiguous tensor of the same shape and dtype."""
    _check(w, name, "vnni_pack")
    n, k = w.shape[-2], w.shape[-1]
    bits = _bits(w).reshape(-1, n, k)
    out = torch.empty_like(bits)
    for start, rows in _bands(n):
        band = bits[:, start : start + rows].reshape(-1, rows, k // PAIR, PAIR)
        out[:, start : start + rows] = band.permute(0, 2, 1, 3).reshape(-1, rows, k)
    return out.view(w.shape).view(w.dtype)


def vnni_unpack(w: torch.Tensor, name: str = "weight") -> torch.Tensor:
    """Invert `vnni_pack`: the plain (..., N, K) weight whose packing `w` is."""
    _check(w, name, "vnni_unpack")
    n, k = w.shape[-2], w.shape[-1]
    bits = _bits(w).reshape(-1, n, k)
    out = torch.empty_like(bits)
    for start, rows in _bands(n):
        band = bits[:, start : start + rows].reshape(-1, k // PAIR, rows, PAIR)
        out[:, start : start + rows] = band.permute(0, 2, 1, 3).reshape(-1, rows, k)
    return out.view(w.shape).view(w.dtype)


def can_vnni_pack(shape: tuple[int, ...], dtype: torch.dtype) -> bool:
    """Whether a weight of this shape and dtype can be (or have been) VNNI-packed."""
    return (
        len(shape) >= 2 and dtype in PACKED_DTYPES and shape[-2] % N_MULTIPLE == 0 and shape[-1] % K_MULTIPLE == 0
    )
