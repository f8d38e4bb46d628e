"""Styled pandas tables of profiled runs: the top ops or kernels of one trace, and the diff of two.

    kernel_table_styler(trace)          # top 20 GPU kernels (CPU ops on a CPU-only trace) by total time
    trace_diff_styler(diff)             # per-step time of run A vs run B, big changes highlighted
    trace_table_styler(frame)           # any other table of a Trace (events, gaps, a critical sequence)

Each returns a pandas Styler (display it in a notebook, or `.to_html()` it into a report). Names are
HTML-escaped: op and kernel names are data (templated C++ kernel names are full of '<' and '>').
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from .tables import _base
from .timeline import short_name

if TYPE_CHECKING:
    from pandas.io.formats.style import Styler

# Slower in B: red; faster in B: green (the same red as the triage tables' diverged rows).
SLOWER_ROW = "background-color: #f8d0d0"
FASTER_ROW = "background-color: #d5f0d5"
CHANGED_CELL = "font-weight: bold"
SHARE_BAR = "#9ecae1"
DELTA_BARS = ("#5fba7d", "#d65f5f")  # negative (faster in B), positive (slower in B)

# Time columns are in microseconds: one decimal is enough and keeps the table narrow.
TIME_FORMAT = "{:,.1f}"
# Table cells hold this much of a demangled kernel name (the hover of a timeline shows more).
NAME_CHARS = 120
COUNT_COLUMNS = ("count", "a_launches", "b_launches", "a_count", "b_count", "cpu_ops", "gpu_kernels", "calls")
# Identifiers: whole numbers even when a missing value made the column float.
ID_COLUMNS = ("correlation", "range_id", "rank")


def _time_formats(columns) -> dict[str, str]:
    formats = {c: TIME_FORMAT for c in columns if str(c).endswith("_us")}
    if "share" in columns:
        formats["share"] = "{:.1%}"
    if "ratio" in columns:
        formats["ratio"] = "{:.2f}x"
    formats.update({c: "{:,.0f}" for c in columns if c in COUNT_COLUMNS})
    return formats


def _styled(frame, caption: str) -> Styler:
    # The triage tables' base (caption, padding, hidden index), then this module's number formats. A
    # format call sets every column's formatter, so it must ask for the escaping again.
    formats = _time_formats(frame.columns)
    for column in frame.columns:
        if column not in formats and frame[column].dtype.kind == "f":
            formats[column] = "{:.0f}" if column in ID_COLUMNS else "{:.4g}"
    return _base(frame, caption).format(formats, na_rep="-", escape="html")


def _shorten(frame, columns: tuple[str, ...], full_names: bool):
    """`frame` with its name columns cut to one line (see `short_name`) unless full names are wanted."""
    present = [c for c in columns if c in frame.columns]
    if full_names or not present:
        return frame
    return frame.assign(
        **{c: [short_name(v, NAME_CHARS) if isinstance(v, str) else v for v in frame[c]] for c in present}
    )


def kernel_table_styler(trace: Any, gpu: bool | None = None, top: int | None = 20, full_names: bool = False) -> Styler:
    """`trace.op_table(gpu, top)` (name, count, total/mean/min/max us, share) with the share of each row
    drawn as a bar.

    `gpu=None` picks GPU kernels when the trace has them, else CPU ops: one table never mixes the two,
    because a CPU op's time also counts the time it waits for the GPU. Demangled kernel names are cut
    to one line (`short_name`) unless `full_names`.

    >>> kernel_table_styler(md.load_trace("profiles/20261130-101500-1a2b3c"), top=10)
    """
    on_gpu = bool(trace.has_gpu) if gpu is None else gpu
    frame = trace.op_table(gpu=on_gpu, top=top)
    frame = frame.drop(columns=[c for c in ("is_gpu",) if c in frame.columns])  # one value: in the caption
    frame = _shorten(frame, ("name",), full_names)
    what = "GPU kernels" if on_gpu else "CPU ops"
    total = float(frame["total_us"].sum()) if "total_us" in frame.columns else math.nan
    caption = f"{'Top ' + str(top) + ' ' if top else ''}{what} by total time: {len(frame)} rows, {total:,.1f} us"
    if not on_gpu:
        caption += " (an op's time includes the ops it calls)"
    styler = _styled(frame, caption)
    if "share" in frame.columns and len(frame):
        styler = styler.bar(subset=["share"], color=SHARE_BAR, vmin=0.0, vmax=1.0)
    return styler.set_properties(subset=["name"], **{"max-width": "48em", "word-break": "break-all"})


def trace_table_styler(frame: Any, caption: str = "", full_names: bool = False) -> Styler:
    """Any table of a `Trace` (`trace.events`, `gpu_idle_gaps()`, `critical_sequence(...)`, `per_step()`)
    with readable numbers: times (``*_us``) in microseconds with one decimal and thousands separators,
    counts as integers, share as a percentage; the frame itself keeps its raw floats.

    Times in these tables count from the trace's first event (`Trace.origin_us` is that zero in the
    tracer's clock). Demangled kernel names are cut to one line unless `full_names`.

    >>> trace_table_styler(trace.gpu_idle_gaps(min_us=5).nlargest(10, "gap_us"), "longest GPU idle gaps")
    """
    names = ("name", "before", "after", "a_name", "b_name")
    return _styled(_shorten(frame, names, full_names), caption)


def time_change(frame):
    """B's time minus A's per row of a diff table, a side without the row counting as 0 us (so a step
    or kernel that appeared or vanished changed by its whole time)."""
    return frame["b_us"].fillna(0.0) - frame["a_us"].fillna(0.0)


def big_changes(frame, rel: float = 0.2, min_share: float = 0.01) -> list[int]:
    """For each row of a per-step or per-kernel diff: +1 when B is markedly slower, -1 when markedly
    faster, 0 otherwise. Markedly: the time changed by at least `rel` of A's time (or appeared or
    vanished) and by at least `min_share` of the larger run's total, so a 3x change of a 2 us op in a
    50 ms run does not light up."""
    a = frame["a_us"].fillna(0.0)
    floor = min_share * max(float(a.sum()), float(frame["b_us"].fillna(0.0).sum()))
    marks = []
    for a_us, d_us in zip(a, time_change(frame)):
        relative = math.inf if a_us == 0 else abs(d_us) / a_us
        big = d_us != 0 and relative >= rel and abs(d_us) >= floor
        marks.append(0 if not big else (1 if d_us > 0 else -1))
    return marks


def trace_diff_styler(
    diff: Any,
    table: str = "per_step",
    top: int | None = None,
    rel: float = 0.2,
    min_share: float = 0.01,
    full_names: bool = False,
) -> Styler:
    """`diff.per_step` (or `diff.per_kernel` with table="per_kernel") of `md.compare_traces(a, b)`: rows
    where B is markedly slower in red, markedly faster in green (see `big_changes`), the delta drawn as a
    bar around zero and changed launch counts in bold.

    `top` keeps the rows that changed most (largest first; a row present on one side only changed by
    its whole time); without it the table keeps the diff's order (execution order for steps). Kernel
    names are cut to one line unless `full_names`.

    >>> trace_diff_styler(md.compare_traces(a, b), table="per_kernel", top=15)
    """
    import pandas as pd

    if table not in ("per_step", "per_kernel"):
        raise ValueError(f"table={table!r} is not 'per_step' or 'per_kernel'")
    if top is not None and top < 1:
        raise ValueError(f"top={top} must be >= 1")
    whole = getattr(diff, table)
    missing = [c for c in ("a_us", "b_us", "delta_us") if c not in whole.columns]
    if missing:
        raise ValueError(f"diff.{table} lacks the columns {', '.join(missing)}")
    # Marks are relative to the runs' totals, so they are computed on the whole table, then cut.
    marks = big_changes(whole, rel, min_share)
    slower, faster = sum(m > 0 for m in marks), sum(m < 0 for m in marks)
    frame = whole
    if top is not None:
        change = time_change(whole).abs().reset_index(drop=True)
        keep = change.sort_values(ascending=False, kind="stable").index[:top].tolist()
        frame, marks = whole.iloc[keep], [marks[i] for i in keep]
    a_total, b_total = float(whole["a_us"].fillna(0).sum()), float(whole["b_us"].fillna(0).sum())
    ratio = f"{b_total / a_total:.2f}x" if a_total else "-"
    shown = f"; the {len(frame)} largest changes of {len(whole)} rows" if len(frame) < len(whole) else ""
    caption = (
        f"{table.replace('_', ' ')}: A = {getattr(diff, 'a_label', 'A')} ({a_total:,.1f} us), "
        f"B = {getattr(diff, 'b_label', 'B')} ({b_total:,.1f} us, {ratio}); "
        f"{slower} rows markedly slower and {faster} markedly faster in B{shown}"
    )

    def rows(shown_frame):
        # Positional, so a diff table indexed by step name (or with a repeated label) styles the same.
        styles = [[SLOWER_ROW if m > 0 else FASTER_ROW if m < 0 else ""] * shown_frame.shape[1] for m in marks]
        return pd.DataFrame(styles, index=shown_frame.index, columns=shown_frame.columns)

    styler = _styled(_shorten(frame, ("a_name", "b_name"), full_names), caption).apply(rows, axis=None)
    if len(frame) and frame["delta_us"].abs().max() > 0:
        styler = styler.bar(subset=["delta_us"], align="zero", color=list(DELTA_BARS))
    for a_col, b_col in (("a_launches", "b_launches"), ("a_count", "b_count")):
        if a_col in frame.columns and b_col in frame.columns:
            changed = (frame[a_col].fillna(-1) != frame[b_col].fillna(-1)).tolist()
            styler = styler.apply(
                lambda column, changed=changed: [CHANGED_CELL if c else "" for c in changed],
                axis=0,
                subset=[a_col, b_col],
            )
    return styler
