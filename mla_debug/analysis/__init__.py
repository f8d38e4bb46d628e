"""Run diffs, TP triage, culprit bisection and activation patching, triage reports as plain data (with the
caveats of a triage and its tokens' positions); the fused norm+quant accuracy study; the layout diff and
explanation of captured layers."""

from .bisection import BisectStats, Culprit, KnownFix, Remedy
from .capture_diff import CaptureDiff, diff_captures, load_capture_diff
from .capture_explain import CaptureExplanation, explain_capture, load_capture_explanation
from .capture_reference import reference_capture, run_capture
from .capture_stories import StoryKind
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
from .scan_compare import ScanComparison, compare_scans, load_scan_comparison
from .triage import ConfigResult, CulpritGroup, TriageResult, Workbench, bisect, triage

__all__ = [
    "DISTRIBUTIONS",
    "DIVERGENCE_FACTOR",
    "MIN_THRESHOLD",
    "PATHS",
    "BisectStats",
    "BlockErrors",
    "CaptureDiff",
    "CaptureExplanation",
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
    "StoryKind",
    "RemedyKind",
    "RunDiff",
    "RunReport",
    "ScanComparison",
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
    "compare_scans",
    "confirm_by_patching",
    "dense_twin",
    "diff_captures",
    "distribution_names",
    "explain_capture",
    "fp8_spacing",
    "load_capture_diff",
    "load_capture_explanation",
    "load_scan_comparison",
    "load_triage",
    "make_inputs",
    "measure_accuracy",
    "patch_steps",
    "reference_capture",
    "rmsnorm_truth",
    "run_capture",
    "step_floor",
    "triage",
    "write_json",
]
