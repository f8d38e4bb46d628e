"""What the triage figures, tables and HTML report draw from: a TriageReport, and nothing with tensors.

Every triage drawing function takes a `TriageReport` (`md.load_triage(path)`, or `result.report()`).
A live `TriageResult` is accepted too, for convenience: it is turned into its report first (made once
per result), so a figure drawn from a live result and one drawn from its saved JSON are the same; a
block heatmap of a step the default report does not keep asks the live result for that matrix.
"""

from __future__ import annotations

from ..triage.report import TriageReport


def as_report(data, block_steps: tuple[tuple[int, str, str | None], ...] = ()) -> TriageReport:
    """`data` as a TriageReport: itself, or the report of a live result (anything with ``report()``),
    made to keep the block errors of `block_steps` too (a report read from a file keeps what it kept)."""
    if isinstance(data, TriageReport):
        return data
    report = getattr(data, "report", None)
    if callable(report):
        made = report(block_steps=block_steps) if block_steps else report()
        if isinstance(made, TriageReport):
            return made
    raise TypeError(
        f"expected a TriageReport (md.load_triage(path) or result.report()) or a TriageResult, "
        f"got {type(data).__name__}"
    )


def check_mode(report: TriageReport, mode: str) -> None:
    if mode not in report.modes:
        raise ValueError(f"mode {mode!r} was not triaged; this result has modes {', '.join(report.modes)}")
