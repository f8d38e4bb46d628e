"""Incidents in words: the list, and one reproduction's diagnosis beside what its thread reported.

Everything here reads the typed results of `mla_debug.incidents` (`Incident`, `IncidentRun` and its
diagnoses) and returns lines; the command line prints them and notebooks display them.
"""

from __future__ import annotations

import math
import textwrap

from ..incidents import Incident, IncidentRun
from ..incidents.diagnosis import CaptureDiagnosis, OperandDiagnosis, TriageDiagnosis

WIDTH = 80
_OUTCOME_WORDS = {
    "explained": "explained by",
    "correct_from_inputs": "what its captured inputs give (no fault inside the step)",
    "no_story": "a value difference that no known layout or format story reproduces",
    "untestable": "not testable from the captured tensors",
}


def incident_rows(incidents: list[Incident]) -> list[tuple[str, str, str, str, str]]:
    """(name, engine, platform, model, reproduced by) per incident, for a table."""
    return [
        (
            i.name,
            i.engine.split(" (")[0],
            i.platform.split(";")[0].split(" (")[0],
            i.model.split(" (")[0],
            ", ".join(i.kinds),
        )
        for i in incidents
    ]


def _number(value: float) -> str:
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf (NaN or Inf in the output)"
    return f"{value:.3g}"


def _wrap(label: str, text: str) -> list[str]:
    head = f"  {label:<11}"
    return textwrap.wrap(text, WIDTH, initial_indent=head, subsequent_indent=" " * len(head)) or [head]


def _triage_text(d: TriageDiagnosis) -> list[tuple[str, str]]:
    diverged = ", ".join(f"TP{tp} {mode}" for tp, mode in d.diverged) or "nothing"
    out = [("triage", f"diverged: {diverged}")]
    if d.diverged:
        steps = ", ".join(sorted(set(d.first_steps.values())))
        layers = ", ".join(sorted(set(d.culprits.values())))
        broken = ", ".join(d.violations) or "none (a value difference, no layout contract broken)"
        out += [
            ("step", f"first divergent step {steps}; culprit layer {layers}"),
            ("kind", f"contracts broken: {broken}"),
        ]
        if d.code_fixes:
            out.append(("fix", "code changes that restore: " + "; ".join(d.code_fixes)))
        if d.known_fix is not None:
            out.append(
                ("fix", "the scenario's known upstream fix " + ("restores" if d.known_fix else "does not restore"))
            )
        if d.workarounds:
            out.append(("workaround", "; ".join(d.workarounds)))
        if d.headline:
            out.append(("culprit", d.headline))
    return out


def _capture_text(d: CaptureDiagnosis) -> list[tuple[str, str]]:
    if d.first_step is None:
        return [("capture", "no step diverges between the two captures")]
    outcome = _OUTCOME_WORDS.get(d.outcome or "", d.outcome or "")
    story = f" {', '.join(d.stories)}" if d.stories else ""
    moved = [name for name, kind in d.weights.items() if kind != "none"]
    out = [
        ("capture", f"diverged steps: {', '.join(d.diverged_steps)}"),
        ("step", f"{d.first_step}: {outcome}{story}"),
    ]
    if moved:
        out.append(
            ("weights", "bytes differ from the checkpoint's: " + ", ".join(f"{n} ({d.weights[n]})" for n in moved))
        )
    others = {s: o for s, o in d.outcomes.items() if s != d.first_step}
    if others:
        out.append(("explained", "; ".join(f"{s}: {o}" for s, o in others.items())))
    return out


def _operands_text(d: OperandDiagnosis) -> list[tuple[str, str]]:
    outcome = _OUTCOME_WORDS.get(d.outcome, d.outcome)
    story = f" {', '.join(d.stories)}" if d.stories else ""
    out = [
        ("operands", f"{d.step}: {outcome}{story}"),
        (
            "error",
            f"against the fp32 truth {_number(d.truth_err)} (noise floor {_number(d.floor)}, divergence "
            f"threshold {_number(d.threshold)}): {'diverged' if d.diverged else 'within noise'}",
        ),
    ]
    for name, v in d.variants.items():
        verdict = "restores" if v.restores else "does not restore"
        found = f", {', '.join(v.stories)}" if v.stories else ""
        out.append(("variant", f"{name}: {verdict} (error {_number(v.truth_err)}; {v.outcome}{found})"))
    return out


def diagnosis_lines(run: IncidentRun) -> list[str]:
    """The incident, what its thread reported, what mla_debug found by running it, and each expected field."""
    inc = run.incident
    lines = textwrap.wrap(f"{inc.name}: {inc.title}", WIDTH)
    lines += _wrap("source", "; ".join(f"{t.ref} ({t.kind}, {t.state})" for t in inc.threads))
    lines += _wrap("setting", f"{inc.engine}; {inc.platform}; {inc.model}; {inc.parallel}")
    if inc.stand_in:
        lines += _wrap("stand-in", inc.stand_in)
    lines += ["", "what the thread reported:"]
    for key in ("step", "kind", "fix", "workaround"):
        lines += _wrap(key, inc.thread_reported[key])
    lines += ["", "what mla_debug finds by running it:"]
    for diagnosis, text in ((run.triage, _triage_text), (run.capture, _capture_text), (run.operands, _operands_text)):
        if diagnosis is not None:
            for label, sentence in text(diagnosis):
                lines += _wrap(label, sentence)
    lines += ["", "the file's expected diagnosis:"]
    for c in run.checks:
        mark = "ok  " if c.ok else "FAIL"
        detail = "" if c.ok else f" (found {c.found})"
        lines += textwrap.wrap(
            f"  {mark} {c.reproduction}.{c.field} = {c.expected}{detail}", WIDTH, subsequent_indent=" " * 7
        )
    verdict = (
        "reproduced: every expected field holds" if run.ok else f"NOT reproduced: {len(run.failed)} field(s) differ"
    )
    lines += ["", verdict]
    return lines
