"""``flashinfer-deepgemm``: vLLM 0.33's Hopper block-FP8 kernel, FlashInfer below 32 rows, DeepGEMM above (CPU emulation).

What it models, vLLM 0.33.0 ``model_executor/kernels/linear/scaled_mm/flashinfer.py``
``FlashInferFp8DeepGEMMDynamicBlockScaledKernel`` - first in the CUDA block-FP8 list, taken on Hopper when
FlashInfer's SM90 block-scale GEMM is there (``utils/flashinfer.py`` ``is_flashinfer_fp8_blockscale_gemm_supported``:
``VLLM_BLOCKSCALE_FP8_GEMM_FLASHINFER``, on by default, and compute capability 9.0) and DeepGEMM is supported:

- ``apply_input_quant = False``: the linear hands the kernel its bf16 input, and
  ``_dynamic_flashinfer_deepgemm_blockscale_gemm_impl`` branches on ``input.shape[0] < 32`` (``torch.cond``);
- M < 32: FlashInfer 0.7.2.post1's ``fp8_blockscale_gemm_sm90`` quantizes the bf16 input itself (TensorRT-LLM's
  ``scale_1x128_kernel``: the ``flashinfer-sm90`` flavor, written to its own workspace and read back by its own
  GEMM, so no caller can hand it the wrong scale order) and runs DeepGEMM's swapAB kernel, the same per-128-K
  block arithmetic with A and B swapped;
- M >= 32 (and every M with ``VLLM_BATCH_INVARIANT=1``): vLLM's ``per_token_group_quant_fp8`` with column-major
  scales (the C++ op on CUDA: ``vllm-cuda``) and DeepGEMM's ``fp8_gemm_nt`` - `deepgemm`;
- at load, the DeepGEMM kernel's processing runs once for both (``process_weights_after_loading`` calls the
  fallback's): with ue8m0 (``VLLM_USE_DEEP_GEMM_E8M0``, on by default) the weight is re-quantized to
  power-of-two block scales, so FlashInfer multiplies the re-quantized weight too. FlashInfer reads the
  weight scale through a bare float pointer as (N/128, K/128) or (N, K/128); on Hopper DeepGEMM leaves a
  128x128 fp32 block scale as it is (no packing), so it reads the values the DeepGEMM branch reads.

FlashInfer builds with ``-use_fast_math``: on the GPU its two divisions are approximate (2 ulps); the emulation
computes them correctly rounded (see `numerics.engine_flavors`). ``swap_ab_below`` is the M threshold (0: the
DeepGEMM branch for every M, what ``VLLM_BATCH_INVARIANT=1`` does); ``small_m_flavor`` FlashInfer's quant.
Each call's record names the branch it took.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from ..implementations import Check
from ..layouts import QuantizedActivation, ScaleLayout, quantize_groups
from ..numerics import Fp8Format
from .base import GemmCall, GemmProblem, register_kernel
from .deepgemm import DeepGemmKernel
from .deepgemm_weights import VLLM_0_33

if TYPE_CHECKING:
    from .linear import BlockScaledLinear

HOPPER = "sm90"
SWAP_AB_BELOW = 32
_SOURCE = "vLLM 0.33.0 scaled_mm/flashinfer.py FlashInferFp8DeepGEMMDynamicBlockScaledKernel"


@register_kernel
class FlashInferDeepGemmKernel(DeepGemmKernel):
    name = "flashinfer-deepgemm"
    description = (
        "vLLM 0.33's Hopper block-FP8 kernel (CPU emulation): FlashInfer's fp8_blockscale_gemm_sm90 (its own bf16 "
        "input quant, DeepGEMM swapAB) for M < 32, DeepGEMM with vLLM's column-major input quant above; the "
        "weight re-quantized to ue8m0 at load for both"
    )
    vllm_name = "FlashInferFp8DeepGEMMDynamicBlockScaledKernel"

    def __init__(
        self,
        ue8m0: bool = True,
        flavor: str = "vllm-cuda",
        small_m_flavor: str = "flashinfer-sm90",
        swap_ab_below: int = SWAP_AB_BELOW,
        requant: str = VLLM_0_33,
    ) -> None:
        super().__init__(ue8m0=ue8m0, packed=False, requant=requant, flavor=flavor)
        if not isinstance(swap_ab_below, int) or isinstance(swap_ab_below, bool) or swap_ab_below < 0:
            raise ValueError(f"kernel {self.name!r}: swap_ab_below must be a row count >= 0, got {swap_ab_below!r}")
        self.small_m_flavor = small_m_flavor
        self.swap_ab_below = swap_ab_below

    def can_implement(self, problem: GemmProblem) -> Check:
        if problem.platform.is_cuda and problem.platform.arch != HOPPER:
            return Check(
                False,
                f"{_SOURCE}: FlashInfer's block-scale GEMM is Hopper's (compute capability 9.0, "
                f"utils/flashinfer.py has_flashinfer_fp8_blockscale_gemm), not {problem.platform.arch}",
            )
        check = super().can_implement(problem)
        if not check.ok:
            return check
        return Check(True, f"{_SOURCE}: takes (N={problem.n}, K={problem.k}) on {problem.platform.arch}")

    def small(self, m: int) -> bool:
        """Whether a call of `m` rows takes FlashInfer's swapAB branch."""
        return m < self.swap_ab_below

    def branch(self, m: int) -> str:
        if self.small(m):
            return f"{self.name}: FlashInfer swapAB (M={m} < {self.swap_ab_below})"
        return f"{self.name}: DeepGEMM (M={m} >= {self.swap_ab_below})"

    def quantize_input(
        self, x: torch.Tensor, fmt: Fp8Format, scale_layout: ScaleLayout | None = None, ue8m0: bool | None = None
    ) -> QuantizedActivation:
        if not self.small(x.shape[0]):
            return super().quantize_input(x, fmt, scale_layout, ue8m0)
        # FlashInfer's workspace: one fp32 scale per group, column-major (M padded to 4), read by its own GEMM.
        return quantize_groups(
            x,
            128,
            fmt=fmt,
            flavor=self.small_m_flavor,
            scale_layout=ScaleLayout.COL_MAJOR_STRIDED,
            ue8m0=False,
            producer=f"{self.name}: FlashInfer's own input quant (scale_1x128_kernel)",
        )

    def run(self, linear: BlockScaledLinear, x: torch.Tensor | QuantizedActivation) -> GemmCall:
        if isinstance(x, QuantizedActivation) and self.small(x.m):
            raise ValueError(
                f"{linear.name}: {self.name} takes bf16 input (vLLM's kernel has apply_input_quant=False and "
                f"FlashInfer quantizes it itself); a pre-quantized input of M={x.m} < {self.swap_ab_below} rows "
                "has no path in vLLM 0.33"
            )
        call = super().run(linear, x)
        call.kernel = self.branch(call.input.m)
        return call
