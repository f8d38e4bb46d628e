"""The Triton backend of ``fused_qk_rmsnorm_group_quant``: one launch for the q rows and the k rows.

Grid (row blocks, 2): program (i, 0) adds the residual, normalizes a block of q rows in fp32 and
quantizes them per 1 x group_size group straight from the fp32 values (group amax, scale, fp8 bytes
all in registers), writing the scale ROW_MAJOR (offset m*G + g) or COL_MAJOR "view" (g*M + m);
program (i, 1) normalizes the same rows of k to k's dtype. With many rows the launch heuristic gives
each program both (grid (row blocks, 1), `RowLaunch.k_with_q`), which pays a program's fixed costs
once. Inputs may be row-strided views (``torch.split``); nothing is copied. The rounding steps are the
torch reference's, so scales and bytes agree bit for bit (see `_triton_kernels`).

Registered as backend ``"triton"``: ``"auto"`` picks it for CUDA tensors; CPU tensors go through it
only when asked for explicitly under ``TRITON_INTERPRET=1``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from ..layouts import QuantizedActivation
from . import _triton_support as support
from ._inputs import NormQuantArgs
from .reference import OP, NormQuantResult, register_builtin_backend


@dataclass
class FusedOutputs:
    """Buffers one fused launch writes: q bytes (uint8 view), scale (M, G), and the optional outputs."""

    q_bytes: torch.Tensor
    scale: torch.Tensor
    k_out: torch.Tensor | None
    q_unquantized: torch.Tensor | None
    residual_sum: torch.Tensor | None
    overflow_counter: torch.Tensor | None


def allocate_outputs(args: NormQuantArgs, return_unquantized: bool) -> FusedOutputs:
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


def make_launch(
    args: NormQuantArgs, outputs: FusedOutputs, config: support.RowLaunch | None = None, soft_cvt: bool | None = None
) -> Callable[[], None]:
    """A zero-argument callable that runs the fused kernel on `args` into `outputs` (one launch).

    Everything but the launch itself is done here once, so benchmarks and CUDA graphs time only the
    kernel. `soft_cvt` forces the integer fp8/bf16 conversions (default: only under the interpreter).
    The overflow counter, if any, accumulates: zero it before each launch that is to be read.
    """
    check_supported(OP, args)
    support.require_triton(OP, args.q.device)
    module = support.kernels()
    m, n1 = args.q.shape
    n2 = 0 if args.k is None else args.k.shape[1]
    groups = n1 // args.group_size
    if config is None:
        config = support.launch_for(m, (n1, n2), args.q.device)
    soft = support.interpreting() if soft_cvt is None else bool(soft_cvt)
    stride_sm, stride_sg = support.scale_strides(args.scale_layout, m, groups)
    q = args.q
    k = q if args.k is None else args.k  # placeholders for absent tensors are never read
    k_w = args.q_weight if args.k_weight is None else args.k_weight
    res = q if args.residual is None else args.residual
    placeholder = outputs.q_bytes
    ovf = outputs.overflow_counter if outputs.overflow_counter is not None else outputs.scale
    grid = (-(-m // config.block_m), 1 if args.k is None or config.k_with_q else 2)
    positional = (
        q,
        args.q_weight,
        res,
        k,
        k_w,
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
        N1=n1,
        N2=max(n2, 1),
        GS=args.group_size,
        BLOCK_M=config.block_m,
        NG=support.next_pow2(groups),
        BLOCK_N2=support.next_pow2(max(n2, 1)),
        HAS_K=args.k is not None,
        HAS_RES=args.residual is not None,
        HAS_UNQ=outputs.q_unquantized is not None,
        GEMMA=args.gemma_norm,
        SOFT=soft,
        SCALES_IN_PLACE=support.scales_in_place(args.q.device, config),
        K_WITH_Q=config.k_with_q,
        SHORT_CHAIN=config.short_chain,
        num_warps=config.num_warps,
        **support.quant_constants(args.fmt, args.flavor).kwargs(),
    )
    kernel = module.fused_norm_quant_kernel

    def launch() -> None:
        kernel[grid](*positional, **constants)

    return launch


def check_supported(op: str, args: NormQuantArgs) -> None:
    """Rules of the Triton kernels beyond `validate_inputs`' (which every backend shares)."""
    gs = args.group_size
    if gs & (gs - 1):
        raise ValueError(
            f"{op}: group_size={gs} is not a power of two; the Triton kernels tile a row as "
            "(groups, group_size) blocks, whose sizes must be powers of two (use backend='torch')"
        )


def quantized_activation(args: NormQuantArgs, outputs, producer: str) -> QuantizedActivation:
    """What a quant launch wrote (`outputs`: q_bytes, scale, overflow_counter) as the public result;
    reads the overflow counter (warning as the torch quantizer does)."""
    overflows = support.report_overflows(outputs.overflow_counter, f"{producer}: q", args.fmt, args.flavor)
    return args.quantized(outputs.q_bytes.view(args.fmt.dtype), outputs.scale, producer, overflows)


def _run(args: NormQuantArgs, return_unquantized: bool) -> NormQuantResult:
    check_supported(OP, args)  # before allocating, and also when M == 0
    outputs = allocate_outputs(args, return_unquantized)
    if args.m > 0:
        make_launch(args, outputs)()
    return NormQuantResult(
        q_quant=quantized_activation(args, outputs, OP),
        k_normed=outputs.k_out,
        q_unquantized=outputs.q_unquantized,
        residual_sum=outputs.residual_sum,
    )


register_builtin_backend("triton", _run, support.triton_unavailable_reason, support.triton_interpreted_on)
