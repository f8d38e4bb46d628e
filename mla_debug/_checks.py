"""Input validation that fails early with a message naming the tensor, its shape and the rule broken.

Every public entry point validates through these helpers so that a bad input never surfaces as a
shape error from deep inside torch.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TypeVar

import torch

T = TypeVar("T")


def describe(t: torch.Tensor) -> str:
    """'shape (4, 256), dtype torch.bfloat16' - the part of an error message that shows the tensor."""
    return f"shape {tuple(t.shape)}, dtype {t.dtype}"


def require_tensor(name: str, t: object) -> torch.Tensor:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name}: expected a torch.Tensor, got {type(t).__name__}")
    return t


def require_ndim(name: str, t: torch.Tensor, ndim: int | tuple[int, ...]) -> None:
    allowed = (ndim,) if isinstance(ndim, int) else ndim
    if t.dim() not in allowed:
        want = " or ".join(f"{n}-D" for n in allowed)
        raise ValueError(f"{name}: {describe(t)} must be {want}")


def require_min_ndim(name: str, t: torch.Tensor, ndim: int) -> None:
    if t.dim() < ndim:
        raise ValueError(f"{name}: {describe(t)} must have at least {ndim} dimensions")


def require_multiple(name: str, t: torch.Tensor, dim_label: str, size: int, multiple: int, why: str) -> None:
    if size % multiple != 0:
        raise ValueError(
            f"{name}: {dim_label}={size} ({describe(t)}) is not a multiple of {multiple} required by {why}"
        )


def require_floating(name: str, t: torch.Tensor) -> None:
    if not t.is_floating_point() or t.element_size() == 1:
        raise TypeError(f"{name}: {describe(t)} must be a float16/bfloat16/float32/float64 tensor")


def require_dtype(name: str, t: torch.Tensor, dtypes: tuple[torch.dtype, ...], why: str) -> None:
    if t.dtype not in dtypes:
        allowed = ", ".join(str(d) for d in dtypes)
        raise TypeError(f"{name}: {describe(t)} has the wrong dtype; {why} needs one of {allowed}")


def require_shape(name: str, t: torch.Tensor, shape: tuple[int, ...], why: str) -> None:
    if tuple(t.shape) != tuple(shape):
        raise ValueError(f"{name}: {describe(t)} does not match the expected shape {tuple(shape)} ({why})")


def is_dense(t: torch.Tensor) -> bool:
    """True when the tensor covers one gap-free span of memory in some dimension order.

    Kernels that take raw pointers (CK, ASM) read `numel` consecutive elements from the data pointer,
    so only such tensors have a well-defined byte order.
    """
    expected = 1
    for stride, size in sorted((st, s) for s, st in zip(t.shape, t.stride()) if s != 1):
        if stride != expected:
            return False
        expected *= size
    return True


def find(items: Iterable[T], key: Callable[[T], object], wanted: object, absent: str, listing: str) -> T:
    """The first of `items` whose `key` is `wanted`; else a KeyError "<absent>; <listing> [every key]", so a
    lookup by a wrong name says which names there are."""
    items = list(items)
    for item in items:
        if key(item) == wanted:
            return item
    raise KeyError(f"{absent}; {listing} {[key(item) for item in items]}")
