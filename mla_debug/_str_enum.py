"""An enum whose members are their string values, in ``str()`` too (Python 3.11's ``enum.StrEnum``;
the package supports 3.10, which lacks it). Reports and tables print the value users write, e.g.
``scale-order``, not ``ViolationKind.SCALE_ORDER``."""

from __future__ import annotations

from enum import Enum


class StrEnum(str, Enum):
    def __str__(self) -> str:
        return self.value
