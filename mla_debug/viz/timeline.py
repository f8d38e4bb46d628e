"""Timelines of a profiled run, and per-step time across several runs.

    fig = timeline(trace)                             # one row per (rank, CPU thread or GPU stream)
    fig = step_bars({"fused": fused, "unfused": unfused})   # one stacked bar per run, one segment per step

`trace` is what `md.load_trace` returns (or `session.trace()` after `md.profile`). Bars are coloured by
the layer step that encloses them, so the same step has the same colour in both figures when the runs
share their steps. plotly and pandas are imported inside the functions, so importing this module (or
mla_debug) never needs them.
"""

from __future__ import annotations

import html
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ._cells import wrapped

if TYPE_CHECKING:
    import pandas as pd
    import plotly.graph_objects as go

# Events outside every step (profiler bookkeeping, the run's own setup) are drawn in grey under the
# steps, so the coloured bars are the layer's work.
NO_STEP = "(no step)"
NO_STEP_COLOUR = "#bdbdbd"

# A bar one nesting level deeper is this much thinner, so a CPU op and the ops it calls stay visible on
# one row (a flame graph squeezed into a row) instead of hiding each other.
DEPTH_SHRINK = 0.72
ROW_HEIGHT = 0.8
MAX_DEPTH_DRAWN = 8
# Same hue, different shade: a step range (depth 0) is half-way to white and every level inside it
# stronger, so a callee stands out on its caller even where their bars are nearly as long.
OUTER_LIGHTEN = 0.5
DEPTH_LIGHTEN = 0.55

# Spans longer than this are shown in ms; shorter ones in us (GPU kernels of a small layer last a few us).
MS_FROM_US = 10_000.0

REQUIRED_COLUMNS = ("name", "ph", "start_us", "dur_us", "tid", "is_gpu", "step")
PROFILER_CATEGORIES = ("trace", "overhead")

# Demangled GPU kernel names run to hundreds of characters of template arguments; hover labels keep
# this much (wrapped), tables a one-line short form.
HOVER_NAME_CHARS = 600


def short_name(name: str, width: int = 80) -> str:
    """A kernel or op name fit for one table cell: a demangled CUDA/HIP kernel signature
    ('void ns::kernel<...>(args)') loses 'void ' and its argument list, then anything longer than
    `width` is cut with an ellipsis. Other names (aten::mm, sm90_xmma_..., 'Memcpy HtoD (...)') are only
    cut."""
    if name.startswith("void ") and name.endswith(")"):
        depth = 0
        for i, char in enumerate(name):
            if char == "<":
                depth += 1
            elif char == ">":
                depth -= 1
            elif char == "(" and depth == 0:
                name = name[5:i]
                break
    return name if len(name) <= width else name[: width - 1] + "\u2026"


def step_palette() -> list[str]:
    """The colours given to steps, in step order (48 distinct ones before they repeat)."""
    import plotly.colors

    return list(plotly.colors.qualitative.Dark24) + list(plotly.colors.qualitative.Light24)


def step_colours(steps: Iterable[str]) -> dict[str, str]:
    """A colour per step name, in the order given; the no-step bucket is always grey."""
    palette = step_palette()
    colours: dict[str, str] = {}
    for name in steps:
        if name == NO_STEP:
            colours[name] = NO_STEP_COLOUR
        elif name not in colours:
            colours[name] = palette[sum(1 for s in colours if s != NO_STEP) % len(palette)]
    return colours


def lighten(colour: str, amount: float) -> str:
    """'#rrggbb' mixed with white: amount 0 keeps the colour, 1 gives white."""
    rgb = [int(colour[i : i + 2], 16) for i in (1, 3, 5)]
    return "#" + "".join(f"{round(c + (255 - c) * amount):02x}" for c in rgb)


def depth_colour(colour: str, depth: int) -> str:
    """A step's colour at a nesting depth: the step range itself pale, the ops inside it stronger, so a
    callee stands out on its caller (both have the step's hue)."""
    return lighten(colour, OUTER_LIGHTEN * DEPTH_LIGHTEN ** min(depth, MAX_DEPTH_DRAWN))


def _missing(value: Any) -> bool:
    if value is None:
        return True
    try:
        return bool(value != value)  # NaN and pandas' NA are not equal to themselves
    except (TypeError, ValueError):
        return False


def _text(value: Any) -> str:
    """A cell of the events table as plain text: '' for a missing value, lists as Python writes them."""
    if isinstance(value, (list, tuple)):
        return str(list(value)) if value else ""
    return "" if _missing(value) else str(value)


def _sort_key(value: Any) -> tuple[int, float, str]:
    # Thread ids are ints in CPU traces and stream numbers (or names) in GPU ones: numbers sort
    # numerically, anything else by its text after them.
    if _missing(value):
        return (2, 0.0, "")
    try:
        return (0, float(value), "")
    except (TypeError, ValueError):
        return (1, 0.0, str(value))


def _events(trace: Any) -> pd.DataFrame:
    events = getattr(trace, "events", None)
    if events is None or not hasattr(events, "columns"):
        raise TypeError(f"expected a Trace (md.load_trace) with an .events table, got {type(trace).__name__}")
    missing = [c for c in REQUIRED_COLUMNS if c not in events.columns]
    if missing:
        raise ValueError(f"trace events lack the columns {', '.join(missing)}")
    return events


def timed_events(trace: Any, ranks: Iterable[int] | None = None) -> pd.DataFrame:
    """The complete ('X') events of `trace` with a duration, optionally only those of `ranks`, ordered
    by start; the rows a timeline draws before any downsampling."""
    events = _events(trace)
    timed = events[(events["ph"] == "X") & events["dur_us"].notna() & (events["dur_us"] >= 0)]
    if "category" in timed.columns:
        # Kineto's own bookkeeping ("PyTorch Profiler (0)" over the whole recording, "Activity Buffer
        # Request") sits on rows of its own and is no work of the run.
        timed = timed[~timed["category"].fillna("").str.lower().isin(PROFILER_CATEGORIES)]
    if ranks is not None:
        wanted = sorted(set(ranks))
        known = sorted({int(r) for r in timed["rank"].dropna()}) if "rank" in timed.columns else []
        if not known:
            raise ValueError("ranks=...: this trace has no rank information (a single-process run)")
        unknown = [r for r in wanted if r not in known]
        if unknown:
            raise ValueError(f"ranks {unknown} are not in this trace; it has ranks {known}")
        timed = timed[timed["rank"].isin(wanted)]
    return timed.sort_values("start_us", kind="stable")


def longest(events: pd.DataFrame, max_events: int) -> pd.DataFrame:
    """At most `max_events` rows: the longest events (earliest first among equal durations), in start
    order. Long events carry the time; dropping the short ones keeps the picture and makes a trace of a
    real-size layer (hundreds of thousands of aten ops) render in a browser."""
    if len(events) <= max_events:
        return events
    return events.nlargest(max_events, "dur_us", keep="first").sort_values("start_us", kind="stable")


def nesting_depths(starts: Sequence[float], ends: Sequence[float]) -> list[int]:
    """How many earlier events enclose each event of one row; the events must be sorted by start, and
    an enclosing event (same start, longer) must come before the events it encloses."""
    depths: list[int] = []
    open_ends: list[float] = []
    for start, end in zip(starts, ends):
        while open_ends and open_ends[-1] <= start:
            open_ends.pop()
        depths.append(len(open_ends))
        open_ends.append(end)
    return depths


def _row_label(rank: Any, is_gpu: bool, pid: Any, tid: Any) -> str:
    who = f"rank {int(rank)}" if not _missing(rank) else f"pid {_text(pid)}"
    # Kineto puts GPU activity in a process per device and a thread per stream.
    where = f"GPU {_text(pid)} stream {_text(tid)}" if is_gpu else f"CPU thread {_text(tid)}"
    return f"{who} | {where}"


def _describe(trace: Any) -> str:
    meta = getattr(trace, "meta", None)
    if not isinstance(meta, Mapping):
        return "trace"
    parts = [str(meta[k]) for k in ("model", "platform", "scenario") if meta.get(k)]
    tp = meta.get("tp", meta.get("tp_size"))
    if tp is not None:
        parts.append(f"TP{tp}")
    if meta.get("mode"):
        parts.append(str(meta["mode"]))
    if not parts and meta.get("run_id"):
        parts.append(str(meta["run_id"]))
    return " ".join(parts) or "trace"


def _duration(us: float) -> str:
    return f"{us / 1000:,.3f} ms" if us >= 1000 else f"{us:,.2f} us"


HOVER = (
    "<b>%{customdata[0]}</b><br>"
    "duration %{customdata[4]}, starts at %{customdata[5]}<br>"
    "step: %{customdata[2]}<br>"
    "kernel: %{customdata[1]}<br>"
    "shapes: %{customdata[3]}<br>"
    "%{customdata[6]}<extra></extra>"
)


def timeline(trace: Any, ranks: Iterable[int] | None = None, max_events: int = 20000) -> go.Figure:
    """plotly Figure of a trace: horizontal bars over time, one row per (rank, CPU thread or GPU stream),
    GPU streams above CPU threads (a dashed line between them), coloured by the step that encloses each
    event; hovering a bar shows the op or kernel name, the kernel mla_debug chose for the step, the step,
    the input shapes and the duration. Nested CPU ops are drawn thinner on top of their caller.

    Beyond `max_events` only the longest events are drawn (the title says how many were kept).

    >>> timeline(md.load_trace("profiles/20261130-101500-1a2b3c"), ranks=[0])
    """
    import plotly.graph_objects as go

    if not isinstance(max_events, int) or max_events < 1:
        raise ValueError(f"max_events={max_events!r} must be a positive integer")
    ranks = None if ranks is None else list(ranks)  # read twice: to filter and in the error message
    events = timed_events(trace, ranks)
    if events.empty:
        raise ValueError(
            "the trace has no timed events to draw" + (f" for ranks {sorted(set(ranks))}" if ranks else "")
        )
    total = len(events)
    # Time zero is the first event of the whole selection, so ranks and streams stay aligned after
    # downsampling drops the first events of a row.
    t0 = float(events["start_us"].min())
    span = float((events["start_us"] + events["dur_us"]).max()) - t0
    shown = longest(events, max_events)

    def column(name: str) -> list:
        return shown[name].tolist() if name in shown.columns else [None] * len(shown)

    keys = list(zip(column("is_gpu"), column("rank"), column("pid"), column("tid")))
    rows = sorted(
        set(keys),
        key=lambda k: (0 if k[0] else 1, _sort_key(k[1]), _sort_key(k[2]), _sort_key(k[3])),
    )
    row_of = {key: i for i, key in enumerate(rows)}
    labels = [_row_label(rank, bool(gpu), pid, tid) for gpu, rank, pid, tid in rows]

    starts = [float(s) for s in shown["start_us"]]
    durs = [float(d) for d in shown["dur_us"]]
    steps = [_text(s) or NO_STEP for s in shown["step"]]
    # Depth per row: the enclosing event first among equal starts, so sort by (row, start, -duration).
    depth = [0] * len(shown)
    by_row: dict[int, list[int]] = {}
    for i in sorted(range(len(shown)), key=lambda i: (starts[i], -durs[i])):
        by_row.setdefault(row_of[keys[i]], []).append(i)
    for members in by_row.values():
        found = nesting_depths([starts[i] for i in members], [starts[i] + durs[i] for i in members])
        for i, d in zip(members, found):
            depth[i] = d

    scale, unit = (1000.0, "ms") if span >= MS_FROM_US else (1.0, "us")
    names, kernels, shapes = column("name"), column("kernel"), column("shapes")
    order = list(dict.fromkeys(s for _, s in sorted(zip(starts, steps)) if s != NO_STEP))
    colours = step_colours([NO_STEP, *order])
    groups: dict[str, list[int]] = {}
    for i, step in enumerate(steps):
        groups.setdefault(step, []).append(i)
    fig = go.Figure()
    # The no-step bucket first: it holds the run's outer frames, which must lie under the steps' bars.
    for step in [NO_STEP, *order]:
        members = sorted(groups.get(step, []), key=lambda i: depth[i])  # callers first, callees on top
        if not members:
            continue
        custom = [
            [
                wrapped(short_name(_text(names[i]), HOVER_NAME_CHARS)),
                html.escape(_text(kernels[i]) or "-"),
                html.escape(step),
                html.escape(_text(shapes[i]) or "-"),
                _duration(durs[i]),
                f"{(starts[i] - t0) / scale:,.3f} {unit}",
                html.escape(labels[row_of[keys[i]]]),
            ]
            for i in members
        ]
        fig.add_trace(
            go.Bar(
                name=step,
                orientation="h",
                y=[row_of[keys[i]] for i in members],
                base=[(starts[i] - t0) / scale for i in members],
                x=[durs[i] / scale for i in members],
                width=[ROW_HEIGHT * DEPTH_SHRINK ** min(depth[i], MAX_DEPTH_DRAWN) for i in members],
                marker=dict(color=[depth_colour(colours[step], depth[i]) for i in members], line=dict(width=0)),
                customdata=custom,
                hovertemplate=HOVER,
            )
        )

    n_gpu = sum(1 for r in rows if r[0])
    shapes_layout = []
    if 0 < n_gpu < len(rows):
        shapes_layout.append(
            dict(
                type="line",
                xref="paper",
                x0=0,
                x1=1,
                y0=n_gpu - 0.5,
                y1=n_gpu - 0.5,
                line=dict(color="#555555", dash="dash", width=1),
            )
        )
    title = f"{html.escape(_describe(trace))}: {len(shown):,} events on {len(rows)} rows"
    if len(shown) < total:
        title += f" (the {len(shown):,} longest of {total:,})"
    fig.update_layout(
        title=title,
        barmode="overlay",
        bargap=0,
        shapes=shapes_layout,
        xaxis=dict(title=f"time since the first event ({unit})", zeroline=False),
        yaxis=dict(
            tickmode="array",
            tickvals=list(range(len(rows))),
            ticktext=[html.escape(label) for label in labels],
            autorange="reversed",
        ),
        legend=dict(title="step", traceorder="normal"),
        height=max(320, 120 + 44 * len(rows)),
        margin=dict(l=10, r=10, t=60, b=40),
        hoverlabel=dict(align="left"),
    )
    return fig


def _per_step(trace: Any) -> pd.DataFrame:
    frame = trace.per_step()
    if "step" not in frame.columns:
        raise ValueError("per_step() of a trace has no 'step' column")
    return frame.assign(step=[_text(s) or NO_STEP for s in frame["step"]])


def step_bars(traces: Mapping[str, Any], metric: str | None = None) -> go.Figure:
    """plotly Figure comparing runs step by step: one bar per run label, stacked by step (each step one
    colour, in layer order), the run's total above its bar.

    `metric` is a column of `Trace.per_step()`: by default GPU time ("gpu_us") when every trace has GPU
    activity, else wall time ("wall_us"). Hover a segment for its kernel, time, share of the run and
    launches.

    >>> step_bars({"fused": md.load_trace(a), "unfused": md.load_trace(b)})
    """
    import plotly.graph_objects as go

    if not isinstance(traces, Mapping) or not traces:
        raise ValueError("step_bars needs a non-empty {label: Trace} mapping")
    frames = {str(label): _per_step(trace) for label, trace in traces.items()}
    if metric is None:
        metric = "gpu_us" if all(getattr(t, "has_gpu", False) for t in traces.values()) else "wall_us"
    for label, frame in frames.items():
        if metric not in frame.columns:
            raise ValueError(f"metric {metric!r} is not a per_step() column of {label!r}: {', '.join(frame.columns)}")
    launches = "gpu_kernels" if metric.startswith("gpu") else "cpu_ops"

    labels = list(frames)
    order = list(dict.fromkeys(s for frame in frames.values() for s in frame["step"]))
    colours = step_colours(order)
    # Several rows of one step (should a per_step table split a step) add up into one segment.
    sums = {
        label: frame.groupby("step", sort=False)[[c for c in (metric, launches) if c in frame.columns]].sum()
        for label, frame in frames.items()
    }
    kernels = {
        label: dict(zip(frame["step"], (_text(k) for k in frame.get("kernel", [None] * len(frame)))))
        for label, frame in frames.items()
    }
    totals = {label: float(sums[label][metric].sum()) for label in labels}

    fig = go.Figure()
    for step in order:
        values, custom = [], []
        for label in labels:
            table = sums[label]
            if step not in table.index:
                values.append(None)
                custom.append(["", "", "", ""])
                continue
            value = float(table.at[step, metric])
            share = value / totals[label] if totals[label] else math.nan
            count = table.at[step, launches] if launches in table.columns else None
            values.append(value)
            custom.append(
                [
                    html.escape(kernels[label].get(step) or "-"),
                    f"{share:.1%}" if math.isfinite(share) else "-",
                    "-" if count is None else f"{int(count):,}",
                    html.escape(label),
                ]
            )
        fig.add_trace(
            go.Bar(
                name=step,
                x=labels,
                y=values,
                marker=dict(color=colours[step]),
                customdata=custom,
                hovertemplate=(
                    f"<b>%{{customdata[3]}}: {html.escape(step)}</b><br>"
                    f"{metric} %{{y:,.1f}} (%{{customdata[1]}} of the run)<br>"
                    "kernel: %{customdata[0]}<br>"
                    f"{launches}: %{{customdata[2]}}<extra></extra>"
                ),
            )
        )
    what = "GPU time" if metric.startswith("gpu") else "wall time" if metric.startswith("wall") else metric
    fig.update_layout(
        title=f"{what} per step ({metric}) in {len(labels)} run{'s' if len(labels) != 1 else ''}",
        barmode="stack",
        xaxis=dict(title="run"),
        yaxis=dict(title=f"{what} (us)"),
        legend=dict(title="step", traceorder="normal"),
        annotations=[
            dict(x=label, y=totals[label], text=f"{totals[label]:,.0f} us", showarrow=False, yshift=10)
            for label in labels
        ],
        height=480,
    )
    return fig
