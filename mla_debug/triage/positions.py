"""Where a triage's tokens sit in the sequence, as report data (JSON "positions", schema 5).

RoPE makes every step after `rope` depend on the positions, and DeepSeek's yarn scaling behaves
differently past ``original_max_position_embeddings`` (4096): a triage that always started at 0 could
not exercise it. A `TriageSession` takes ``start_position=`` (contiguous positions from there) or explicit
``positions=``; the report records which, so a saved triage says where its tokens were.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .._json_records import JsonRecord


@dataclass(frozen=True)
class TokenPositions(JsonRecord):
    """``start``, ``start + 1``, ... for contiguous positions; else ``explicit``, one per token.

    Reports written before positions were recorded started at 0: they read back as ``start=0``.
    """

    start: int = 0
    explicit: tuple[int, ...] | None = None

    @classmethod
    def of(cls, positions: torch.Tensor) -> TokenPositions:
        """The compact form of a run's positions (`start` when they are contiguous)."""
        values = [int(p) for p in positions.tolist()]
        if values and values == list(range(values[0], values[0] + len(values))):
            return cls(start=values[0])
        return cls(start=values[0] if values else 0, explicit=tuple(values))

    @property
    def contiguous(self) -> bool:
        return self.explicit is None

    def values(self, tokens: int) -> list[int]:
        """The position of each of `tokens` tokens."""
        return list(self.explicit) if self.explicit is not None else list(range(self.start, self.start + tokens))
