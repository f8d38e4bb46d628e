"""Block-FP8 weights shaped like kv_b_proj for the absorbed-weight tests (model and engine checks)."""

from __future__ import annotations

import torch

import mla_debug as md


def block_weight(n: int, k: int, fmt, seed: int, spread: float = 4.0, zero: bool = False) -> md.QuantizedWeight:
    """A 128x128-block FP8 weight whose block scales span `spread` octaves (a zero weight if asked)."""
    gen = torch.Generator().manual_seed(seed)
    values = torch.randn(n, k, generator=gen) * 0.02
    values *= torch.exp2(torch.rand(n // 128, 1, k // 128, 1, generator=gen) * spread).repeat(1, 128, 1, 128).view(n, k)
    if zero:
        values.zero_()
    return md.layouts.quantize_blocks(values, fmt=fmt, flavor="aiter")
