"""Plots, styled tables and the HTML report of a TP triage (drawn from a TriageReport); timelines and
tables of kernel traces; plots of the fused norm+quant accuracy study.

    from mla_debug.viz import error_heatmap, block_heatmap, summary_styler, steps_styler, write_html
    from mla_debug.viz import timeline, step_bars, kernel_table_styler, trace_diff_styler, trace_table_styler
    from mla_debug.viz import group_error_heatmap, error_histogram
    from mla_debug.viz import capture_heatmap, diff_lines, explanation_lines   # capture diffs and stories
    from mla_debug.viz import scan_lines, scan_figure   # whole-model scan comparisons
    from mla_debug.viz import verdict_text, shuffle_fit_text   # layout-forensics verdicts in words
    from mla_debug.viz import setup_notebook   # figures that survive a notebook's HTML export, offline

plotly and pandas are imported inside the functions, so importing this package needs neither.
"""

from __future__ import annotations

from .captures import capture_heatmap, diff_lines, explanation_lines
from .forensics import shuffle_fit_text, verdict_text
from .heatmaps import block_heatmap, error_heatmap
from .normquant_plots import error_histogram, group_error_heatmap
from .notebook import setup_notebook
from .report import render_html, write_html
from .scans import scan_figure, scan_lines
from .tables import steps_styler, summary_styler
from .timeline import short_name, step_bars, timeline
from .trace_tables import kernel_table_styler, trace_diff_styler, trace_table_styler
from .violations import violation_sentence

__all__ = [
    "violation_sentence",
    "block_heatmap",
    "capture_heatmap",
    "diff_lines",
    "error_heatmap",
    "error_histogram",
    "explanation_lines",
    "group_error_heatmap",
    "kernel_table_styler",
    "render_html",
    "scan_figure",
    "scan_lines",
    "setup_notebook",
    "short_name",
    "shuffle_fit_text",
    "step_bars",
    "steps_styler",
    "summary_styler",
    "timeline",
    "trace_diff_styler",
    "trace_table_styler",
    "verdict_text",
    "write_html",
]
