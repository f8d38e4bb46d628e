"""RMSNorm as the serving engines compute it: fp32 statistics, result in the activation dtype."""

from __future__ import annotations

import torch


def rms_norm(x: torch.Tensor, weight: torch.Tensor | None, eps: float, out_dtype: torch.dtype | None = None):
    """x * rsqrt(mean(x^2) + eps) * weight over the last dim, in fp32; `weight=None` is unweighted."""
    xf = x.to(torch.float32)
    y = xf * torch.rsqrt(xf.pow(2).mean(dim=-1, keepdim=True) + eps)
    if weight is not None:
        y = y * weight.to(torch.float32)
    return y.to(out_dtype or x.dtype)
