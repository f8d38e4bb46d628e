"""The public form of the unfused norm + quant paths: each takes the arguments of the fused op,
`reference.fused_qk_rmsnorm_group_quant` (aiter's ``fused_qk_rmsnorm_group_quant`` argument list), so a
caller switches paths by changing the function alone.

The signature is read from the fused op once and given to each entry (``__signature__``, what `help`,
`inspect` and Jupyter show), so the paths cannot drift from the op they stand in for. A call is bound
to it, validated into `NormQuantArgs` (`_inputs.validate_inputs`) and handed to the path's body.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from ._inputs import validate_inputs
from .reference import fused_qk_rmsnorm_group_quant

_FUSED = inspect.signature(fused_qk_rmsnorm_group_quant)


def _signature(flavor: str, drop: tuple[str, ...], required: tuple[str, ...] = ()) -> inspect.Signature:
    """The fused op's signature without `drop`, with `flavor` as the quant flavor's default and the
    `required` arguments (optional in the fused op) without a default."""
    params = []
    for p in _FUSED.parameters.values():
        if p.name in drop:
            continue
        if p.name == "flavor":
            p = p.replace(default=flavor)
        if p.name in required:
            p = p.replace(default=inspect.Parameter.empty, annotation="torch.Tensor")
        params.append(p)
    return _FUSED.replace(parameters=params, return_annotation=inspect.Signature.empty)


def _entry(op: str, signature: inspect.Signature, impl: Callable, call: Callable[[dict], Any]) -> Callable:
    """A function with `signature`, shown under `impl`'s name and docstring, that binds its call and
    hands the arguments (defaults filled in) to `call`."""
    # Every parameter is positional-or-keyword, so a call that fits binds by name order and defaults in
    # about a microsecond; `Signature.bind` (several microseconds) runs only to word the TypeError of one
    # that does not.
    assert all(p.kind is p.POSITIONAL_OR_KEYWORD for p in signature.parameters.values()), signature
    names = tuple(signature.parameters)
    defaults = {name: p.default for name, p in signature.parameters.items()}

    def entry(*args: Any, **kwargs: Any) -> Any:
        given = [*names[: len(args)], *kwargs]
        arguments = {**defaults, **dict(zip(names, args)), **kwargs}
        fits = len(args) <= len(names) and len(set(given)) == len(given) and len(arguments) == len(names)
        if not fits or any(value is inspect.Parameter.empty for value in arguments.values()):
            try:
                signature.bind(*args, **kwargs)
            except TypeError as err:
                raise TypeError(f"{op}: {err} (see help({op}))") from None
            raise AssertionError(f"{op}: refused a call its signature binds")  # unreachable; a property test holds it
        return call(arguments)

    entry.__signature__ = signature  # type: ignore[attr-defined]
    for attr in ("__module__", "__name__", "__qualname__", "__doc__"):
        setattr(entry, attr, getattr(impl, attr))
    return entry


def norm_quant_op(op: str, flavor: str = "aiter") -> Callable:
    """Decorate ``impl(args, return_unquantized)`` into an unfused path taking the fused op's arguments
    (less its ``backend``); `flavor` is the path's default quant flavor."""
    signature = _signature(flavor, drop=("backend",))

    def wrap(impl: Callable[..., Any]) -> Callable[..., Any]:
        def call(arguments: dict) -> Any:
            return_unquantized = bool(arguments.pop("return_unquantized"))
            return impl(validate_inputs(op, **arguments), return_unquantized)

        return _entry(op, signature, impl, call)

    return wrap


def v4_norm_quant_op(op: str) -> Callable:
    """Decorate ``impl(args)`` into a DeepSeek-V4 pre-fusion path: the fused op's arguments with k and
    k_weight required (qr and kv are normalized together) and no residual."""
    signature = _signature("aiter", drop=("backend", "residual", "return_unquantized"), required=("k", "k_weight"))

    def wrap(impl: Callable[..., Any]) -> Callable[..., Any]:
        def call(arguments: dict) -> Any:
            if arguments["k"] is None:
                raise ValueError(f"{op}: k is required (DeepSeek-V4 normalizes kv together with qr)")
            return impl(validate_inputs(op, residual=None, **arguments))

        return _entry(op, signature, impl, call)

    return wrap
