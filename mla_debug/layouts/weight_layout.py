"""The history of what was done to a weight's bytes, and by whom.

A shuffled weight looks exactly like a plain one (same shape, same dtype), so the only way to know
its layout is to record every transform as it happens. Readers then compare what they expect with
this history (`layouts.contracts`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .weight_shuffle import ShuffleLayout


@dataclass(frozen=True)
class WeightTransform:
    """One transform applied to a weight's bytes: ``kind`` is "shuffle" or "pad_k"."""

    kind: str
    by: str
    layout: ShuffleLayout | None = None
    pad_k_to: int | None = None

    def __str__(self) -> str:
        if self.kind == "shuffle":
            return f"shuffle{tuple(self.layout or ())} by {self.by}"
        return f"pad K to a multiple of {self.pad_k_to} by {self.by}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "by": self.by,
            "layout": list(self.layout) if self.layout is not None else None,
            "pad_k_to": self.pad_k_to,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> WeightTransform:
        layout = data.get("layout")
        pad = data.get("pad_k_to")
        return cls(
            kind=str(data["kind"]),
            by=str(data["by"]),
            layout=tuple(int(x) for x in layout) if layout is not None else None,
            pad_k_to=int(pad) if pad is not None else None,
        )


@dataclass(frozen=True)
class WeightLayout:
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

    def to_dict(self) -> dict[str, Any]:
        """Plain data (`from_dict` gives an equal WeightLayout back): the transforms in order."""
        return {"transforms": [t.to_dict() for t in self.transforms]}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> WeightLayout:
        return cls(tuple(WeightTransform.from_dict(t) for t in data.get("transforms", ())))
