"""Backend "aiter-triton": aiter's own Triton ``fused_rms_fp8_group_quant``, run off ROCm.

The released form of aiter's fused RMSNorm + group quant (amd-aiter 0.1.7.post2.dev18,
aiter/ops/triton/fused_fp8_quant.py), loaded by `mla_debug.real_aiter` and launched by the GPU wing
(`gpu.aiter_triton`): compiled on CUDA GPUs, and on CPU tensors under ``TRITON_INTERPRET=1`` when asked
for by name (tiny shapes; the interpreter's fp32 -> bf16/fp8 casts differ from compiled Triton's).
"auto" never picks it: it is here to run aiter's code next to ours, on the same inputs.

What aiter's op does differently from the torch reference, and what this adapter refuses:
- it quantizes with its own recipe, the "aiter-fused" flavor (the "aiter" name is the same recipe);
- it sums squares in fp32 (the reference sums in float64 and rounds once), so q and its scale can differ
  by an ulp where that sum rounds differently (tests/aiter_reference states the bound);
- it writes k normalized in q's dtype, so k must have q's dtype; it has no gemma_norm.
"""

from __future__ import annotations

import torch

from .._checks import describe
from ..gpu import aiter_triton
from ._inputs import NormQuantArgs
from .reference import OP, NormQuantResult, register_builtin_backend
from .released_op import call_released_op

NAME = "aiter-triton"
PRODUCER = f"{OP} (aiter Triton fused_rms_fp8_group_quant)"
# The recipe aiter's _fp8_quant_op implements, under both of its names.
FLAVORS = ("aiter-fused", "aiter")


def unavailable_reason(device: torch.device) -> str | None:
    return aiter_triton.unavailable_reason(device)


def interpreted_on(device: torch.device) -> bool:
    return device.type == "cpu"


def _problem(args: NormQuantArgs) -> tuple[type[Exception], str] | None:
    """What aiter's op cannot do in this call (the error type a caller raises, and why), or None."""
    if args.flavor.name not in FLAVORS:
        return ValueError, (
            f"{OP}: flavor={args.flavor.name!r}: aiter's fused_rms_fp8_group_quant quantizes with its own "
            "recipe, flavor 'aiter-fused'"
        )
    if args.gemma_norm:
        return ValueError, f"{OP}: gemma_norm=True: aiter's Triton fused_rms_fp8_group_quant has no gemma_norm"
    if args.k is not None and args.k.dtype != args.q.dtype:
        return TypeError, f"{OP}: k: {describe(args.k)}: aiter's Triton op writes k in q's dtype {args.q.dtype}"
    if args.group_size & (args.group_size - 1):
        return ValueError, f"{OP}: group_size={args.group_size}: aiter's Triton op tiles rows in powers of two"
    return None


def unsupported_reason(args: NormQuantArgs) -> str | None:
    problem = _problem(args)
    return None if problem is None else problem[1]


def check(args: NormQuantArgs) -> None:
    """What aiter's op cannot do, as errors naming the argument and the rule."""
    problem = _problem(args)
    if problem is not None:
        error, reason = problem
        raise error(reason)


def _empty(args: NormQuantArgs, return_unquantized: bool) -> NormQuantResult:
    """M == 0: aiter's launch grid would be empty; the outputs are empty tensors of the right shapes."""
    n1, device = args.q.shape[1], args.q.device
    scale = torch.empty((0, n1 // args.group_size), dtype=torch.float32, device=device)
    empty = torch.empty((0, n1), dtype=args.q.dtype, device=device)
    return NormQuantResult(
        q_quant=args.quantized(torch.empty((0, n1), dtype=args.fmt.dtype, device=device), scale, PRODUCER),
        k_normed=None if args.k is None else torch.empty(tuple(args.k.shape), dtype=args.q.dtype, device=device),
        q_unquantized=empty if return_unquantized else None,
        residual_sum=None if args.residual is None else empty.clone(),
    )


def _run(args: NormQuantArgs, return_unquantized: bool) -> NormQuantResult:
    check(args)
    if args.m == 0:
        return _empty(args, return_unquantized)
    return call_released_op(aiter_triton.fused_rms_fp8_group_quant, args, return_unquantized, PRODUCER)


register_builtin_backend(
    NAME,
    _run,
    unavailable_reason,
    interpreted_on,
    unsupported_reason,
    description="aiter's own Triton fused_rms_fp8_group_quant (amd-aiter, pinned), off ROCm",
)
