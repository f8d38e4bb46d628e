"""``aiter-triton-bpreshuffle``: vLLM 0.33's gfx1250 preshuffle backend (CPU emulation).

What it models, read from vLLM 0.33.0:

- selection, ``model_executor/kernels/linear/scaled_mm/aiter.py`` ``AiterFp8BlockScaledMMKernel.__init__``:
  ``use_bpreshuffle = on_gfx1250() and N % 16 == 0 and K % 128 == 0 and
  is_triton_blockscale_bpreshuffle_gemm_tuned(N, K)``, the last one aiter's config probe
  ``get_gemm_config("GEMM-A8W8_BLOCKSCALE_PRESHUFFLED", M=1, N, K)`` (``_aiter_ops.py``): a tuned
  ``gfx1250-GEMM-A8W8_BLOCKSCALE_PRESHUFFLED-N=..-K=...json`` in the problem's ``triton_configs``. The
  pinned aiter release ships none, so by default this kernel takes no layer; a scenario that points
  ``triton_configs`` at such files models a release that does (`engine_rules.vllm_bpreshuffle_check`).
- load, ``AiterFp8BlockScaledMMKernel.process_weights_after_loading``: ``if getattr(layer, "is_bmm", False):
  self.use_bpreshuffle = False``; otherwise the weight is replaced by ``shuffle_weight(w, layout=(16, 16))``
  and ``layer.aiter_bpreshuffled = True``. Only ``is_bmm`` is honoured - ``skip_weight_relayout`` (MLA's
  kv_b_proj), ``_cpu_skip_gemm_dispatch`` and SGLang's ``keep_plain_weight_layout`` are not read, so a
  weight that MLA's absorbed decode reads directly is shuffled under it (defect 4 of vLLM PR #56433, back
  on gfx1250). ``honour_layer_flags=True`` honours every vLLM direct-read flag instead: the fix bisection
  proposes. A layer kept plain is multiplied by the backend vLLM then uses, aiter's Triton
  ``gemm_a8w8_blockscale`` (``use_triton`` is always true on gfx1250), which reads scales by strides too.
- call, ``_aiter_ops.py`` ``_rocm_aiter_triton_gemm_a8w8_blockscale_preshuffle_impl``: aiter's Triton
  ``gemm_a8w8_blockscale_preshuffle(A, B.reshape(N // 16, K * 16), As, Bs, ..., is_x_scale_tranposed=False)``,
  which hands the kernel ``x_scale.stride(0), x_scale.stride(1)`` (aiter
  ``ops/triton/gemm/basic/gemm_a8w8_blockscale.py``): the activation scale is read BY STRIDES, and the
  weight bytes as shuffled once with (16, 16).
- input quant: the kernel builds its QuantFP8 with ``column_major_scales=True``, but with aiter on vLLM
  enables the ``quant_fp8`` custom op (``platforms/rocm.py`` ``apply_config_platform_defaults``) and
  ``QuantFP8.forward_hip`` runs aiter's HIP group quant (``group_fp8_quant``, ``transpose_scale=False``),
  which writes row-major and ignores that request. So its own input is quantized with the ``aiter-hip``
  flavor into a ROW_MAJOR scale; the native path's (1, M)-strided scale would be read just as right.

Contract: weight shuffled (16, 16) at load (flag set), scales read by their strides - a ROW_MAJOR or
(1, M)-strided producer is right, a COL_MAJOR "view" producer (transposed bytes behind row-major strides)
is read wrongly and recorded as an effective violation for M > 1. A CPU emulation in torch; the pinned
aiter release has no Triton preshuffle GEMM to run.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from ..implementations import Check
from ..layouts import QuantizedActivation, ScaleLayout
from .aiter_emulated import SHUFFLE, _AiterKernel
from .base import Contract, GemmProblem, register_kernel
from .block_gemm import Accumulation, block_scaled_mm
from .engine_rules import vllm_bpreshuffle_check
from .stride_read import layout_read_by_strides, values_read_by_strides

if TYPE_CHECKING:
    from .block_scaled_linear import BlockScaledLinear


@register_kernel
class AiterTritonBpreshuffleKernel(_AiterKernel):
    name = "aiter-triton-bpreshuffle"
    description = (
        "vLLM 0.33's gfx1250 aiter Triton gemm_a8w8_blockscale_preshuffle (CPU emulation): weight shuffled "
        "(16,16) at load unless is_bmm, scales read by their strides"
    )
    vllm_class = "AiterFp8BlockScaledMMKernel"
    preshuffles_weight = True
    act_scale_layout = ScaleLayout.ROW_MAJOR

    def __init__(
        self, accumulation: Accumulation = "blockwise", flavor: str = "aiter-hip", honour_layer_flags: bool = False
    ) -> None:
        super().__init__(accumulation=accumulation, flavor=flavor)
        self.honour_layer_flags = honour_layer_flags

    def can_implement(self, problem: GemmProblem) -> Check:
        check = super().can_implement(problem)
        if not check.ok:
            return check
        return vllm_bpreshuffle_check(problem.platform, problem.n, problem.k, problem.triton_configs)

    def process_weights_after_loading(self, linear: BlockScaledLinear) -> None:
        honoured = linear.direct_read_flags if self.honour_layer_flags else (["is_bmm"] if linear.is_bmm else [])
        if honoured:
            linear.plain_fallback = True
            linear.events.append(
                f"{self.name}: left the weight plain and uses aiter's Triton gemm_a8w8_blockscale "
                f"(honours {', '.join(honoured)})"
            )
            return
        linear.kernel_preshuffle(SHUFFLE, by=f"{self.name}.process_weights_after_loading")

    def contract(self, linear: BlockScaledLinear) -> Contract:
        return Contract(scale=self.act_scale_layout, weight=None if linear.plain_fallback else SHUFFLE)

    def scale_layout_read(self, qa: QuantizedActivation, contract: Contract) -> ScaleLayout:
        return layout_read_by_strides(qa.scale)

    def compute(self, linear: BlockScaledLinear, qa: QuantizedActivation, contract: Contract) -> torch.Tensor:
        scale = values_read_by_strides(qa.scale)
        return block_scaled_mm(qa.fmt.decode(qa.data), scale, linear, contract.weight, self.accumulation)
