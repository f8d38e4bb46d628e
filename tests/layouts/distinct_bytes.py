"""Weights whose bytes make layout forensics unambiguous, for the forensics tests."""

from __future__ import annotations

import torch

from mla_debug.layouts import shuffle_weight

FP8 = torch.float8_e4m3fn


def distinct_weight(shape: tuple[int, ...], dtype: torch.dtype = FP8, seed: int = 0) -> torch.Tensor:
    """Random bytes whose 16-byte units all differ (a unit index in the first two bytes), so two
    different shuffles can never give the same bytes by accident."""
    *lead, n, k = shape
    size = torch.empty((), dtype=dtype).element_size()
    raw = torch.randint(0, 256, (*lead, n, k * size), dtype=torch.uint8, generator=torch.Generator().manual_seed(seed))
    units = raw.view(-1, 16)
    index = torch.arange(units.shape[0])
    units[:, 0], units[:, 1] = (index & 0xFF).to(torch.uint8), (index >> 8).to(torch.uint8)
    return raw.view(dtype)


def shuffled(w: torch.Tensor, layout: tuple[int, int], times: int) -> torch.Tensor:
    for _ in range(times):
        w = shuffle_weight(w, layout)
    return w
