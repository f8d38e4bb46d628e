"""Rotary position embedding as DeepSeek uses it: GPT-J style (interleaved pairs) with deepseek-yarn.

vLLM's DeepSeek models rotate interleaved pairs (x[2i], x[2i+1]) in place (``is_neox_style=False``).
transformers' ``apply_rotary_pos_emb_interleave`` returns the rotated pairs de-interleaved
([evens | odds]); q.k is the same, intermediates are permutations of these (SEMANTICS 7).
"""

from __future__ import annotations

import math

import torch

from .config import MLAConfig, RopeScaling


def _correction_dim(rotations: float, dim: int, base: float, max_positions: int) -> float:
    return (dim * math.log(max_positions / (rotations * 2 * math.pi))) / (2 * math.log(base))


def inverse_frequencies(dim: int, base: float, scaling: RopeScaling | None) -> torch.Tensor:
    """float32 (dim/2,) frequencies; under yarn, interpolated low frequencies blend into extrapolated
    high ones over the correction range [low, high] given by beta_fast / beta_slow."""
    powers = base ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim)
    extrapolated = 1.0 / powers
    if scaling is None or scaling.factor <= 1:
        return extrapolated
    interpolated = 1.0 / (scaling.factor * powers)
    low = math.floor(_correction_dim(scaling.beta_fast, dim, base, scaling.original_max_position_embeddings))
    high = math.ceil(_correction_dim(scaling.beta_slow, dim, base, scaling.original_max_position_embeddings))
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001  # avoid a zero-width ramp
    ramp = ((torch.arange(dim // 2, dtype=torch.float32) - low) / (high - low)).clamp(0, 1)
    extrapolation_weight = 1.0 - ramp
    return interpolated * (1 - extrapolation_weight) + extrapolated * extrapolation_weight


def cos_sin(cfg: MLAConfig, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(M, R/2) float32 cos and sin for integer positions, including yarn's attention factor."""
    inv_freq = inverse_frequencies(cfg.qk_rope_head_dim, cfg.rope_theta, cfg.rope_scaling)
    angles = positions.to(torch.float32).unsqueeze(-1) * inv_freq.to(positions.device)
    factor = cfg.rope_scaling.attention_factor if cfg.rope_scaling is not None else 1.0
    return torch.cos(angles) * factor, torch.sin(angles) * factor


def rotate_interleaved(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, inverse: bool = False) -> torch.Tensor:
    """Rotate interleaved pairs of the last dim of x (..., M, [heads,] R) in fp32; returns x's dtype.

    cos/sin are (M, R/2); for a head dimension between M and R they broadcast over heads.
    `inverse` rotates by -angle (DeepSeek-V4 undoes RoPE on the attention output's rope slice).
    """
    pairs = x.to(torch.float32).unflatten(-1, (-1, 2))
    even, odd = pairs[..., 0], pairs[..., 1]
    while cos.dim() < even.dim():
        cos, sin = cos.unsqueeze(-2), sin.unsqueeze(-2)
    if inverse:
        sin = -sin
    rotated = torch.stack((even * cos - odd * sin, odd * cos + even * sin), dim=-1)
    return rotated.flatten(-2).to(x.dtype)
