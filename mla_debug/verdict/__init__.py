"""The yardsticks of every verdict: the fp32 truth, the noise floor of a correct FP8 run, and the rule
that says when a step diverged. Triage and the capture explanation share them."""

from .floor import dense_twin, step_floor
from .rule import DIVERGENCE_FACTOR, MIN_THRESHOLD, diverges, step_verdict, threshold

__all__ = ["DIVERGENCE_FACTOR", "MIN_THRESHOLD", "dense_twin", "diverges", "step_floor", "step_verdict", "threshold"]
