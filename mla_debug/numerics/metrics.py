"""Error metrics between an output and its reference, computed in float64 so the metric adds no error.

All take ``(actual, reference)``; relative measures are relative to the reference. Non-finite values
are not hidden: any NaN makes the norm-based metrics NaN, and `nonfinite` counts them.
"""

from __future__ import annotations

import math

import torch

from .._checks import describe
from .formats import Fp8Format, fp8_format


def _pair(actual: torch.Tensor, reference: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    if actual.shape != reference.shape:
        raise ValueError(f"metrics: actual {describe(actual)} and reference {describe(reference)} differ in shape")
    return actual.detach().to(torch.float64).cpu().flatten(), reference.detach().to(torch.float64).cpu().flatten()


def rel_l2(actual: torch.Tensor, reference: torch.Tensor) -> float:
    """||actual - reference|| / ||reference|| (inf when the reference is zero and actual is not)."""
    a, r = _pair(actual, reference)
    diff = torch.linalg.vector_norm(a - r).item()
    ref = torch.linalg.vector_norm(r).item()
    if ref == 0.0:
        return 0.0 if diff == 0.0 else math.inf
    return diff / ref


def max_abs(actual: torch.Tensor, reference: torch.Tensor) -> float:
    a, r = _pair(actual, reference)
    if a.numel() == 0:
        return 0.0
    return (a - r).abs().max().item()


def cosine(actual: torch.Tensor, reference: torch.Tensor) -> float:
    """Cosine similarity; 1.0 when both are zero."""
    a, r = _pair(actual, reference)
    na, nr = torch.linalg.vector_norm(a).item(), torch.linalg.vector_norm(r).item()
    if na == 0.0 and nr == 0.0:
        return 1.0
    if na == 0.0 or nr == 0.0:
        return 0.0
    return (a @ r).item() / (na * nr)


def snr_db(actual: torch.Tensor, reference: torch.Tensor) -> float:
    """Signal-to-noise ratio 10*log10(|ref|^2 / |actual - ref|^2) in dB; inf for an exact match."""
    a, r = _pair(actual, reference)
    noise = torch.sum((a - r) ** 2).item()
    signal = torch.sum(r**2).item()
    if noise == 0.0:
        return math.inf
    if signal == 0.0:
        return -math.inf
    ratio = signal / noise
    if ratio == 0.0 or math.isinf(ratio):
        # infinite noise (an Inf in actual) or signal, or a ratio outside float64's range: log10(0)
        # would raise, so take the logarithms separately (-inf, +inf, or NaN for Inf/Inf)
        return 10.0 * (math.log10(signal) - math.log10(noise))
    return 10.0 * math.log10(ratio)


def deepgemm_diff(actual: torch.Tensor, reference: torch.Tensor) -> float:
    """DeepGEMM's ``calc_diff``: 1 - 2<x,y> / (|x|^2 + |y|^2); 0 for identical tensors."""
    a, r = _pair(actual, reference)
    denominator = (a * a + r * r).sum().item()
    if denominator == 0.0:
        return 0.0
    return 1.0 - 2.0 * (a * r).sum().item() / denominator


def fp8_ulp_distance(actual: torch.Tensor, reference: torch.Tensor) -> torch.Tensor:
    """Per-element distance in fp8 units in the last place (float32; NaN where either side is NaN).

    Both tensors must hold the same fp8 format; +0 and -0 are 0 apart.
    """
    if actual.dtype != reference.dtype:
        raise TypeError(f"fp8_ulp_distance: dtypes differ ({actual.dtype} vs {reference.dtype})")
    if actual.shape != reference.shape:
        raise ValueError(f"fp8_ulp_distance: shapes differ ({tuple(actual.shape)} vs {tuple(reference.shape)})")
    fmt: Fp8Format = fp8_format(actual.dtype)
    distance = (fmt.ordinal(actual) - fmt.ordinal(reference)).abs().to(torch.float32)
    nan = fmt.is_nan_bytes(actual) | fmt.is_nan_bytes(reference)
    return torch.where(nan, torch.full_like(distance, math.nan), distance)


def nonfinite(t: torch.Tensor) -> int:
    """Number of NaN or Inf elements."""
    if t.dtype in (torch.float8_e4m3fn, torch.float8_e4m3fnuz):
        return int(fp8_format(t.dtype).is_nan_bytes(t).sum())
    return int((~torch.isfinite(t)).sum()) if t.is_floating_point() else 0


def error_metrics(actual: torch.Tensor, reference: torch.Tensor) -> dict[str, float]:
    """All scalar metrics at once: rel_l2, max_abs, cosine, snr_db, deepgemm_diff, nonfinite."""
    return {
        "rel_l2": rel_l2(actual, reference),
        "max_abs": max_abs(actual, reference),
        "cosine": cosine(actual, reference),
        "snr_db": snr_db(actual, reference),
        "deepgemm_diff": deepgemm_diff(actual, reference),
        "nonfinite": float(nonfinite(actual)),
    }
