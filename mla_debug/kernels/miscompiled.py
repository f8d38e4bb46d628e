"""``aiter-bpreshuffle-gfx950-rocm72``: aiter's CK ``gemm_a8w8_blockscale_bpreshuffle`` as ROCm 7.2 built it for
gfx950 before rocm-libraries PR #8639 - a value fault, not a layout one (CPU emulation of its signature).

The record (SGLang issue #28685, rocm-libraries PR #8639, aiter issue #3261): on gfx950 with ROCm 7.2 the
CK bpreshuffle kernel silently produces wrong rows - "sparse bad-row failures near tile boundaries" - for
larger M (fine at M=12, kv_b_proj (28672 x 512) at cosine 0.9969 / relative error 0.078 at M=64 against a
torch dequant reference), and is nondeterministic across repeated launches. #8639 replaces a packed
2-lane post-scale accumulator FMA update with scalar updates; the miscompiled code itself is not in the
record.

What is emulated is therefore a stand-in with that signature, not the miscompiled instruction stream, shaped
by the one thing the fix says: a 2-lane packed update of the post-scaled accumulator. For M >= ``min_m``
the last row of each ``tile``-row tile takes its lane partner's (the row above) post-scaled partial product
of the last K block in place of its own. The damage per bad row then shrinks as K grows (one block of
K / 128), as the record's numbers do (kv_b_proj, K = 512, far worse than q_b_proj or down_proj). Bytes and layouts are the correct kernel's (the weight shuffled once and read
so, column-major activation-scale bytes), so every layout contract holds and only the values are wrong -
the case in which mla_debug must report a value difference and no layout story. The defaults (M >= 56,
16-row tiles) are a characterisation the stored record does not give: it confirms rows at tile boundaries
and the M dependence, not these numbers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from ..layouts import QuantizedActivation, read_scale
from .aiter_emulated import AiterBpreshuffleEmulated
from .base import Contract, register_kernel
from .block_gemm import BLOCK, block_scaled_mm, expand_weight_scale, weight_values

if TYPE_CHECKING:
    from .linear import BlockScaledLinear


@register_kernel
class AiterBpreshuffleGfx950Rocm72(AiterBpreshuffleEmulated):
    name = "aiter-bpreshuffle-gfx950-rocm72"
    vllm_name = None  # the same vLLM class as aiter-bpreshuffle (found through the base class)
    description = (
        "aiter gemm_a8w8_blockscale_bpreshuffle as built by ROCm 7.2 for gfx950 before rocm-libraries PR #8639 "
        "(CPU emulation of its signature: for M >= 56 the last row of each 16-row tile takes the row above's "
        "last-K-block update)"
    )

    def __init__(self, *args, min_m: int = 56, tile: int = 16, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        if not isinstance(min_m, int) or min_m < 1:
            raise ValueError(f"kernel {self.name!r}: min_m must be a positive integer, got {min_m!r}")
        if not isinstance(tile, int) or tile < 2:
            raise ValueError(f"kernel {self.name!r}: tile must be an integer of at least 2 rows, got {tile!r}")
        self.min_m, self.tile = min_m, tile

    def faulty_rows(self, m: int) -> list[int]:
        """The rows this launch gets wrong: none below `min_m`, else the last row of each tile."""
        if m < self.min_m:
            return []
        return [r for r in range(self.tile - 1, m, self.tile)]

    def compute(self, linear: BlockScaledLinear, qa: QuantizedActivation, contract: Contract) -> torch.Tensor:
        scale = read_scale(qa.scale, contract.scale, f"{linear.name} input scale")
        x = qa.fmt.decode(qa.data)
        out = block_scaled_mm(x, scale, linear, contract.weight, self.accumulation)
        rows = self.faulty_rows(x.shape[0])
        if not rows:
            return out
        # Each bad row's last-K-block update swapped for its lane partner's (the row above).
        last = slice(linear.k - BLOCK, linear.k)
        w = weight_values(linear, contract.weight, scaled=False)[:, last].float()  # the cache holds bf16 (exact)
        w_scale = expand_weight_scale(linear.weight.scale, linear.n)[:, -1].unsqueeze(0)
        partners = [r - 1 for r in rows]
        own = (x[rows, last] @ w.t()) * (scale[rows, -1:] * w_scale)
        partner = (x[partners, last] @ w.t()) * (scale[partners, -1:] * w_scale)
        faulty = out.to(torch.float32)
        faulty[rows] += partner - own
        return faulty.to(out.dtype)
