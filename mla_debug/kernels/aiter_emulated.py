"""Faithful CPU emulations of aiter's two FP8 block-scale GEMMs as vLLM drives them on ROCm.

- ``aiter-blockscale`` (vLLM AiterFp8BlockScaledMMKernel -> ``gemm_a8w8_blockscale``): plain weight,
  reads ROW_MAJOR activation-scale bytes.
- ``aiter-bpreshuffle`` (vLLM AiterPreshuffledFp8BlockScaledMMKernel ->
  ``gemm_a8w8_blockscale_bpreshuffle``): shuffles the weight (16, 16) at load, reads the weight bytes
  as shuffled once and the activation scale as COL_MAJOR bytes (offset kb*M + m) whatever the tensor's
  strides claim - as CK and ASM do through raw pointers.

Their callers quantize the input with aiter's HIP group quant (vLLM's ``group_fp8_quant`` ->
``dynamic_per_group_scaled_quant_kernel``, with ``transpose_scale`` for the preshuffled GEMM), so the
default flavor is ``"aiter-hip"``, byte-exact with that kernel (`numerics.flavors`).

``honour_layer_flags`` models vLLM PR #56433: a weight flagged ``skip_weight_relayout`` / ``is_bmm`` /
``_cpu_skip_gemm_dispatch`` is left plain and multiplied by the plain GEMM. With it off (PR #51692),
such weights are shuffled under their direct readers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from ..implementations import Check
from ..layouts import QuantizedActivation, ScaleLayout, read_scale
from .base import Contract, GemmProblem, Kernel, register_kernel
from .block_gemm import Accumulation, block_scaled_mm, check_accumulation

if TYPE_CHECKING:
    from .linear import BlockScaledLinear
    from .platforms import Platform

SHUFFLE = (16, 16)


class _AiterKernel(Kernel):
    """Shared capability checks of aiter kernels: ROCm platforms, the platform's fp8 format."""

    def __init__(self, accumulation: Accumulation = "blockwise", flavor: str = "aiter-hip") -> None:
        super().__init__(flavor=flavor)
        self.accumulation = check_accumulation(accumulation)

    def can_implement(self, problem: GemmProblem) -> Check:
        platform = problem.platform
        if not platform.is_rocm:
            return Check(False, f"aiter kernels run on ROCm platforms, not {platform.name}")
        if problem.fmt != platform.fp8:
            return Check(False, f"{platform.arch} computes {platform.fp8.name}, the weight is {problem.fmt.name}")
        return super().can_implement(problem)

    def compute(self, linear: BlockScaledLinear, qa: QuantizedActivation, contract: Contract) -> torch.Tensor:
        scale = read_scale(qa.scale, contract.scale, f"{linear.name} input scale")
        return block_scaled_mm(qa.fmt.decode(qa.data), scale, linear, contract.weight, self.accumulation)


def tuned_row_check(problem: GemmProblem, platform: Platform) -> Check:
    """vLLM's rule for the preshuffled kernel: the rank's (N, K) has a row in the bpreshuffle tuned table
    for `platform`'s (gfx, cu_num) - the problem's own, or the ROCm card a stand-in selects as; M is
    ignored."""
    if problem.tuned is None:
        return Check(False, "no bpreshuffle tuned table to consult")
    key = f"{platform.arch}/cu{platform.cu_num}"
    if not problem.tuned.has(platform, problem.n, problem.k):
        return Check(False, f"no bpreshuffle tuned row for (N={problem.n}, K={problem.k}) on {key}")
    return Check(True, f"(N={problem.n}, K={problem.k}) has a bpreshuffle tuned row on {key} ({problem.tuned.source})")


@register_kernel
class AiterBlockscaleEmulated(_AiterKernel):
    name = "aiter-blockscale"
    description = "aiter gemm_a8w8_blockscale (CPU emulation): plain weight, ROW_MAJOR scale bytes"
    vllm_name = "AiterFp8BlockScaledMMKernel"


@register_kernel
class AiterBpreshuffleEmulated(_AiterKernel):
    name = "aiter-bpreshuffle"
    description = (
        "aiter gemm_a8w8_blockscale_bpreshuffle (CPU emulation): weight shuffled (16,16) at load, "
        "COL_MAJOR scale bytes whatever the strides say"
    )
    vllm_name = "AiterPreshuffledFp8BlockScaledMMKernel"
    wants_transposed_act_scale = True
    preshuffles_weight = True
    act_scale_layout = ScaleLayout.COL_MAJOR

    def __init__(
        self, accumulation: Accumulation = "blockwise", flavor: str = "aiter-hip", honour_layer_flags: bool = True
    ) -> None:
        super().__init__(accumulation=accumulation, flavor=flavor)
        self.honour_layer_flags = honour_layer_flags

    def can_implement(self, problem: GemmProblem) -> Check:
        check = super().can_implement(problem)
        if not check.ok:
            return check
        if problem.n % 16:
            return Check(False, f"N={problem.n} is not a multiple of 16 (shuffle_weight(16,16))")
        return tuned_row_check(problem, problem.platform)

    def process_weights_after_loading(self, linear: BlockScaledLinear) -> None:
        if self.honour_layer_flags and linear.reads_weight_directly:
            linear.plain_fallback = True
            linear.events.append(
                f"{self.name}: left the weight plain and uses the plain GEMM "
                f"(honours {', '.join(linear.direct_read_flags)})"
            )
            return
        linear.shuffle_weight(SHUFFLE, by=f"{self.name}.process_weights_after_loading")

    def contract(self, linear: BlockScaledLinear) -> Contract:
        if linear.plain_fallback:
            return Contract(scale=ScaleLayout.ROW_MAJOR, weight=None)
        return Contract(scale=self.act_scale_layout, weight=SHUFFLE)
