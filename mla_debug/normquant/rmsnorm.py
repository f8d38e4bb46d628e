"""RMSNorm in fp32, exactly as the reference defines it (docs/semantics.md §11), before any rounding to bf16 or fp8.

The rounding steps are fixed so that an independent fp32 emulation reproduces them bit for bit:

1. ``s = fp32(x) (+ fp32(residual))``   one fp32 add (x and residual convert exactly)
2. ``ms = fp32(sum(s*s) / n)``           squares of fp32 values are exact in float64; they are summed in
   float64 and rounded once to fp32, so the result does not depend on a reduction order (a kernel's
   fp32 tree reduction lands within a few fp32 ulps of it). Side effect: rows whose squares overflow
   fp32 (|s| > ~1.8e19) still normalize here where an fp32 kernel would get an infinite mean.
3. ``r = 1 / sqrt(ms + eps)``             three correctly rounded fp32 operations (eps read as fp32); a GPU
   ``rsqrtf`` is an approximation within 2 ulps of this. torch's CPU ``sqrt`` is NOT correctly rounded
   (vectorized, within an ulp, in fp32 and float64 alike), so `sqrt_rn` corrects the root exactly.
4. ``y = (s * r) * w``                    two fp32 multiplies; ``w`` is read as fp32, and with gemma_norm
   replaced by ``fp32(1 + w)``
"""

from __future__ import annotations

import math

import torch


def sqrt_rn(v: torch.Tensor) -> torch.Tensor:
    """Correctly rounded (to nearest) fp32 square root of fp32 values, on any device.

    The float64 root rounded to fp32 is the starting candidate (within one fp32 ulp of the exact root
    even where torch's float64 sqrt is not correctly rounded); `nearest_root` makes it exact.
    """
    return nearest_root(v, torch.sqrt(v.to(torch.float64)).to(torch.float32))


def nearest_root(v: torch.Tensor, candidate: torch.Tensor) -> torch.Tensor:
    """The fp32 value nearest to sqrt(v), given a `candidate` within one fp32 ulp of it.

    A midpoint between two adjacent fp32 values has 25 significant bits, so its square is exact in
    float64 and compares with `v` exactly; one step towards the side the exact root lies on fixes the
    candidate. No fp32 value is the square of a midpoint, so there are no ties.
    """
    v64 = v.to(torch.float64)
    up = torch.nextafter(candidate, torch.full_like(candidate, math.inf))
    down = torch.nextafter(candidate, torch.zeros_like(candidate))
    mid_up = (candidate.to(torch.float64) + up.to(torch.float64)) / 2
    mid_down = (candidate.to(torch.float64) + down.to(torch.float64)) / 2
    fixed = torch.where(mid_up * mid_up < v64, up, candidate)
    fixed = torch.where(mid_down * mid_down > v64, down, fixed)
    # Zero, Inf and NaN roots are exact already (and the midpoint test would step 0 below zero).
    return torch.where(torch.isfinite(v) & (v > 0), fixed, torch.sqrt(v))


def rmsnorm_fp32(
    x: torch.Tensor,
    weight: torch.Tensor,
    eps: float,
    gemma_norm: bool = False,
    residual: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Normalize each row of `x` (M, n) in fp32; returns ``(y, s)``, both fp32 (M, n).

    ``s`` is the normalized input (``x + residual`` when a residual is given); callers round it to the
    storage dtype for the residual output. Inputs are assumed validated (see ``validate_inputs``).

    >>> y, _ = rmsnorm_fp32(torch.randn(4, 256, dtype=torch.bfloat16), torch.ones(256), 1e-6)
    """
    s = x.to(torch.float32)
    if residual is not None:
        s = s + residual.to(torch.float32)
    n = s.shape[-1]
    s64 = s.to(torch.float64)
    mean_sq = ((s64 * s64).sum(dim=-1, keepdim=True) / n).to(torch.float32)
    # A tensor eps, so the add is an fp32 add of fp32 operands on every device and no scalar-promotion
    # rule can change it.
    eps32 = torch.tensor(eps, dtype=torch.float32, device=s.device)
    r = torch.reciprocal(sqrt_rn(mean_sq + eps32))
    w = weight.to(torch.float32)
    if gemma_norm:
        w = w + torch.ones_like(w)
    return (s * r) * w, s
