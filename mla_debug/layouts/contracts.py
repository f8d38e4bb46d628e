"""Layout contracts between producers and consumers of bytes, and the violations a run records.

A violation is recorded whenever a consumer reads bytes in another order than they were written,
even when the read happens to be harmless (M == 1, or a double shuffle on a 256-byte row where the
shuffle is an involution); ``effective`` says whether the values read are actually wrong.

A violation is typed data: which tensor (a module and its operand), who read it, the layout the reader
expected and the one it found, as layout values. The sentences that explain one are made where words
are made (`viz`, the CLI, a culprit's explanation); ``str()`` gives a compact one-line form for logs.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from .._str_enum import StrEnum
from .scale_layout import ScaleLayout, same_bytes
from .weight_layout import WeightLayout, WeightTransform
from .weight_shuffle import ShuffleLayout, shuffle_period


class ViolationKind(StrEnum):
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


@dataclass(frozen=True)
class ShuffleExpectation:
    """What a weight reader expects of the bytes: plain (no shuffle) or shuffled once with `layout`.
    ``direct`` marks a reader outside the linear's kernel (absorbed decode, a grouped BMM)."""

    layout: ShuffleLayout | None = None
    direct: bool = False

    @property
    def shuffles(self) -> int:
        return 0 if self.layout is None else 1

    def to_dict(self) -> dict[str, Any]:
        return {"type": "weight", "layout": list(self.layout) if self.layout else None, "direct": self.direct}


@dataclass(frozen=True)
class ConsumerOrders:
    """The scale byte order each consumer of one pre-quantized tensor reads, in consumer order."""

    orders: tuple[tuple[str, ScaleLayout], ...]

    def to_dict(self) -> dict[str, Any]:
        return {"type": "consumers", "orders": [[name, layout.value] for name, layout in self.orders]}


Expected = ScaleLayout | ShuffleExpectation | None
Found = ScaleLayout | WeightLayout | ConsumerOrders


def _layout_to_dict(value: Expected | Found) -> dict[str, Any] | None:
    if value is None:
        return None
    if isinstance(value, ScaleLayout):
        return {"type": "scale", "layout": value.value}
    if isinstance(value, WeightLayout):
        return {"type": "weight-history", **value.to_dict()}
    return value.to_dict()


def _layout_from_dict(data: dict[str, Any] | None, where: str):
    if data is None:
        return None
    kind = data.get("type")
    if kind == "scale":
        return ScaleLayout(data["layout"])
    if kind == "weight-history":
        return WeightLayout.from_dict(data)
    if kind == "weight":
        layout = data.get("layout")
        return ShuffleExpectation(tuple(int(x) for x in layout) if layout else None, bool(data.get("direct")))
    if kind == "consumers":
        return ConsumerOrders(tuple((str(name), ScaleLayout(value)) for name, value in data["orders"]))
    raise ValueError(f"{where}: unknown layout value type {kind!r}")


@dataclass(frozen=True)
class ContractViolation:
    """One broken layout contract: which tensor (``module`` and its ``operand``: "weight",
    "input_scale", "output"), who read it (``consumer``), the layout it ``expected`` and the one it
    ``found``, and whether the values read are wrong (``effective``). ``rows`` and ``groups`` are the
    activation scale's (M, G) for a scale-order violation (whether M > 1 decides ``effective``)."""

    kind: ViolationKind
    consumer: str
    module: str
    operand: str
    expected: Expected
    found: Found
    effective: bool
    rows: int | None = None
    groups: int | None = None

    @property
    def tensor(self) -> str:
        """The tensor's canonical name, ``module.operand``."""
        return f"{self.module}.{self.operand}"

    def __str__(self) -> str:
        state = "effective" if self.effective else "harmless"
        expected = "one order" if self.expected is None else _short(self.expected)
        return f"{self.kind}: {self.tensor} read by {self.consumer} as {expected}, found {_short(self.found)} ({state})"

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind.value,
            "consumer": self.consumer,
            "module": self.module,
            "operand": self.operand,
            "expected": _layout_to_dict(self.expected),
            "found": _layout_to_dict(self.found),
            "effective": self.effective,
            "rows": self.rows,
            "groups": self.groups,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ContractViolation:
        """From `to_dict`'s data, or from the sentences reports wrote before violations were typed."""
        if "message" in data:
            return _from_sentences(data)
        where = f"violation of {data.get('module')}.{data.get('operand')}"
        return cls(
            kind=ViolationKind(data["kind"]),
            consumer=str(data["consumer"]),
            module=str(data["module"]),
            operand=str(data["operand"]),
            expected=_layout_from_dict(data.get("expected"), where),
            found=_layout_from_dict(data["found"], where),
            effective=bool(data["effective"]),
            rows=data.get("rows"),
            groups=data.get("groups"),
        )


def _short(value: Expected | Found) -> str:
    if isinstance(value, ScaleLayout):
        return value.name
    if isinstance(value, ShuffleExpectation):
        return "plain bytes" if value.layout is None else f"bytes shuffled once with {tuple(value.layout)}"
    if isinstance(value, ConsumerOrders):
        return ", ".join(f"{name} reads {layout.name}" for name, layout in value.orders)
    return value.describe()


def scale_order_violation(
    consumer: str, module: str, written: ScaleLayout | str, read_as: ScaleLayout | str, m: int, g: int
) -> ContractViolation | None:
    """A violation when `consumer` reads `module`'s input-scale bytes in another order than the producer
    wrote them."""
    written, read_as = ScaleLayout.parse(written), ScaleLayout.parse(read_as)
    if written.byte_order == read_as.byte_order:
        return None
    return ContractViolation(
        kind=ViolationKind.SCALE_ORDER,
        consumer=consumer,
        module=module,
        operand="input_scale",
        expected=read_as,
        found=written,
        effective=not same_bytes(written, read_as, m, g),
        rows=m,
        groups=g,
    )


def weight_read_violation(
    consumer: str,
    module: str,
    layout: WeightLayout,
    expects: ShuffleLayout | None,
    k: int,
    element_size: int,
    direct_reader: bool = False,
) -> ContractViolation | None:
    """A violation when a reader of `module`'s weight expecting one (`expects`) or no shuffle finds
    another history."""
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
    return ContractViolation(
        kind=kind,
        consumer=consumer,
        module=module,
        operand="weight",
        expected=ShuffleExpectation(tuple(expects) if expects else None, direct_reader),
        found=layout,
        effective=effective,
    )


# -- violations as reports of schema 3 to 5 wrote them (sentences; the grammar was closed) ----------------
_SCALE_WORDS = re.compile(r"(?P<module>\S+) input scale")
_SHUFFLE_WORDS = re.compile(r"shuffle\((?P<n>\d+), (?P<k>\d+)\) by (?P<by>.+)")
_PAD_WORDS = re.compile(r"pad K to a multiple of (?P<to>\d+) by (?P<by>.+)")
_ONCE_WORDS = re.compile(r"bytes shuffled once with \((?P<n>\d+), (?P<k>\d+)\)")
_ORDER_WORDS = re.compile(r"(?P<consumer>[\w.]+) reads (?P<layout>[A-Z_]+)")
_ROWS_WORDS = re.compile(r"M=(?P<m>\d+)")


def weight_layout_from_text(text: str, where: str) -> WeightLayout:
    """The WeightLayout a ``WeightLayout.describe()`` sentence names ("plain", or transforms by "; ")."""
    if text in ("plain", "plain (dense)"):
        return WeightLayout()
    transforms = []
    for part in str(text).split("; "):
        if shuffle := _SHUFFLE_WORDS.fullmatch(part):
            layout = (int(shuffle["n"]), int(shuffle["k"]))
            transforms.append(WeightTransform("shuffle", by=shuffle["by"], layout=layout))
        elif pad := _PAD_WORDS.fullmatch(part):
            transforms.append(WeightTransform("pad_k", by=pad["by"], pad_k_to=int(pad["to"])))
        else:
            raise ValueError(
                f"{where}: weight layout part {part!r} is neither 'shuffle(N, K) by <who>' nor "
                "'pad K to a multiple of <n> by <who>'"
            )
    return WeightLayout(tuple(transforms))


def _from_sentences(data: dict[str, Any]) -> ContractViolation:
    kind = ViolationKind(data["kind"])
    tensor, where = str(data["tensor"]), f"violation of {data['tensor']}"
    if kind is ViolationKind.SCALE_ORDER:
        module = _SCALE_WORDS.fullmatch(tensor)
        rows = _ROWS_WORDS.search(str(data.get("message", "")))
        return ContractViolation(
            kind,
            str(data["consumer"]),
            module["module"] if module else tensor.split(" ")[0],
            "input_scale",
            ScaleLayout[str(data["expected"])],
            ScaleLayout[str(data["found"])],
            bool(data["effective"]),
            rows=int(rows["m"]) if rows else None,
        )
    if kind is ViolationKind.CONSUMERS_DISAGREE:
        orders = tuple((m["consumer"], ScaleLayout[m["layout"]]) for m in _ORDER_WORDS.finditer(str(data["found"])))
        return ContractViolation(
            kind, str(data["consumer"]), "q_norm", "output", None, ConsumerOrders(orders), bool(data["effective"])
        )
    once = _ONCE_WORDS.fullmatch(str(data["expected"]))
    expected = ShuffleExpectation(
        (int(once["n"]), int(once["k"])) if once else None, kind is ViolationKind.RELAID_WEIGHT_DIRECT_READ
    )
    module = tensor.removesuffix(".weight")
    found = weight_layout_from_text(str(data["found"]), where)
    return ContractViolation(kind, str(data["consumer"]), module, "weight", expected, found, bool(data["effective"]))
