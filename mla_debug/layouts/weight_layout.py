"""The history of what was done to a weight's bytes, and by whom.

A shuffled weight looks exactly like a plain one (same shape, same dtype), so the only way to know
its layout is to record every transform as it happens. Readers then compare what they expect with
this history (`layouts.contracts`).
"""

from __future__ import annotations

from dataclasses import dataclass

from .._json_records import JsonRecord
from .weight_shuffle import ShuffleLayout


@dataclass(frozen=True)
class WeightTransform(JsonRecord):
    """One transform applied to a weight's bytes: ``kind`` is "shuffle" or "pad_k"."""

    kind: str
    by: str
    layout: ShuffleLayout | None = None
    pad_k_to: int | None = None

    def __str__(self) -> str:
        if self.kind == "shuffle":
            return f"shuffle{tuple(self.layout or ())} by {self.by}"
        return f"pad K to a multiple of {self.pad_k_to} by {self.by}"


@dataclass(frozen=True)
class WeightLayout(JsonRecord):
    """Immutable history of transforms; ``WeightLayout()`` is a plain (N, K) weight."""

    transforms: tuple[WeightTransform, ...] = ()

    @property
    def plain(self) -> bool:
        return not self.transforms

    @property
    def shuffle_count(self) -> int:
        return sum(1 for t in self.transforms if t.kind == "shuffle")

    @property
    def shuffle_layouts(self) -> tuple[ShuffleLayout, ...]:
        return tuple(t.layout for t in self.transforms if t.kind == "shuffle" and t.layout is not None)

    @property
    def shufflers(self) -> tuple[str, ...]:
        """Who shuffled the weight, in order."""
        return tuple(t.by for t in self.transforms if t.kind == "shuffle")

    def then(self, transform: WeightTransform) -> WeightLayout:
        return WeightLayout(self.transforms + (transform,))

    def describe(self) -> str:
        if self.plain:
            return "plain"
        return "; ".join(str(t) for t in self.transforms)

    def __str__(self) -> str:
        return self.describe()
