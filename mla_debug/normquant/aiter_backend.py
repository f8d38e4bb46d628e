"""Backend "aiter": aiter's own fused RMSNorm + group quant, on ROCm GPUs with ``import aiter`` working.

aiter is imported on first use only. Two forms of the op exist, and the adapter runs the one the
installed aiter offers, naming it in the result's ``producer``:

- ``aiter.fused_qk_rmsnorm_group_quant`` (HIP; newer aiter, re-exported by aiter/__init__.py from
  aiter/ops/fused_qk_rmsnorm_group_quant.py, commit 582efef6afc4), preferred where present. Signature
  ``(q_out_quantized, q_out_scale, q, q_weight, q_epsilon, q_out_unquantized=None, k_out=None,
  q_res_out=None, k=None, k_weight=None, k_epsilon=None, q_residual=None, group_size=128,
  transpose_scale=False, gemma_norm=False) -> None``; ``gemma_norm`` only in newer releases (checked by
  signature here). The caller allocates every output: q_out_quantized (M, n1) of ``aiter.dtypes.fp8``,
  q_out_scale fp32 (M, n1/group_size), with ``transpose_scale`` a contiguous buffer holding the transposed
  bytes (aiter's test allocates ``torch.empty((G, M)).view(M, G)``); k_out and q_res_out with k and
  q_residual; every tensor in q's dtype. Its quant recipe is taken to be the fused one (docs/semantics.md §11:
  amax floor 1e-10, amax / max); its HIP source is not in the pinned release, so that is not checked.
- the Triton ``fused_rms_fp8_group_quant`` (aiter/ops/triton/fused_fp8_quant.py in the released
  amd-aiter 0.1.7.post2.dev18, aiter/ops/triton/quant/fused_fp8_quant.py later), which the released
  aiter has instead: it allocates its own outputs and returns ``((q, scale), q_unquantized, k, residual)``
  with k in q's dtype, and quantizes with the "aiter-fused" flavor, byte for byte (tests/aiter_reference).

Both take bf16/fp16 q (last dim contiguous, row stride free) and n1, n2 <= 8192. Off ROCm, the same
Triton code runs through the real-aiter loader as backend "aiter-triton".
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import inspect
from collections.abc import Callable
from dataclasses import dataclass

import torch

from .._checks import describe
from ..layouts import ScaleLayout
from ._inputs import NormQuantArgs
from .reference import OP, NormQuantResult, register_builtin_backend
from .released_op import call_released_op


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


HIP_OP = "fused_qk_rmsnorm_group_quant"
TRITON_OP = "fused_rms_fp8_group_quant"
# Where the released and the later aiter keep the Triton op.
TRITON_MODULES = ("aiter.ops.triton.fused_fp8_quant", "aiter.ops.triton.quant.fused_fp8_quant")


@dataclass(frozen=True)
class NativeOp:
    """The form of aiter's fused op this process has: "hip" (caller allocates) or "triton" (allocates itself)."""

    kind: str
    fn: Callable
    where: str

    @property
    def producer(self) -> str:
        name = HIP_OP if self.kind == "hip" else TRITON_OP
        return f"{OP} (aiter {'HIP' if self.kind == 'hip' else 'Triton'} {name})"


@functools.lru_cache(maxsize=1)
def _aiter_op() -> NativeOp | str:
    """The op the installed aiter offers, or the reason none can be had."""
    try:
        import aiter
    except Exception as err:  # a broken ROCm install raises more than ImportError
        return f"aiter is not importable ({type(err).__name__}: {err})"
    hip = getattr(aiter, HIP_OP, None)
    if hip is not None:
        return NativeOp("hip", hip, f"aiter.{HIP_OP}")
    for module in TRITON_MODULES:
        try:
            triton_op = getattr(importlib.import_module(module), TRITON_OP, None)
        except ImportError:
            continue
        if triton_op is not None:
            return NativeOp("triton", triton_op, f"{module}.{TRITON_OP}")
    return (
        f"this aiter ({getattr(aiter, '__file__', '?')}) has neither {HIP_OP} nor the Triton {TRITON_OP} "
        f"(looked in {', '.join(TRITON_MODULES)})"
    )


def _problem(args: NormQuantArgs, fp8: torch.dtype, op: NativeOp) -> tuple[type[Exception], str] | None:
    """What aiter's op refuses in this call (the error type a caller raises, and why), or None."""
    if args.flavor.name not in ("aiter-fused", "aiter"):
        return ValueError, (
            f"{OP}: flavor={args.flavor.name!r}: aiter's fused op quantizes with its own recipe, flavor 'aiter-fused'"
        )
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
    if args.gemma_norm:
        accepts_gemma = op.kind == "hip" and "gemma_norm" in inspect.signature(op.fn).parameters
        if not accepts_gemma:
            return ValueError, f"{OP}: gemma_norm=True: this aiter's {op.where} has no gemma_norm"
    return None


def _op_and_dtype() -> tuple[NativeOp, torch.dtype] | str:
    """aiter's op and the fp8 dtype it writes; or why aiter cannot be had."""
    op = _aiter_op()
    if isinstance(op, str):
        return op
    import aiter

    return op, aiter.dtypes.fp8


def aiter_unsupported_reason(args: NormQuantArgs) -> str | None:
    """Why aiter's op cannot take this call (or aiter cannot be had at all), or None when it can."""
    found = _op_and_dtype()
    if isinstance(found, str):
        return found
    problem = _problem(args, found[1], found[0])
    return None if problem is None else problem[1]


def _run_hip(op: NativeOp, args: NormQuantArgs, return_unquantized: bool) -> NormQuantResult:
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
        op.fn(
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
    return NormQuantResult(args.quantized(q_out, scale, op.producer), k_out, unq, res_out)


def _run_triton(op: NativeOp, args: NormQuantArgs, return_unquantized: bool) -> NormQuantResult:
    return call_released_op(op.fn, args, return_unquantized, op.producer)


def _run(args: NormQuantArgs, return_unquantized: bool) -> NormQuantResult:
    found = _op_and_dtype()
    if isinstance(found, str):
        raise RuntimeError(f"{OP}: backend 'aiter': {found}")
    op, fp8 = found
    problem = _problem(args, fp8, op)
    if problem is not None:
        error, reason = problem
        raise error(reason)
    if op.kind == "hip":
        return _run_hip(op, args, return_unquantized)
    return _run_triton(op, args, return_unquantized)


register_builtin_backend(
    "aiter",
    _run,
    aiter_unavailable_reason,
    unsupported_reason=aiter_unsupported_reason,
    description=(
        "aiter's fused op on ROCm GPUs: the HIP fused_qk_rmsnorm_group_quant, else the released Triton "
        "fused_rms_fp8_group_quant"
    ),
)
