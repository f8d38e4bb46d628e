"""Backend "aiter": aiter's own ``fused_qk_rmsnorm_group_quant`` HIP kernel, on ROCm GPUs.

aiter is imported on first use only. What this adapter relies on, read in ROCm/aiter's sources:
aiter/ops/fused_qk_rmsnorm_group_quant.py (commit 582efef6afc4), re-exported by aiter/__init__.py as
``aiter.fused_qk_rmsnorm_group_quant``; the argument checks of its C++ entry point; and its use in
op_tests/test_fused_qk_rmsnorm_group_quant.py (commit 1fc2d27dd7a9):

- signature ``fused_qk_rmsnorm_group_quant(q_out_quantized, q_out_scale, q, q_weight, q_epsilon,
  q_out_unquantized=None, k_out=None, q_res_out=None, k=None, k_weight=None, k_epsilon=None,
  q_residual=None, group_size=128, transpose_scale=False, gemma_norm=False) -> None``; ``gemma_norm``
  only in newer releases (checked by signature here). The caller allocates every output.
- q_out_quantized (M, n1) of ``aiter.dtypes.fp8`` (e4m3fnuz on gfx942, e4m3fn on gfx950); q_out_scale
  fp32 (M, n1/group_size), with ``transpose_scale`` a contiguous buffer holding the transposed bytes
  (aiter's test allocates ``torch.empty((G, M)).view(M, G)``); k_out and q_res_out needed with k and
  q_residual.
- q bf16/fp16 with last dim contiguous (row stride free); q_weight, k, k_weight, q_residual and every
  output in q's dtype; n1, n2 <= 8192; the scale is amax / dtype max (our "aiter" flavor, except that
  the HIP kernel's reciprocal is a hardware approximation - not bit-comparable, SEMANTICS 2).
"""

from __future__ import annotations

import functools
import importlib.util
import inspect
from collections.abc import Callable

import torch

from .._checks import describe
from ..layouts import ScaleLayout
from ._inputs import NormQuantArgs
from .reference import OP, NormQuantResult, register_builtin_backend


@functools.lru_cache(maxsize=1)
def _aiter_installed() -> bool:
    # cached: backend="auto" asks on every call, and a path search is not free
    return importlib.util.find_spec("aiter") is not None


def aiter_unavailable_reason(device: torch.device) -> str | None:
    """None when aiter's kernel can run on tensors on `device`, else why not."""
    if not _aiter_installed():
        return "aiter is not importable (no module named 'aiter'); it is AMD's ROCm kernel library"
    if device.type != "cuda" or not getattr(torch.version, "hip", None):
        return f"aiter's kernels run on ROCm GPUs, and these tensors are on {device} of a non-ROCm torch build"
    op = _aiter_op()
    return op if isinstance(op, str) else None


@functools.lru_cache(maxsize=1)
def _aiter_op() -> Callable | str:
    """aiter's op, or the reason it cannot be had."""
    try:
        import aiter
    except Exception as err:  # a broken ROCm install raises more than ImportError
        return f"aiter is not importable ({type(err).__name__}: {err})"
    op = getattr(aiter, "fused_qk_rmsnorm_group_quant", None)
    if op is None:
        return f"this aiter ({getattr(aiter, '__file__', '?')}) has no fused_qk_rmsnorm_group_quant (an older release)"
    return op


def _problem(args: NormQuantArgs, fp8: torch.dtype, accepts_gemma: bool) -> tuple[type[Exception], str] | None:
    """What aiter's kernel refuses in this call (the error type a caller raises, and why), or None."""
    if args.flavor.name != "aiter":
        return ValueError, f"{OP}: flavor={args.flavor.name!r}: aiter's kernel implements only the 'aiter' flavor"
    if args.fmt.dtype != fp8:
        return ValueError, (
            f"{OP}: fmt={args.fmt.name}: aiter's kernel writes this GPU's fp8 type {fp8} (aiter.dtypes.fp8) only"
        )
    if args.q.dtype not in (torch.bfloat16, torch.float16):
        return TypeError, f"{OP}: q: {describe(args.q)}: aiter's kernel takes bf16/fp16 q only"
    for name, t in (
        ("q_weight", args.q_weight),
        ("k", args.k),
        ("k_weight", args.k_weight),
        ("residual", args.residual),
    ):
        if t is not None and t.dtype != args.q.dtype:
            return TypeError, f"{OP}: {name}: {describe(t)}: aiter's kernel needs it in q's dtype {args.q.dtype}"
    if args.gemma_norm and not accepts_gemma:
        return ValueError, f"{OP}: gemma_norm=True: this aiter's fused_qk_rmsnorm_group_quant has no gemma_norm"
    return None


def _op_and_rules() -> tuple[Callable, torch.dtype, bool] | str:
    """aiter's op, the fp8 dtype it writes and whether it takes gemma_norm; or why aiter cannot be had."""
    op = _aiter_op()
    if isinstance(op, str):
        return op
    import aiter

    return op, aiter.dtypes.fp8, "gemma_norm" in inspect.signature(op).parameters


def aiter_unsupported_reason(args: NormQuantArgs) -> str | None:
    """Why aiter's kernel cannot take this call (or aiter cannot be had at all), or None when it can."""
    found = _op_and_rules()
    if isinstance(found, str):
        return found
    problem = _problem(args, found[1], found[2])
    return None if problem is None else problem[1]


def _run(args: NormQuantArgs, return_unquantized: bool) -> NormQuantResult:
    found = _op_and_rules()
    if isinstance(found, str):
        raise RuntimeError(f"{OP}: backend 'aiter': {found}")
    op, fp8, accepts_gemma = found
    problem = _problem(args, fp8, accepts_gemma)
    if problem is not None:
        error, reason = problem
        raise error(reason)
    m, n1 = args.q.shape
    groups = n1 // args.group_size
    device, dtype = args.q.device, args.q.dtype
    q_out = torch.empty((m, n1), dtype=args.fmt.dtype, device=device)
    transposed = args.scale_layout is ScaleLayout.COL_MAJOR
    # aiter's own test allocates the transposed buffer as (G, M) viewed (M, G): the same contiguous bytes
    scale = torch.empty((groups, m) if transposed else (m, groups), dtype=torch.float32, device=device)
    scale = scale.view(m, groups)
    unq = torch.empty((m, n1), dtype=dtype, device=device) if return_unquantized else None
    k_out = None if args.k is None else torch.empty(tuple(args.k.shape), dtype=dtype, device=device)
    res_out = None if args.residual is None else torch.empty((m, n1), dtype=dtype, device=device)
    extra = {"gemma_norm": True} if args.gemma_norm else {}
    if m > 0:
        op(
            q_out,
            scale,
            args.q,
            args.q_weight,
            args.q_eps,
            unq,
            k_out,
            res_out,
            args.k,
            args.k_weight,
            None if args.k is None else args.k_eps,
            args.residual,
            args.group_size,
            transposed,
            **extra,
        )
    return NormQuantResult(
        q_quant=args.quantized(q_out, scale, f"{OP} (aiter)"),  # flavor "aiter": checked above
        k_normed=k_out,
        q_unquantized=unq,
        residual_sum=res_out,
    )


register_builtin_backend(
    "aiter",
    _run,
    aiter_unavailable_reason,
    unsupported_reason=aiter_unsupported_reason,
    description="aiter's fused_qk_rmsnorm_group_quant HIP kernel (ROCm GPUs)",
)
