"""What every Triton block-scaled GEMM (ours and aiter's) asks of a problem before any shape rule of its
own: a GPU serving platform to model, the fp8 format that platform computes, and K in whole 128-blocks."""

from __future__ import annotations

from ..implementations import Check
from ..numerics import E4M3FN, E4M3FNUZ
from .base import GemmProblem


def gpu_gemm_refusal(problem: GemmProblem, kernels: str) -> Check | None:
    """The first rule `problem` breaks, as a refusing Check naming `kernels` ("Triton GEMMs"), or None."""
    plat = problem.platform
    if not (plat.is_rocm or plat.is_cuda):
        return Check(False, f"{kernels} model GPU serving platforms, not {plat.name}")
    if plat.is_rocm and problem.fmt != plat.fp8:
        return Check(False, f"{plat.arch} computes {plat.fp8.name}, the weight is {problem.fmt.name}")
    if problem.fmt not in (E4M3FN, E4M3FNUZ):
        return Check(False, f"takes e4m3fn or e4m3fnuz, the weight is {problem.fmt.name}")
    if problem.k % 128:
        return Check(False, f"K={problem.k} is not a multiple of 128")
    return None
