"""aiter's fused RMSNorm + FP8 group quant (``fused_qk_rmsnorm_group_quant``), and its backends.

The op (docs/semantics.md §11) normalizes q (M, n1) and, optionally, k (M, n2) in fp32 and quantizes q
per 1 x group_size group straight from the fp32 normalized values - one rounding, where the unfused path
(`unfused.py`) first rounds to bf16 and quantizes that (two roundings). DeepSeek-V4 on ROCm runs it on
(qr, kv) after fused_wqa_wkv since vLLM PR #53540.

Backends are implementations in the sense of `mla_debug.implementations` (as the GEMM kernels are),
held by the registry `NORM_QUANT_BACKENDS`, each saying which devices it serves and which calls it takes:
``"torch"`` (the reference below, every device), ``"triton"`` (`triton_fused.py`: CUDA GPUs, or the CPU
under ``TRITON_INTERPRET=1``), ``"aiter"`` (`aiter_backend.py`: ROCm GPUs with aiter importable) and
``"aiter-triton"`` (`aiter_triton_backend.py`: aiter's Triton op off ROCm, through the real-aiter loader).
``"auto"`` picks the first of :data:`AUTO_ORDER` that serves q's device - never Triton's CPU interpreter,
never "aiter-triton". A backend module registers itself with `register_builtin_backend`; besides "auto"'s
preference (`AUTO_ORDER`), nothing names it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar, NamedTuple

import torch

from ..implementations import Check, Registry
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
# Why a backend cannot serve tensors on a device (None when it can).
UnavailableReason = Callable[[torch.device], "str | None"]
DevicePredicate = Callable[[torch.device], bool]
# Why a backend cannot take a call's (validated) arguments (None when it can).
UnsupportedReason = Callable[[NormQuantArgs], "str | None"]

# Preference of "auto", fastest first, among the backends available for q's device.
AUTO_ORDER: tuple[str, ...] = ("aiter", "triton", "torch")


def _serves_every_device(device: torch.device) -> str | None:
    return None


def _never(device: torch.device) -> bool:
    return False


def _takes_every_call(args: NormQuantArgs) -> str | None:
    return None


def _device(device: torch.device | str | None) -> torch.device:
    # No device given: tensors created without one land on torch's default device (the CPU unless set).
    return torch.get_default_device() if device is None else torch.device(device)


@dataclass(frozen=True)
class NormQuantBackend:
    """A registered backend of the op, and what it serves (an `implementations.Implementation`).

    unavailable_reason(device): None when it can run on tensors on `device`, else why not.
    interpreted_on(device): True where it runs only through an interpreter (Triton's on the CPU): it
    then runs when asked for by name, but is not listed as available and never picked by "auto".
    unsupported_reason(args): None when it takes a call's validated arguments, else why not (its run
    raises the same reason).
    """

    name: str
    run: Backend
    unavailable_reason: UnavailableReason = _serves_every_device
    interpreted_on: DevicePredicate = _never
    unsupported_reason: UnsupportedReason = _takes_every_call
    description: str = ""
    operation: ClassVar[str] = OP

    def availability(self, device: torch.device | str | None = None) -> Check:
        """Whether it runs on tensors on `device` (default: torch's default device), and how or why not."""
        where = _device(device)
        reason = self.unavailable_reason(where)
        if reason is not None:
            return Check(False, reason)
        if self.interpreted_on(where):
            return Check(True, f"only through an interpreter on {where.type} tensors: when asked for by name")
        return Check(True, f"runs on {where.type} tensors")

    def offered_on(self, device: torch.device) -> bool:
        """Available on `device` without an interpreter: what `available_backends` lists and "auto" picks."""
        return self.unavailable_reason(device) is None and not self.interpreted_on(device)

    def can_implement(self, problem: NormQuantArgs) -> Check:
        """Whether it takes this call (arguments already checked by `validate_inputs`)."""
        reason = self.unsupported_reason(problem)
        return Check(True, "takes these arguments") if reason is None else Check(False, reason)


def quantize_normed(y: torch.Tensor, args: NormQuantArgs, producer: str) -> QuantizedActivation:
    """Quantize normalized q values (fp32, or already rounded to bf16) with the call's recipe and layout.

    The recipe is `group_quantize`'s; this only names the producer and writes the scale in the
    layout the producer writes.
    """
    data, scale, overflows = group_quantize(y, args.group_size, args.fmt, args.flavor, name=f"{producer}: q")
    return args.quantized(
        data, present_scale(scale, args.scale_layout, name=f"{producer}: q scale"), producer, overflows
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


# The built-in backends (torch here; triton and aiter register from their modules), and above them the
# backends registered with `register_backend`, which shadow a built-in of the same name until
# unregistered. Scenario files check backend names against NORM_QUANT_BACKENDS ("auto" included).
_BUILTIN: Registry[NormQuantBackend] = Registry(OP, "norm+quant backend")
NORM_QUANT_BACKENDS: Registry[NormQuantBackend] = Registry(OP, "norm+quant backend", keywords=("auto",), below=_BUILTIN)


def available_backends(device: torch.device | str | None = None) -> tuple[str, ...]:
    """The backends that run natively on tensors on `device` (default: torch's default device), in
    ``"auto"`` preference order, then any others.

    "torch" serves every device, "triton" CUDA GPUs, "aiter" ROCm GPUs where aiter is importable.
    Triton's CPU interpreter (``TRITON_INTERPRET=1``) is not listed: it runs only when asked for by name.
    """
    where = _device(device)
    usable = {name for name, entry in NORM_QUANT_BACKENDS.items() if entry.offered_on(where)}
    ordered = [name for name in AUTO_ORDER if name in usable]
    return tuple(ordered + sorted(usable - set(ordered)))


def register_backend(
    name: str,
    backend: Backend,
    unavailable_reason: UnavailableReason | None = None,
    interpreted_on: DevicePredicate | None = None,
    unsupported_reason: UnsupportedReason | None = None,
    description: str = "",
) -> None:
    """Register `backend` (called with validated `NormQuantArgs` and `return_unquantized`) under `name`.

    By default it serves every device natively and takes every call; `unavailable_reason`,
    `interpreted_on` and `unsupported_reason` (see `NormQuantBackend`) narrow that. "auto" considers it
    at its place in `AUTO_ORDER` (names outside it come after "torch", which serves everything, so "auto"
    never picks them). A registered backend shadows a built-in one of the same name ("triton", "aiter")
    until `unregister_backend`; "torch" cannot be replaced.
    """
    if not isinstance(name, str) or not name or name == "auto":
        raise ValueError(f"register_backend: name {name!r} must be a non-empty string other than 'auto'")
    held = NORM_QUANT_BACKENDS.find(name)
    registered_here = held is not None and held is not _BUILTIN.find(name)
    if (registered_here or name == "torch") and held.run is not backend:
        raise ValueError(f"register_backend: a backend named {name!r} is already registered")
    entry = NormQuantBackend(
        name,
        backend,
        unavailable_reason or _serves_every_device,
        interpreted_on or _never,
        unsupported_reason or _takes_every_call,
        description,
    )
    NORM_QUANT_BACKENDS.register(name, entry, replace=True)


def register_builtin_backend(
    name: str,
    backend: Backend,
    unavailable_reason: UnavailableReason,
    interpreted_on: DevicePredicate = _never,
    unsupported_reason: UnsupportedReason = _takes_every_call,
    description: str = "",
) -> None:
    """Register one of the library's own backends (its module does this when imported)."""
    entry = NormQuantBackend(name, backend, unavailable_reason, interpreted_on, unsupported_reason, description)
    _BUILTIN.register(name, entry, replace=True)


def unregister_backend(name: str) -> None:
    """Remove a backend registered with `register_backend` (a built-in one of that name serves again);
    the torch reference cannot be removed."""
    if name == "torch":
        raise ValueError("unregister_backend: the 'torch' reference backend cannot be removed")
    NORM_QUANT_BACKENDS.unregister(name)


register_builtin_backend(
    "torch",
    _torch_backend,
    _serves_every_device,
    description="the reference: fp32 norm, q quantized from the fp32 values (one rounding), every device",
)


def _require_name(backend: object) -> str:
    if not isinstance(backend, str):
        raise TypeError(f"{OP}: backend must be a string, got {type(backend).__name__}")
    return backend


def resolve_backend(backend: str, device: torch.device | str | None = None) -> str:
    """The backend a `backend` argument selects for tensors on `device` (default: torch's default device).

    "auto" picks the first available one (`available_backends`) in `AUTO_ORDER`: aiter on a ROCm GPU
    with aiter, Triton on a CUDA GPU, else torch - never an interpreter. A name that cannot serve the
    device raises a ValueError saying why and listing the available ones.
    """
    _require_name(backend)
    where = _device(device)
    if backend == "auto":
        return available_backends(where)[0]  # "torch" serves every device
    entry = NORM_QUANT_BACKENDS.find(backend)
    availability = None if entry is None else entry.availability(where)
    if availability is None or not availability.ok:
        why = "" if availability is None else f" for {where.type} tensors: {availability.reason}"
        raise ValueError(
            f"{OP}: backend={backend!r} is not available here: no implementation is registered under that "
            f"name{why}. Registered backends: {', '.join(available_backends(where))}; those serve {where.type} "
            f"tensors here, and 'auto' picks the first of {', '.join(AUTO_ORDER)} among them "
            f"(now {resolve_backend('auto', where)!r})"
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
    flavor: QuantFlavor | str = "aiter-fused",
    gemma_norm: bool = False,
    return_unquantized: bool = False,
    backend: str = "auto",
) -> NormQuantResult:
    """RMSNorm q (and k) in fp32, quantize q per 1 x group_size group from the fp32 values.

    Per row: ``s = q (+ residual)``, ``y = s * rsqrt(mean(s^2) + eps) * w`` (``* (1 + w)`` with
    gemma_norm), all in fp32 (rounding steps in `rmsnorm.py`); q is quantized from fp32 ``y`` with
    `flavor`'s recipe (default "aiter-fused", the quant step of aiter's own fused op, byte-exact with
    it), the scale written ROW_MAJOR, or COL_MAJOR ("view": transposed bytes in an
    (M, G) buffer with strides (G, 1)) when `transpose_scale`. k is normalized to k's dtype; k_eps
    defaults to q_eps. Inputs may be row-strided views (torch.split). NaN and Inf flow through.

    q, k and residual are bf16, fp16 or fp32 (residual need not match q); weights any float dtype,
    read as fp32. q_unquantized and residual_sum are stored in q's dtype (bf16 in the models), k_normed
    in k's. Bad input raises ValueError/TypeError naming the argument, its shape and the rule.

    `backend`: "auto" (aiter on a ROCm GPU with aiter, Triton on a CUDA GPU, else torch), or one of
    `available_backends(q.device)`; "torch" and "triton" give the same bits; "aiter" and "aiter-triton"
    run aiter's own code, whose fp32 sum of squares can move q and its scale by an ulp (aiter_triton_backend).

    Returns ``NormQuantResult(q_quant, k_normed, q_unquantized, residual_sum)``.

    >>> qa, kn, _, _ = fused_qk_rmsnorm_group_quant(qr, q_norm_w, 1e-6, kv, kv_norm_w, transpose_scale=True)
    """
    _require_name(backend)
    args = validate_inputs(
        OP, q, q_weight, q_eps, k, k_weight, k_eps, residual, group_size, transpose_scale, fmt, flavor, gemma_norm
    )
    chosen = resolve_backend(backend, args.q.device)
    return NORM_QUANT_BACKENDS.get(chosen).run(args, bool(return_unquantized))
