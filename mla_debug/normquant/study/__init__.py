"""How accurate the fused RMSNorm + FP8 group quant is against its unfused paths, over input
distributions chosen to stress it (the study behind notebook 04)."""

from __future__ import annotations

from .accuracy import PATHS, NormQuantAccuracy, fp8_spacing, measure_accuracy, rmsnorm_truth
from .inputs import DISTRIBUTIONS, NormQuantInputs, distribution_names, make_inputs
from .study import NormQuantStudy, accuracy_study

__all__ = [
    "DISTRIBUTIONS",
    "PATHS",
    "NormQuantAccuracy",
    "NormQuantInputs",
    "NormQuantStudy",
    "accuracy_study",
    "distribution_names",
    "fp8_spacing",
    "make_inputs",
    "measure_accuracy",
    "rmsnorm_truth",
]
