"""Plots, styled tables and the HTML report of a TP triage.

    from mla_debug.viz import error_heatmap, block_heatmap, summary_styler, steps_styler, write_html

plotly and pandas are imported inside the functions, so importing this package needs neither.
"""

from __future__ import annotations

from .heatmaps import block_heatmap, error_heatmap
from .report import render_html, write_html
from .tables import steps_styler, summary_styler

__all__ = ["block_heatmap", "error_heatmap", "render_html", "steps_styler", "summary_styler", "write_html"]
