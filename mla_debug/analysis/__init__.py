"""Run diffs, TP triage, culprit bisection and activation patching, triage reports as plain data (with the
caveats of a triage and its tokens' positions); the fused norm+quant accuracy study."""

from .bisection import BisectStats, Culprit, KnownFix, Remedy
from .caveats import Caveat, CaveatKind
from .changes import Change, RemedyKind, candidate_changes, candidate_workarounds
from .diff import RunDiff, StepDiff, block_errors, compare
from .noise import DIVERGENCE_FACTOR, MIN_THRESHOLD, dense_twin, step_floor
from .normquant_accuracy import PATHS, NormQuantAccuracy, fp8_spacing, measure_accuracy, rmsnorm_truth
from .normquant_inputs import DISTRIBUTIONS, NormQuantInputs, distribution_names, make_inputs
from .normquant_study import NormQuantStudy, accuracy_study
from .patching import PatchConfirmation, PatchResult, PatchVerdict, StepRecovery, confirm_by_patching, patch_steps
from .positions import TokenPositions
from .provenance import Provenance, WeightsSource
from .report import BlockErrors, RunReport, TriageReport, load_triage, write_json
from .triage import ConfigResult, CulpritGroup, TriageResult, Workbench, bisect, triage

__all__ = [
    "DISTRIBUTIONS",
    "DIVERGENCE_FACTOR",
    "MIN_THRESHOLD",
    "PATHS",
    "BisectStats",
    "BlockErrors",
    "Caveat",
    "CaveatKind",
    "Change",
    "ConfigResult",
    "Culprit",
    "CulpritGroup",
    "KnownFix",
    "NormQuantAccuracy",
    "NormQuantInputs",
    "NormQuantStudy",
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
    "WeightsSource",
    "Workbench",
    "accuracy_study",
    "bisect",
    "block_errors",
    "candidate_changes",
    "candidate_workarounds",
    "compare",
    "confirm_by_patching",
    "dense_twin",
    "distribution_names",
    "fp8_spacing",
    "load_triage",
    "make_inputs",
    "measure_accuracy",
    "patch_steps",
    "rmsnorm_truth",
    "step_floor",
    "triage",
    "write_json",
]
