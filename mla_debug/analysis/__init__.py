"""Layout contracts, run diffs, TP triage and culprit bisection; the fused norm+quant accuracy study."""

from .changes import Change, candidate_changes
from .diff import RunDiff, StepDiff, block_errors, compare
from .noise import DIVERGENCE_FACTOR, MIN_THRESHOLD, dense_twin, step_floor
from .normquant_accuracy import PATHS, NormQuantAccuracy, fp8_spacing, measure_accuracy, rmsnorm_truth
from .normquant_inputs import DISTRIBUTIONS, NormQuantInputs, distribution_names, make_inputs
from .normquant_study import NormQuantStudy, accuracy_study
from .triage import ConfigResult, Culprit, TriageResult, Workbench, bisect, triage

__all__ = [
    "DISTRIBUTIONS",
    "DIVERGENCE_FACTOR",
    "MIN_THRESHOLD",
    "PATHS",
    "Change",
    "ConfigResult",
    "Culprit",
    "NormQuantAccuracy",
    "NormQuantInputs",
    "NormQuantStudy",
    "RunDiff",
    "StepDiff",
    "TriageResult",
    "Workbench",
    "accuracy_study",
    "bisect",
    "block_errors",
    "candidate_changes",
    "compare",
    "dense_twin",
    "distribution_names",
    "fp8_spacing",
    "make_inputs",
    "measure_accuracy",
    "rmsnorm_truth",
    "step_floor",
    "triage",
]
