"""Calling aiter's released fused RMSNorm + group quant, ``fused_rms_fp8_group_quant``
(amd-aiter 0.1.7.post2.dev18, aiter/ops/triton/fused_fp8_quant.py), on validated arguments.

The released form allocates its own outputs and returns ``((q, scale), q_unquantized, k, residual)``,
with k in q's dtype. Two backends call it: "aiter" when the installed aiter offers this form instead of
the older ``fused_qk_rmsnorm_group_quant``, and "aiter-triton", which loads aiter's Triton code off ROCm.
"""

from __future__ import annotations

from collections.abc import Callable

from ..layouts import ScaleLayout
from ._inputs import NormQuantArgs
from .reference import NormQuantResult


def call_released_op(fn: Callable, args: NormQuantArgs, return_unquantized: bool, producer: str) -> NormQuantResult:
    (q_fp8, scale), q_unquantized, k_out, residual_sum = fn(
        args.q,
        args.q_weight,
        args.q_eps,
        args.k,
        args.k_weight,
        None if args.k is None else args.k_eps,
        args.group_size,
        args.fmt.dtype,
        args.residual,
        return_unquantized,
        transpose_scale=args.scale_layout is ScaleLayout.COL_MAJOR,
    )
    return NormQuantResult(
        q_quant=args.quantized(q_fp8, scale, producer),
        k_normed=k_out,
        q_unquantized=q_unquantized if return_unquantized else None,
        residual_sum=residual_sum,
    )
