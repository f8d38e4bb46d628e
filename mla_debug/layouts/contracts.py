"""Layout contracts between producers and consumers of bytes, and the violations a run records.

A violation is recorded whenever a consumer reads bytes in another order than they were written,
even when the read happens to be harmless (M == 1, or a double shuffle on a 256-byte row where the
shuffle is an involution); ``effective`` says whether the values read are actually wrong.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any

from .scale_layout import ScaleLayout, same_bytes
from .weight_layout import WeightLayout
from .weight_shuffle import ShuffleLayout, shuffle_period


class ViolationKind(str, Enum):
    SCALE_ORDER = "scale-order"
    DOUBLE_SHUFFLE = "double-shuffle"
    RELAID_WEIGHT_DIRECT_READ = "direct-read-of-relaid-weight"
    WEIGHT_LAYOUT_MISMATCH = "weight-layout-mismatch"
    CONSUMERS_DISAGREE = "consumers-disagree"
    # Scale representation (layouts.scale_format): what a reader takes the bytes of a scale for.
    SCALE_CODES_AS_VALUES = "scale-codes-read-as-values"  # E8M0 codes used as numbers (120 for 2^-7)
    PACKED_SCALES_AS_VALUES = "packed-scales-read-as-values"  # four ue8m0 codes per int32 read as fp32
    SCALE_TRUNCATED = "scale-truncated-to-power-of-two"  # a non-power-of-two scale through an exponent-only packer
    UE8M0_MANTISSA_LEAK = "ue8m0-packing-mantissa-leak"  # an unmasked packer ORs mantissa bits into other codes
    # A grouped (batched) GEMM's per-(token, group) scales written in one flattening order, read in the other.
    GROUPED_SCALE_ORDER = "grouped-scale-order"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class ContractViolation:
    """One broken layout contract: who read which tensor, expecting what, finding what."""

    kind: ViolationKind
    consumer: str
    tensor: str
    expected: str
    found: str
    effective: bool
    message: str

    def __str__(self) -> str:
        return self.message

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind.value,
            "tensor": self.tensor,
            "consumer": self.consumer,
            "expected": self.expected,
            "found": self.found,
            "effective": self.effective,
            "message": self.message,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ContractViolation:
        return cls(
            kind=ViolationKind(data["kind"]),
            consumer=str(data["consumer"]),
            tensor=str(data["tensor"]),
            expected=str(data["expected"]),
            found=str(data["found"]),
            effective=bool(data["effective"]),
            message=str(data["message"]),
        )


def scale_order_violation(
    consumer: str, tensor: str, written: ScaleLayout | str, read_as: ScaleLayout | str, m: int, g: int
) -> ContractViolation | None:
    """A violation when `consumer` reads scale bytes in another order than the producer wrote them."""
    written, read_as = ScaleLayout.parse(written), ScaleLayout.parse(read_as)
    if written.byte_order == read_as.byte_order:
        return None
    effective = not same_bytes(written, read_as, m, g)
    consequence = (
        f"for M={m} > 1 row m reads the scales of other tokens"
        if effective
        else f"harmless here because the bytes coincide (M={m}, G={g})"
    )
    return ContractViolation(
        kind=ViolationKind.SCALE_ORDER,
        consumer=consumer,
        tensor=tensor,
        expected=read_as.name,
        found=written.name,
        effective=effective,
        message=(
            f"{tensor}: {consumer} reads {read_as.name} activation-scale bytes but the producer wrote "
            f"{written.name}; {consequence}"
        ),
    )


def _shuffled_times(count: int) -> str:
    return {0: "left plain", 1: "shuffled once", 2: "shuffled twice"}.get(count, f"shuffled {count} times")


def weight_read_violation(
    consumer: str,
    tensor: str,
    layout: WeightLayout,
    expects: ShuffleLayout | None,
    k: int,
    element_size: int,
    direct_reader: bool = False,
) -> ContractViolation | None:
    """A violation when a reader expecting one (`expects`) or no shuffle finds another history."""
    count = layout.shuffle_count
    wanted = 0 if expects is None else 1
    layouts = set(layout.shuffle_layouts)
    if count == wanted and (expects is None or layouts == {tuple(expects)}):
        return None
    if count >= 2:
        kind = ViolationKind.DOUBLE_SHUFFLE
    elif direct_reader:
        kind = ViolationKind.RELAID_WEIGHT_DIRECT_READ
    else:
        kind = ViolationKind.WEIGHT_LAYOUT_MISMATCH
    effective = True
    if len(layouts) <= 1 and (expects is None or not layouts or layouts == {tuple(expects)}):
        only = next(iter(layouts), tuple(expects) if expects else (16, 16))
        effective = (count - wanted) % shuffle_period(k, element_size, only) != 0
    expected = "plain bytes" if expects is None else f"bytes shuffled once with {tuple(expects)}"
    reader = "reads the weight directly" if direct_reader else "reads the weight"
    consequence = (
        "the values it reads are wrong"
        if effective
        else (
            "harmless here: at this row width the extra shuffles complete a full period of the shuffle, "
            "so the bytes read are the intended ones"
        )
    )
    return ContractViolation(
        kind=kind,
        consumer=consumer,
        tensor=tensor,
        expected=expected,
        found=layout.describe(),
        effective=effective,
        message=(
            f"{tensor}: {consumer} {reader} expecting {expected}, but it was "
            f"{_shuffled_times(count)} ({layout.describe()}); {consequence}"
        ),
    )
