"""The pre-fusion path in Triton: an RMSNorm kernel, then a separate per-1x128 group quant kernel.

This is what the fused kernel replaced in DeepSeek-V4 (SEMANTICS 8): one launch normalizes qr and kv to
bf16, one quantizes the bf16 qr for wq_b, and one quantizes the same bf16 qr again inside indexer.wq_b -
three launches, the bf16 qr written once and read twice. Same math as the torch unfused path
(`unfused.py`: fp32 norm, rounding to the activation dtype, quant of the rounded values), so the
results are bitwise equal to it; the difference to the fused op is the one extra rounding.

Both functions take the arguments of their torch counterparts and validate them the same way.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from ..numerics import Fp8Format, QuantFlavor
from . import _triton_support as support
from ._inputs import NormQuantArgs, validate_inputs
from .reference import NormQuantResult
from .triton_fused import check_supported, quantized_activation
from .unfused import V4UnfusedResult


@dataclass
class NormOutputs:
    """What the norm launch writes: q normalized in q's dtype, k normalized, the residual sum."""

    q_normed: torch.Tensor
    k_out: torch.Tensor | None
    residual_sum: torch.Tensor | None


@dataclass
class QuantOutputs:
    """What one quant launch writes."""

    q_bytes: torch.Tensor
    scale: torch.Tensor
    overflow_counter: torch.Tensor | None


def allocate_norm(args: NormQuantArgs) -> NormOutputs:
    m, n1 = args.q.shape
    device = args.q.device
    return NormOutputs(
        q_normed=torch.empty((m, n1), dtype=args.q.dtype, device=device),
        k_out=None if args.k is None else torch.empty(tuple(args.k.shape), dtype=args.k.dtype, device=device),
        residual_sum=None if args.residual is None else torch.empty((m, n1), dtype=args.q.dtype, device=device),
    )


def allocate_quant(args: NormQuantArgs) -> QuantOutputs:
    m, n1 = args.q.shape
    device = args.q.device
    counting = support.quant_constants(args.fmt, args.flavor).COUNT_OVF
    return QuantOutputs(
        q_bytes=torch.empty((m, n1), dtype=torch.uint8, device=device),
        scale=torch.empty((m, n1 // args.group_size), dtype=torch.float32, device=device),
        overflow_counter=torch.zeros(1, dtype=torch.int32, device=device) if counting else None,
    )


def make_norm_launch(
    args: NormQuantArgs, out: NormOutputs, config: support.RowLaunch | None = None, soft_cvt: bool | None = None
) -> Callable[[], None]:
    """The RMSNorm launch (q, residual and k rows in one grid) as a zero-argument callable."""
    support.require_triton("rmsnorm (triton)", args.q.device)
    kernel = support.kernels().rmsnorm_kernel
    m, n1 = args.q.shape
    n2 = 0 if args.k is None else args.k.shape[1]
    config = config or support.launch_for(m, (n1, n2), args.q.device)
    q = args.q
    k = q if args.k is None else args.k
    res = q if args.residual is None else args.residual
    positional = (
        q,
        args.q_weight,
        res,
        k,
        args.q_weight if args.k_weight is None else args.k_weight,
        out.q_normed,
        out.q_normed if out.residual_sum is None else out.residual_sum,
        out.q_normed if out.k_out is None else out.k_out,
        m,
        q.stride(0),
        res.stride(0),
        k.stride(0),
        args.q_eps,
        args.k_eps,
    )
    constants = dict(
        N1=n1,
        N2=max(n2, 1),
        BLOCK_M=config.block_m,
        BLOCK_N1=support.next_pow2(n1),
        BLOCK_N2=support.next_pow2(max(n2, 1)),
        HAS_K=args.k is not None,
        HAS_RES=args.residual is not None,
        GEMMA=args.gemma_norm,
        SOFT=support.interpreting() if soft_cvt is None else bool(soft_cvt),
        SHORT_CHAIN=config.short_chain,
        num_warps=config.num_warps,
    )
    grid = (-(-m // config.block_m), 1 if args.k is None else 2)

    def launch() -> None:
        kernel[grid](*positional, **constants)

    return launch


def make_quant_launch(
    args: NormQuantArgs,
    x: torch.Tensor,
    out: QuantOutputs,
    config: support.RowLaunch | None = None,
    soft_cvt: bool | None = None,
) -> Callable[[], None]:
    """One per-group quant launch of the stored (M, n1) rows `x` as a zero-argument callable."""
    check_supported("group quant (triton)", args)
    support.require_triton("group quant (triton)", x.device)
    kernel = support.kernels().group_quant_kernel
    m, n1 = x.shape
    groups = n1 // args.group_size
    config = config or support.launch_for(m, (n1,), x.device)
    stride_sm, stride_sg = support.scale_strides(args.scale_layout, m, groups)
    ovf = out.scale if out.overflow_counter is None else out.overflow_counter
    positional = (x, out.q_bytes, out.scale, ovf, m, x.stride(0), stride_sm, stride_sg)
    constants = dict(
        N=n1,
        GS=args.group_size,
        BLOCK_M=config.block_m,
        NG=support.next_pow2(groups),
        SOFT=support.interpreting() if soft_cvt is None else bool(soft_cvt),
        SCALES_IN_PLACE=support.scales_in_place(x.device, config),
        num_warps=config.num_warps,
        **support.quant_constants(args.fmt, args.flavor).kwargs(),
    )
    grid = (-(-m // config.block_m),)

    def launch() -> None:
        kernel[grid](*positional, **constants)

    return launch


def _norm_and_quants(args: NormQuantArgs, quants: int) -> tuple[NormOutputs, list[QuantOutputs]]:
    norm = allocate_norm(args)
    outs = [allocate_quant(args) for _ in range(quants)]
    if args.m > 0:
        make_norm_launch(args, norm)()
        for out in outs:
            make_quant_launch(args, norm.q_normed, out)()
    return norm, outs


def triton_norm_then_quant(
    q: torch.Tensor,
    q_weight: torch.Tensor,
    q_eps: float,
    k: torch.Tensor | None = None,
    k_weight: torch.Tensor | None = None,
    k_eps: float | None = None,
    residual: torch.Tensor | None = None,
    group_size: int = 128,
    transpose_scale: bool = False,
    fmt: Fp8Format | torch.dtype | str = "e4m3fn",
    flavor: QuantFlavor | str = "aiter",
    gemma_norm: bool = False,
    return_unquantized: bool = False,
) -> NormQuantResult:
    """`norm_then_quant` in Triton (2 launches: norm to q's dtype, then per-group quant); same result bits.

    >>> qa, kn, _, _ = triton_norm_then_quant(qr, q_norm_w, 1e-6, kv, kv_norm_w)
    """
    op = "norm_then_quant"
    args = validate_inputs(
        op, q, q_weight, q_eps, k, k_weight, k_eps, residual, group_size, transpose_scale, fmt, flavor, gemma_norm
    )
    check_supported(op, args)
    support.require_triton(op, args.q.device)
    norm, (out,) = _norm_and_quants(args, 1)
    return NormQuantResult(
        q_quant=quantized_activation(args, out, op),
        k_normed=norm.k_out,
        q_unquantized=norm.q_normed if return_unquantized else None,
        residual_sum=norm.residual_sum,
    )


def triton_norm_then_quant_for_v4(
    q: torch.Tensor,
    q_weight: torch.Tensor,
    q_eps: float,
    k: torch.Tensor,
    k_weight: torch.Tensor,
    k_eps: float | None = None,
    group_size: int = 128,
    transpose_scale: bool = False,
    fmt: Fp8Format | torch.dtype | str = "e4m3fn",
    flavor: QuantFlavor | str = "aiter",
    gemma_norm: bool = False,
) -> V4UnfusedResult:
    """`norm_then_quant_for_v4` in Triton: norm (qr and kv), quant for wq_b, quant again for indexer.wq_b
    - the three launches the fused op replaced; same result bits as the torch path.

    >>> wq_b_in, indexer_in, kv_n, qr_n = triton_norm_then_quant_for_v4(qr, q_norm_w, 1e-6, kv, kv_norm_w)
    """
    op = "norm_then_quant_for_v4"
    if k is None:
        raise ValueError(f"{op}: k is required (DeepSeek-V4 normalizes kv together with qr)")
    args = validate_inputs(
        op, q, q_weight, q_eps, k, k_weight, k_eps, None, group_size, transpose_scale, fmt, flavor, gemma_norm
    )
    check_supported(op, args)
    support.require_triton(op, args.q.device)
    norm, (first, second) = _norm_and_quants(args, 2)
    assert norm.k_out is not None  # k is required above
    return V4UnfusedResult(
        q_for_wq_b=quantized_activation(args, first, f"{op} (wq_b)"),
        q_for_indexer=quantized_activation(args, second, f"{op} (indexer.wq_b)"),
        k_normed=norm.k_out,
        q_bf16=norm.q_normed,
    )


def make_v4_launch(
    args: NormQuantArgs, config: support.RowLaunch | None = None
) -> tuple[Callable[[], None], NormOutputs, list[QuantOutputs]]:
    """The three V4 pre-fusion launches into preallocated buffers, as one callable (for benchmarks and
    tests; `config` overrides the launch heuristic for all three)."""
    norm = allocate_norm(args)
    outs = [allocate_quant(args), allocate_quant(args)]
    steps = [make_norm_launch(args, norm, config)] + [make_quant_launch(args, norm.q_normed, o, config) for o in outs]

    def launch() -> None:
        for step in steps:
            step()

    return launch, norm, outs
