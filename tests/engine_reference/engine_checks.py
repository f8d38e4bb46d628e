"""What the engine cross-checks share: running an engine function where it can run, and the bitwise verdict."""

from __future__ import annotations

import pytest
import torch
from engine_quantizers import EngineQuantizer

import mla_debug as md


def run_engine(quantizer: EngineQuantizer, x: torch.Tensor, dtype: torch.dtype, ue8m0: bool, keep_layout: bool = False):
    """(q, logical scale (M, G)) from the engine's own function - the scale as the engine laid it out with
    `keep_layout`, else contiguous. Triton kernels run under the CPU interpreter with compiled Triton's
    rounding (tests/aiter_reference/interpreter_casts.py)."""
    if quantizer.runs_on != "triton":
        q, scale = quantizer.run(x, dtype, ue8m0)
        return q, scale if keep_layout else scale.contiguous()
    if torch.cuda.is_available():
        pytest.skip(
            "with a CUDA GPU Triton compiles the engines' kernels, whose fp32 `/` is approximate; the byte-exact "
            "check runs them under the CPU interpreter"
        )
    pytest.importorskip("triton")
    from aiter_reference.interpreter_casts import compiled_semantics

    from mla_debug.gpu import triton_env

    if not triton_env.interpreting() or triton_env.interpreter_error():
        pytest.skip(f"Triton's CPU interpreter is not usable in this process ({triton_env.interpreter_error()})")
    with compiled_semantics():
        q, scale = quantizer.run(x, dtype, ue8m0)
    return q, scale if keep_layout else scale.contiguous()


def ours(x: torch.Tensor, dtype: torch.dtype, flavor: str, ue8m0: bool) -> md.QuantizedActivation:
    """`flavor`'s quantization of x, with the scale order that runs that flavor's own kernel: a flavor naming
    one kernel of an engine function that picks its kernel by the scale order (SGLang's column-major one)
    writes that order, or quantize_groups would run the function's other kernel."""
    by_order = md.numerics.quant_flavor(flavor).by_scale_order
    layout = "col_major_strided" if by_order is not None and by_order[1] == flavor else "row_major"
    return md.quantize_groups(x, 128, fmt=dtype, flavor=flavor, ue8m0=ue8m0, scale_layout=layout)


def first_differences(a: torch.Tensor, b: torch.Tensor, what: str, any_nan: bool = False) -> str | None:
    """None when a and b have the same bits (zero signs included), else where they differ. With `any_nan`
    (fp32 scales) a NaN matches a NaN: its payload is whichever NaN torch's reduction kept (it differs between
    a bf16 and an fp32 max), not part of any recipe; fp8 bytes are compared with NaN bytes and all."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return f"{what}: {tuple(a.shape)} {a.dtype} vs the engine's {tuple(b.shape)} {b.dtype}"
    view = {1: torch.uint8, 4: torch.int32}[a.element_size()]
    bits_a, bits_b = a.contiguous().view(view), b.contiguous().view(view)
    mismatch = bits_a != bits_b
    if any_nan:
        mismatch &= ~(torch.isnan(a) & torch.isnan(b))
    differ = mismatch.nonzero()
    if not len(differ):
        return None
    where = [tuple(i.tolist()) for i in differ[:4]]
    pairs = [(a[w].item(), b[w].item()) for w in where]
    return f"{what}: {len(differ)} of {a.numel()} differ from the engine's, first at {where}: ours vs engine {pairs}"


def assert_byte_exact(mine: md.QuantizedActivation, q: torch.Tensor, scale: torch.Tensor, what: str) -> None:
    problems = [
        first_differences(mine.data, q, f"{what} bytes"),
        first_differences(mine.scale, scale, f"{what} scales", any_nan=True),
    ]
    problems = [p for p in problems if p]
    assert not problems, "\n".join(problems)
