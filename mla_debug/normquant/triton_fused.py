"""The Triton backend of ``fused_qk_rmsnorm_group_quant``: one launch for the q rows and the k rows.

The kernel and its launch live in the GPU package (`gpu.normquant`: the launch's grid and buffers in
`launch.make_launch`, the source in `kernels`); this module runs it for the op and returns the public
result. The rounding steps are the torch reference's, so scales and bytes agree bit for bit.

Registered as backend ``"triton"``: ``"auto"`` picks it for CUDA tensors; CPU tensors go through it
only when asked for explicitly under ``TRITON_INTERPRET=1``.
"""

from __future__ import annotations

from ..gpu.normquant import launch, support
from ..layouts import QuantizedActivation
from ._inputs import NormQuantArgs
from .reference import OP, NormQuantResult, register_builtin_backend


def quantized_activation(args: NormQuantArgs, outputs, producer: str) -> QuantizedActivation:
    """What a quant launch wrote (`outputs`: q_bytes, scale, overflow_counter) as the public result;
    reads the overflow counter (warning as the torch quantizer does)."""
    overflows = support.report_overflows(outputs.overflow_counter, f"{producer}: q", args.fmt, args.flavor)
    return args.quantized(outputs.q_bytes.view(args.fmt.dtype), outputs.scale, producer, overflows)


def _run(args: NormQuantArgs, return_unquantized: bool) -> NormQuantResult:
    launch.check_supported(OP, args)  # before allocating, and also when M == 0
    outputs = launch.allocate_outputs(args, return_unquantized)
    if args.m > 0:
        launch.make_launch(args, outputs)()
    return NormQuantResult(
        q_quant=quantized_activation(args, outputs, OP),
        k_normed=outputs.k_out,
        q_unquantized=outputs.q_unquantized,
        residual_sum=outputs.residual_sum,
    )


def _unsupported_reason(args: NormQuantArgs) -> str | None:
    return launch.unsupported_reason(OP, args)


register_builtin_backend(
    "triton",
    _run,
    support.triton_unavailable_reason,
    support.triton_interpreted_on,
    _unsupported_reason,
    description="Triton kernel, one launch for the q and k rows (CUDA GPUs; the CPU under TRITON_INTERPRET=1)",
)
