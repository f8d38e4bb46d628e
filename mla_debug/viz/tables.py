"""Styled pandas tables of a TP triage: the per-configuration summary and one configuration's steps.

Both draw from a TriageReport (or a live TriageResult, turned into its report first) and return a
pandas Styler (display it in a notebook, or `.to_html()` it into a report). Every text cell, header
and caption is HTML-escaped, because violation messages and kernel names are data. Each table's HTML
ids are derived from what it shows (no random ids), so the same report renders to the same bytes.
"""

from __future__ import annotations

import html
from typing import TYPE_CHECKING

from ._report_data import as_report

if TYPE_CHECKING:
    from pandas.io.formats.style import Styler

    from ..triage.report import TriageReport

# Light red for a diverged row, a darker red for the text of an effective violation (the cause, not a
# consequence), pale yellow for violations that are recorded but harmless for these shapes.
DIVERGED_ROW = "background-color: #f8d0d0"
EFFECTIVE_CELL = "color: #9b1c1c; font-weight: bold"
HARMLESS_CELL = "background-color: #fff3c4"

# Columns whose numbers span many decades; a fixed-point format would print most of them as 0.000.
SCIENTIFIC = ("rel_err", "worst_rel_err", "max_abs", "floor", "threshold")


def _number_formats(columns) -> dict[str, str]:
    formats = {c: "{:.2e}" for c in SCIENTIFIC if c in columns}
    if "cosine" in columns:
        formats["cosine"] = "{:.6f}"
    if "snr_db" in columns:
        formats["snr_db"] = "{:.1f}"
    return formats


def _base(frame, caption: str, table_id: str | None = None) -> Styler:
    # One format call for every column: the dict covers the numbers; the others get the default
    # formatter (str of the typed layout and kernel values), with the same escaping and the same mark
    # for a missing value. `table_id` replaces pandas' random id, so a render is reproducible.
    styler = frame.style if table_id is None else frame.style.set_uuid(table_id)
    return (
        styler.format(_number_formats(frame.columns), na_rep="-", escape="html")
        .format_index(escape="html", axis=1)
        .hide(axis="index")
        .set_caption(html.escape(caption))
        .set_table_styles(
            [
                {"selector": "caption", "props": "caption-side: top; text-align: left; font-weight: bold;"},
                {"selector": "td, th", "props": "padding: 2px 8px; text-align: left; vertical-align: top;"},
            ]
        )
    )


def summary_styler(report: TriageReport) -> Styler:
    """`report.summary` (one row per TP size and mode) with the diverged configurations in red."""
    report = as_report(report)
    frame = report.summary
    diverged = (frame["verdict"] == "diverged").tolist()

    def rows(row):
        return [DIVERGED_ROW if diverged[frame.index.get_loc(row.name)] else ""] * len(row)

    caption = (
        f"{report.model} on {report.platform} under {report.scenario}, {report.tokens} tokens: "
        f"{sum(diverged)} of {len(diverged)} configurations diverged"
    )
    return _base(frame, caption, "summary").apply(rows, axis=1)


def steps_styler(report: TriageReport, tp: int, mode: str) -> Styler:
    """The step table of (tp, mode): diverged steps in red, effective contract violations in bold dark
    red (harmless ones on yellow), errors in scientific notation."""
    report = as_report(report)
    run = report.run(tp, mode)
    frame = run.table
    steps = run.steps

    def rows(row):
        return [DIVERGED_ROW if steps[frame.index.get_loc(row.name)].diverged else ""] * len(row)

    def violations(column):
        styles = []
        for step in steps:
            if step.effective_violations:
                styles.append(EFFECTIVE_CELL)
            elif step.violations:
                styles.append(HARMLESS_CELL)
            else:
                styles.append("")
        return styles

    n_div = sum(s.diverged for s in steps)
    first = run.first_divergent_step
    caption = f"TP{tp} {mode} under {report.scenario}: {n_div} of {len(steps)} steps diverged" + (
        f", first at {first}" if first else ""
    )
    return (
        _base(frame, caption, f"steps-tp{tp}-{mode}")
        .apply(rows, axis=1)
        .apply(violations, axis=0, subset=["violations"])
        # Messages are sentences; without a minimum width the column collapses to one word a line.
        .set_properties(subset=["violations", "classification"], **{"min-width": "24em"})
    )
