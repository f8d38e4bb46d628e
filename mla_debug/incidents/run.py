"""Reproduce an incident and diagnose it with the tool's own mechanics: `run_incident(name)`.

``reproduce`` of an incident file names up to three reproductions, each run here:

- ``triage``: `triage.triage` of the incident's scenario (``scenario``: a file under ``data/incidents/``
  or a named scenario - the release profile with the rule the bug changed), on ``model`` and
  ``platform`` at ``tp_sizes`` and ``modes`` with ``tokens``.
- ``capture``: two captures compared and explained (`explain.diff_captures`, `explain.explain_capture`):
  either shipped folders (``sample`` and ``against``, under ``data/``) or a planted pair made here - the
  layer run by mla_debug under the scenario of each side (``bad`` and ``good``: scenario, TP size,
  settings), each made a capture (`explain.run_capture`) on the same synthetic
  checkpoint and inputs.
- ``operands``: one op's held tensors and its consumer's output (`incidents.operands`).

Nothing of the diagnosis is written in the file: the run derives it and `diagnosis.compare` holds it to
``expected``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from .diagnosis import (
    CaptureDiagnosis,
    Check,
    OperandDiagnosis,
    TriageDiagnosis,
    VariantVerdict,
    compare,
)
from .operands import run_operands
from .record import Incident, incidents_folder, load_incident

DERIVED_STEPS = ("absorb_uk", "absorb_uv")  # explained as the derived weight they read (W_UK, W_UV)


@dataclass(frozen=True)
class IncidentRun:
    """One incident reproduced: its record, each reproduction's diagnosis and the checks against ``expected``."""

    incident: Incident
    triage: TriageDiagnosis | None = None
    capture: CaptureDiagnosis | None = None
    operands: OperandDiagnosis | None = None
    checks: tuple[Check, ...] = field(default_factory=tuple)

    @property
    def ok(self) -> bool:
        """Every expected field holds (and at least one was checked)."""
        return bool(self.checks) and all(c.ok for c in self.checks)

    @property
    def failed(self) -> list[Check]:
        return [c for c in self.checks if not c.ok]


# -- scenarios -------------------------------------------------------------------------------------


def _scenario(ref: str, settings: Mapping[str, Any] | None = None):
    """A named scenario, or a scenario file relative to ``data/incidents/``; with `settings` applied."""
    from ..scenarios import scenario

    path = incidents_folder() / ref
    found = scenario(path) if ref.endswith((".yaml", ".yml")) else scenario(ref)
    return found.with_settings(dict(settings)) if settings else found


# -- triage ----------------------------------------------------------------------------------------


def run_triage(spec: Mapping[str, Any], progress: bool | None = False):
    from ..triage import triage

    return triage(
        model_config(spec["model"]),
        spec["platform"],
        _scenario(spec["scenario"], spec.get("settings")),
        tp_sizes=tuple(spec["tp_sizes"]),
        tokens=int(spec.get("tokens", 8)),
        modes=tuple(spec.get("modes", ("prefill", "decode"))),
        device="cpu",
        progress=progress,
        patching=bool(spec.get("patching", False)),
    )


def triage_diagnosis(result) -> TriageDiagnosis:
    """The diagnosis a triage result holds (see `diagnosis.TriageDiagnosis`)."""
    diverged = tuple((c.tp, c.mode) for c in result.configs if c.verdict == "diverged")
    first_steps, kinds = {}, []
    for tp, mode in diverged:
        config = result.config(tp, mode)
        step = config.diff.first_divergent_step
        first_steps[f"TP{tp} {mode}"] = step
        for v in config.diff.run.records[step].violations:
            if v.effective:
                kinds.append(v.kind.value)
    culprits = {f"TP{c.tp} {c.mode}": c.layer for c in result.culprits}
    workarounds = [w.setting for c in result.culprits for w in c.workarounds if w.setting]
    fixes = [
        f"{fix.changes[0].kind} {fix.changes[0].target}"
        for c in result.culprits
        for fix in c.code_fixes
        if len(fix.changes) == 1
    ]
    known = [c.known_fix.restores for c in result.culprits if c.known_fix is not None]
    return TriageDiagnosis(
        diverged=diverged,
        first_steps=first_steps,
        culprits=culprits,
        violations=tuple(dict.fromkeys(kinds)),
        workarounds=tuple(dict.fromkeys(workarounds)),
        code_fixes=tuple(dict.fromkeys(fixes)),
        known_fix=all(known) if known else None,
        headline=result.culprits[0].explanation if result.culprits else "",
    )


# -- capture ---------------------------------------------------------------------------------------


def model_config(model: str | Mapping[str, Any]):
    """A preset by name, or ``{preset: NAME, FIELD: value, ...}``: the preset with fields replaced (named
    ``NAME-FIELD...`` so reports say it is not the preset)."""
    from dataclasses import replace

    from ..model import MLAConfig

    if isinstance(model, str):
        return MLAConfig.preset(model)
    fields = {k: v for k, v in model.items() if k != "preset"}
    name = f"{model['preset']}-" + "-".join(f"{k}{v}" for k, v in sorted(fields.items()))
    return replace(MLAConfig.preset(model["preset"]), name=name, **fields)


def _held_bytes(capture, run) -> None:
    """Plant what the engine held: the bytes of every linear whose kernel preshuffles its weight at load
    shuffled (16, 16) once on every rank, as that kernel left them (`layouts.shuffle_weight`)."""
    from dataclasses import replace

    from ..kernels.base import kernel_class
    from ..layouts import shuffle_weight

    for module, choice in run.kernels.items():
        try:
            shuffles = getattr(kernel_class(choice.kernel), "preshuffles_weight", False)
        except ValueError:
            continue  # a dense (unquantized) linear
        if not shuffles:
            continue
        for rank in capture.ranks:
            name = f"{module}.weight"
            held = rank.tensors.get(name)
            if held is not None:
                attrs = {**held.attrs, "aiter_bpreshuffled": True, "kernel": choice.kernel}
                rank.tensors[name] = replace(held, tensor=shuffle_weight(held.tensor, (16, 16)), attrs=attrs)


def _planted(side: Mapping[str, Any], spec: Mapping[str, Any], ckpt, hidden, positions):
    from ..explain import run_capture
    from ..parallel import run_layer

    scen = _scenario(side.get("scenario", spec.get("scenario", "reference")), side.get("settings"))
    run = run_layer(
        ckpt.cfg,
        ckpt,
        hidden,
        positions,
        tp_size=int(side["tp"]),
        mode=spec.get("mode", "prefill"),
        platform=spec["platform"],
        scenario=scen,
        dtype=torch.bfloat16,
    )
    capture = run_capture(run, ckpt, hidden, positions, note=f"incident reproduction: {scen.name} TP{side['tp']}")
    _held_bytes(capture, run)
    return capture


def capture_pair(spec: Mapping[str, Any]):
    """(good, bad, checkpoint) of a capture reproduction (see the module docstring)."""
    from ..capture import load_capture
    from ..model import Checkpoint
    from ..scenarios import data_folder

    if "sample" in spec:
        root = data_folder()
        good, bad = load_capture(root / spec["against"]), load_capture(root / spec["sample"])
        return good, bad, good.checkpoint()
    cfg = model_config(spec["model"])
    ckpt = Checkpoint.synthetic(cfg, seed=int(spec.get("seed", 0)))
    gen = torch.Generator().manual_seed(int(spec.get("seed", 0)) + 1)
    tokens = int(spec.get("tokens", 8))
    hidden = torch.randn(tokens, cfg.hidden_size, generator=gen).to(torch.bfloat16)
    positions = torch.arange(tokens)
    good = _planted(spec["good"], spec, ckpt, hidden, positions)
    bad = _planted(spec["bad"], spec, ckpt, hidden, positions)
    return good, bad, ckpt


def capture_diagnosis(good, bad, ckpt) -> CaptureDiagnosis:
    from ..explain import diff_captures, explain_capture

    diff = diff_captures(good, bad, checkpoint=ckpt)
    explanation = explain_capture(bad, ckpt, diff=diff)
    diverged = tuple(diff.diverged_steps)
    first = diverged[0] if diverged else None
    outcome, stories, violations = None, (), ()
    if first is not None:
        found = explanation.of(first)
        outcome = found.outcome.value
        stories = tuple(dict.fromkeys(k.value for k in found.story))
        violations = tuple(dict.fromkeys(k.violation.value for k in found.story if k.violation is not None))
    weights = {w.name: w.difference.value for w in diff.weights}
    outcomes = {e.tensor if e.step in DERIVED_STEPS else e.step: e.outcome.value for e in explanation.explanations}
    return CaptureDiagnosis(diverged, first, outcome, stories, violations, weights, outcomes)


# -- operands --------------------------------------------------------------------------------------


def operand_diagnosis(run) -> OperandDiagnosis:
    def verdict(outcome) -> VariantVerdict:
        e = outcome.explanation
        return VariantVerdict(
            e.outcome.value,
            tuple(dict.fromkeys(k.value for k in e.story)),
            outcome.truth_err,
            outcome.threshold,
            not outcome.diverged,
        )

    e = run.bad.explanation
    return OperandDiagnosis(
        step=e.step,
        outcome=e.outcome.value,
        stories=tuple(dict.fromkeys(k.value for k in e.story)),
        violations=tuple(dict.fromkeys(k.violation.value for k in e.story if k.violation is not None)),
        truth_err=run.bad.truth_err,
        floor=run.bad.floor,
        threshold=run.bad.threshold,
        diverged=run.bad.diverged,
        variants={name: verdict(v) for name, v in run.variants.items()},
    )


# -- the whole incident ----------------------------------------------------------------------------


def run_incident(
    incident: Incident | str | Path, reproductions: tuple[str, ...] | None = None, progress: bool | None = False
) -> IncidentRun:
    """Reproduce `incident` (a name, a path, or a loaded `Incident`) - every reproduction its file names,
    or only `reproductions` - and compare what the tool finds with the file's ``expected``."""
    inc = incident if isinstance(incident, Incident) else load_incident(incident)
    wanted = reproductions or inc.kinds
    unknown = [r for r in wanted if r not in inc.kinds]
    if unknown:
        raise ValueError(f"incident {inc.name} has no {', '.join(unknown)} reproduction; it has {', '.join(inc.kinds)}")
    found: dict[str, Any] = {}
    checks: list[Check] = []
    for kind in wanted:
        spec = inc.reproduce[kind]
        if kind == "triage":
            found[kind] = triage_diagnosis(run_triage(spec, progress))
        elif kind == "capture":
            found[kind] = capture_diagnosis(*capture_pair(spec))
        else:
            found[kind] = operand_diagnosis(run_operands(f"{inc.name} reproduce.operands", spec))
        checks += compare(kind, inc.expected[kind], found[kind])
    return IncidentRun(inc, found.get("triage"), found.get("capture"), found.get("operands"), tuple(checks))
