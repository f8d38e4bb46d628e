"""Layout contracts, run diffs, TP triage and culprit bisection."""

from .changes import Change, candidate_changes
from .diff import RunDiff, StepDiff, block_errors, compare
from .noise import DIVERGENCE_FACTOR, MIN_THRESHOLD, dense_twin, step_floor
from .triage import ConfigResult, Culprit, TriageResult, Workbench, bisect, triage

__all__ = [
    "DIVERGENCE_FACTOR",
    "MIN_THRESHOLD",
    "Change",
    "ConfigResult",
    "Culprit",
    "RunDiff",
    "StepDiff",
    "TriageResult",
    "Workbench",
    "bisect",
    "block_errors",
    "candidate_changes",
    "compare",
    "dense_twin",
    "step_floor",
    "triage",
]
