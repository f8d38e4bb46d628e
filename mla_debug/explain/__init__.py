"""Explaining captured layers: the step-by-step diff of two captures (or a capture and mla_debug's
reference run on its inputs), weight and scale forensics, and the ranked layout stories that reproduce a
diverging step from the captured bytes."""

from __future__ import annotations

from .diff import CaptureDiff, diff_captures, load_capture_diff
from .explain import CaptureExplanation, explain_capture, load_capture_explanation
from .reference import reference_capture, run_capture
from .scan_compare import ScanComparison, compare_scans, load_scan_comparison
from .stories import StoryKind

__all__ = [
    "CaptureDiff",
    "CaptureExplanation",
    "ScanComparison",
    "StoryKind",
    "compare_scans",
    "diff_captures",
    "explain_capture",
    "load_capture_diff",
    "load_capture_explanation",
    "load_scan_comparison",
    "reference_capture",
    "run_capture",
]
