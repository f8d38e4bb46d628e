"""The numbers a judged step carries beside its rel_err, alike in triage's `StepDiff` and the capture
diff's `StepComparison`: how close the outputs are (max_abs, cosine, snr_db) and what the rule made of
it (floor, threshold, diverged). Measured, written to JSON and read back in one place, so the two
results report and store them the same way."""

from __future__ import annotations

import math
from typing import Any

import torch

from .._json_numbers import float_from_json, float_to_json
from ..numerics import cosine, max_abs, snr_db

CLOSENESS = ("max_abs", "cosine", "snr_db")
RULED = ("floor", "threshold")


def closeness(actual: torch.Tensor, reference: torch.Tensor) -> dict[str, float]:
    """max_abs, cosine and snr_db of `actual` against `reference`, by field name."""
    return {"max_abs": max_abs(actual, reference), "cosine": cosine(actual, reference), "snr_db": snr_db(actual, reference)}


def measures_to_json(step: Any) -> dict[str, Any]:
    """`step`'s closeness and the rule's numbers as JSON data (NaN and Inf spelled as strings)."""
    data: dict[str, Any] = {key: float_to_json(getattr(step, key)) for key in CLOSENESS + RULED}
    data["diverged"] = step.diverged
    return data


def measures_from_json(data: dict[str, Any], where: str) -> dict[str, Any]:
    """The fields `measures_to_json` wrote, by name: a missing measure reads as NaN, a missing floor or
    threshold as None, a missing diverged as False; `where` names the step in an error."""
    found: dict[str, Any] = {}
    for key in CLOSENESS:
        value = float_from_json(data.get(key), f"{where}: {key}")
        found[key] = math.nan if value is None else value
    for key in RULED:
        found[key] = float_from_json(data.get(key), f"{where}: {key}")
    found["diverged"] = bool(data.get("diverged", False))
    return found
