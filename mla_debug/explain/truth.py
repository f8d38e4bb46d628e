"""Which weights a capture diff or explanation takes for the checkpoint's, as data.

Every verdict of a diff or an explanation rests on some weights taken as right: the noise floor and the
propagated input difference are computed from them, the stories recompute steps with them and relate the
captured bytes to them. Only a checkpoint passed in is known to be right (`TruthSource.CHECKPOINT`);
weights read from a capture are the capture's word for them (`Truth.assumed`) - a loader bug that wrote
the wrong bytes on every rank looks correct against itself. Two captures that hold different values and
no checkpoint leave the truth `UNDECIDED`: the weights in dispute are named (`Truth.disputed`), and
nothing that depends on them is claimed.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any

from .._json_records import JsonRecord


class TruthSource(str, Enum):
    CHECKPOINT = "checkpoint"  # the checkpoint passed (checkpoint=)
    SIDES_AGREE = "sides_agree"  # no checkpoint: both captures hold the same weight bytes, taken as the checkpoint's
    SIDE_A = "a"  # no checkpoint: side a's weights (the other side's are those re-laid out, or absent)
    SIDE_B = "b"  # no checkpoint: side b's weights
    CAPTURE = "capture"  # an explanation without checkpoint: the capture's own weights
    OTHER_CAPTURE = "other_capture"  # another capture's own weights, passed in as the checkpoint
    UNDECIDED = "undecided"  # no checkpoint, and the sides hold different values: nothing says which is right
    NONE = "none"  # no checkpoint and no weights in checkpoint layout: no truth at all
    UNRECORDED = "unrecorded"  # a result saved before the truth was recorded (schema 1)


@dataclass(frozen=True)
class Truth(JsonRecord):
    """The weights taken as right, and the weights two captures disagree on without a checkpoint to decide."""

    source: TruthSource
    disputed: tuple[str, ...] = ()

    @property
    def assumed(self) -> bool:
        """Whether the verdicts rest on weights nobody vouched for (anything but a checkpoint passed in)."""
        return self.source is not TruthSource.CHECKPOINT

    @property
    def decided(self) -> bool:
        """Whether there are weights to judge by at all."""
        return self.source not in (TruthSource.UNDECIDED, TruthSource.NONE)

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> Truth:
        """A result saved before the truth was recorded (schema 1) has none: UNRECORDED."""
        return cls(TruthSource.UNRECORDED) if data is None else super().from_dict(data)

    def swapped(self) -> Truth:
        """The same truth seen from a diff whose sides are swapped."""
        other = {TruthSource.SIDE_A: TruthSource.SIDE_B, TruthSource.SIDE_B: TruthSource.SIDE_A}
        return Truth(other.get(self.source, self.source), self.disputed)
