"""``deepgemm``: DeepGEMM's fp8 block GEMM as vLLM 0.33 and SGLang 0.5.23 drive it (CPU emulation).

What it models:

- selection, vLLM 0.33.0 ``model_executor/kernels/linear/scaled_mm/deep_gemm.py``
  ``DeepGemmFp8BlockScaledMMKernel``: CUDA only, Hopper or Blackwell (``is_deep_gemm_supported``), bf16
  output, and ``vllm/utils/deep_gemm.py`` ``should_use_deepgemm_for_fp8_linear``: N % 64 == 0 and
  K % 128 == 0 (SGLang 0.5.23 ``fp8_utils.py`` ``_deepgemm_block_fp8_supported`` asks the same of 128x128
  blocks). Second on vLLM's CUDA ``_POSSIBLE_FP8_BLOCK_KERNELS``, after FlashInfer's M-dispatching kernel
  (which hands M >= 32 to this one); first in SGLang's ``_dispatch_auto_backend``.
- ue8m0: ``VLLM_USE_DEEP_GEMM_E8M0=1`` (vLLM's default, ``envs.py``) makes every scale a power of two - the
  activation quantizer rounds its scales up (``QuantFP8(use_ue8m0=True)``) and the weights are re-quantized
  at load (``deepgemm_post_process_fp8_weight_block`` -> ``requant_weight_ue8m0_inplace``; `deepgemm_weights`).
  ``ue8m0=False`` keeps the checkpoint's fp32 scales. A checkpoint's ``quantization_config.scale_fmt: "ue8m0"``
  changes nothing in vLLM 0.33 beyond that default: ``transformers_utils/config.py`` ``get_config`` sets
  ``VLLM_USE_DEEP_GEMM_E8M0=1`` only when the variable is unset, which is already its value.
- ``follow_scale_fmt``: SGLang 0.5.23 binds the checkpoint's format to the call instead
  (``layers/quantization/fp8.py`` ``Fp8LinearMethod.__init__``: ``act_scale_ue8m0 = scale_fmt == "ue8m0"``,
  ``fp8_utils.py`` ``dispatch_w8a8_block_fp8_linear``), and on Hopper
  ``deepgemm_w8a8_block_fp8_linear_with_fallback`` then quantizes the input with power-of-two scales
  (``sglang_per_token_group_quant_fp8(..., scale_ue8m0=True)``) although DeepGEMM's own scales stay fp32:
  with ``follow_scale_fmt`` the input quant rounds its scales up for a linear whose checkpoint says
  ``scale_fmt`` "ue8m0" (`Kernel.input_ue8m0`); the weights, powers of two already, stay as they are.
- scale layout: the activation quantizer writes column-major TMA-aligned scales (``QuantFP8(
  column_major_scales=True, tma_aligned_scales=VLLM_USE_DEEP_GEMM_TMA_ALIGNED_SCALES)``, default on); on
  Blackwell with ue8m0 (``DeepGemmQuantScaleFMT.UE8M0``) it writes the packed form directly
  (``per_token_group_quant_fp8_packed_for_deepgemm``) and the weight scales are transformed into it at load
  (``transform_sf_into_required_layout``: one packed row per weight row). fp32 scales reach DeepGEMM by
  strides: its host step (DeepGEMM ``get_mn_major_tma_aligned_tensor``) keeps an already TMA-aligned
  MN-major tensor and re-lays any other one by its strides, so a (1, M)-strided or ROW_MAJOR producer is
  right and only a COL_MAJOR "view" buffer is misread.

``packed`` (None: as vLLM decides - on for a layer loaded for Blackwell, ``sm100``, with ue8m0) routes the
scales through DeepGEMM's packed bytes (`layouts.pack_ue8m0`): each scale read is its exponent byte, so a
scale that is not a power of two is truncated to the power of two below it. The emulation computes with
the values those buffers hold (`layouts.tma_aligned_column_major`, `layouts.unpack_ue8m0`), in the
per-128-K-block order of the kernel.

Its own input is quantized with the ``"deepgemm"`` flavor (DeepGEMM's ``per_token_cast_to_fp8``: amax floored
at 1e-4, scale amax / 448), with ue8m0 scales when ``ue8m0`` is on; pass ``flavor`` for the engine's own
quantizer in front of it (``"vllm-cuda"`` for vLLM's QuantFP8 on CUDA, for instance).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from ..implementations import Check
from ..layouts import (
    QuantizedActivation,
    ScaleLayout,
    pack_ue8m0,
    tma_aligned_column_major,
    unpack_ue8m0,
)
from ..numerics import E4M3FN
from .base import Contract, GemmProblem, Kernel, register_kernel
from .block_gemm import block_scaled_mm, expand_weight_scale
from .deepgemm_weights import RECIPES, VLLM_0_33, requant_ue8m0
from .stride_read import layout_read_by_strides, values_read_by_strides

if TYPE_CHECKING:
    from .block_scaled_linear import BlockScaledLinear

BLACKWELL = "sm100"
DEEPGEMM_ARCHES = ("sm90", BLACKWELL)
N_MULTIPLE, K_MULTIPLE = 64, 128
_SOURCE = "vLLM 0.33.0 scaled_mm/deep_gemm.py DeepGemmFp8BlockScaledMMKernel"


@register_kernel
class DeepGemmKernel(Kernel):
    name = "deepgemm"
    description = (
        "DeepGEMM fp8_gemm_nt as vLLM 0.33 / SGLang 0.5.23 drive it (CPU emulation): column-major TMA-aligned "
        "activation scales read by strides, ue8m0 scales (packed four per int32 on Blackwell), weights "
        "re-quantized to ue8m0 at load"
    )
    vllm_name = "DeepGemmFp8BlockScaledMMKernel"
    wants_transposed_act_scale = True
    act_scale_layout = ScaleLayout.COL_MAJOR_STRIDED

    def __init__(
        self,
        ue8m0: bool = True,
        packed: bool | None = None,
        requant: str = VLLM_0_33,
        flavor: str = "deepgemm",
        follow_scale_fmt: bool = False,
    ) -> None:
        super().__init__(flavor=flavor)
        for flag, value in (("ue8m0", ue8m0), ("follow_scale_fmt", follow_scale_fmt)):
            if not isinstance(value, bool):
                raise TypeError(f"kernel {self.name!r}: {flag} must be true or false, got {value!r}")
        if packed is not None and not isinstance(packed, bool):
            raise TypeError(f"kernel {self.name!r}: packed must be true, false or null (as the platform says)")
        if packed and not ue8m0:
            raise ValueError(f"kernel {self.name!r}: packed scales hold ue8m0 exponents; they need ue8m0=True")
        if requant not in RECIPES:
            raise ValueError(f"kernel {self.name!r}: requant {requant!r} is not one of {', '.join(RECIPES)}")
        self.ue8m0 = ue8m0
        self.follow_scale_fmt = follow_scale_fmt
        self.packed = packed
        self.requant = requant

    # -- capability -------------------------------------------------------------------------------
    def can_implement(self, problem: GemmProblem) -> Check:
        plat = problem.platform
        if not plat.is_cuda:
            return Check(False, f"{_SOURCE}: DeepGEMM runs on CUDA platforms, not {plat.name}")
        if plat.arch not in DEEPGEMM_ARCHES:
            return Check(False, f"{_SOURCE}: DeepGEMM supports Hopper (sm90) and Blackwell (sm100), not {plat.arch}")
        if problem.fmt != E4M3FN:
            return Check(False, f"DeepGEMM multiplies e4m3fn, the weight is {problem.fmt.name}")
        if self.packed and plat.arch != BLACKWELL:
            return Check(False, f"packed ue8m0 scales are Blackwell's (sm100) format, not {plat.arch}'s")
        if problem.n % N_MULTIPLE or problem.k % K_MULTIPLE:
            return Check(
                False,
                f"vLLM 0.33.0 utils/deep_gemm.py should_use_deepgemm_for_fp8_linear needs N % 64 == 0 and "
                f"K % 128 == 0 (N={problem.n}, K={problem.k})",
            )
        return Check(True, f"{_SOURCE}: takes (N={problem.n}, K={problem.k}) on {plat.arch}")

    # -- load time --------------------------------------------------------------------------------
    def packs_for(self, linear: BlockScaledLinear) -> bool:
        """Whether this layer's scales go through DeepGEMM's packed int32 form."""
        if self.packed is not None:
            return self.packed
        return self.ue8m0 and linear.platform is not None and linear.platform.arch == BLACKWELL

    def process_weights_after_loading(self, linear: BlockScaledLinear) -> None:
        if self.ue8m0:
            linear.weight = requant_ue8m0(linear.weight, self.requant, name=f"{linear.name}.weight")
            linear.read_cache.clear()
            linear.events.append(f"{self.name}: weight re-quantized to ue8m0 block scales at load ({self.requant})")
        if self.packs_for(linear):
            # DeepGEMM keeps one packed row per weight row; the block scale it multiplies by is what those
            # bytes hold (the same values whenever they are powers of two).
            rows = pack_ue8m0(expand_weight_scale(linear.weight.scale, linear.n), f"{linear.name}.weight scale")
            held = unpack_ue8m0(rows, linear.weight.scale.shape[1])[::128].contiguous()
            if not torch.equal(held, linear.weight.scale):
                linear.weight = type(linear.weight)(
                    linear.weight.data, held, linear.weight.fmt, linear.weight.layout, linear.weight.block
                )
                linear.read_cache.clear()
            linear.events.append(f"{self.name}: weight scales packed four ue8m0 per int32 (Blackwell)")

    # -- run time ---------------------------------------------------------------------------------

    def scale_layout_read(self, qa: QuantizedActivation, contract: Contract) -> ScaleLayout:
        return layout_read_by_strides(qa.scale)

    def compute(self, linear: BlockScaledLinear, qa: QuantizedActivation, contract: Contract) -> torch.Tensor:
        # The scale as DeepGEMM's host step lays it out (by strides), then as the kernel's bytes hold it.
        buffer = tma_aligned_column_major(values_read_by_strides(qa.scale), f"{linear.name} input scale")
        scale = unpack_ue8m0(pack_ue8m0(buffer), qa.groups) if self.packs_for(linear) else buffer
        return block_scaled_mm(qa.fmt.decode(qa.data), scale, linear, None, "blockwise")
