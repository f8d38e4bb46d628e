"""The attention core in fp32: scaled dot products, a positional causal (optionally windowed) mask,
softmax, weighted sum. Kept simple and exact; the kernels under study are the GEMMs around it."""

from __future__ import annotations

import torch


def causal_mask(q_positions: torch.Tensor, k_positions: torch.Tensor, window: int | None = None) -> torch.Tensor:
    """(Mq, Mk) bool: key j is visible to query i when pos_j <= pos_i (and pos_i - pos_j < window)."""
    delta = q_positions.unsqueeze(1) - k_positions.unsqueeze(0)
    visible = delta >= 0
    if window:
        visible &= delta < window
    return visible


def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float, mask: torch.Tensor) -> torch.Tensor:
    """q (M, H, D), k (T, H, D) or shared (T, D), v (T, H, Dv) or shared (T, Dv) -> (M, H, Dv) in fp32.

    NaN/Inf in the inputs flow through to the output, where step stats show them.
    """
    qf, kf, vf = q.to(torch.float32), k.to(torch.float32), v.to(torch.float32)
    if kf.dim() == 2:
        scores = torch.einsum("mhd,td->hmt", qf, kf)
    else:
        scores = torch.einsum("mhd,thd->hmt", qf, kf)
    scores = scores * scale
    scores = scores.masked_fill(~mask.unsqueeze(0), float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    # A masked key's weight is exactly 0, but 0 * NaN is NaN: a non-finite value must reach only the
    # queries that see it (as in a real kernel, which never reads masked positions).
    finite = torch.isfinite(vf)
    clean = torch.where(finite, vf, torch.zeros_like(vf))
    if vf.dim() == 2:
        out = torch.einsum("hmt,td->mhd", weights, clean)
        bad_key = (~finite).any(dim=-1).to(torch.float32)  # (T,)
        poisoned = (mask.to(torch.float32) @ bad_key) > 0  # (M,)
        return out.masked_fill(poisoned.view(-1, 1, 1), float("nan"))
    out = torch.einsum("hmt,thd->mhd", weights, clean)
    bad_key = (~finite).any(dim=-1).to(torch.float32)  # (T, H)
    poisoned = (mask.to(torch.float32) @ bad_key) > 0  # (M, H)
    return out.masked_fill(poisoned.unsqueeze(-1), float("nan"))
