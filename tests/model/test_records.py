"""StepRecord.summary: one line that spells out what went wrong, not only how often."""

from __future__ import annotations

import torch

from mla_debug.layouts.contracts import scale_order_violation
from mla_debug.model.records import StepRecord


def violation(module: str, m: int = 8):
    return scale_order_violation("aiter-bpreshuffle", module, "ROW_MAJOR", "COL_MAJOR", m=m, g=4)


def test_summary_without_violations_says_nothing_about_them():
    record = StepRecord("q_norm", torch.ones(2, 3), kernel="rmsnorm")
    assert record.summary() == "q_norm: (2, 3); kernel rmsnorm; amax 1, nan 0, inf 0"


def test_summary_spells_out_one_violation():
    broken = violation("wq_b")
    record = StepRecord("wq_b", torch.ones(2, 3), kernel="aiter-bpreshuffle", violations=[broken])
    line = record.summary()
    assert "\n" not in line
    assert line.endswith(f"; violation: {broken}")
    assert "wq_b.input_scale read by aiter-bpreshuffle as COL_MAJOR, found ROW_MAJOR (effective)" in line


def test_summary_numbers_several_violations_harmless_ones_say_so():
    first, second = violation("wq_b"), violation("indexer.wq_b", m=1)
    record = StepRecord("wq_b", None, violations=[first, second])
    line = record.summary()
    assert line == f"wq_b: -; kernel -; 2 violations: (1) {first} (2) {second}"
    assert first.effective and not second.effective and line.endswith("(harmless)")
