"""When a step diverges: its relative L2 error against the same step of a reference exceeds
DIVERGENCE_FACTOR x its noise floor (and MIN_THRESHOLD); without a floor, only an effective broken
contract or a non-finite value marks it. Two correct FP8 runs differ by about sqrt(2) x floor (independent
roundings), a misread scale or weight by far more. One rule for triage and for the capture diff.
"""

from __future__ import annotations

import math

from ..numerics import rel_l2

DIVERGENCE_FACTOR = 4.0
MIN_THRESHOLD = 1e-3


def threshold(floor: float, factor: float = DIVERGENCE_FACTOR) -> float:
    return max(factor * floor, MIN_THRESHOLD)


def step_verdict(
    record, reference, floor: dict[str, float] | None = None, factor: float = DIVERGENCE_FACTOR
) -> tuple[float, float | None, float | None, bool] | None:
    """(rel_err, floor, threshold, diverged) of one step's record against the same step of `reference`
    (a LayerRun) by the rule of `compare`, without compare's other metrics; None where compare skips
    the step (the reference lacks it, or either side has no output)."""
    ref = reference.records.get(record.name)
    if ref is None or record.output is None or ref.output is None:
        return None
    return verdict_of(record.name, record, ref, floor, factor)


def diverges(record, reference, floor: dict[str, float] | None = None, factor: float = DIVERGENCE_FACTOR) -> bool:
    """Whether one step's record diverges from the same step of `reference` (a LayerRun), by the rule of
    `compare`; a step the reference lacks, or without output, never does (compare skips it)."""
    ref = reference.records.get(record.name)
    if ref is None or record.output is None or ref.output is None:
        return False
    return verdict_of(record.name, record, ref, floor, factor)[3]


def verdict_of(name: str, record, ref, floor: dict[str, float] | None, factor: float):
    """(rel_err, floor, threshold, diverged) of one step - the one rule `compare` and `diverges` share."""
    a, b = record.output, ref.output
    if a.shape != b.shape:
        raise ValueError(f"step {name}: run output {tuple(a.shape)} and reference {tuple(b.shape)} differ in shape")
    err = rel_l2(a, b)
    step_floor = floor.get(name) if floor else None
    limit = threshold(step_floor, factor) if step_floor is not None else None
    effective = any(v.effective for v in record.violations)
    diverged = (not math.isfinite(err)) or (limit is not None and err > limit) or (limit is None and effective)
    return err, step_floor, limit, diverged
