"""The pre-fusion path in Triton: an RMSNorm kernel, then a separate per-1x128 group quant kernel.

This is what the fused kernel replaced in DeepSeek-V4 (docs/semantics.md §10): one launch normalizes qr and kv to
bf16, one quantizes the bf16 qr for wq_b, and one quantizes the same bf16 qr again inside indexer.wq_b -
three launches, the bf16 qr written once and read twice. Same math as the torch unfused path
(`unfused.py`: fp32 norm, rounding to the activation dtype, quant of the rounded values), so the
results are bitwise equal to it; the difference to the fused op is the one extra rounding. The kernels
and their launches live in the GPU package (`gpu.normquant.launch`); the public functions
(`triton_norm_then_quant`, `triton_norm_then_quant_for_v4`) are `unfused.py`'s with ``backend="triton"``.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ..gpu.normquant import launch, support
from ..layouts import QuantizedActivation
from ._inputs import NormQuantArgs
from .triton_fused import quantized_activation


def triton_norm_and_quants(
    op: str, args: NormQuantArgs, producers: Sequence[str]
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None, list[QuantizedActivation]]:
    """(q normalized and stored in q's dtype, k normalized, residual sum, one quantization of the stored
    q per producer): the norm launch, then one quant launch per producer."""
    launch.check_supported(op, args)
    support.require_triton(op, args.q.device)
    norm = launch.allocate_norm(args)
    outs = [launch.allocate_quant(args) for _ in producers]
    if args.m > 0:
        launch.make_norm_launch(args, norm)()
        for out in outs:
            launch.make_quant_launch(args, norm.q_normed, out)()
    quants = [quantized_activation(args, out, producer) for out, producer in zip(outs, producers)]
    return norm.q_normed, norm.k_out, norm.residual_sum, quants
