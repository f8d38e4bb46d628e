"""Rotary position embedding as DeepSeek-style checkpoints use it: yarn-scaled frequencies, and one of two
pairings of the R rope dimensions.

- interleaved (GPT-J, ``rope_interleave: true`` - DeepSeek's convention, and the default when the key is
  absent): dimension pairs (x[2i], x[2i+1]) rotate by frequency i. vLLM's DeepSeek models rotate them in
  place (``is_neox_style=False``); transformers' ``apply_rotary_pos_emb_interleave`` returns the rotated
  pairs de-interleaved ([evens | odds]). q.k is the same; intermediates are permutations (docs/semantics.md §9).
- halves (NeoX, ``rope_interleave: false``, which transformers 5 can write): pairs (x[i], x[i + R/2])
  rotate by frequency i, in place - transformers' ``apply_rotary_pos_emb`` with ``rotate_half``, SGLang's
  ``is_neox_style=True``. No permutation: every intermediate equals transformers'.

The frequencies follow transformers 5.24's ``_compute_yarn_parameters`` exactly (`RopeScaling` says
which field does what), including ``truncate`` and the ``beta_* or default`` rule.
"""

from __future__ import annotations

import math

import torch

from .config import MLAConfig
from .rope_scaling import RopeScaling


def _correction_dim(rotations: float, dim: int, base: float, max_positions: int) -> float:
    return (dim * math.log(max_positions / (rotations * 2 * math.pi))) / (2 * math.log(base))


def correction_range(dim: int, base: float, scaling: RopeScaling) -> tuple[float, float]:
    """The [low, high] dimension range over which yarn blends interpolated into extrapolated frequencies:
    floored/ceiled to whole dimensions unless ``truncate`` is False, clamped to [0, dim - 1]."""
    beta_fast, beta_slow = scaling.correction_betas
    low = _correction_dim(beta_fast, dim, base, scaling.original_max_position_embeddings)
    high = _correction_dim(beta_slow, dim, base, scaling.original_max_position_embeddings)
    if scaling.truncate:
        low, high = math.floor(low), math.ceil(high)
    return max(low, 0), min(high, dim - 1)


def inverse_frequencies(dim: int, base: float, scaling: RopeScaling | None) -> torch.Tensor:
    """float32 (dim/2,) frequencies; under yarn, interpolated low frequencies blend into extrapolated
    high ones over the correction range given by beta_fast / beta_slow (`correction_range`)."""
    powers = base ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim)
    extrapolated = 1.0 / powers
    if scaling is None:
        return extrapolated
    interpolated = 1.0 / (scaling.factor * powers)
    low, high = correction_range(dim, base, scaling)
    if low == high:
        high += 0.001  # avoid a zero-width ramp
    ramp = ((torch.arange(dim // 2, dtype=torch.float32) - low) / (high - low)).clamp(0, 1)
    extrapolation_weight = 1.0 - ramp
    return interpolated * (1 - extrapolation_weight) + extrapolated * extrapolation_weight


def cos_sin(cfg: MLAConfig, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(M, R/2) float32 cos and sin for integer positions, including yarn's cos/sin multiplier."""
    inv_freq = inverse_frequencies(cfg.qk_rope_head_dim, cfg.rope_theta, cfg.rope_scaling)
    angles = positions.to(torch.float32).unsqueeze(-1) * inv_freq.to(positions.device)
    factor = cfg.rope_scaling.cos_sin_scale if cfg.rope_scaling is not None else 1.0
    return torch.cos(angles) * factor, torch.sin(angles) * factor


def _broadcast(cos: torch.Tensor, sin: torch.Tensor, like: torch.Tensor, inverse: bool):
    while cos.dim() < like.dim():
        cos, sin = cos.unsqueeze(-2), sin.unsqueeze(-2)
    return cos, (-sin if inverse else sin)


def rotate_interleaved(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, inverse: bool = False) -> torch.Tensor:
    """Rotate interleaved pairs (x[2i], x[2i+1]) of the last dim of x (..., M, [heads,] R) in fp32, in
    place of the pair; returns x's dtype.

    cos/sin are (M, R/2); for a head dimension between M and R they broadcast over heads.
    `inverse` rotates by -angle (DeepSeek-V4 undoes RoPE on the attention output's rope slice).
    """
    pairs = x.to(torch.float32).unflatten(-1, (-1, 2))
    even, odd = pairs[..., 0], pairs[..., 1]
    cos, sin = _broadcast(cos, sin, even, inverse)
    rotated = torch.stack((even * cos - odd * sin, odd * cos + even * sin), dim=-1)
    return rotated.flatten(-2).to(x.dtype)


def rotate_halves(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, inverse: bool = False) -> torch.Tensor:
    """Rotate the pairs (x[i], x[i + R/2]) of the last dim of x (..., M, [heads,] R) in fp32, in place of
    the pair (NeoX style, transformers' ``rotate_half``); returns x's dtype. Arguments as
    `rotate_interleaved`'s."""
    first, second = x.to(torch.float32).chunk(2, dim=-1)
    cos, sin = _broadcast(cos, sin, first, inverse)
    return torch.cat((first * cos - second * sin, second * cos + first * sin), dim=-1).to(x.dtype)


def rotate(
    x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, interleaved: bool, inverse: bool = False
) -> torch.Tensor:
    """`rotate_interleaved` or `rotate_halves`, as `interleaved` says."""
    return (rotate_interleaved if interleaved else rotate_halves)(x, cos, sin, inverse)


def rope_is_interleaved(cfg: MLAConfig, behaviour: object = None) -> bool:
    """Whether a layer run rotates interleaved pairs: the config's ``rope_interleave``, unless the serving
    engine's model code rotates interleaved pairs whatever the config says (a behaviour whose
    ``honours_rope_interleave`` is False: vLLM 0.33, `scenarios.behaviour.ModelBehaviour`)."""
    return cfg.rope_interleave or not getattr(behaviour, "honours_rope_interleave", True)


def rope_label(interleaved: bool, cfg: MLAConfig) -> str:
    """The rope step's kernel label: the pairing that ran, and the scaling."""
    pairing = "GPT-J interleaved" if interleaved else "NeoX halves"
    if interleaved and not cfg.rope_interleave:
        pairing += ", ignoring rope_interleave=false"
    return f"rope ({pairing}, deepseek-yarn)" if cfg.rope_scaling is not None else f"rope ({pairing})"
