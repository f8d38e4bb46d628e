"""What mla_debug derived from an incident's reproduction, and how it compares with what the file expects.

Each reproduction gives a typed diagnosis made only of what the tool's mechanics produced:

- `TriageDiagnosis` (a triage of the incident's scenario): the (TP, mode) configurations that diverged,
  the first divergent step and culprit layer of each, the contracts the first step broke, and what
  bisection found restores it (code fixes, workarounds a user can apply, the known upstream fix).
- `CaptureDiagnosis` (a planted capture pair, diffed and explained): the diverged steps, the first, the
  explanation's outcome and story there, and how the weight bytes relate to the checkpoint's.
- `OperandDiagnosis` (one op's held tensors): the explanation's outcome and story, the reported
  configuration's error against the fp32 truth, and whether each variant (the fix, the workaround)
  restores it.

`compare` holds a diagnosis to the ``expected`` mapping of the file, field by field (`Check`); the
expected values are the file's statement of the thread's root cause in the tool's terms.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True)
class Check:
    """One expected field against what the tool found."""

    reproduction: str
    field: str
    expected: Any
    found: Any
    ok: bool


@dataclass(frozen=True)
class TriageDiagnosis:
    diverged: tuple[tuple[int, str], ...]
    first_steps: dict[str, str]  # "TP4 decode" -> step
    culprits: dict[str, str]  # "TP4 decode" -> layer
    violations: tuple[str, ...]  # kinds broken (effectively) at the first divergent step, any configuration
    workarounds: tuple[str, ...]  # settings a user can apply, as written
    code_fixes: tuple[str, ...]  # "kind target" of each single-change code fix
    known_fix: bool | None  # whether the scenario's known upstream fix restores (None: none declared)
    headline: str  # the first culprit's explanation


@dataclass(frozen=True)
class CaptureDiagnosis:
    diverged_steps: tuple[str, ...]
    first_step: str | None
    outcome: str | None  # the explanation's outcome at the first diverged step
    stories: tuple[str, ...]
    violations: tuple[str, ...]
    weights: dict[str, str]  # weight -> difference kind (none, layout, value)
    outcomes: dict[str, str] = field(default_factory=dict)  # every explained step -> its outcome


@dataclass(frozen=True)
class VariantVerdict:
    outcome: str
    stories: tuple[str, ...]
    truth_err: float
    threshold: float
    restores: bool


@dataclass(frozen=True)
class OperandDiagnosis:
    step: str
    outcome: str
    stories: tuple[str, ...]
    violations: tuple[str, ...]
    truth_err: float
    floor: float
    threshold: float
    diverged: bool
    variants: dict[str, VariantVerdict] = field(default_factory=dict)


def _number(value: float) -> float | str:
    return value if math.isfinite(value) else ("inf" if value > 0 else "nan" if math.isnan(value) else "-inf")


def diagnosis_to_dict(diagnosis) -> dict[str, Any]:
    """Plain JSON data (non-finite numbers as strings)."""
    data = asdict(diagnosis)

    def clean(value):
        if isinstance(value, float):
            return _number(value)
        if isinstance(value, dict):
            return {k: clean(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [clean(v) for v in value]
        return value

    return clean(data)


def _pairs(value: Any) -> set[tuple[int, str]]:
    return {(int(tp), str(mode)) for tp, mode in value}


def _compare_triage(expected: Mapping[str, Any], found: TriageDiagnosis) -> list[Check]:
    checks = []
    if "diverged" in expected:
        want = _pairs(expected["diverged"])
        checks.append(Check("triage", "diverged", sorted(want), sorted(found.diverged), want == set(found.diverged)))
    if "first_step" in expected:
        steps = set(found.first_steps.values())
        checks.append(
            Check("triage", "first_step", expected["first_step"], sorted(steps), steps == {expected["first_step"]})
        )
    if "culprit" in expected:
        layers = set(found.culprits.values())
        checks.append(Check("triage", "culprit", expected["culprit"], sorted(layers), layers == {expected["culprit"]}))
    if "violations" in expected:
        want = set(expected["violations"])
        checks.append(
            Check("triage", "violations", sorted(want), list(found.violations), want == set(found.violations))
        )
    if "workaround" in expected:
        want = expected["workaround"]
        checks.append(Check("triage", "workaround", want, list(found.workarounds), want in found.workarounds))
    if "code_fix" in expected:
        want = expected["code_fix"]
        checks.append(Check("triage", "code_fix", want, list(found.code_fixes), want in found.code_fixes))
    if "known_fix_restores" in expected:
        want = bool(expected["known_fix_restores"])
        checks.append(Check("triage", "known_fix_restores", want, found.known_fix, found.known_fix is want))
    return checks


def _compare_capture(expected: Mapping[str, Any], found: CaptureDiagnosis) -> list[Check]:
    checks = []
    for key in ("first_step", "outcome"):
        if key in expected:
            value = getattr(found, key)
            checks.append(Check("capture", key, expected[key], value, value == expected[key]))
    for key in ("diverged_steps", "stories", "violations"):
        if key in expected:
            want, got = list(expected[key]), list(getattr(found, key))
            checks.append(Check("capture", key, want, got, set(want) == set(got)))
    for step, outcome in (expected.get("outcomes") or {}).items():
        got = found.outcomes.get(step)
        checks.append(Check("capture", f"outcomes.{step}", outcome, got, got == outcome))
    for weight, kind in (expected.get("weights") or {}).items():
        got = found.weights.get(weight)
        checks.append(Check("capture", f"weights.{weight}", kind, got, got == kind))
    return checks


def _compare_operands(expected: Mapping[str, Any], found: OperandDiagnosis) -> list[Check]:
    checks = []
    for key in ("step", "outcome", "diverged"):
        if key in expected:
            value = getattr(found, key)
            checks.append(Check("operands", key, expected[key], value, value == expected[key]))
    for key in ("stories", "violations"):
        if key in expected:
            want, got = list(expected[key]), list(getattr(found, key))
            checks.append(Check("operands", key, want, got, set(want) == set(got)))
    for name, verdict in (expected.get("variants") or {}).items():
        got = found.variants.get(name)
        want_restores = verdict == "restores"
        value = None if got is None else ("restores" if got.restores else "does-not-restore")
        checks.append(
            Check("operands", f"variants.{name}", verdict, value, got is not None and got.restores is want_restores)
        )
    return checks


def compare(reproduction: str, expected: Mapping[str, Any], found) -> list[Check]:
    """Every expected field of one reproduction against its diagnosis (unknown fields are refused)."""
    allowed = {
        "triage": ("diverged", "first_step", "culprit", "violations", "workaround", "code_fix", "known_fix_restores"),
        "capture": ("diverged_steps", "first_step", "outcome", "stories", "violations", "weights", "outcomes"),
        "operands": ("step", "outcome", "stories", "violations", "diverged", "variants"),
    }[reproduction]
    unknown = sorted(set(expected) - set(allowed))
    if unknown:
        raise ValueError(f"expected.{reproduction}: unknown field(s) {', '.join(unknown)}; known: {', '.join(allowed)}")
    compare_fn = {"triage": _compare_triage, "capture": _compare_capture, "operands": _compare_operands}[reproduction]
    return compare_fn(expected, found)
