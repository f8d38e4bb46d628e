"""How one op handed over an activation scale: the layout its producer wrote, the layout its reader
expected. A step record carries this instead of a sentence, so analysis compares layouts, not words."""

from __future__ import annotations

from dataclasses import dataclass

from .._json_records import JsonRecord
from .scale_layout import ScaleLayout


@dataclass(frozen=True)
class ScaleRead(JsonRecord):
    """Scale bytes `written` in one layout and read as `read_as` (None: written by this step, read by
    later ones - a producer such as the fused norm+quant).

    >>> ScaleRead(ScaleLayout.ROW_MAJOR, ScaleLayout.COL_MAJOR).misread   # True: rows read as columns
    """

    written: ScaleLayout
    read_as: ScaleLayout | None = None

    @property
    def misread(self) -> bool:
        """Whether the reader takes the bytes in another order than they were written (for M > 1 and
        G > 1 it then reads wrong values; `layouts.same_bytes` decides for a given shape)."""
        return self.read_as is not None and self.read_as.byte_order != self.written.byte_order

    def __str__(self) -> str:
        read = f", read as {self.read_as.name}" if self.read_as is not None else ""
        return f"{self.written.name} written{read}"
