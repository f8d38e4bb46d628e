"""A broken layout contract in words: what the reader expected, what it found, and what that does."""

from __future__ import annotations

from ..layouts import ContractViolation, ScaleLayout, ViolationKind, WeightLayout
from ..layouts.contracts import ConsumerOrders, ShuffleExpectation


def _times(count: int) -> str:
    return {0: "left plain", 1: "shuffled once", 2: "shuffled twice"}.get(count, f"shuffled {count} times")


def _expected(expectation: ShuffleExpectation) -> str:
    return "plain bytes" if expectation.layout is None else f"bytes shuffled once with {tuple(expectation.layout)}"


def violation_sentence(v: ContractViolation) -> str:
    """'q_b_proj.input_scale: aiter-bpreshuffle reads COL_MAJOR activation-scale bytes but ...'."""
    if v.kind is ViolationKind.SCALE_ORDER and isinstance(v.found, ScaleLayout) and isinstance(v.expected, ScaleLayout):
        shape = f"M={v.rows}" if v.rows is not None else "this M"
        consequence = (
            f"for {shape} > 1 row m reads the scales of other tokens"
            if v.effective
            else f"harmless here because the bytes coincide ({shape}, G={v.groups})"
        )
        return (
            f"{v.tensor}: {v.consumer} reads {v.expected.name} activation-scale bytes but the producer wrote "
            f"{v.found.name}; {consequence}"
        )
    if isinstance(v.found, ConsumerOrders):
        wanted = ", ".join(f"{name} reads {layout.name}" for name, layout in v.found.orders)
        return f"{v.module}: the fused producer writes one scale order for two consumers that disagree ({wanted})"
    if isinstance(v.found, WeightLayout) and isinstance(v.expected, ShuffleExpectation):
        reader = "reads the weight directly" if v.expected.direct else "reads the weight"
        consequence = (
            "the values it reads are wrong"
            if v.effective
            else (
                "harmless here: at this row width the extra shuffles complete a full period of the shuffle, "
                "so the bytes read are the intended ones"
            )
        )
        return (
            f"{v.tensor}: {v.consumer} {reader} expecting {_expected(v.expected)}, but it was "
            f"{_times(v.found.shuffle_count)} ({v.found.describe()}); {consequence}"
        )
    return str(v)
