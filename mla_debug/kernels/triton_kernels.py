"""Triton block-scaled FP8 GEMMs with the aiter kernels' contracts, for NVIDIA GPUs.

- ``triton-blockscale`` stands in for aiter ``gemm_a8w8_blockscale``: plain weight, ROW_MAJOR scale bytes.
- ``triton-bpreshuffle`` stands in for ``gemm_a8w8_blockscale_bpreshuffle``: weight shuffled (16, 16) at
  load and read in that byte order, COL_MAJOR scale bytes whatever the strides claim, the same
  ``honour_layer_flags`` switch (vLLM PR #56433) and the same ``selection`` rules (the tuned-table rule,
  or SGLang 0.5.23's).

They carry the aiter kernels' capability flags, so every scenario runs on a GPU unchanged and the silent
layout bugs reproduce on NVIDIA hardware. On an NVIDIA platform the preshuffled kernel is chosen as the
engine would choose on the ROCm card `tuned_as` names (default the MI355X: aiter's tuned table for its
(gfx, cu_num), or SGLang's gfx95 rule) - because no table exists for NVIDIA GPUs.

Where Triton cannot run (CPU tensors without TRITON_INTERPRET=1) the kernels compute with the aiter
emulation's code, which reads the same bytes in the same order, so a triage gives the same verdicts on a
laptop and on a GPU; ``backend="triton"`` forbids that fallback, ``backend="emulation"`` forces it.

The multiply itself is the GPU wing's (`gpu.gemm.triton_block_scaled_mm`: checks, launch heuristics,
the Triton and Gluon kernels); these classes add the contracts, the platform rules and the fallback.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

import torch

from ..gpu.gemm import runs_on, triton_block_scaled_mm, triton_status
from ..implementations import Check
from ..layouts import QuantizedActivation
from .aiter_emulated import (
    SGLANG_0_5_23,
    SHUFFLE,
    TUNED_ROW,
    AiterBlockscaleEmulated,
    AiterBpreshuffleEmulated,
    tuned_row_check,
)
from .base import Contract, GemmProblem, register_kernel
from .block_gemm import Accumulation
from .engine_rules import sglang_bpreshuffle_check
from .gpu_problem import gpu_gemm_refusal
from .platforms import platform

if TYPE_CHECKING:
    from .block_scaled_linear import BlockScaledLinear

BACKENDS = ("auto", "triton", "emulation")


class _TritonGemm:
    """Where the multiply runs (Triton or the emulation) and the platform checks shared by both kernels."""

    stands_in_for: ClassVar[str]
    backend: str

    def _set_backend(self, backend: str) -> None:
        if backend not in BACKENDS:
            raise ValueError(f"backend {backend!r} is not one of {', '.join(BACKENDS)}")
        self.backend = backend

    def availability(self, device: torch.device | None = None) -> Check:
        """Runs everywhere unless ``backend="triton"`` and Triton cannot; where Triton cannot run (or
        ``backend="emulation"``), the aiter emulation's code multiplies, reading the same bytes."""
        ok, why = triton_status()
        if self.backend == "triton" and not ok:
            return Check(False, why)
        if self.backend == "emulation" or not ok:
            return Check(True, f"runs the {self.stands_in_for} emulation's code ({why})")
        if device is None:
            return Check(True, f"Triton on CUDA tensors ({why}); the {self.stands_in_for} emulation's code elsewhere")
        device = torch.device(device)
        if runs_on(device, allow_interpreter=self.backend == "triton"):
            return Check(True, f"Triton on {device.type} tensors ({why})")
        if self.backend == "triton":
            return Check(False, f"backend='triton', and Triton does not run on {device.type} tensors here")
        return Check(True, f"runs the {self.stands_in_for} emulation's code on {device.type} tensors")

    def uses_triton(self, device: torch.device) -> bool:
        """Triton for CUDA tensors ("auto" or "triton"); the CPU interpreter only when asked by name."""
        if self.backend == "emulation":
            return False
        if runs_on(device, allow_interpreter=self.backend == "triton"):
            return True
        if self.backend == "triton":
            raise RuntimeError(
                f"{self.name}: backend='triton' but tensors on {device} cannot go through Triton here "  # type: ignore[attr-defined]
                f"({triton_status()[1]}); use backend='auto' to fall back to the emulation"
            )
        return False

    def platform_check(self, problem: GemmProblem) -> Check:
        refusal = gpu_gemm_refusal(problem, "Triton GEMMs")
        if refusal is not None:
            return refusal
        if problem.n % 16:
            return Check(False, f"N={problem.n} is not a multiple of 16")
        return Check(True, "takes this shape (N % 16 == 0, K % 128 == 0)")

    def compute(self, linear: BlockScaledLinear, qa: QuantizedActivation, contract: Contract) -> torch.Tensor:
        """The Triton GEMM, or the emulation's code (the aiter class next in the MRO) where Triton cannot run."""
        if not self.uses_triton(qa.data.device):
            return super().compute(linear, qa, contract)  # type: ignore[misc]
        weight = linear.weight
        if contract.weight not in (None, SHUFFLE):
            raise ValueError(f"{linear.name}: the Triton GEMM reads plain or (16, 16) weights, not {contract.weight}")
        return triton_block_scaled_mm(
            qa.data,
            qa.scale,
            contract.scale,
            weight.data,
            weight.scale,
            weight.k,
            qa.fmt,
            shuffled=contract.weight is not None,
            name=f"{linear.name} ({self.name})",  # type: ignore[attr-defined]
        )


@register_kernel
class TritonBlockscaleKernel(_TritonGemm, AiterBlockscaleEmulated):
    name = "triton-blockscale"
    description = (
        "Triton block-scaled FP8 GEMM with aiter gemm_a8w8_blockscale's contract: plain weight, ROW_MAJOR scale bytes"
    )
    vllm_name = None
    stands_in_for = "aiter-blockscale"

    def __init__(
        self, backend: str = "auto", accumulation: Accumulation = "blockwise", flavor: str = "aiter-hip"
    ) -> None:
        super().__init__(accumulation=accumulation, flavor=flavor)
        self._set_backend(backend)

    def can_implement(self, problem: GemmProblem) -> Check:
        return self.platform_check(problem)


@register_kernel
class TritonBpreshuffleKernel(_TritonGemm, AiterBpreshuffleEmulated):
    name = "triton-bpreshuffle"
    description = (
        "Triton block-scaled FP8 GEMM with aiter gemm_a8w8_blockscale_bpreshuffle's contract: weight "
        "shuffled (16,16) at load and read so, COL_MAJOR scale bytes whatever the strides say"
    )
    vllm_name = None
    stands_in_for = "aiter-bpreshuffle"

    def __init__(
        self,
        backend: str = "auto",
        honour_layer_flags: bool = True,
        tuned_as: str = "mi355x",
        accumulation: Accumulation = "blockwise",
        flavor: str = "aiter-hip",
        selection: str = TUNED_ROW,
    ) -> None:
        super().__init__(
            accumulation=accumulation, flavor=flavor, honour_layer_flags=honour_layer_flags, selection=selection
        )
        self._set_backend(backend)
        self.tuned_as = platform(tuned_as)
        if not self.tuned_as.is_rocm:
            raise ValueError(f"tuned_as={tuned_as!r} must name a ROCm platform (aiter's tables are per AMD card)")

    def can_implement(self, problem: GemmProblem) -> Check:
        check = self.platform_check(problem)
        if not check.ok:
            return check
        # The engine's rule decides exactly as for aiter; on NVIDIA, as on the ROCm card named by tuned_as.
        on_rocm = problem.platform.is_rocm
        as_on = problem.platform if on_rocm else self.tuned_as
        if self.selection == SGLANG_0_5_23:
            ok, why = sglang_bpreshuffle_check(as_on, problem.n, problem.k)
        else:
            ok, why = tuned_row_check(problem, as_on)
        return Check(ok, why if on_rocm else f"{why} (selection as on {self.tuned_as.name})")
