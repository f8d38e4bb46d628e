"""The arithmetic of block-scaled FP8 GEMMs on the CPU (or any torch device), in two accumulation orders.

- ``blockwise``: the kernels' order. For every 128-wide K block, an fp32 dot product of the raw fp8
  values, multiplied by ``x_scale[m, kb] * w_scale[n // 128, kb]`` and added to an fp32 accumulator;
  cast to bf16 once at the end.
- ``dequant``: the reference order (aiter op_tests): dequantize both operands to fp32, one fp32 GEMM.

The two differ only by fp32 rounding (summation order), bounded in the tests. Weights are decoded
through the reader's byte order and cached on the linear keyed by the tensors' identity and version
counters, so repeated calls cost one GEMM while any in-place change to the bytes invalidates the cache.
The cache holds the fp8 values unscaled in bf16, which represents every fp8 value exactly: half the
memory of fp32, the same numbers (a real-size layer's decoded weights are most of a triage's memory).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

import torch

from ..layouts.weight_shuffle import ShuffleLayout, unshuffle_weight
from ..numerics.quantize import scale_blocks_

if TYPE_CHECKING:
    from .block_scaled_linear import BlockScaledLinear

Accumulation = Literal["blockwise", "dequant"]
ACCUMULATIONS: tuple[str, ...] = ("blockwise", "dequant")
BLOCK = 128


def check_accumulation(accumulation: str) -> str:
    if accumulation not in ACCUMULATIONS:
        raise ValueError(f"accumulation {accumulation!r} is not one of {', '.join(ACCUMULATIONS)}")
    return accumulation


def expand_weight_scale(scale: torch.Tensor, n: int) -> torch.Tensor:
    """(ceil(N/128), G) block scale -> (N, G): the scale of each output row's K blocks."""
    return scale.repeat_interleave(BLOCK, dim=0)[:n]


def weight_values(linear: BlockScaledLinear, shuffled: ShuffleLayout | None, scaled: bool) -> torch.Tensor:
    """(N, K) weight as a reader sees it: bytes de-shuffled per `shuffled` (as the hardware reads them,
    whatever was really done to them). Unscaled: the fp8 values, in bf16 (exact; the cached tensor);
    scaled: fp32 values multiplied by the block scale (a new tensor, as `block_dequantize` makes it)."""
    weight = linear.weight
    data, scale = weight.data, weight.scale
    # Keyed on the tensors themselves (identity + version counter), never on data pointers, which a
    # new tensor can inherit from a freed one.
    key = (data, data._version, scale, scale._version)
    cached = linear.read_cache.get(shuffled)
    if cached is not None and same_tensor_key(cached[0], key):
        values = cached[1]
    else:
        if shuffled is not None:
            data = unshuffle_weight(data, shuffled, k=weight.k, name=f"{linear.name}.weight")
        elif data.shape[1] != weight.k:
            raise ValueError(
                f"{linear.name}.weight: bytes are K-padded to {data.shape[1]} (logical K={weight.k}); "
                "a plain-weight reader cannot read them"
            )
        values = weight.fmt.decode(data).to(torch.bfloat16)
        linear.read_cache[shuffled] = (key, values)
    return scale_blocks_(values.float(), scale) if scaled else values


def same_tensor_key(a: tuple, b: tuple) -> bool:
    return a[0] is b[0] and a[1] == b[1] and a[2] is b[2] and a[3] == b[3]


def block_scaled_mm(
    x_values: torch.Tensor,
    x_scale: torch.Tensor,
    linear: BlockScaledLinear,
    shuffled: ShuffleLayout | None,
    accumulation: Accumulation,
) -> torch.Tensor:
    """y (M, N) bf16 from decoded fp8 input values (M, K), its LOGICAL scale as read (M, G), and the
    linear's weight read per `shuffled`."""
    check_accumulation(accumulation)
    m, k = x_values.shape
    groups = k // BLOCK
    if accumulation == "dequant":
        x = (x_values.view(m, groups, BLOCK) * x_scale.unsqueeze(-1)).view(m, k)
        return (x @ weight_values(linear, shuffled, scaled=True).t()).to(torch.bfloat16)
    w = weight_values(linear, shuffled, scaled=False)
    w_scale = expand_weight_scale(linear.weight.scale, linear.n)
    acc = torch.zeros((m, linear.n), dtype=torch.float32, device=x_values.device)
    for kb in range(groups):
        cols = slice(kb * BLOCK, (kb + 1) * BLOCK)
        partial = x_values[:, cols] @ w[:, cols].float().t()
        acc.add_(partial.mul_(x_scale[:, kb : kb + 1] * w_scale[:, kb].unsqueeze(0)))
    return acc.to(torch.bfloat16)
