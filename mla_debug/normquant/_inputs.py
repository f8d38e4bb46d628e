"""Validation of the inputs of the fused RMSNorm + group quant op and its unfused baselines.

Every rule of docs/semantics.md §11 is checked here, once, for every backend, so a bad call fails with a message
naming the argument, its shape and the rule - never with a torch shape error from inside a kernel.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass

import torch

from .._checks import describe, require_dtype, require_floating, require_ndim, require_shape, require_tensor
from ..layouts import QuantizedActivation, ScaleLayout
from ..numerics import Fp8Format, QuantFlavor, fp8_format, quant_flavor

# aiter's fused kernel keeps one row in registers/LDS; rows wider than this are rejected by it.
MAX_WIDTH = 8192

# The activation dtypes the op takes (docs/semantics.md §11: bf16/fp16; fp32 is accepted for references).
ACTIVATION_DTYPES = (torch.bfloat16, torch.float16, torch.float32)


@dataclass(frozen=True)
class NormQuantArgs:
    """Validated arguments of one call; what every backend receives."""

    q: torch.Tensor
    q_weight: torch.Tensor
    q_eps: float
    k: torch.Tensor | None
    k_weight: torch.Tensor | None
    k_eps: float
    residual: torch.Tensor | None
    group_size: int
    scale_layout: ScaleLayout
    fmt: Fp8Format
    flavor: QuantFlavor
    gemma_norm: bool

    @property
    def m(self) -> int:
        return self.q.shape[0]

    def quantized(
        self, data: torch.Tensor, scale: torch.Tensor, producer: str, overflow_count: int = 0
    ) -> QuantizedActivation:
        """A backend's q bytes and scale (written in this call's scale layout) as the public result, with
        the call's recipe (format, group size, flavor) recorded."""
        return QuantizedActivation(
            data=data,
            scale=scale,
            scale_layout=self.scale_layout,
            fmt=self.fmt,
            group_size=self.group_size,
            producer=producer,
            flavor=self.flavor.name,
            overflow_count=overflow_count,
        )


def _strides(t: torch.Tensor) -> str:
    return f"{describe(t)}, strides {tuple(t.stride())}"


def _require_row_contiguous(name: str, t: torch.Tensor) -> None:
    # Kernels walk a row with unit stride from each row's start; only the row stride may be free
    # (torch.split views of one (M, n1 + n2) tensor have row stride n1 + n2).
    if t.shape[-1] > 1 and t.stride(-1) != 1:
        raise ValueError(
            f"{name}: {_strides(t)}: the last dimension must be contiguous (stride(-1) == 1, got "
            f"{t.stride(-1)}); rows may be strided (torch.split views) but each row must be one contiguous run"
        )


def _require_width(name: str, t: torch.Tensor, label: str) -> int:
    width = t.shape[-1]
    if width <= 0:
        raise ValueError(f"{name}: width {label}={width} ({describe(t)}) must be positive")
    if width > MAX_WIDTH:
        raise ValueError(
            f"{name}: width {label}={width} ({describe(t)}) exceeds {MAX_WIDTH}, the widest row "
            "aiter's fused_qk_rmsnorm_group_quant normalizes"
        )
    return width


def _require_activation(name: str, t: object, label: str) -> torch.Tensor:
    t = require_tensor(name, t)
    require_ndim(name, t, 2)
    require_dtype(name, t, ACTIVATION_DTYPES, "the fused RMSNorm + quant op")
    _require_width(name, t, label)
    _require_row_contiguous(name, t)
    return t


def _require_weight(name: str, w: object, width: int, of: str) -> torch.Tensor:
    w = require_tensor(name, w)
    require_floating(name, w)
    require_shape(name, w, (width,), f"one weight per column of {of}")
    _require_row_contiguous(name, w)
    return w


def _require_eps(name: str, eps: object) -> float:
    if isinstance(eps, bool) or not isinstance(eps, numbers.Real):
        raise TypeError(f"{name}: expected a real number, got {type(eps).__name__}")
    value = float(eps)
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"{name}={value!r} must be finite and >= 0 (it is added to mean(x^2) under the rsqrt)")
    return value


def validate_inputs(
    op: str,
    q: object,
    q_weight: object,
    q_eps: object,
    k: object | None,
    k_weight: object | None,
    k_eps: object | None,
    residual: object | None,
    group_size: object,
    transpose_scale: bool,
    fmt: object,
    flavor: object,
    gemma_norm: bool,
) -> NormQuantArgs:
    """Check a call against docs/semantics.md §11 and return the normalized arguments; `op` prefixes messages."""
    if isinstance(group_size, bool) or not isinstance(group_size, int):
        raise TypeError(f"{op}: group_size must be an int, got {type(group_size).__name__}")
    if group_size <= 0:
        raise ValueError(f"{op}: group_size={group_size} must be positive")

    q = _require_activation(f"{op}: q", q, "n1")
    m, n1 = q.shape
    if n1 % group_size:
        raise ValueError(
            f"{op}: q: width n1={n1} ({describe(q)}) is not a multiple of group_size={group_size} "
            f"(q is quantized per 1x{group_size} group)"
        )
    q_weight = _require_weight(f"{op}: q_weight", q_weight, n1, "q (M, n1)")
    q_eps = _require_eps(f"{op}: q_eps", q_eps)

    if k is None:
        if k_weight is not None:
            raise ValueError(f"{op}: k_weight was given without k; pass k (M, n2) or drop k_weight")
        k_eps_value = q_eps
    else:
        k = _require_activation(f"{op}: k", k, "n2")
        if k.shape[0] != m:
            raise ValueError(
                f"{op}: k: {describe(k)} has M={k.shape[0]} rows but q: {describe(q)} has M={m}; "
                "q and k must have the same number of rows (tokens)"
            )
        if k_weight is None:
            raise ValueError(f"{op}: k_weight is required with k ({describe(k)}); expected shape ({k.shape[1]},)")
        k_weight = _require_weight(f"{op}: k_weight", k_weight, k.shape[1], "k (M, n2)")
        # docs/semantics.md §11: the k eps defaults to the q eps.
        k_eps_value = q_eps if k_eps is None else _require_eps(f"{op}: k_eps", k_eps)

    if residual is not None:
        residual = require_tensor(f"{op}: residual", residual)
        require_dtype(f"{op}: residual", residual, ACTIVATION_DTYPES, "the residual add")
        require_shape(f"{op}: residual", residual, (m, n1), "(M, n1) like q; it is added to q element-wise")
        _require_row_contiguous(f"{op}: residual", residual)

    for name, t in (("q_weight", q_weight), ("k", k), ("k_weight", k_weight), ("residual", residual)):
        if t is not None and t.device != q.device:
            raise ValueError(f"{op}: {name} is on {t.device} but q is on {q.device}; all tensors must share a device")

    try:
        fmt_value = fp8_format(fmt)  # type: ignore[arg-type]
    except (ValueError, TypeError) as err:
        raise type(err)(f"{op}: fmt={fmt!r} is not a supported fp8 format ({err})") from err
    try:
        flavor_value = quant_flavor(flavor)  # type: ignore[arg-type]
    except ValueError as err:
        raise ValueError(f"{op}: flavor={flavor!r} is not a known quantization flavor ({err})") from err

    return NormQuantArgs(
        q=q,
        q_weight=q_weight,
        q_eps=q_eps,
        k=k,
        k_weight=k_weight,
        k_eps=k_eps_value,
        residual=residual,
        group_size=group_size,
        scale_layout=ScaleLayout.COL_MAJOR if transpose_scale else ScaleLayout.ROW_MAJOR,
        fmt=fmt_value,
        flavor=flavor_value,
        gemma_norm=bool(gemma_norm),
    )
