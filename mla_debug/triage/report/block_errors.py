"""Where inside one step's output a run leaves the reference: the small token x block error matrix a
report keeps (and its HTML draws) so that it can be drawn again without the tensors."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ..._json_records import JsonRecord

# Significant digits kept per block error. The heatmap shows three (hover) and a colour; six keep the
# figure faithful while a decode step of DeepSeek-V3 (16 tokens x 512 blocks) stays about 100 kB of JSON.
SIGNIFICANT_DIGITS = 6


def rounded(x: float) -> float:
    """`x` to SIGNIFICANT_DIGITS significant digits; non-finite values as they are."""
    return float(f"{x:.{SIGNIFICANT_DIGITS}g}") if math.isfinite(x) else x


@dataclass
class BlockErrors(JsonRecord):
    """Relative L2 error of `step` at (`tp`, `mode`) per token (rows) and per `block`-column block
    (columns) of the step output flattened per token; `shape` is the step output's shape.

    Values are rounded to SIGNIFICANT_DIGITS when the report is made, so a report and its JSON hold
    the same numbers and draw the same figure.
    """

    tp: int
    mode: str
    step: str
    shape: tuple[int, ...]
    block: int
    errors: list[list[float]]

    @classmethod
    def of(cls, tp: int, mode: str, step: str, shape, block: int, errors) -> BlockErrors:
        """From a (tokens, blocks) tensor or nested sequence of errors, rounded."""
        rows = errors.tolist() if hasattr(errors, "tolist") else errors
        return cls(
            tp, mode, step, tuple(int(d) for d in shape), int(block), [[rounded(float(v)) for v in r] for r in rows]
        )

    @property
    def key(self) -> tuple[int, str, str]:
        return (self.tp, self.mode, self.step)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> BlockErrors:
        where = f"block errors of TP{data.get('tp')} {data.get('mode')} {data.get('step')}"
        rows = data.get("errors", ())
        if any(v is None for row in rows for v in row):  # a block's error is always measured, NaN spelled "nan"
            raise ValueError(f"{where}: a block error is null")
        if len({len(row) for row in rows}) > 1:
            raise ValueError(f"{where}: rows of different lengths {sorted({len(row) for row in rows})}")
        return super().from_dict(data)
