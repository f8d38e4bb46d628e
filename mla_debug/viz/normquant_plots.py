"""Plots of the fused norm+quant accuracy study: where the error sits (rows x 128-wide groups) and how
it is distributed (per-element error in fp8 ulps, one path over another).

    fig = group_error_heatmap(acc, "fused")                       # max error per group, in fp8 ulps
    fig = group_error_heatmap(acc, "unfused", minus="fused")      # where double rounding costs more
    fig = error_histogram(acc, ("fused", "unfused"))              # overlaid, with the theory's bounds

`acc` is a `mla_debug.triage.NormQuantAccuracy`. plotly is imported inside the functions.
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

from ._cells import COLOURSCALE, left_title, log10_grid, log_ticks, sci

if TYPE_CHECKING:
    import plotly.graph_objects as go

    from ..normquant.study import NormQuantAccuracy

# The bounds theory gives, in fp8 ulps: single rounding, and double rounding through bf16 (half a bf16
# ulp is at most 1/16 of an e4m3 ulp: bf16 keeps 4 more mantissa bits).
SINGLE_ROUNDING_BOUND = 0.5
DOUBLE_ROUNDING_BOUND = 0.5 + 1 / 16

# One colour per path, the same in every figure.
PATH_COLOURS = {"fused": "#1b9e77", "unfused": "#d95f02", "aiter_test_reference": "#7570b3"}


def _check_path(acc: NormQuantAccuracy, path: str) -> None:
    if path not in acc.errors:
        raise ValueError(f"path {path!r} was not measured; this result has {', '.join(acc.paths)}")


def group_error_heatmap(
    acc: NormQuantAccuracy,
    path: str = "fused",
    metric: str = "max_err_ulp",
    minus: str | None = None,
    log: bool = False,
) -> go.Figure:
    """plotly Figure of one per-group metric (a column of ``acc.groups``): rows are the input's rows
    (tokens), columns its 1 x 128 quantization groups.

    With `minus`, the colour is ``metric(path) - metric(minus)`` on a diverging scale centred on 0 (red:
    `path` worse). With `log`, the colour is log10 of the metric (for rel_l2, whose near-zero rows reach
    1 while ordinary groups sit near 1e-2). Hover shows the row's input magnitude and the group's amax
    and scales.
    """
    import plotly.graph_objects as go

    _check_path(acc, path)
    grid = acc.group_matrix(path, metric)
    if minus is not None:
        _check_path(acc, minus)
        grid = grid - acc.group_matrix(minus, metric)
    rows = grid.tolist()
    m, g = grid.shape
    groups = acc.groups[acc.groups["path"] == path]
    amax = groups["amax"].to_numpy().reshape(m, g)
    scale = groups["scale"].to_numpy().reshape(m, g)
    row_scale = acc.inputs.row_scale.tolist()
    label = f"{metric}({path}) - {metric}({minus})" if minus else f"{metric} of {path}"
    hover = [
        [
            f"row {i} (input x {row_scale[i]:.1e}), group {j} (columns {j * 128}-{j * 128 + 127})<br>"
            f"{html.escape(label)}: {sci(rows[i][j])}<br>amax {sci(float(amax[i, j]))}, "
            f"{html.escape(path)} scale {sci(float(scale[i, j]))}"
            for j in range(g)
        ]
        for i in range(m)
    ]

    heat: dict = dict(
        x=list(range(g)), y=list(range(m)), customdata=hover, hovertemplate="%{customdata}<extra></extra>"
    )
    if minus is not None:
        finite = [abs(v) for row in rows for v in row if math.isfinite(v)]
        span = max(finite, default=0.0) or 1.0
        heat.update(
            z=rows, colorscale="RdBu_r", zmid=0.0, zmin=-span, zmax=span, colorbar=dict(title=dict(text="diff"))
        )
    elif log:
        z, low, high = log10_grid(rows)
        tickvals, ticktext = log_ticks(low, high)
        heat.update(
            z=z,
            colorscale=COLOURSCALE,
            zmin=low,
            zmax=high,
            colorbar=dict(title=dict(text=metric), tickvals=tickvals, ticktext=ticktext),
        )
    else:
        heat.update(z=rows, colorscale=COLOURSCALE, zmin=0.0, colorbar=dict(title=dict(text=metric)))

    inputs = acc.inputs
    fig = go.Figure(go.Heatmap(name=label, **heat))
    fig.update_layout(
        title=left_title(
            f"{html.escape(inputs.distribution)} ({inputs.m} x {inputs.n}, {acc.fmt.name}): "
            f"{html.escape(label)}<br><sup>{'red: ' + html.escape(path) + ' worse, blue: better; ' if minus else ''}"
            f"one cell per row and 1x128 quantization group</sup>"
        ),
        xaxis=dict(title=dict(text="group (128 columns)")),
        yaxis=dict(title=dict(text="row (token)"), autorange="reversed"),
        height=max(320, 120 + 6 * m),
        margin=dict(l=70, r=30, t=80, b=60),
        plot_bgcolor="white",
    )
    return fig


def error_histogram(
    acc: NormQuantAccuracy,
    paths: Sequence[str] = ("fused", "unfused"),
    bins: int = 60,
    log_y: bool = True,
) -> go.Figure:
    """plotly Figure: the per-element error in fp8 ulps of each path, binned on shared edges and drawn
    as overlaid bars, with the single- (0.5) and double-rounding (0.5 + 1/16) bounds marked.

    Binned here, not by plotly, so the figure holds `bins` numbers per path rather than every element.
    A log count axis (default) shows the few elements past 0.5, which is where the paths differ.
    """
    import plotly.graph_objects as go
    import torch

    if not paths:
        raise ValueError("error_histogram: give at least one path")
    for path in paths:
        _check_path(acc, path)
    if bins < 1:
        raise ValueError(f"error_histogram: bins={bins} must be positive")
    values = {path: acc.errors[path].err_ulp.flatten() for path in paths}
    top = max(max(float(v.max()) for v in values.values()), DOUBLE_ROUNDING_BOUND)
    edges = torch.linspace(0.0, top * (1 + 1e-9), bins + 1, dtype=torch.float64)
    centres = ((edges[1:] + edges[:-1]) / 2).tolist()
    width = float(edges[1] - edges[0])

    fig = go.Figure()
    for path, v in values.items():
        counts, _ = torch.histogram(v, bins=edges)
        fig.add_trace(
            go.Bar(
                x=centres,
                y=counts.tolist(),
                width=width,
                name=path,
                opacity=0.55,
                marker=dict(color=PATH_COLOURS.get(path)),
                hovertemplate=f"{html.escape(path)}: %{{y}} elements with error %{{x:.3f}} ulp<extra></extra>",
            )
        )
    # Labels on opposite sides of their lines: the two bounds are only 1/16 ulp apart.
    for x, text, side in (
        (SINGLE_ROUNDING_BOUND, "single rounding: 0.5", "top left"),
        (DOUBLE_ROUNDING_BOUND, "double: 0.5 + 1/16", "top right"),
    ):
        fig.add_vline(
            x=x, line=dict(color="#444", dash="dash", width=1), annotation_text=text, annotation_position=side
        )
    inputs = acc.inputs
    fig.update_layout(
        barmode="overlay",
        title=left_title(
            f"{html.escape(inputs.distribution)} ({inputs.m} x {inputs.n}, {acc.fmt.name}): per-element error "
            f"against the fp64 truth<br><sup>in fp8 ulps at the element; {bins} bins</sup>"
        ),
        xaxis=dict(title=dict(text="|dequantized - truth| (fp8 ulps)")),
        yaxis=dict(title=dict(text="elements"), type="log" if log_y else "linear"),
        height=360,
        margin=dict(l=70, r=30, t=80, b=60),
        legend=dict(x=0.01, y=0.01, xanchor="left", yanchor="bottom"),
        plot_bgcolor="white",
    )
    return fig
