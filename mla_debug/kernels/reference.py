"""The exact reference: dequantize both operands to fp32, one fp32 GEMM, cast to bf16 (aiter op_tests).

It decodes the activation scale with the layout its producer DECLARED, and reads the weight bytes as a
plain matrix, so it is correct for every well-labelled input and is what other kernels are judged by.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from ..implementations import Check
from ..layouts import QuantizedActivation
from .base import Contract, GemmProblem, Kernel, register_kernel
from .block_gemm import block_scaled_mm

if TYPE_CHECKING:
    from .block_scaled_linear import BlockScaledLinear


@register_kernel
class TorchReferenceKernel(Kernel):
    name = "torch-reference"
    description = "dequantize x per 1x128 and W per 128x128 to fp32, one fp32 matmul, cast to bf16"
    reads_declared_scale_layout = True

    def can_implement(self, problem: GemmProblem) -> Check:
        return Check(True, "the reference takes any shape")

    def compute(self, linear: BlockScaledLinear, qa: QuantizedActivation, contract: Contract) -> torch.Tensor:
        return block_scaled_mm(qa.fmt.decode(qa.data), qa.logical_scale(), linear, None, "dequant")
