"""Launching the norm + quant kernels: the output buffers, the compile-time constants, the grid.

Each ``make_*`` function does everything but the launch itself once - checks, the launch configuration
(`support.launch_for` unless one is given), the kernels' compile-time constants - and returns a
zero-argument callable that launches into preallocated buffers, so that the ops, the benchmarks and CUDA
graphs share one launch and time only the kernel.

The fused launch (`make_launch`, the ``"triton"`` backend of ``fused_qk_rmsnorm_group_quant``): grid (row
blocks, 2); program (i, 0) adds the residual, normalizes a block of q rows in fp32 and quantizes them per
1 x group_size group straight from the fp32 values (group amax, scale, fp8 bytes all in registers),
writing the scale ROW_MAJOR (offset m*G + g) or COL_MAJOR "view" (g*M + m); program (i, 1) normalizes the
same rows of k to k's dtype. With many rows the launch heuristic gives each program both (grid (row
blocks, 1), `RowLaunch.k_with_q`), which pays a program's fixed costs once. Inputs may be row-strided
views (``torch.split``); nothing is copied.

The pre-fusion launches (`make_norm_launch`, `make_quant_launch`, and `make_v4_launch` for DeepSeek-V4's
three): one normalizes q (plus residual) and k to their dtypes, one quantizes stored rows per group.

A launch reads the call's validated arguments (`RowArgs`: what normquant's ``NormQuantArgs`` holds);
this package does not import normquant, which builds on it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import torch

from ...layouts import ScaleLayout
from ...numerics import Fp8Format, QuantFlavor
from . import support

# The op the fused kernel implements, named in its errors.
FUSED_OP = "fused_qk_rmsnorm_group_quant"


class RowArgs(Protocol):
    """The validated arguments of one call, as a launch reads them."""

    @property
    def q(self) -> torch.Tensor: ...
    @property
    def q_weight(self) -> torch.Tensor: ...
    @property
    def q_eps(self) -> float: ...
    @property
    def k(self) -> torch.Tensor | None: ...
    @property
    def k_weight(self) -> torch.Tensor | None: ...
    @property
    def k_eps(self) -> float: ...
    @property
    def residual(self) -> torch.Tensor | None: ...
    @property
    def group_size(self) -> int: ...
    @property
    def scale_layout(self) -> ScaleLayout: ...
    @property
    def fmt(self) -> Fp8Format: ...
    @property
    def flavor(self) -> QuantFlavor: ...
    @property
    def gemma_norm(self) -> bool: ...


@dataclass
class FusedOutputs:
    """Buffers one fused launch writes: q bytes (uint8 view), scale (M, G), and the optional outputs."""

    q_bytes: torch.Tensor
    scale: torch.Tensor
    k_out: torch.Tensor | None
    q_unquantized: torch.Tensor | None
    residual_sum: torch.Tensor | None
    overflow_counter: torch.Tensor | None


def allocate_outputs(args: RowArgs, return_unquantized: bool) -> FusedOutputs:
    m, n1 = args.q.shape
    device = args.q.device

    def like_q() -> torch.Tensor:
        return torch.empty((m, n1), dtype=args.q.dtype, device=device)

    counter = None
    if support.quant_constants(args.fmt, args.flavor).COUNT_OVF:
        counter = torch.zeros(1, dtype=torch.int32, device=device)
    return FusedOutputs(
        q_bytes=torch.empty((m, n1), dtype=torch.uint8, device=device),
        # Always a contiguous (M, G) buffer: COL_MAJOR ("view") is a byte order inside it, not strides.
        scale=torch.empty((m, n1 // args.group_size), dtype=torch.float32, device=device),
        k_out=None if args.k is None else torch.empty(tuple(args.k.shape), dtype=args.k.dtype, device=device),
        q_unquantized=like_q() if return_unquantized else None,
        residual_sum=like_q() if args.residual is not None else None,
        overflow_counter=counter,
    )


def _row_launch(args: RowArgs) -> support.RowLaunch:
    """The heuristic launch of a kernel over the rows of q and k."""
    n2 = 0 if args.k is None else args.k.shape[1]
    return support.launch_for(args.q.shape[0], (args.q.shape[1], n2), args.q.device)


def _inputs(args: RowArgs) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(q, q_weight, residual, k, k_weight), the norm kernels' first arguments; an absent tensor's place
    holds q (or q's weight), which the kernel never reads there."""
    q = args.q
    res = q if args.residual is None else args.residual
    k = q if args.k is None else args.k
    return q, args.q_weight, res, k, args.q_weight if args.k_weight is None else args.k_weight


def _soft(soft_cvt: bool | None) -> bool:
    """The kernels' SOFT: forced by `soft_cvt`, else the integer conversions only under the interpreter."""
    return support.interpreting() if soft_cvt is None else bool(soft_cvt)


def _norm_constants(args: RowArgs, config: support.RowLaunch, soft_cvt: bool | None) -> dict:
    """The compile-time constants (and warps) of the norm both kernels run over the q and k rows."""
    n2 = 0 if args.k is None else args.k.shape[1]
    return dict(
        N1=args.q.shape[1],
        N2=max(n2, 1),
        BLOCK_M=config.block_m,
        BLOCK_N2=support.next_pow2(max(n2, 1)),
        HAS_K=args.k is not None,
        HAS_RES=args.residual is not None,
        GEMMA=args.gemma_norm,
        SOFT=_soft(soft_cvt),
        SHORT_CHAIN=config.short_chain,
        num_warps=config.num_warps,
    )


def make_launch(
    args: RowArgs, outputs: FusedOutputs, config: support.RowLaunch | None = None, soft_cvt: bool | None = None
) -> Callable[[], None]:
    """A zero-argument callable that runs the fused kernel on `args` into `outputs` (one launch).

    Everything but the launch itself is done here once, so benchmarks and CUDA graphs time only the
    kernel. `soft_cvt` forces the integer fp8/bf16 conversions (default: only under the interpreter).
    The overflow counter, if any, accumulates: zero it before each launch that is to be read.
    """
    check_supported(FUSED_OP, args)
    support.require_triton(FUSED_OP, args.q.device)
    module = support.kernels()
    config = config or _row_launch(args)
    m, n1 = args.q.shape
    groups = n1 // args.group_size
    stride_sm, stride_sg = support.scale_strides(args.scale_layout, m, groups)
    q, q_weight, res, k, k_weight = _inputs(args)
    placeholder = outputs.q_bytes
    ovf = outputs.overflow_counter if outputs.overflow_counter is not None else outputs.scale
    grid = (-(-m // config.block_m), 1 if args.k is None or config.k_with_q else 2)
    positional = (
        q,
        q_weight,
        res,
        k,
        k_weight,
        outputs.q_bytes,
        outputs.scale,
        placeholder if outputs.q_unquantized is None else outputs.q_unquantized,
        placeholder if outputs.residual_sum is None else outputs.residual_sum,
        placeholder if outputs.k_out is None else outputs.k_out,
        ovf,
        m,
        q.stride(0),
        res.stride(0),
        k.stride(0),
        stride_sm,
        stride_sg,
        args.q_eps,
        args.k_eps,
    )
    constants = dict(
        _norm_constants(args, config, soft_cvt),
        GS=args.group_size,
        NG=support.next_pow2(groups),
        HAS_UNQ=outputs.q_unquantized is not None,
        SCALES_IN_PLACE=support.scales_in_place(args.q.device, config),
        K_WITH_Q=config.k_with_q,
        QUANT=support.quant_constants(args.fmt, args.flavor),
    )
    kernel = module.fused_norm_quant_kernel

    def launch() -> None:
        kernel[grid](*positional, **constants)

    return launch


def unsupported_reason(op: str, args: RowArgs) -> str | None:
    """Why the Triton kernels cannot take this call beyond `validate_inputs`' rules (which every backend
    shares), or None when they can."""
    gs = args.group_size
    if gs & (gs - 1):
        return (
            f"{op}: group_size={gs} is not a power of two; the Triton kernels tile a row as "
            "(groups, group_size) blocks, whose sizes must be powers of two (use backend='torch')"
        )
    flavor = args.flavor
    if flavor.scale_rule == "torch_scalar_divide" or flavor.zero_scale is not None:
        return (
            f"{op}: flavor {flavor.name!r} divides by a Python float the way torch does, which rounds "
            "differently on the CPU and on a GPU, and replaces a zero scale; the Triton kernels do not "
            "implement it (use backend='torch')"
        )
    if flavor.quotient == "times_max_over_amax" or flavor.nan_clamps_to_min:
        return (
            f"{op}: flavor {flavor.name!r} multiplies by max/amax or clamps NaN to -max (C++ fminf/fmaxf); the "
            "Triton kernels implement only x * (1/scale) and x / scale with a NaN-keeping clamp (use backend='torch')"
        )
    return None


def check_supported(op: str, args: RowArgs) -> None:
    """Raise `unsupported_reason`'s reason as a ValueError."""
    reason = unsupported_reason(op, args)
    if reason is not None:
        raise ValueError(reason)


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


def allocate_norm(args: RowArgs) -> NormOutputs:
    m, n1 = args.q.shape
    device = args.q.device
    return NormOutputs(
        q_normed=torch.empty((m, n1), dtype=args.q.dtype, device=device),
        k_out=None if args.k is None else torch.empty(tuple(args.k.shape), dtype=args.k.dtype, device=device),
        residual_sum=None if args.residual is None else torch.empty((m, n1), dtype=args.q.dtype, device=device),
    )


def allocate_quant(args: RowArgs) -> QuantOutputs:
    m, n1 = args.q.shape
    device = args.q.device
    counting = support.quant_constants(args.fmt, args.flavor).COUNT_OVF
    return QuantOutputs(
        q_bytes=torch.empty((m, n1), dtype=torch.uint8, device=device),
        scale=torch.empty((m, n1 // args.group_size), dtype=torch.float32, device=device),
        overflow_counter=torch.zeros(1, dtype=torch.int32, device=device) if counting else None,
    )


def make_norm_launch(
    args: RowArgs, out: NormOutputs, config: support.RowLaunch | None = None, soft_cvt: bool | None = None
) -> Callable[[], None]:
    """The RMSNorm launch (q, residual and k rows in one grid) as a zero-argument callable."""
    support.require_triton("rmsnorm (triton)", args.q.device)
    kernel = support.kernels().rmsnorm_kernel
    config = config or _row_launch(args)
    m = args.q.shape[0]
    q, q_weight, res, k, k_weight = _inputs(args)
    positional = (
        q,
        q_weight,
        res,
        k,
        k_weight,
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
    constants = dict(_norm_constants(args, config, soft_cvt), BLOCK_N1=support.next_pow2(args.q.shape[1]))
    grid = (-(-m // config.block_m), 1 if args.k is None else 2)

    def launch() -> None:
        kernel[grid](*positional, **constants)

    return launch


def make_quant_launch(
    args: RowArgs,
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
        SOFT=_soft(soft_cvt),
        SCALES_IN_PLACE=support.scales_in_place(x.device, config),
        num_warps=config.num_warps,
        QUANT=support.quant_constants(args.fmt, args.flavor),
    )
    grid = (-(-m // config.block_m),)

    def launch() -> None:
        kernel[grid](*positional, **constants)

    return launch


def make_v4_launch(
    args: RowArgs, config: support.RowLaunch | None = None
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
