"""``aiter-triton-blockscale``: aiter's own Triton block-scale GEMM as a swappable kernel.

It runs AMD's code (amd-aiter 0.1.7.post2.dev18, aiter/ops/triton/gemm_a8w8_blockscale.py, loaded without
``import aiter`` and launched by `gpu.aiter_triton`) with aiter's config choice for the ROCm card it stands for
(``config_as``, default the MI355X: aiter's MI350X configs; "mi300x" etc. give its MI300X configs). On an
NVIDIA GPU it is compiled with the AMD-only launch options dropped; on CPU tensors it runs only under
Triton's interpreter when asked for with ``backend="triton"`` (tiny shapes), and ``backend="auto"`` there
computes with the emulation of the same contract, so a triage gives the same verdicts on a laptop.

Its contract is aiter ``gemm_a8w8_blockscale``'s - a plain weight, read in place - except for one thing
the CK kernel does not share: it reads ``x_scale`` and ``w_scale`` by the strides the tensors carry.
What that means for the defects of vLLM PR #51692 (docs/semantics.md §8):

- a ROW_MAJOR scale and a COL_MAJOR_STRIDED one (strides (1, M)) are both read right; only a COL_MAJOR
  "view" buffer - transposed bytes behind row-major strides, what aiter's ``transpose_scale=True``
  producers write - is read wrongly (as ROW_MAJOR), exactly like the CK kernel. So defect 1 (a consumer
  reading the other scale order) shows where the producer writes the "view" layout and this kernel
  consumes it, and cannot show where a producer hands it honestly strided scales;
- it never shuffles a weight, so the load-time defects 2-4 (double shuffle, the shuffled ``wo_a``,
  the shuffled ``kv_b_proj``) come from the preshuffled kernel chosen for the other layers: with this
  kernel in the plain-kernel slot (after ``triton-bpreshuffle``, say) a triage finds them exactly as
  with the emulated plain kernel, and it reads a weight someone else shuffled as plain bytes, wrongly,
  and records the violation.

``selection`` says which layers an engine routes to it (`engine_rules` cites file and function):

- ``"any"`` (default): every layer it can multiply;
- ``"vllm-0.33"``: vLLM 0.33's ``use_triton`` inside AiterFp8BlockScaledMMKernel - not fnuz, and aiter ships
  a tuned ``{arch}-GEMM-A8W8_BLOCKSCALE-N=..-K=...json`` for the rank's (N, K) (the problem's
  ``triton_configs``, probed at M=128), or the platform is gfx1250;
- ``"sglang-0.5.23"``: SGLang 0.5.23's hard-coded Triton shapes on gfx95.

On an NVIDIA platform the rule is applied as on ``config_as``'s ROCm card, as the stand-ins do.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from ..gpu import aiter_triton
from ..implementations import Check
from ..layouts import QuantizedActivation, ScaleLayout
from ..numerics import E4M3FNUZ
from .aiter_emulated import SGLANG_0_5_23, AiterBlockscaleEmulated, check_selection
from .base import Contract, GemmProblem, register_kernel
from .block_gemm import block_scaled_mm
from .engine_rules import sglang_triton_check, vllm_triton_check
from .gpu_problem import gpu_gemm_refusal
from .platforms import platform
from .stride_read import layout_read_by_strides, values_read_by_strides

if TYPE_CHECKING:
    from .block_scaled_linear import BlockScaledLinear

BACKENDS = ("auto", "triton", "emulation")
ANY = "any"
VLLM_0_33 = "vllm-0.33"
SELECTIONS = (ANY, VLLM_0_33, SGLANG_0_5_23)


@register_kernel
class AiterTritonBlockscaleKernel(AiterBlockscaleEmulated):
    name = "aiter-triton-blockscale"
    description = (
        "aiter's own Triton gemm_a8w8_blockscale (amd-aiter 0.1.7.post2.dev18) with aiter's config choice: "
        "plain weight, scales read by their strides"
    )
    vllm_name = None
    stands_in_for = "aiter-blockscale"

    def __init__(
        self, backend: str = "auto", config_as: str = "mi355x", flavor: str = "aiter-hip", selection: str = ANY
    ) -> None:
        super().__init__(accumulation="blockwise", flavor=flavor)
        if backend not in BACKENDS:
            raise ValueError(f"backend {backend!r} is not one of {', '.join(BACKENDS)}")
        self.backend = backend
        self.selection = check_selection(selection, SELECTIONS, self.name)
        self.config_as = platform(config_as)
        if self.config_as.arch not in aiter_triton.ARCH_OF_FP8.values():
            raise ValueError(
                f"config_as={config_as!r}: aiter's Triton configs exist for gfx942 (MI300X) and gfx950 (MI350X), "
                f"not {self.config_as.arch}"
            )

    # -- capability -------------------------------------------------------------------------------
    def availability(self, device: torch.device | None = None) -> Check:
        """Runs everywhere unless ``backend="triton"`` and aiter's Triton cannot run; elsewhere (or with
        ``backend="emulation"``) the emulation of its contract multiplies."""
        where = torch.device(device) if device is not None else None
        probe = where or (torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu"))
        why = aiter_triton.unavailable_reason(probe, interpreter_allowed=self.backend == "triton")
        if self.backend == "triton" and why is not None:
            return Check(False, why)
        if self.backend == "emulation" or why is not None:
            return Check(True, f"runs the emulation of its contract ({why or 'asked for'})")
        return Check(True, f"aiter's Triton GEMM on {probe.type} tensors")

    def can_implement(self, problem: GemmProblem) -> Check:
        refusal = gpu_gemm_refusal(problem, "aiter's Triton GEMM")
        if refusal is not None:
            return refusal
        if problem.platform.is_cuda and problem.fmt == E4M3FNUZ:
            # aiter picks its fp8 type from the device it runs on; on NVIDIA that is always e4m3fn.
            return Check(False, "e4m3fnuz does not exist on NVIDIA GPUs")
        if self.selection == ANY:
            return Check(True, "takes this shape (K is a multiple of 128)")
        as_on = problem.platform if problem.platform.is_rocm else self.config_as
        if self.selection == VLLM_0_33:
            ok, why = vllm_triton_check(as_on, problem.n, problem.k, problem.triton_configs)
        else:
            ok, why = sglang_triton_check(as_on, problem.n, problem.k)
        return Check(ok, why if as_on is problem.platform else f"{why} (selection as on {as_on.name})")

    # -- run time ---------------------------------------------------------------------------------
    def scale_layout_read(self, qa: QuantizedActivation, contract: Contract) -> ScaleLayout:
        """By strides: (1, M)-strided buffers are read column-major, everything else row-major - a COL_MAJOR
        "view" buffer included, whose strides claim row-major."""
        return layout_read_by_strides(qa.scale)

    def uses_triton(self, device: torch.device) -> bool:
        if self.backend == "emulation":
            return False
        why = aiter_triton.unavailable_reason(device, interpreter_allowed=self.backend == "triton")
        if why is None:
            return True
        if self.backend == "triton":
            raise RuntimeError(f"{self.name}: backend='triton' but tensors on {device} cannot run it here: {why}")
        return False

    def compute(self, linear: BlockScaledLinear, qa: QuantizedActivation, contract: Contract) -> torch.Tensor:
        weight = linear.weight
        if weight.data.shape[1] != weight.k:
            raise ValueError(
                f"{linear.name}.weight: bytes are K-padded to {weight.data.shape[1]} (logical K={weight.k}); "
                f"{self.name} reads a plain (N, K) weight"
            )
        if not self.uses_triton(qa.data.device):
            return block_scaled_mm(qa.fmt.decode(qa.data), values_read_by_strides(qa.scale), linear, None, "blockwise")
        return aiter_triton.gemm_a8w8_blockscale(qa.data, weight.data, qa.scale, weight.scale, self.config_as.arch)


def launch_gemm(
    x: torch.Tensor, w: torch.Tensor, x_scale: torch.Tensor, w_scale: torch.Tensor, arch: str
) -> torch.Tensor:
    """aiter's Triton ``gemm_a8w8_blockscale`` with aiter's config for `arch`, the scales read by their strides:
    for the other kernels that hand aiter's GEMM their operands (SGLang's consumer behind its scale view)."""
    return aiter_triton.gemm_a8w8_blockscale(x, w, x_scale, w_scale, arch)


def gemm_unavailable(device: torch.device) -> str | None:
    """None when aiter's Triton GEMM can run on tensors on `device` here (compiled, or interpreted on CPU
    tensors under TRITON_INTERPRET=1), else why not."""
    return aiter_triton.unavailable_reason(device)
