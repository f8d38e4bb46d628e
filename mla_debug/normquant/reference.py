"""aiter's fused RMSNorm + FP8 group quant (``fused_qk_rmsnorm_group_quant``, SEMANTICS 9), and its backends.

The op normalizes q (M, n1) and, optionally, k (M, n2) in fp32 and quantizes q per 1 x group_size group
straight from the fp32 normalized values - one rounding, where the unfused path (`unfused.py`) first
rounds to bf16 and quantizes that (two roundings). DeepSeek-V4 on ROCm runs it on (qr, kv) after
fused_wqa_wkv since vLLM PR #53540.

Backends are looked up in a small registry. This build registers only ``"torch"`` (the reference
below); faster backends register themselves under their own names and ``"auto"`` picks the first
registered one of :data:`AUTO_ORDER`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import torch

from ..layouts import QuantizedActivation, present_scale
from ..numerics import Fp8Format, QuantFlavor
from ..numerics.quantize import group_quantize
from ._inputs import NormQuantArgs, validate_inputs
from .rmsnorm import rmsnorm_fp32

OP = "fused_qk_rmsnorm_group_quant"


class NormQuantResult(NamedTuple):
    """What the op returns; a tuple, so ``q_quant, k_normed, q_unq, res = ...`` unpacks it.

    q_quant: q quantized, scale written ROW_MAJOR or COL_MAJOR ("view") as the producer would.
    k_normed: normalized k in k's dtype, or None without k.
    q_unquantized: normalized q in q's dtype, only when asked for, else None.
    residual_sum: ``q + residual`` rounded to q's dtype, or None without a residual.
    """

    q_quant: QuantizedActivation
    k_normed: torch.Tensor | None
    q_unquantized: torch.Tensor | None
    residual_sum: torch.Tensor | None


Backend = Callable[[NormQuantArgs, bool], NormQuantResult]

# Preference of "auto", fastest first; only registered names are considered.
AUTO_ORDER: tuple[str, ...] = ("aiter", "triton", "torch")


def quantize_normed(y: torch.Tensor, args: NormQuantArgs, producer: str) -> QuantizedActivation:
    """Quantize normalized q values (fp32, or already rounded to bf16) with the call's recipe and layout.

    The recipe is `group_quantize`'s; this only names the producer and writes the scale in the
    layout the producer writes.
    """
    data, scale, overflows = group_quantize(y, args.group_size, args.fmt, args.flavor, name=f"{producer}: q")
    return QuantizedActivation(
        data=data,
        scale=present_scale(scale, args.scale_layout, name=f"{producer}: q scale"),
        scale_layout=args.scale_layout,
        fmt=args.fmt,
        group_size=args.group_size,
        producer=producer,
        flavor=args.flavor.name,
        overflow_count=overflows,
    )


def normalize_k(args: NormQuantArgs) -> torch.Tensor | None:
    """k normalized in fp32 and rounded once to k's dtype (k is never quantized), or None without k."""
    if args.k is None:
        return None
    assert args.k_weight is not None  # validate_inputs guarantees it
    y, _ = rmsnorm_fp32(args.k, args.k_weight, args.k_eps, args.gemma_norm)
    return y.to(args.k.dtype)


def _torch_backend(args: NormQuantArgs, return_unquantized: bool) -> NormQuantResult:
    """The reference: fp32 norm, q quantized from the fp32 values (single rounding)."""
    y, s = rmsnorm_fp32(args.q, args.q_weight, args.q_eps, args.gemma_norm, args.residual)
    return NormQuantResult(
        q_quant=quantize_normed(y, args, OP),
        k_normed=normalize_k(args),
        q_unquantized=y.to(args.q.dtype) if return_unquantized else None,
        residual_sum=s.to(args.q.dtype) if args.residual is not None else None,
    )


_BACKENDS: dict[str, Backend] = {"torch": _torch_backend}


def available_backends() -> tuple[str, ...]:
    """Names of the registered backends, in ``"auto"`` preference order, then any others."""
    ordered = [name for name in AUTO_ORDER if name in _BACKENDS]
    return tuple(ordered + sorted(set(_BACKENDS) - set(ordered)))


def register_backend(name: str, backend: Backend) -> None:
    """Register `backend` (called with validated `NormQuantArgs` and `return_unquantized`) under `name`."""
    if not isinstance(name, str) or not name or name == "auto":
        raise ValueError(f"register_backend: name {name!r} must be a non-empty string other than 'auto'")
    if name in _BACKENDS and _BACKENDS[name] is not backend:
        raise ValueError(f"register_backend: a backend named {name!r} is already registered")
    _BACKENDS[name] = backend


def unregister_backend(name: str) -> None:
    """Remove a backend registered with `register_backend`; the torch reference cannot be removed."""
    if name == "torch":
        raise ValueError("unregister_backend: the 'torch' reference backend cannot be removed")
    _BACKENDS.pop(name, None)


def resolve_backend(backend: str) -> str:
    """The registered backend a `backend` argument selects ("auto" -> first registered of AUTO_ORDER)."""
    if not isinstance(backend, str):
        raise TypeError(f"{OP}: backend must be a string, got {type(backend).__name__}")
    registered = available_backends()
    if backend == "auto":
        return next(name for name in AUTO_ORDER + registered if name in _BACKENDS)
    if backend not in _BACKENDS:
        auto = resolve_backend("auto")
        raise ValueError(
            f"{OP}: backend={backend!r} is not available here: no implementation is registered under "
            f"that name. Registered backends: {', '.join(registered)}; 'auto' picks the first registered "
            f"of {', '.join(AUTO_ORDER)} (now {auto!r})"
        )
    return backend


def fused_qk_rmsnorm_group_quant(
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
    backend: str = "auto",
) -> NormQuantResult:
    """RMSNorm q (and k) in fp32, quantize q per 1 x group_size group from the fp32 values.

    Per row: ``s = q (+ residual)``, ``y = s * rsqrt(mean(s^2) + eps) * w`` (``* (1 + w)`` with
    gemma_norm), all in fp32 (rounding steps in `rmsnorm.py`); q is quantized from fp32 ``y`` with
    `flavor`'s recipe, the scale written ROW_MAJOR, or COL_MAJOR ("view": transposed bytes in an
    (M, G) buffer with strides (G, 1)) when `transpose_scale`. k is normalized to k's dtype; k_eps
    defaults to q_eps. Inputs may be row-strided views (torch.split). NaN and Inf flow through.

    q, k and residual are bf16, fp16 or fp32 (residual need not match q); weights any float dtype,
    read as fp32. q_unquantized and residual_sum are stored in q's dtype (bf16 in the models), k_normed
    in k's. Bad input raises ValueError/TypeError naming the argument, its shape and the rule.

    Returns ``NormQuantResult(q_quant, k_normed, q_unquantized, residual_sum)``.

    >>> qa, kn, _, _ = fused_qk_rmsnorm_group_quant(qr, q_norm_w, 1e-6, kv, kv_norm_w, transpose_scale=True)
    """
    chosen = resolve_backend(backend)
    args = validate_inputs(
        OP, q, q_weight, q_eps, k, k_weight, k_eps, residual, group_size, transpose_scale, fmt, flavor, gemma_norm
    )
    return _BACKENDS[chosen](args, bool(return_unquantized))
