"""The unfused baselines the fused op replaced: RMSNorm to bf16, then a separate per-group quant.

Before vLLM PR #53540, DeepSeek-V4 on ROCm normalized qr and kv with a Triton RMSNorm that stored bf16,
then quantized the bf16 qr per 1x128 group for wq_b - and quantized the same bf16 tensor a second time
inside indexer.wq_b. The quantizer therefore sees values rounded twice (fp32 -> bf16 -> fp8), and its
scale comes from the bf16-rounded amax. aiter's own test reference for the fused kernel does the same
(fp32 norm, bf16 round, quant), which is why it cannot check the fused kernel's single rounding bitwise.

All functions share `validate_inputs`, `rmsnorm_fp32` and `quantize_normed` with the fused reference,
so the only difference from it is the one rounding to the activation dtype.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from ..layouts import QuantizedActivation
from ._inputs import NormQuantArgs
from .entries import norm_quant_op, v4_norm_quant_op
from .reference import NormQuantResult, normalize_k, quantize_normed
from .rmsnorm import rmsnorm_fp32


class V4UnfusedResult(NamedTuple):
    """The pre-fusion DeepSeek-V4 path: two quantizations of the same bf16 qr, plus normalized kv."""

    q_for_wq_b: QuantizedActivation
    q_for_indexer: QuantizedActivation
    k_normed: torch.Tensor
    q_bf16: torch.Tensor


def _normed_stored(args: NormQuantArgs) -> tuple[torch.Tensor, torch.Tensor]:
    """(q normalized and stored in q's dtype - the first rounding -, fp32 residual sum)."""
    y, s = rmsnorm_fp32(args.q, args.q_weight, args.q_eps, args.gemma_norm, args.residual)
    return y.to(args.q.dtype), s


def _norm_round_quant(args: NormQuantArgs, return_unquantized: bool, op: str) -> NormQuantResult:
    stored, s = _normed_stored(args)
    return NormQuantResult(
        q_quant=quantize_normed(stored, args, op),
        k_normed=normalize_k(args),
        q_unquantized=stored if return_unquantized else None,
        residual_sum=s.to(args.q.dtype) if args.residual is not None else None,
    )


@norm_quant_op("norm_then_quant")
def norm_then_quant(args: NormQuantArgs, return_unquantized: bool) -> NormQuantResult:
    """The pre-fusion path: RMSNorm stored in q's dtype (bf16), then per-group quant of those values.

    Same arguments, validation and result as `fused_qk_rmsnorm_group_quant`; q is rounded twice
    (fp32 -> q's dtype -> fp8). For fp32 inputs the first rounding is the identity and the result
    equals the fused reference bit for bit.

    >>> qa, kn, _, _ = norm_then_quant(qr, q_norm_w, 1e-6, kv, kv_norm_w)
    """
    return _norm_round_quant(args, return_unquantized, "norm_then_quant")


@norm_quant_op("aiter_test_reference")
def aiter_test_reference(args: NormQuantArgs, return_unquantized: bool) -> NormQuantResult:
    """aiter's op_tests reference for ``fused_qk_rmsnorm_group_quant``: fp32 norm, bf16 round, quant.

    Numerically the unfused path (`norm_then_quant`), kept under its own name (and producer) so a
    comparison can say which reference it used. aiter compares the fused kernel to it with
    rtol = atol = 0.05 on dequantized values - loose enough to hide the double rounding it contains;
    here it is compared exactly, with the differences to the single-rounding reference located.
    The norm structure is what this models; the quant step is `flavor`'s. aiter's test itself
    (op_tests/test_fused_qk_rmsnorm_group_quant.py at 1fc2d27dd7a9, ``_per_token_group_fp8_quant_ref``)
    floors amax at 1e-10 and computes ``clamp(x / scale)``, a recipe none of aiter's kernels uses.
    """
    return _norm_round_quant(args, return_unquantized, "aiter_test_reference")


@v4_norm_quant_op("norm_then_quant_for_v4")
def norm_then_quant_for_v4(args: NormQuantArgs) -> V4UnfusedResult:
    """DeepSeek-V4's pre-fusion path: norm qr/kv to bf16, then quantize bf16 qr TWICE (wq_b, indexer.wq_b).

    The two `QuantizedActivation`s come from two separate quantization calls of the same bf16 tensor,
    as the two linear layers each quantized their input; they are bitwise equal. The fused op replaces
    all three launches (norm, quant, quant) with one.

    >>> wq_b_in, indexer_in, kv_n, qr_n = norm_then_quant_for_v4(qr, q_norm_w, 1e-6, kv, kv_norm_w)
    """
    op = "norm_then_quant_for_v4"
    stored, _ = _normed_stored(args)
    k_normed = normalize_k(args)
    assert k_normed is not None  # k is required above
    return V4UnfusedResult(
        q_for_wq_b=quantize_normed(stored, args, f"{op} (wq_b)"),
        q_for_indexer=quantize_normed(stored, args, f"{op} (indexer.wq_b)"),
        k_normed=k_normed,
        q_bf16=stored,
    )
