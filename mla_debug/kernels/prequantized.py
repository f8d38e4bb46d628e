"""The pre-quantized entry point, like vLLM's ``apply_pre_quantized_block_scaled_mm``.

A producer that already quantized the activation (DeepSeek-V4's fused RMSNorm + group quant feeding
wq_b and indexer.wq_b) hands its `QuantizedActivation` straight to the linear's kernel. The kernel reads
the scale bytes in ITS order; the producer's declared order is only used to record the violation.
"""

from __future__ import annotations

from ..layouts import QuantizedActivation, ScaleLayout
from .base import GemmCall
from .block_scaled_linear import BlockScaledLinear


def apply_pre_quantized_block_scaled_mm(linear: BlockScaledLinear, qa: QuantizedActivation) -> GemmCall:
    """Multiply a pre-quantized activation by `linear` through its kernel, without re-quantizing."""
    if not isinstance(qa, QuantizedActivation):
        raise TypeError(f"{linear.name}: expected a QuantizedActivation, got {type(qa).__name__}")
    return linear.run(qa)


def wanted_scale_layout(linear: BlockScaledLinear) -> ScaleLayout:
    """The activation-scale order the linear's kernel reads (what a producer should be asked for)."""
    if linear.kernel is None:
        raise RuntimeError(f"{linear.name}: no kernel attached yet")
    return linear.kernel.contract(linear).scale
