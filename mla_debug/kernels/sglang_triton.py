"""``sglang-triton-blockscale``: SGLang 0.5.23's Triton block-FP8 consumer (CPU emulation).

What it models, read from SGLang 0.5.23 ``srt/layers/quantization/fp8_utils.py``:

- the re-layout, ``aiter_w8a8_block_fp8_linear``: on its Triton branch (``use_triton``, on gfx95 with
  ``SGLANG_USE_AITER=1`` and HIP >= 7.2) a pre-quantized input's scale is passed through
  ``view_aiter_fused_rms_transposed_fp8_scale``, i.e. ``torch.as_strided(scale, scale.shape, (1, M))``: the
  (M, G) scale is read as ``memory[g * M + m]`` from its first byte, whatever its strides said
  (`layouts.relay_column_major`). SGLang's producers emit column-major bytes for this consumer
  (``transpose_scale=True``, ``emit_transposed_bpreshuffle_scale``; at M == 1 row-major, where the orders
  coincide), so today's pairs are right; any producer handing it ROW_MAJOR bytes is misread for M > 1, with
  no error - the hazard this kernel reproduces. The GEMM behind the view (aiter's Triton
  ``gemm_a8w8_blockscale``) then reads the view by its strides, which yields exactly those values.
- the plain function, ``triton_w8a8_block_fp8_linear`` -> ``w8a8_block_fp8_matmul_triton``
  (``sglang/kernels/ops/gemm/fp8_kernel.py``, passing ``As.stride(-2), As.stride(-1)``): reads scales by
  strides and re-lays nothing; that is the contract of `vllm-triton-blockscale` and of this kernel with
  ``relayout=False`` (SGLang's Triton path without aiter: CUDA without DeepGEMM, HIP without
  ``SGLANG_USE_AITER``).

``gemm``: what multiplies behind the view - ``"emulation"`` (default, `block_gemm`, runs anywhere) or
``"aiter-triton"``: aiter's own Triton ``gemm_a8w8_blockscale`` (amd-aiter 0.1.7.post2.dev18, launched through
`kernels.aiter_triton`, with aiter's configs for gfx950), handed SGLang's ``as_strided`` view exactly as
SGLang hands it, so the real kernel is the consumer of whatever the view reads; compiled on a CUDA GPU, interpreted on CPU tensors under
``TRITON_INTERPRET=1`` (tiny shapes), unavailable elsewhere (the policy then says why and skips it).

``input_scale_layout`` is the presentation the producer feeding this consumer writes - its own input quant
stands in for that producer: ``"col_major_strided"`` (default, what SGLang's producers hand it),
``"col_major"`` (the ``transpose_scale=True`` bytes before SGLang's view) or ``"row_major"`` (the hazard).
``selection``: ``"sglang-0.5.23"`` (default) takes only the (N, K) of SGLang's hard-coded Triton list on gfx95,
where the branch runs (`engine_rules.sglang_triton_check`); ``"any"`` every shape on a GPU platform. The
default flavor is aiter's HIP group quant (``aiter_per1x128_quant``), what that branch quantizes with.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from ..implementations import Check
from ..layouts import QuantizedActivation, ScaleLayout, relay_column_major, values_relaid
from ..numerics import Fp8Format
from .aiter_triton import gemm_unavailable, launch_gemm
from .base import Contract, GemmProblem, Kernel, register_kernel
from .block_gemm import Accumulation, block_scaled_mm, check_accumulation
from .engine_rules import SGLANG, sglang_triton_check
from .gpu_problem import gpu_gemm_refusal
from .stride_read import layout_read_by_strides, values_read_by_strides

if TYPE_CHECKING:
    from .block_scaled_linear import BlockScaledLinear

SGLANG_0_5_23 = "sglang-0.5.23"
ANY = "any"
SELECTIONS = (SGLANG_0_5_23, ANY)
EMULATION = "emulation"
AITER_TRITON = "aiter-triton"
GEMMS = (EMULATION, AITER_TRITON)
# The configs aiter picks for SGLang's gfx95 path: its MI350X tuning.
AITER_ARCH = "gfx950"


@register_kernel
class SglangTritonBlockscaleKernel(Kernel):
    name = "sglang-triton-blockscale"
    description = (
        "SGLang 0.5.23's Triton block-FP8 consumer (CPU emulation): plain weight, the activation scale re-laid "
        "by as_strided(scale, shape, (1, M)), so its bytes are read column-major whatever the strides say"
    )
    # It reads column-order bytes (with the default re-layout): it wants the transposed scale.
    wants_transposed_act_scale = True
    act_scale_layout = ScaleLayout.COL_MAJOR

    def __init__(
        self,
        input_scale_layout: str = "col_major_strided",
        selection: str = SGLANG_0_5_23,
        relayout: bool = True,
        accumulation: Accumulation = "blockwise",
        flavor: str = "aiter-hip",
        gemm: str = EMULATION,
    ) -> None:
        super().__init__(flavor=flavor)
        if gemm not in GEMMS:
            raise ValueError(f"kernel {self.name!r}: gemm {gemm!r} is not one of {', '.join(GEMMS)}")
        self.gemm = gemm
        self.input_scale_layout = ScaleLayout.parse(input_scale_layout)
        if selection not in SELECTIONS:
            raise ValueError(f"kernel {self.name!r}: selection {selection!r} is not one of {', '.join(SELECTIONS)}")
        self.selection = selection
        self.relayout = relayout
        self.accumulation = check_accumulation(accumulation)

    def availability(self, device: torch.device | None = None) -> Check:
        if self.gemm == EMULATION:
            return super().availability(device)
        probe = (
            torch.device(device) if device is not None else torch.device("cuda" if torch.cuda.is_available() else "cpu")
        )
        why = gemm_unavailable(probe)
        if why is not None:
            return Check(False, f"gemm='aiter-triton' runs aiter's own Triton GEMM, which cannot run here: {why}")
        return Check(True, f"aiter's Triton gemm_a8w8_blockscale behind SGLang's view, on {probe.type} tensors")

    def can_implement(self, problem: GemmProblem) -> Check:
        refusal = gpu_gemm_refusal(problem, f"{SGLANG}'s Triton GEMM")
        if refusal is not None:
            return refusal
        if self.selection == SGLANG_0_5_23:
            return sglang_triton_check(problem.platform, problem.n, problem.k)
        return Check(True, "takes every block-FP8 layer (selection 'any')")

    def contract(self, linear: BlockScaledLinear) -> Contract:
        return Contract(scale=ScaleLayout.COL_MAJOR if self.relayout else ScaleLayout.ROW_MAJOR, weight=None)

    def quantize_input(
        self, x: torch.Tensor, fmt: Fp8Format, scale_layout: ScaleLayout | None = None, ue8m0: bool | None = None
    ) -> QuantizedActivation:
        """Its producer's quantization: the scale in ``input_scale_layout``, whatever this consumer reads."""
        return super().quantize_input(x, fmt, self.input_scale_layout, ue8m0)

    def scale_layout_read(self, qa: QuantizedActivation, contract: Contract) -> ScaleLayout:
        return ScaleLayout.COL_MAJOR if self.relayout else layout_read_by_strides(qa.scale)

    def run(self, linear: BlockScaledLinear, x):
        call = super().run(linear, x)
        if self.gemm == AITER_TRITON:
            call.kernel = f"{self.name} (aiter's Triton gemm_a8w8_blockscale behind the view)"
        return call

    def compute(self, linear: BlockScaledLinear, qa: QuantizedActivation, contract: Contract) -> torch.Tensor:
        name = f"{linear.name} input scale"
        if self.gemm == AITER_TRITON:
            weight = linear.weight
            if not weight.layout.plain or weight.data.shape[1] != weight.k:
                raise ValueError(
                    f"{linear.name}.weight: aiter's Triton GEMM reads a plain (N, K) weight, not {weight.layout}"
                )
            # SGLang hands aiter's GEMM its view of the scale; the GEMM reads the view by its strides.
            scale = relay_column_major(qa.scale, name) if self.relayout else qa.scale
            return launch_gemm(qa.data, weight.data, scale, weight.scale, AITER_ARCH)
        scale = values_relaid(qa.scale, name) if self.relayout else values_read_by_strides(qa.scale)
        return block_scaled_mm(qa.fmt.decode(qa.data), scale, linear, None, self.accumulation)
