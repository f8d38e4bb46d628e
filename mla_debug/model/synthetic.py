"""Seeded synthetic weights for one attention layer, shaped and scaled like a real DeepSeek checkpoint.

Real weights are not needed to reproduce layout and TP bugs, but their *statistics* matter: a weight
whose 128x128 blocks all have the same magnitude hides every scale-layout bug (any scale read in any
order gives the same number), and a weight without outlier input channels never stresses a block's
amax. The generator therefore produces, per linear weight (N, K):

- ``w = randn(N, K) * LINEAR_STD_GAIN / sqrt(K)``: std 0.5/sqrt(K), the order of magnitude of DeepSeek-V3's
  trained projections (an O(1) activation maps to an O(1) output);
- times one factor per ``block`` (128x128) drawn log-uniformly over ``BLOCK_FACTOR_RANGE`` = [0.25, 4], so
  neighbouring block scales differ by up to 16x and a scale read from the wrong block is visible;
- times ``OUTLIER_GAIN_RANGE`` = 8..20 on ``OUTLIER_COLUMNS`` = 3 random input columns, the outlier channels
  that dominate a block's amax in trained LLM weights;
- generated in float32, rounded to bfloat16 like a released checkpoint, then (optionally) block-quantized.

Norm weights are ``uniform(NORM_RANGE)`` = 0.2..1.5 (positive, around 1, varied enough that a norm applied
with the wrong weight shows), in bfloat16.

Every module gets its own generator seeded from ``(seed, module key)``, so a module's bytes do not depend
on which other modules exist or on the order they are generated in. Same seed, same torch version, same
bytes. Generation is chunked by row blocks so the fp32 temporaries stay a few MiB whatever the weight size.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping

import torch

from .._progress import progress as progress_of
from ..numerics import Fp8Format, QuantFlavor, block_quantize

LINEAR_STD_GAIN = 0.5
BLOCK_FACTOR_RANGE = (0.25, 4.0)
OUTLIER_COLUMNS = 3
OUTLIER_GAIN_RANGE = (8.0, 20.0)
NORM_RANGE = (0.2, 1.5)

# fp32 elements generated at once (16 MiB); changing it changes the bytes, since randn is drawn per chunk.
_CHUNK_ELEMENTS = 1 << 22


def module_seed(seed: int, key: str) -> int:
    """A 63-bit generator seed for one tensor, derived from the user's seed and the tensor's key.

    A hash (not ``seed + index``) so that seeds 0 and 1 do not share streams shifted by one module.
    """
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise TypeError(f"synthetic weights: seed must be an int, got {type(seed).__name__}")
    digest = hashlib.blake2b(f"mla_debug:{seed}:{key}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") & ((1 << 63) - 1)


def synthetic_linear(n: int, k: int, seed: int, block: tuple[int, int] = (128, 128)) -> torch.Tensor:
    """A bf16 (n, k) weight with per-block magnitudes and outlier input columns (see the module doc)."""
    if n <= 0 or k <= 0:
        raise ValueError(f"synthetic linear weight: shape ({n}, {k}) must be positive")
    gen = torch.Generator().manual_seed(seed)
    bn, bk = block
    nb, kb = -(-n // bn), -(-k // bk)
    lo, hi = (math.log(v) for v in BLOCK_FACTOR_RANGE)
    factors = torch.empty(nb, kb).uniform_(lo, hi, generator=gen).exp_()
    outliers = torch.randperm(k, generator=gen)[: min(OUTLIER_COLUMNS, k)]
    column_gain = torch.ones(k)
    column_gain[outliers] = torch.empty(len(outliers)).uniform_(*OUTLIER_GAIN_RANGE, generator=gen)
    # One (K,) multiplier row per row block: small (nb x K), and it avoids an (N, K) expanded factor.
    row_block_gain = factors.repeat_interleave(bk, dim=1)[:, :k] * column_gain * (LINEAR_STD_GAIN / math.sqrt(k))

    out = torch.empty(n, k, dtype=torch.bfloat16)
    rows_per_chunk = max(bn, (_CHUNK_ELEMENTS // k) // bn * bn)
    for r0 in range(0, n, rows_per_chunk):
        r1 = min(n, r0 + rows_per_chunk)
        chunk = torch.randn(r1 - r0, k, generator=gen)
        for b in range(r0 // bn, -(-r1 // bn)):
            chunk[b * bn - r0 : min(r1, (b + 1) * bn) - r0].mul_(row_block_gain[b])
        out[r0:r1] = chunk  # the copy rounds to bf16, as a released checkpoint is
        del chunk
    return out


def synthetic_norm(n: int, seed: int) -> torch.Tensor:
    """A bf16 (n,) RMSNorm weight, uniform over NORM_RANGE."""
    if n <= 0:
        raise ValueError(f"synthetic norm weight: shape ({n},) must be positive")
    gen = torch.Generator().manual_seed(seed)
    return torch.empty(n).uniform_(*NORM_RANGE, generator=gen).to(torch.bfloat16)


def synthetic_tensors(
    shapes: Mapping[str, tuple[int, ...]],
    seed: int,
    *,
    block: tuple[int, int],
    quantize: bool,
    fmt: Fp8Format,
    flavor: QuantFlavor,
    progress: bool = False,
    desc: str = "synthetic weights",
    ue8m0: bool = False,
) -> dict[str, torch.Tensor]:
    """Generate every tensor of `shapes` (keys ``<module>.weight``; 2-D linear, 1-D norm).

    With ``quantize`` each linear weight is block-quantized right after it is generated (its bf16 copy
    is freed before the next module), adding ``<module>.weight_scale_inv`` (fp32) after its weight; with
    ``ue8m0`` those scales are rounded up to powers of two (a ``scale_fmt: "ue8m0"`` checkpoint).
    """
    out: dict[str, torch.Tensor] = {}
    for key, shape in progress_of(shapes.items(), desc=desc, unit="module", enabled=progress):
        sub_seed = module_seed(seed, key)
        if len(shape) == 1:
            out[key] = synthetic_norm(shape[0], sub_seed)
            continue
        weight = synthetic_linear(shape[0], shape[1], sub_seed, block)
        if not quantize:
            out[key] = weight
            continue
        q, scale, _ = block_quantize(weight, block, fmt, flavor, ue8m0=ue8m0, name=key)
        del weight
        out[key] = q
        out[key.removesuffix(".weight") + ".weight_scale_inv"] = scale
    return out
