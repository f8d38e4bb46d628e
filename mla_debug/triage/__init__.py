"""TP triage: run a layer at several TP sizes under a serving scenario, find where it first diverges from
the reference and why (the broken contract), bisect the one change that restores it, confirm by activation
patching, and keep it all as a typed report that round-trips through JSON.

The package is itself callable: ``md.triage(...)`` is `session.triage`, while ``md.triage.TriageSession``,
``md.triage.compare`` ... name the rest.
"""

from __future__ import annotations

from .._callable_package import make_callable
from .bisection import BisectStats, Culprit, KnownFix, Remedy
from .caveats import Caveat, CaveatKind
from .changes import Change, RemedyKind, candidate_changes, candidate_workarounds
from .diff import RunDiff, StepDiff, block_errors, compare
from .patching import PatchConfirmation, PatchResult, PatchVerdict, StepRecovery, confirm_by_patching, patch_steps
from .positions import TokenPositions
from .provenance import Provenance, WeightsSource
from .report import BlockErrors, RunReport, TriageReport, load_triage, write_json
from .session import ConfigResult, CulpritGroup, TriageResult, TriageSession, bisect, triage

__all__ = [
    "BisectStats",
    "BlockErrors",
    "Caveat",
    "CaveatKind",
    "Change",
    "ConfigResult",
    "Culprit",
    "CulpritGroup",
    "KnownFix",
    "PatchConfirmation",
    "PatchResult",
    "PatchVerdict",
    "Provenance",
    "Remedy",
    "RemedyKind",
    "RunDiff",
    "RunReport",
    "StepDiff",
    "StepRecovery",
    "TokenPositions",
    "TriageReport",
    "TriageResult",
    "TriageSession",
    "WeightsSource",
    "bisect",
    "block_errors",
    "candidate_changes",
    "candidate_workarounds",
    "compare",
    "confirm_by_patching",
    "load_triage",
    "patch_steps",
    "triage",
    "write_json",
]

make_callable(__name__, triage)
