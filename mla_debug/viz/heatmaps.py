"""Error heatmaps of a TP triage: where (TP size x step) and then where inside one step's output
(token x 128-column block) a run leaves the reference. Both draw from a TriageReport (or a live
TriageResult, turned into its report first).

    fig = error_heatmap(report, "decode")        # rows TP sizes, columns steps in layer order
    fig = block_heatmap(report, 4, "decode")     # the first divergent step of TP4 decode

plotly is imported inside the functions, so importing this module (or mla_debug) never needs it.
"""

from __future__ import annotations

import html
import math
from typing import TYPE_CHECKING

from ._cells import (
    COLOURSCALE,
    DIVERGED_COLOUR,
    cell_outline,
    flat_range,
    left_title,
    log10_grid,
    log_ticks,
    sci,
    step_hover,
)
from ._report_data import as_report, check_mode

if TYPE_CHECKING:
    import plotly.graph_objects as go

    from ..triage.report import TriageReport

# Decimals of log10 rel_err kept per block heatmap cell.
Z_DECIMALS = 4


def step_order(report: TriageReport, mode: str) -> list[str]:
    """Step names of `mode` in layer order (the union over TP sizes, first run first)."""
    names: dict[str, None] = {}
    for r in as_report(report).runs:
        if r.mode == mode:
            names.update(dict.fromkeys(s.name for s in r.steps))
    return list(names)


def _rel_err_heatmap(
    z, x, y, hover, low: float, high: float, name: str, hovertemplate: str = "%{customdata}", **gaps
) -> go.Heatmap:
    """A heatmap of log10 rel_err on the shared colour scale, its colour bar labelled in plain rel_err."""
    import plotly.graph_objects as go

    tickvals, ticktext = log_ticks(low, high)
    return go.Heatmap(
        z=z,
        x=x,
        y=y,
        customdata=hover,
        hovertemplate=f"{hovertemplate}<extra></extra>",
        colorscale=COLOURSCALE,
        zmin=low,
        zmax=high,
        name=name,
        colorbar=dict(title=dict(text="rel_err"), tickvals=tickvals, ticktext=ticktext),
        **gaps,
    )


def error_heatmap(report: TriageReport, mode: str) -> go.Figure:
    """plotly Figure of the report's error matrix of `mode`: rows TP sizes, columns steps in layer order,
    colour log10 of each step's relative L2 error against the reference at the same TP size.

    Diverged cells (error above the step's threshold) are outlined and crossed in red; hovering a cell
    shows the step's kernel, layouts, classification and layout-contract violations.
    """
    import plotly.graph_objects as go

    report = as_report(report)
    check_mode(report, mode)
    steps = step_order(report, mode)
    tps = [tp for tp in report.tp_sizes if any(r.tp == tp and r.mode == mode for r in report.runs)]
    runs = [report.run(tp, mode) for tp in tps]
    by_name = [{s.name: s for s in run.steps} for run in runs]
    # A step a run lacks is a gap (None); a NaN error is a value, drawn at the top of the colour bar.
    rows = [[found[name].rel_err if name in found else None for name in steps] for found in by_name]
    z, low, high = log10_grid(rows)

    labels = [f"TP{tp}" for tp in tps]
    hover: list[list[str]] = []
    diverged_x: list[str] = []
    diverged_y: list[str] = []
    shapes = []
    for i, (tp, found) in enumerate(zip(tps, by_name)):
        row = []
        for j, name in enumerate(steps):
            step = found.get(name)
            if step is None:
                row.append(f"TP{tp} {html.escape(mode)}: no step {html.escape(name)} in this run")
                continue
            row.append(step_hover(step, tp, mode))
            if step.diverged:
                diverged_x.append(name)
                diverged_y.append(labels[i])
                shapes.append(cell_outline(j, i))
        hover.append(row)

    fig = go.Figure(_rel_err_heatmap(z, steps, labels, hover, low, high, "rel_err", xgap=1, ygap=1))
    # A marker trace as well as the outlines: it survives a greyscale print, where a red outline on a
    # dark cell would not. The subtitle explains it rather than a legend, which would compete with the
    # title for the top band of a narrow figure.
    fig.add_trace(
        go.Scatter(
            x=diverged_x,
            y=diverged_y,
            mode="markers",
            name="diverged (rel_err > threshold)",
            marker=dict(symbol="x-thin", size=14, line=dict(width=3, color=DIVERGED_COLOUR)),
            hoverinfo="skip",
            showlegend=False,
        )
    )
    n_div = sum(run.diverged for run in runs)
    fig.update_layout(
        title=left_title(
            f"{html.escape(report.model)} on {html.escape(report.platform)} under {html.escape(report.scenario)}, "
            f"{html.escape(mode)}: {n_div} of {len(tps)} TP sizes diverged<br><sup>colour: log10 rel_err of each "
            f"step vs the reference at the same TP size; red outline and cross: diverged (rel_err above the "
            f"step's threshold)</sup>"
        ),
        shapes=shapes,
        xaxis=dict(title=dict(text="step (layer order)"), type="category", tickangle=-35),
        yaxis=dict(title=dict(text="TP size"), type="category", autorange="reversed"),
        height=220 + 45 * len(tps),
        margin=dict(l=70, r=30, t=90, b=110),
        plot_bgcolor="white",
    )
    return fig


def block_heatmap(report: TriageReport, tp: int, mode: str, step: str | None = None) -> go.Figure:
    """plotly Figure of the report's block errors of `step` at (tp, mode): rows tokens, columns
    128-column blocks of the step's output (flattened per token), aligned to the FP8 quantization
    blocks; colour log10 relative L2 error of each block against the reference. `step` defaults to the
    first divergent step (else the worst one), and the title names it. A report keeps the matrices of
    every diverged configuration's first divergent step (KeyError naming what it keeps otherwise;
    ``result.report(block_steps=[...])`` keeps more); a live TriageResult gives any step's.
    """
    import plotly.graph_objects as go

    report = as_report(report, block_steps=((tp, mode, step),) if step is not None else ())
    check_mode(report, mode)
    run = report.run(tp, mode)
    blocks = report.blocks(tp, mode, step)  # KeyError naming the steps or the kept matrices
    name = blocks.step
    diff_step = run.step(name)
    rows = blocks.errors
    z, low, high = log10_grid(rows)
    # A colour bar cannot show more than a few decimals of log10 rel_err, and full floats were a third
    # of a large block heatmap's bytes in a report.
    z = [[None if v is None else round(v, Z_DECIMALS) for v in row] for row in z]

    inner = blocks.shape[1:]
    width = math.prod(inner)
    n_tokens, n_blocks = len(rows), len(rows[0]) if rows else 0
    tokens = list(range(n_tokens))
    block = blocks.block
    # Columns are categories named by where the block lies, so a cell's hover text takes that from its
    # column and holds only its own error: with the full text per cell, the block heatmap of a decode
    # step with 128 heads (16 tokens x 512 blocks) was 0.8 MB of a report.
    columns = [f"block {b}: {flat_range(b * block, min((b + 1) * block, width) - 1, inner)}" for b in range(n_blocks)]
    hover = [[sci(v) for v in row] for row in rows]
    every = max(1, math.ceil(len(columns) / 16))  # about 16 labelled ticks, block numbers only
    ticks = list(range(0, len(columns), every))

    why = (
        "first divergent step"
        if name == run.first_divergent_step
        else ("worst step" if step is None else "chosen step")
    )
    heat = _rel_err_heatmap(
        z, columns, tokens, hover, low, high, "block rel_err", hovertemplate="token %{y}, %{x}<br>rel_err %{customdata}"
    )
    fig = go.Figure(heat)
    fig.update_layout(
        title=left_title(
            f"TP{tp} {html.escape(mode)}, step <b>{html.escape(name)}</b> ({why}, output {blocks.shape}): "
            f"rel_err per token and {block}-column block<br><sup>whole-step rel_err {sci(diff_step.rel_err)}, "
            f"threshold {sci(diff_step.threshold)}; {html.escape(diff_step.classification)}</sup>"
        ),
        xaxis=dict(
            title=dict(text=f"{block}-column block of the flattened per-token output"),
            type="category",
            tickvals=[columns[b] for b in ticks],
            ticktext=[str(b) for b in ticks],
        ),
        yaxis=dict(title=dict(text="token"), autorange="reversed"),
        height=260 + min(18 * len(tokens), 600),
        margin=dict(l=70, r=30, t=100, b=60),
    )
    return fig
