"""Layout forensics: given bytes found in memory and the values they should hold, say how they got there.

`identify_weight_layout` answers "how many shuffles of which layout turn the reference weight into what
the kernel holds?"; `identify_scale_layout` answers "in which presentation(s) was this scale written?".
Both compare bytes only, never values, so they work on any dtype.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .._checks import describe, is_dense, require_tensor
from .scale_layout import ScaleLayout, present_scale, scale_memory
from .weight_shuffle import LAYOUTS, ShuffleLayout, shuffle_period, shuffle_weight


@dataclass(frozen=True)
class WeightLayoutMatch:
    """`shuffles` applications of `layout` turn the reference into the observed bytes.

    Counts are only defined modulo `period`: when the period is 2 (a 256-byte row), 0 and 2 shuffles
    are indistinguishable, so `shuffles` is the smallest count that matches.
    """

    layout: ShuffleLayout | None
    shuffles: int
    period: int

    def __str__(self) -> str:
        if self.shuffles == 0:
            return "plain (bytes equal the reference)"
        times = "once" if self.shuffles == 1 else f"{self.shuffles} times"
        return f"shuffled {times} with {self.layout} (period {self.period})"


def _same_bytes(a: torch.Tensor, b: torch.Tensor) -> bool:
    # reshape(-1), not contiguous(): torch leaves e.g. a (N, 1) tensor with strides (1, N) as it is,
    # then refuses to reinterpret it as bytes.
    return (
        a.shape == b.shape
        and a.element_size() == b.element_size()
        and torch.equal(a.reshape(-1).view(torch.uint8), b.reshape(-1).view(torch.uint8))
    )


def identify_weight_layout(
    observed: torch.Tensor,
    reference: torch.Tensor,
    layouts: tuple[ShuffleLayout, ...] = LAYOUTS,
    max_shuffles: int = 4,
) -> WeightLayoutMatch | None:
    """How many shuffles of which layout turn `reference` into `observed`, or None if none do.

    >>> identify_weight_layout(md.shuffle_weight(md.shuffle_weight(w)), w)
    WeightLayoutMatch(layout=(16, 16), shuffles=2, period=...)
    """
    require_tensor("observed", observed)
    require_tensor("reference", reference)
    if observed.shape != reference.shape or observed.element_size() != reference.element_size():
        raise ValueError(
            f"identify_weight_layout: observed {describe(observed)} and reference {describe(reference)} "
            "must have the same shape and element size"
        )
    k, size = reference.shape[-1], reference.element_size()
    if _same_bytes(observed, reference):
        return WeightLayoutMatch(layout=None, shuffles=0, period=1)
    n = reference.shape[-2] if reference.dim() >= 2 else 0
    for layout in layouts:
        if reference.dim() < 2 or n % layout[0] or k % (2 * layout[1]):
            continue
        period = shuffle_period(k, size, layout)
        current = reference
        for count in range(1, min(max_shuffles, period - 1) + 1):
            current = shuffle_weight(current, layout)
            if _same_bytes(current, observed):
                return WeightLayoutMatch(layout=tuple(layout), shuffles=count, period=period)
    return None


def identify_scale_layout(buffer: torch.Tensor, logical_scale: torch.Tensor) -> tuple[ScaleLayout, ...]:
    """The presentations whose bytes AND strides match `buffer` for the values `logical_scale`.

    Empty when none matches (the buffer holds other values). Several match when the presentations
    coincide: M == 1 or G == 1 (identical bytes), or size-1 dimensions that make strides ambiguous.
    """
    require_tensor("buffer", buffer)
    require_tensor("logical_scale", logical_scale)
    if buffer.shape != logical_scale.shape or buffer.dim() != 2:
        raise ValueError(
            f"identify_scale_layout: buffer {describe(buffer)} and logical_scale {describe(logical_scale)} "
            "must both be (M, G)"
        )
    if not is_dense(buffer):
        return ()
    m, g = buffer.shape
    memory = scale_memory(buffer, "buffer")
    matches = []
    for layout in ScaleLayout:
        candidate = present_scale(logical_scale.to(buffer.dtype), layout)
        strides_agree = all(
            size == 1 or actual == expected
            for size, actual, expected in zip(buffer.shape, buffer.stride(), layout.strides(m, g))
        )
        if strides_agree and _same_bytes(memory, scale_memory(candidate)):
            matches.append(layout)
    return tuple(matches)
