"""Floats in JSON without losing the ones JSON cannot spell.

A step whose output holds NaN or Inf has a non-finite error, and that is a finding, not a missing
value. JSON has no NaN or Infinity, so the report writes them as the strings "nan", "inf" and "-inf"
and reads them back as the same floats; None (null) stays "no value" (a step without a noise floor,
or a key an older report did not write).
"""

from __future__ import annotations

import math

_SPELLED = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}


def float_to_json(x: float | None) -> float | str | None:
    """`x` as JSON can hold it: a finite float as itself, NaN/Inf as "nan"/"inf"/"-inf", None as None."""
    if x is None:
        return None
    x = float(x)
    if math.isfinite(x):
        return x
    return "nan" if math.isnan(x) else ("inf" if x > 0 else "-inf")


def float_from_json(value: object, what: str = "value") -> float | None:
    """The float `float_to_json` wrote (None stays None); ValueError naming `what` for anything else."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ValueError(f"{what}: {value!r} is not a number")
    if isinstance(value, str):
        if value not in _SPELLED:
            raise ValueError(f"{what}: {value!r} is not a number (only 'nan', 'inf' and '-inf' are spelled out)")
        return _SPELLED[value]
    return float(value)
