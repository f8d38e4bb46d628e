"""Shared helpers of the viz layer: error values on a log colour scale, and step details as hover text.

Nothing here imports plotly or pandas, so the helpers are cheap to import and easy to test.
"""

from __future__ import annotations

import html
import math
import textwrap
from collections.abc import Iterable, Sequence

# Hover lines longer than this are wrapped: plotly draws hover labels on one line per <br>, and a
# violation message is a paragraph.
HOVER_WIDTH = 90

# Red outlines and markers read well over every colour of Viridis (blue - green - yellow).
DIVERGED_COLOUR = "#e41a1c"
COLOURSCALE = "Viridis"


def left_title(text: str) -> dict:
    """A figure title set flush with the plot's left edge (long titles wrap there, not off the centre)."""
    return dict(text=text, x=0.0, xref="paper")


def cell_outline(col: float, row: float) -> dict:
    """A red outline around the heatmap cell at (col, row): categorical axes place category k at
    coordinate k, so a cell spans k +- 0.5."""
    return dict(
        type="rect",
        xref="x",
        yref="y",
        x0=col - 0.5,
        x1=col + 0.5,
        y0=row - 0.5,
        y1=row + 0.5,
        line=dict(color=DIVERGED_COLOUR, width=3),
    )


def sci(x: float | None) -> str:
    """A number in scientific notation, '-' for None and the words for non-finite values."""
    if x is None:
        return "-"
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return f"{x:.2e}"


def log10_grid(rows: Sequence[Sequence[float | None]]) -> tuple[list[list[float | None]], float, float]:
    """log10 of a grid of non-negative errors, ready for a heatmap, and the (low, high) colour range.

    A log scale has no place for 0 (an exact match, common for steps that run the same kernel as the
    reference) or for inf/NaN (a broken run): exact matches are drawn at the bottom of the range and
    non-finite errors at its top, so both stay visible; the hover text says which they are. Missing
    cells (None, or NaN in a step the run did not have) stay empty.
    """
    finite = [v for row in rows for v in row if v is not None and math.isfinite(v) and v > 0]
    low = math.floor(math.log10(min(finite))) if finite else -8.0
    # Keep rel_err = 1 (output as far from the reference as the reference is from zero) inside the
    # range, so a clean sweep and a broken one share the colour meaning of the top of the bar.
    high = max(math.ceil(math.log10(max(finite))), 0.0) if finite else 0.0
    if high <= low:
        high = low + 1.0
    grid: list[list[float | None]] = []
    for row in rows:
        out: list[float | None] = []
        for v in row:
            if v is None:
                out.append(None)
            elif math.isfinite(v):
                out.append(math.log10(v) if v > 0 else low)
            else:
                out.append(high)
        grid.append(out)
    return grid, float(low), float(high)


def log_ticks(low: float, high: float) -> tuple[list[float], list[str]]:
    """Colour-bar ticks at the decades between low and high, labelled as 1e-4 rather than -4."""
    step = max(1, math.ceil((high - low) / 10))  # at most about ten labels
    values = [float(v) for v in range(math.ceil(low), math.floor(high) + 1, step)]
    return values, [f"1e{int(v)}" for v in values]


def wrapped(text: str, width: int = HOVER_WIDTH, indent: str = "") -> str:
    """`text` HTML-escaped and wrapped into <br>-separated lines for a plotly hover label."""
    lines = textwrap.wrap(text, width=width, subsequent_indent=indent) or [""]
    return "<br>".join(html.escape(line) for line in lines)


def violation_lines(violations: Iterable) -> list[str]:
    """One line per broken contract: '[effective] kind: sentence' (or [harmless])."""
    from .violations import violation_sentence

    return [f"[{'effective' if v.effective else 'harmless'}] {v.kind}: {violation_sentence(v)}" for v in violations]


def step_hover(step, tp: int, mode: str) -> str:
    """Hover text of one (TP size, step) cell: error against floor and threshold, kernel, layouts,
    classification and violations, escaped for plotly's HTML-like labels."""
    verdict = "DIVERGED" if step.diverged else "ok"
    lines = [
        f"<b>TP{tp} {html.escape(mode)} - {html.escape(step.name)}</b> ({verdict})",
        f"rel_err {sci(step.rel_err)} (floor {sci(step.floor)}, threshold {sci(step.threshold)})",
        wrapped(f"kernel: {step.kernel or '-'} (reference: {step.reference_kernel or '-'})"),
    ]
    if step.scale_layout:
        lines.append(wrapped(f"scale layout: {step.scale_layout}"))
    if step.weight_layout:
        lines.append(wrapped(f"weight layout: {step.weight_layout}"))
    lines.append(wrapped(f"classification: {step.classification}"))
    found = violation_lines(step.violations)
    lines.append("violations: " + ("none" if not found else ""))
    lines += [wrapped(line, indent="    ") for line in found]
    return "<br>".join(lines)


def flat_range(start: int, stop: int, inner: Sequence[int]) -> str:
    """Where flattened columns [start, stop] of a step output of per-token shape `inner` lie, in words:
    'columns 128-255' for a 2-D output, 'head 3, columns 0-127' for (tokens, heads, dim)."""
    if len(inner) <= 1:
        return f"columns {start}-{stop}"

    def index(flat: int) -> tuple[int, ...]:
        out = []
        for size in reversed(inner):
            out.append(flat % size)
            flat //= size
        return tuple(reversed(out))

    first, last = index(start), index(stop)
    if first[:-1] == last[:-1]:
        lead = ", ".join(f"dim{d + 1} {i}" for d, i in enumerate(first[:-1]))
        if len(inner) == 2:
            lead = f"head {first[0]}"
        return f"{lead}, columns {first[-1]}-{last[-1]}"
    return f"flattened columns {start}-{stop} ({first} to {last})"
