"""``vllm-triton-blockscale``: vLLM's own Triton block-scaled GEMM (CPU emulation).

What it models, read from vLLM 0.33.0:

- the class, ``model_executor/kernels/linear/scaled_mm/triton.py`` ``TritonFp8BlockScaledMMKernel``: supported
  on CUDA-alike platforms (ROCm and CUDA; ``is_supported``), any shape (the base ``can_implement`` refuses
  only static activation scales), second on ROCm's ``_POSSIBLE_FP8_BLOCK_KERNELS`` after
  AiterFp8BlockScaledMMKernel (``model_executor/kernels/linear/__init__.py``) and late on CUDA's. Its
  ``apply_block_scaled_mm`` calls ``w8a8_triton_block_scaled_mm`` (through a registered custom op).
- the GEMM, ``layers/quantization/utils/fp8_utils.py`` ``w8a8_triton_block_scaled_mm``: a plain (N, K) weight,
  never re-laid out at load, and the activation scale passed to ``_w8a8_triton_block_scaled_mm`` as
  ``As.stride(-2), As.stride(-1)`` - read BY STRIDES, like aiter's Triton GEMM. On gfx1250 the same function
  is a torch reference instead ("Avoids the gfx1250 native-fp8 block GEMM NaN bug"): dequantize A and B to
  fp32 with ``As.reshape(...).repeat_interleave(...)`` (again by strides) and one fp32 matmul. So one contract
  holds everywhere; only the accumulation order differs, which ``accumulation="auto"`` follows (the
  reference order on a layer loaded for gfx1250, the kernel's per-block order elsewhere).
- its input: the base ``Fp8BlockScaledMMLinearKernel`` quantizes with ``QuantFP8(column_major_scales=False)``
  (``BlockScaledMMLinearKernel.py``): a ROW_MAJOR scale. Block-FP8 weights switch the ``quant_fp8`` custom op
  on (``config/vllm.py``: "+quant_fp8" when ``has_blocked_weights()``), and this kernel runs where aiter does
  not (aiter's class comes first on ROCm), so ``QuantFP8.forward_cuda`` / ``forward_hip`` reach the C++
  ``per_token_group_fp8_quant``: the default flavor is ``"vllm-cuda"``; ``flavor`` picks another.

Contract: plain weight, scales read by their strides - ROW_MAJOR and (1, M)-strided producers are right,
a COL_MAJOR "view" producer is read wrongly and recorded as an effective violation for M > 1. A CPU
emulation in torch; tests/engine_reference/test_engine_triton_gemms.py runs vLLM's own Triton kernel from the
wheel under Triton's interpreter and checks it reads the same values.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from ..implementations import Check
from ..layouts import QuantizedActivation, ScaleLayout
from .base import Contract, GemmProblem, Kernel, register_kernel
from .block_gemm import ACCUMULATIONS, block_scaled_mm
from .gpu_problem import gpu_gemm_refusal
from .stride_read import layout_read_by_strides, values_read_by_strides

if TYPE_CHECKING:
    from .block_scaled_linear import BlockScaledLinear

AUTO = "auto"
GFX1250 = "gfx1250"


@register_kernel
class VllmTritonBlockscaleKernel(Kernel):
    name = "vllm-triton-blockscale"
    description = (
        "vLLM w8a8_triton_block_scaled_mm (CPU emulation): plain weight, scales read by their strides; "
        "a torch reference with the same contract on gfx1250"
    )
    vllm_name = "TritonFp8BlockScaledMMKernel"
    act_scale_layout = ScaleLayout.ROW_MAJOR

    def __init__(self, accumulation: str = AUTO, flavor: str = "vllm-cuda") -> None:
        super().__init__(flavor=flavor)
        if accumulation not in (AUTO, *ACCUMULATIONS):
            raise ValueError(f"accumulation {accumulation!r} is not one of {', '.join((AUTO, *ACCUMULATIONS))}")
        self.accumulation = accumulation

    def can_implement(self, problem: GemmProblem) -> Check:
        refusal = gpu_gemm_refusal(problem, "vLLM's TritonFp8BlockScaledMMKernel")
        if refusal is not None:
            return refusal
        return Check(True, "vLLM 0.33.0 scaled_mm/triton.py TritonFp8BlockScaledMMKernel takes every block-FP8 layer")

    def accumulation_for(self, linear: BlockScaledLinear) -> str:
        """The order this call accumulates in: the option, or under "auto" the gfx1250 reference's order for a
        layer loaded for gfx1250 and the Triton kernel's per-block order otherwise."""
        if self.accumulation != AUTO:
            return self.accumulation
        on_gfx1250 = linear.platform is not None and linear.platform.arch == GFX1250
        return "dequant" if on_gfx1250 else "blockwise"

    def scale_layout_read(self, qa: QuantizedActivation, contract: Contract) -> ScaleLayout:
        return layout_read_by_strides(qa.scale)

    def compute(self, linear: BlockScaledLinear, qa: QuantizedActivation, contract: Contract) -> torch.Tensor:
        scale = values_read_by_strides(qa.scale)
        return block_scaled_mm(qa.fmt.decode(qa.data), scale, linear, None, self.accumulation_for(linear))
