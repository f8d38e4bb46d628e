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

``selection`` says which engine routes layers to the preshuffled kernel (`engine_rules`):

- ``"tuned-row"`` (default): vLLM PR #51692's rule, a row in aiter's bpreshuffle tuned table for the
  rank's (N, K) on the platform's (gfx, cu_num); the flags as ``honour_layer_flags`` says.
- ``"sglang-0.5.23"``: SGLang 0.5.23 on gfx95 with HIP >= 7.2 - every block-FP8 linear except SGLang's
  hard-coded Triton shapes, shuffled at load. SGLang reads only its own flag, ``keep_plain_weight_layout``
  (``layers/quantization/fp8.py`` ``process_weights_after_loading``): such a weight stays plain, while a
  call through the linear would still run the preshuffled GEMM on it (``aiter_w8a8_block_fp8_linear`` does
  not look at the flag; SGLang never calls wo_a's linear), and the emulation records that misread. vLLM's
  flags mean nothing to SGLang, so ``honour_layer_flags`` does not apply under this selection.

Whenever the kernel shuffles a weight at load it sets the layer's ``aiter_bpreshuffled`` flag, as vLLM 0.33
and SGLang 0.5.23 do.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from ..implementations import Check
from ..layouts import QuantizedActivation, ScaleLayout, read_scale
from .base import Contract, GemmProblem, Kernel, register_kernel
from .block_gemm import Accumulation, block_scaled_mm, check_accumulation
from .engine_rules import sglang_bpreshuffle_check
from .stride_read import layout_read_by_strides

if TYPE_CHECKING:
    from .block_scaled_linear import BlockScaledLinear
    from .platforms import Platform

SHUFFLE = (16, 16)
TUNED_ROW = "tuned-row"
SGLANG_0_5_23 = "sglang-0.5.23"
BPRESHUFFLE_SELECTIONS = (TUNED_ROW, SGLANG_0_5_23)
# How the bpreshuffle call takes its activation scale: raw column-major bytes (aiter), or by strides first
# (SGLang's materialize_bpreshuffle_fp8_scale in front of it).
SCALE_READS = ("raw", "strides")


def check_selection(selection: str, allowed: tuple[str, ...], kernel: str) -> str:
    if selection not in allowed:
        raise ValueError(f"kernel {kernel!r}: selection {selection!r} is not one of {', '.join(allowed)}")
    return selection


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
        self,
        accumulation: Accumulation = "blockwise",
        flavor: str = "aiter-hip",
        honour_layer_flags: bool = True,
        selection: str = TUNED_ROW,
        scale_read: str = "raw",
    ) -> None:
        super().__init__(accumulation=accumulation, flavor=flavor)
        self.honour_layer_flags = honour_layer_flags
        self.selection = check_selection(selection, BPRESHUFFLE_SELECTIONS, self.name)
        # "strides": SGLang's materialize_bpreshuffle_fp8_scale (fp8_utils.py, scale.t().contiguous().t())
        # in front of the CK call - the scale's values are taken by its strides, then handed over
        # column-major - so the caller asks for a truthful column-major presentation, (1, M) strides.
        if scale_read not in SCALE_READS:
            raise ValueError(f"kernel {self.name!r}: scale_read {scale_read!r} is not one of {', '.join(SCALE_READS)}")
        self.scale_read = scale_read
        if scale_read == "strides":
            self.act_scale_layout = ScaleLayout.COL_MAJOR_STRIDED

    def can_implement(self, problem: GemmProblem) -> Check:
        check = super().can_implement(problem)
        if not check.ok:
            return check
        if self.selection == SGLANG_0_5_23:
            return sglang_bpreshuffle_check(problem.platform, problem.n, problem.k)
        if problem.n % 16:
            return Check(False, f"N={problem.n} is not a multiple of 16 (shuffle_weight(16,16))")
        return tuned_row_check(problem, problem.platform)

    def process_weights_after_loading(self, linear: BlockScaledLinear) -> None:
        by = f"{self.name}.process_weights_after_loading"
        if self.selection == SGLANG_0_5_23:
            if linear.keep_plain_weight_layout:
                linear.events.append(
                    f"{self.name}: left the weight plain (honours keep_plain_weight_layout, as SGLang 0.5.23 "
                    "fp8.py does); a call through this kernel would still read it as preshuffled"
                )
                return
            linear.kernel_preshuffle(SHUFFLE, by=by)
            return
        if self.honour_layer_flags and linear.reads_weight_directly:
            linear.plain_fallback = True
            linear.events.append(
                f"{self.name}: left the weight plain and uses the plain GEMM "
                f"(honours {', '.join(linear.direct_read_flags)})"
            )
            return
        linear.kernel_preshuffle(SHUFFLE, by=by)

    def contract(self, linear: BlockScaledLinear) -> Contract:
        if linear.plain_fallback:
            return Contract(scale=ScaleLayout.ROW_MAJOR, weight=None)
        return Contract(scale=self.act_scale_layout, weight=SHUFFLE)

    def scale_layout_read(self, qa: QuantizedActivation, contract: Contract) -> ScaleLayout:
        if self.scale_read == "strides" and contract.weight is not None:
            return layout_read_by_strides(qa.scale)
        return contract.scale

    def compute(self, linear: BlockScaledLinear, qa: QuantizedActivation, contract: Contract) -> torch.Tensor:
        scale = read_scale(qa.scale, self.scale_layout_read(qa, contract), f"{linear.name} input scale")
        return block_scaled_mm(qa.fmt.decode(qa.data), scale, linear, contract.weight, self.accumulation)
