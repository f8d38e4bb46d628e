"""The unfused baselines the fused op replaced: RMSNorm to bf16, then a separate per-group quant.

Before vLLM PR #53540, DeepSeek-V4 on ROCm normalized qr and kv with a Triton RMSNorm that stored bf16,
then quantized the bf16 qr per 1x128 group for wq_b - and quantized the same bf16 tensor a second time
inside indexer.wq_b. The quantizer therefore sees values rounded twice (fp32 -> bf16 -> fp8), and its
scale comes from the bf16-rounded amax. aiter's own test reference for the fused kernel does the same
(fp32 norm, bf16 round, quant), which is why it cannot check the fused kernel's single rounding bitwise.

All functions share `validate_inputs`, `rmsnorm_fp32` and `quantize_normed` with the fused reference,
so the only difference from it is the one rounding to the activation dtype. Each runs in torch or, with
``backend="triton"`` (the ``triton_*`` names), in Triton (`triton_unfused.py`), with the same bits.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import torch

from ..layouts import QuantizedActivation
from ..numerics import Fp8Format, QuantFlavor
from ._inputs import NormQuantArgs, validate_inputs
from .reference import NormQuantResult, normalize_k, quantize_normed
from .rmsnorm import rmsnorm_fp32
from .triton_unfused import triton_norm_and_quants


class V4UnfusedResult(NamedTuple):
    """The pre-fusion DeepSeek-V4 path: two quantizations of the same bf16 qr, plus normalized kv."""

    q_for_wq_b: QuantizedActivation
    q_for_indexer: QuantizedActivation
    k_normed: torch.Tensor
    q_bf16: torch.Tensor


# The unfused path runs in torch (the reference) or Triton (`triton_unfused`): same result bits.
UNFUSED_BACKENDS = ("torch", "triton")


def _norm_and_quants(
    op: str, args: NormQuantArgs, backend: str, producers: Sequence[str]
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None, list[QuantizedActivation]]:
    """(q normalized and stored in q's dtype - the first rounding -, k normalized, residual sum in q's
    dtype, one quantization of the stored q per producer)."""
    if backend == "triton":
        return triton_norm_and_quants(op, args, producers)
    if backend != "torch":
        raise ValueError(
            f"{op}: backend={backend!r}: the unfused path runs on {' or '.join(map(repr, UNFUSED_BACKENDS))}"
        )
    y, s = rmsnorm_fp32(args.q, args.q_weight, args.q_eps, args.gemma_norm, args.residual)
    stored = y.to(args.q.dtype)
    residual_sum = s.to(args.q.dtype) if args.residual is not None else None
    return stored, normalize_k(args), residual_sum, [quantize_normed(stored, args, p) for p in producers]


def _unfused_result(op: str, args: NormQuantArgs, return_unquantized: bool, backend: str) -> NormQuantResult:
    stored, k_normed, residual_sum, (q_quant,) = _norm_and_quants(op, args, backend, [op])
    return NormQuantResult(q_quant, k_normed, stored if return_unquantized else None, residual_sum)


def norm_then_quant(
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
    backend: str = "torch",
) -> NormQuantResult:
    """The pre-fusion path: RMSNorm stored in q's dtype (bf16), then per-group quant of those values.

    Same arguments, validation and result as `fused_qk_rmsnorm_group_quant`; q is rounded twice
    (fp32 -> q's dtype -> fp8). For fp32 inputs the first rounding is the identity and the result
    equals the fused reference bit for bit. `backend` is "torch" or "triton" (2 launches: norm to q's
    dtype, then per-group quant); both give the same bits.

    >>> qa, kn, _, _ = norm_then_quant(qr, q_norm_w, 1e-6, kv, kv_norm_w)
    """
    op = "norm_then_quant"
    args = validate_inputs(
        op, q, q_weight, q_eps, k, k_weight, k_eps, residual, group_size, transpose_scale, fmt, flavor, gemma_norm
    )
    return _unfused_result(op, args, return_unquantized, backend)


def triton_norm_then_quant(*args, **kwargs) -> NormQuantResult:
    """`norm_then_quant` (same arguments) with ``backend="triton"``; same result bits.

    >>> qa, kn, _, _ = triton_norm_then_quant(qr, q_norm_w, 1e-6, kv, kv_norm_w)
    """
    return norm_then_quant(*args, **kwargs, backend="triton")


def aiter_test_reference(
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
    """aiter's op_tests reference for ``fused_qk_rmsnorm_group_quant``: fp32 norm, bf16 round, quant.

    Numerically the unfused path (`norm_then_quant`), kept under its own name (and producer) so a
    comparison can say which reference it used. aiter compares the fused kernel to it with
    rtol = atol = 0.05 on dequantized values - loose enough to hide the double rounding it contains;
    here it is compared exactly, with the differences to the single-rounding reference located.
    The norm structure is what this models; the quant step is `flavor`'s. aiter's test itself
    (op_tests/test_fused_qk_rmsnorm_group_quant.py at 1fc2d27dd7a9, ``_per_token_group_fp8_quant_ref``)
    floors amax at 1e-10 and computes ``clamp(x / scale)``, a recipe none of aiter's kernels uses.
    """
    op = "aiter_test_reference"
    args = validate_inputs(
        op, q, q_weight, q_eps, k, k_weight, k_eps, residual, group_size, transpose_scale, fmt, flavor, gemma_norm
    )
    return _unfused_result(op, args, return_unquantized, "torch")


def norm_then_quant_for_v4(
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
    backend: str = "torch",
) -> V4UnfusedResult:
    """DeepSeek-V4's pre-fusion path: norm qr/kv to bf16, then quantize bf16 qr TWICE (wq_b, indexer.wq_b).

    The two `QuantizedActivation`s come from two separate quantization calls of the same bf16 tensor,
    as the two linear layers each quantized their input; they are bitwise equal. The fused op replaces
    all three launches (norm, quant, quant) with one. `backend` is "torch" or "triton" (those three
    launches); both give the same bits.

    >>> wq_b_in, indexer_in, kv_n, qr_n = norm_then_quant_for_v4(qr, q_norm_w, 1e-6, kv, kv_norm_w)
    """
    op = "norm_then_quant_for_v4"
    if k is None:
        raise ValueError(f"{op}: k is required (DeepSeek-V4 normalizes kv together with qr)")
    args = validate_inputs(
        op, q, q_weight, q_eps, k, k_weight, k_eps, None, group_size, transpose_scale, fmt, flavor, gemma_norm
    )
    stored, k_normed, _, (for_wq_b, for_indexer) = _norm_and_quants(
        op, args, backend, [f"{op} (wq_b)", f"{op} (indexer.wq_b)"]
    )
    assert k_normed is not None  # k is required above
    return V4UnfusedResult(q_for_wq_b=for_wq_b, q_for_indexer=for_indexer, k_normed=k_normed, q_bf16=stored)


def triton_norm_then_quant_for_v4(*args, **kwargs) -> V4UnfusedResult:
    """`norm_then_quant_for_v4` (same arguments) with ``backend="triton"``: the three launches the fused
    op replaced; same result bits.

    >>> wq_b_in, indexer_in, kv_n, qr_n = triton_norm_then_quant_for_v4(qr, q_norm_w, 1e-6, kv, kv_norm_w)
    """
    return norm_then_quant_for_v4(*args, **kwargs, backend="triton")
