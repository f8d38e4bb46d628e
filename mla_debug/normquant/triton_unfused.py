"""The pre-fusion path in Triton: an RMSNorm kernel, then a separate per-1x128 group quant kernel.

This is what the fused kernel replaced in DeepSeek-V4 (docs/semantics.md §10): one launch normalizes qr and kv to
bf16, one quantizes the bf16 qr for wq_b, and one quantizes the same bf16 qr again inside indexer.wq_b -
three launches, the bf16 qr written once and read twice. Same math as the torch unfused path
(`unfused.py`: fp32 norm, rounding to the activation dtype, quant of the rounded values), so the
results are bitwise equal to it; the difference to the fused op is the one extra rounding. The kernels
and their launches live in the GPU package (`gpu.normquant.launch`).

Both functions take the arguments of their torch counterparts and validate them the same way.
"""

from __future__ import annotations

from ..gpu.normquant import launch, support
from ._inputs import NormQuantArgs
from .entries import norm_quant_op, v4_norm_quant_op
from .reference import NormQuantResult
from .triton_fused import quantized_activation
from .unfused import V4UnfusedResult


def _norm_and_quants(args: NormQuantArgs, quants: int) -> tuple[launch.NormOutputs, list[launch.QuantOutputs]]:
    norm = launch.allocate_norm(args)
    outs = [launch.allocate_quant(args) for _ in range(quants)]
    if args.m > 0:
        launch.make_norm_launch(args, norm)()
        for out in outs:
            launch.make_quant_launch(args, norm.q_normed, out)()
    return norm, outs


@norm_quant_op("norm_then_quant")
def triton_norm_then_quant(args: NormQuantArgs, return_unquantized: bool) -> NormQuantResult:
    """`norm_then_quant` in Triton (2 launches: norm to q's dtype, then per-group quant); same result bits.

    >>> qa, kn, _, _ = triton_norm_then_quant(qr, q_norm_w, 1e-6, kv, kv_norm_w)
    """
    op = "norm_then_quant"
    launch.check_supported(op, args)
    support.require_triton(op, args.q.device)
    norm, (out,) = _norm_and_quants(args, 1)
    return NormQuantResult(
        q_quant=quantized_activation(args, out, op),
        k_normed=norm.k_out,
        q_unquantized=norm.q_normed if return_unquantized else None,
        residual_sum=norm.residual_sum,
    )


@v4_norm_quant_op("norm_then_quant_for_v4")
def triton_norm_then_quant_for_v4(args: NormQuantArgs) -> V4UnfusedResult:
    """`norm_then_quant_for_v4` in Triton: norm (qr and kv), quant for wq_b, quant again for indexer.wq_b
    - the three launches the fused op replaced; same result bits as the torch path.

    >>> wq_b_in, indexer_in, kv_n, qr_n = triton_norm_then_quant_for_v4(qr, q_norm_w, 1e-6, kv, kv_norm_w)
    """
    op = "norm_then_quant_for_v4"
    launch.check_supported(op, args)
    support.require_triton(op, args.q.device)
    norm, (first, second) = _norm_and_quants(args, 2)
    assert norm.k_out is not None  # k is required above
    return V4UnfusedResult(
        q_for_wq_b=quantized_activation(args, first, f"{op} (wq_b)"),
        q_for_indexer=quantized_activation(args, second, f"{op} (indexer.wq_b)"),
        k_normed=norm.k_out,
        q_bf16=norm.q_normed,
    )
