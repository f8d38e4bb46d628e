"""Activations for the quantizer cross-checks: every kind of 1x128 group a quantizer treats specially.

Groups of ordinary data at magnitudes from 1e-7 to 1e3, all-zero groups (aiter's quantizers disagree on
their scale), groups whose amax is below 1e-10 (the floor of two of them), single outliers, exact
powers of two (amax/max exact), and bf16-representable values (what the layers feed in).
"""

from __future__ import annotations

import torch

GROUP = 128


def activations(m: int, groups: int, seed: int, dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    """(m, groups * 128) in `dtype`, every group drawn from one of the kinds above by the seed."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(m, groups, GROUP, generator=gen, dtype=torch.float64)
    kind = torch.randint(0, 6, (m, groups), generator=gen)
    magnitude = 10.0 ** (torch.rand(m, groups, 1, generator=gen, dtype=torch.float64) * 10 - 7)
    x = x * magnitude
    x[kind == 1] = 0.0  # all-zero group
    x[kind == 2] *= 1e-12 / magnitude[kind == 2]  # amax far below the 1e-10 floor
    outlier = kind == 3
    x[outlier, 0] = x[outlier].abs().amax(-1) * 300.0  # one value dominating its group
    x[kind == 4] = torch.sign(x[kind == 4]) * 2.0 ** torch.randint(-8, 8, x[kind == 4].shape, generator=gen)
    return x.reshape(m, groups * GROUP).to(dtype)


def scale_bits(scale: torch.Tensor) -> torch.Tensor:
    return scale.contiguous().view(torch.int32)
