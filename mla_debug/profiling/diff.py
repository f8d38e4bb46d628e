"""`compare_traces`: what got slower or faster between two profiled runs, step by step and kernel by kernel.

Steps pair by name. Kernels pair by (enclosing step, name); two backends rarely name their kernels
alike (aiter's ``gemm_a8w8_blockscale_bpreshuffle_...`` vs cuBLAS's ``sm90_xmma_...``), so names left
over on both sides of one step pair in order of appearance - the n-th unmatched kernel of a step in A
with the n-th in B. Without GPU events on both sides the CPU ops are compared instead.

Traces recorded elsewhere (a plain torch.profiler trace, as vLLM or SGLang write them) have no
``mla.<step>[<kernel>]`` ranges: then kernels (or ops) are compared over the whole trace, by name. The
result carries `warnings` for what makes the comparison weaker: the loaders' own warnings, runs whose
metadata differ in what they ran (model, device, tokens, ...), and timings that include one-time work.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..model.program import STEP_RANGE_PREFIX
from .trace import CPU_OP, KERNEL, STEP, Trace, load_trace

if TYPE_CHECKING:
    import pandas as pd

PER_STEP_DIFF_COLUMNS = [
    "step",
    "a_us",
    "b_us",
    "delta_us",
    "ratio",
    "a_launches",
    "b_launches",
    "a_kernel",
    "b_kernel",
    "a_gpu_us",
    "b_gpu_us",
]
# Metadata that decides what a run did: two runs differing in one of these ran different work.
WORKLOAD_FIELDS = ("model", "platform", "tp", "mode", "tokens", "device", "executor")
# What a comparison usually varies on purpose: reported, but no reason for a warning on its own.
VARIED_FIELDS = ("scenario",)
# One-time work inside a profiled run: torch.compile's compile phases (dynamo_timed ranges), Triton/
# inductor compilation and autotuning, and GPU code loaded on first use (module and library loads).
_ONE_TIME_WORK = re.compile(
    r"\(dynamo_timed\)|compile_fx|compile_inner|_compile\b|autotun|triton.*compil|nvrtc|"
    r"^(cu|hip)(Module|Library)Load",
    re.IGNORECASE,
)
# A step launching this many times more kernels in one run (and at least LAUNCH_GAP more) is timed by
# its launches: the step times compare CPU launch overhead more than GPU work.
LAUNCH_RATIO, LAUNCH_GAP = 4, 16
PER_KERNEL_COLUMNS = [
    "step",
    "a_name",
    "b_name",
    "match",
    "a_count",
    "b_count",
    "a_us",
    "b_us",
    "delta_us",
    "ratio",
]


@dataclass
class TraceDiff:
    """Two traces side by side. per_step: step, a_us, b_us (CPU wall time of the step's ranges),
    delta_us (b - a), ratio (b / a), a_launches, b_launches, a_kernel, b_kernel, a_gpu_us, b_gpu_us
    (GPU busy time inside the step; NaN without GPU events). per_kernel: step, a_name, b_name, match
    ("name", "order", "only_a", "only_b"), counts, times, delta, ratio. added / removed: op or kernel
    names found only in b / only in a. level: "gpu" (kernels) or "cpu" (ops) - what per_kernel compares.
    scope: "steps" (both traces have ``mla.<step>[<kernel>]`` ranges) or "trace" (at least one has none:
    per_step is empty and per_kernel compares names over the whole trace, step None). differences:
    metadata fields whose values differ, {field: (a, b)}. warnings: what weakens the comparison, in
    words (each side's loader warnings prefixed "A:"/"B:", runs that are not like for like, one-time work
    or launch-bound steps in the timings)."""

    a: Trace
    b: Trace
    per_step: pd.DataFrame
    per_kernel: pd.DataFrame
    added: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    level: str = "gpu"
    a_label: str = "A"
    b_label: str = "B"
    scope: str = "steps"
    differences: dict[str, tuple[Any, Any]] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)

    def summary(self) -> str:
        """A few lines: totals, the steps (or kernels) that moved most, how kernels paired, what
        appeared/vanished, and the warnings."""
        what = "kernels" if self.level == "gpu" else "CPU ops"
        if self.scope == "steps":
            steps = self.per_step
            a_total, b_total = steps["a_us"].sum(), steps["b_us"].sum()
            ratio = f"{b_total / a_total:.2f}x" if a_total > 0 else "n/a"
            lines = [
                f"A = {self.a_label}: {a_total / 1000:.3f} ms in {int(steps['a_us'].notna().sum())} steps",
                f"B = {self.b_label}: {b_total / 1000:.3f} ms in {int(steps['b_us'].notna().sum())} steps "
                f"(B/A {ratio})",
            ]
            moved = steps.dropna(subset=["delta_us"])
            moved = moved.reindex(moved["delta_us"].abs().sort_values(ascending=False).index).head(3)
            for row in moved.itertuples():
                lines.append(
                    f"  {row.step}: {row.a_us:.1f} -> {row.b_us:.1f} us ({row.delta_us:+.1f} us, {row.ratio:.2f}x)"
                )
            for step in steps.loc[steps["b_us"].isna(), "step"]:
                lines.append(f"  {step}: only in A")
            for step in steps.loc[steps["a_us"].isna(), "step"]:
                lines.append(f"  {step}: only in B")
            counts = self.per_kernel["match"].value_counts() if len(self.per_kernel) else {}
            lines.append(
                f"{what}: {counts.get('name', 0)} paired by name, {counts.get('order', 0)} by order within a "
                f"step, {counts.get('only_a', 0)} only in A, {counts.get('only_b', 0)} only in B"
            )
        else:
            kernels = self.per_kernel
            a_total, b_total = kernels["a_us"].sum(), kernels["b_us"].sum()
            ratio = f"{b_total / a_total:.2f}x" if a_total > 0 else "n/a"
            nested = ", nested ops counted in their callers too" if self.level == "cpu" else ""
            lines = [
                f"A = {self.a_label}: {a_total / 1000:.3f} ms in {int(kernels['a_count'].sum())} {what} "
                f"(whole trace, no {STEP_RANGE_PREFIX}<step> ranges compared{nested})",
                f"B = {self.b_label}: {b_total / 1000:.3f} ms in {int(kernels['b_count'].sum())} {what} (B/A {ratio})",
            ]
            both = kernels[kernels["match"] == "name"]
            moved = both.reindex(both["delta_us"].abs().sort_values(ascending=False).index).head(3)
            for row in moved.itertuples():
                lines.append(f"  {row.a_name}: {row.a_us:.1f} -> {row.b_us:.1f} us ({row.delta_us:+.1f} us)")
        if self.added:
            lines.append(f"added in B: {', '.join(self.added[:8])}" + (" ..." if len(self.added) > 8 else ""))
        if self.removed:
            lines.append(f"removed in B: {', '.join(self.removed[:8])}" + (" ..." if len(self.removed) > 8 else ""))
        lines.extend(f"warning: {warning}" for warning in self.warnings)
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"TraceDiff(\n{self.summary()}\n)"


def _label(trace: Trace, fallback: str) -> str:
    meta = trace.meta
    parts = [str(meta[key]) for key in ("model", "scenario") if meta.get(key)]
    if meta.get("tp") is not None:
        parts.append(f"TP{meta['tp']}")
    if meta.get("mode"):
        parts.append(str(meta["mode"]))
    if meta.get("executor") == "distributed":
        parts.append("distributed")
    if parts:
        return " ".join(parts)
    return str(trace.paths[0].parent) if trace.paths else fallback


def _has_steps(trace: Trace) -> bool:
    return bool((trace.events["kind"] == STEP).any())


def _steps(trace: Trace) -> pd.DataFrame:
    """Per step (kernels of several calls joined): wall_us, GPU us, launches, kernel - in order."""
    import pandas as pd

    table = trace.per_step() if _has_steps(trace) else pd.DataFrame(columns=["step"])
    if table.empty:
        return pd.DataFrame(columns=["step", "us", "gpu_us", "launches", "kernel"])
    launches = trace.launch_counts(warn=False)
    if launches.empty:
        launches = table[["step", "kernel"]].assign(launches=0)
    table = table.merge(launches[["step", "kernel", "launches"]], on=["step", "kernel"], how="left")
    table = (
        table.groupby("step", sort=False)
        .agg(
            us=("wall_us", "sum"),
            gpu_us=("gpu_us", "sum"),
            launches=("launches", "sum"),
            kernel=("kernel", lambda k: ", ".join(dict.fromkeys(k))),
        )
        .reset_index()
    )
    if not trace.has_gpu:
        table["gpu_us"] = float("nan")  # not zero: the trace cannot say
    return table


def _ops(trace: Trace, kind: str, whole: bool = False) -> pd.DataFrame:
    """(step, name) -> count and time, slowest rank's (like per_step), in order of first appearance.
    whole=True: every event of `kind`, inside a step or not, with step None."""
    ev = trace.events
    chosen = ev[ev["kind"] == kind] if whole else ev[(ev["kind"] == kind) & ev["step"].notna()]
    if whole:
        chosen = chosen.assign(step="")  # groupby drops missing keys; put back to None below
    per_rank = chosen.groupby(["rank", "step", "name"], sort=False).agg(
        n=("dur_us", "size"), us=("dur_us", "sum"), first=("start_us", "min")
    )
    table = per_rank.groupby(["step", "name"], sort=False).agg(n=("n", "max"), us=("us", "max"), first=("first", "min"))
    table = table.reset_index().sort_values("first", kind="stable")
    if whole:
        table["step"] = None
    return table


def _pair_kernels(
    a_ops: pd.DataFrame, b_ops: pd.DataFrame, step_order: list[str | None], by_order: bool = True
) -> pd.DataFrame:
    import pandas as pd

    rows = []
    a_by_step = {step: group for step, group in a_ops.groupby("step", sort=False, dropna=False)}
    b_by_step = {step: group for step, group in b_ops.groupby("step", sort=False, dropna=False)}
    if step_order == [None]:  # the whole trace: one group each, whatever groupby called its key
        a_by_step, b_by_step = {None: a_ops}, {None: b_ops}
    for step in step_order:
        a_group = a_by_step.get(step, a_ops.iloc[0:0])
        b_group = b_by_step.get(step, b_ops.iloc[0:0])
        a_rows = {row.name: row for row in a_group.itertuples(index=False)}
        b_rows = {row.name: row for row in b_group.itertuples(index=False)}
        for name, row in a_rows.items():
            if name in b_rows:
                rows.append((step, name, name, "name", row, b_rows[name]))
        a_left = [row for name, row in a_rows.items() if name not in b_rows]
        b_left = [row for name, row in b_rows.items() if name not in a_rows]
        # Differently named kernels of one step: n-th with n-th. Over a whole trace the n-th leftovers
        # have nothing to do with each other, so they stay unpaired.
        paired = min(len(a_left), len(b_left)) if by_order else 0
        for a_row, b_row in zip(a_left[:paired], b_left[:paired]):
            rows.append((step, a_row.name, b_row.name, "order", a_row, b_row))
        a_left, b_left = a_left[paired:], b_left[paired:]
        for a_row in a_left:
            rows.append((step, a_row.name, None, "only_a", a_row, None))
        for b_row in b_left:
            rows.append((step, None, b_row.name, "only_b", None, b_row))
    table = pd.DataFrame(
        [
            {
                "step": step,
                "a_name": a_name,
                "b_name": b_name,
                "match": match,
                "a_count": a_row.n if a_row is not None else 0,
                "b_count": b_row.n if b_row is not None else 0,
                "a_us": a_row.us if a_row is not None else float("nan"),
                "b_us": b_row.us if b_row is not None else float("nan"),
            }
            for step, a_name, b_name, match, a_row, b_row in rows
        ],
        columns=PER_KERNEL_COLUMNS[:-2],
    )
    table["delta_us"] = table["b_us"] - table["a_us"]
    table["ratio"] = table["b_us"] / table["a_us"].where(table["a_us"] > 0)
    return table[PER_KERNEL_COLUMNS]


def _shown(value: Any) -> str:
    return json.dumps(value, default=str) if isinstance(value, (list, dict)) else str(value)


def _metadata_warnings(a: Trace, b: Trace) -> tuple[dict[str, tuple[Any, Any]], list[str]]:
    """Fields whose values differ, and a warning when the runs did different work or cannot be checked."""
    fields = (*WORKLOAD_FIELDS, *VARIED_FIELDS)
    differences = {
        key: (a.meta.get(key), b.meta.get(key))
        for key in fields
        if a.meta.get(key) is not None
        and b.meta.get(key) is not None
        and _shown(a.meta.get(key)) != _shown(b.meta.get(key))
    }
    warnings = []
    missing = [side for side, trace in (("A", a), ("B", b)) if not any(trace.meta.get(key) for key in fields)]
    if missing:
        who = "neither trace has" if len(missing) == 2 else f"{missing[0]} has no"
        warnings.append(
            f"{who} run metadata (mla_debug_meta.json beside the trace, written by md.profile): cannot check "
            f"that the runs are comparable ({', '.join(fields)})"
        )
    if any(key in WORKLOAD_FIELDS for key in differences):
        listed = "; ".join(f"{key} (A: {_shown(x)}, B: {_shown(y)})" for key, (x, y) in differences.items())
        warnings.append(f"the runs are not like for like: they differ in {listed}; their times compare different work")
    return differences, warnings


def _one_time_work(trace: Trace) -> tuple[int, list[str]]:
    """How many events of `trace` are compilation, autotuning or GPU code loading, and their first names."""
    names = trace.events["name"].drop_duplicates()
    found = [name for name in names if _ONE_TIME_WORK.search(str(name))]
    count = int(trace.events["name"].isin(found).sum())
    return count, found[:3]


def _timing_caveats(a: Trace, b: Trace, per_step: pd.DataFrame) -> list[str]:
    caveats = []
    for side, trace in (("A", a), ("B", b)):
        count, examples = _one_time_work(trace)
        if count:
            caveats.append(
                f"{side} contains one-time work ({count} compilation, autotuning or code-loading events, e.g. "
                f"{', '.join(examples)}): its times include it; profile after a warm-up run"
            )
    for row in per_step.itertuples(index=False):
        if row.a_us != row.a_us or row.b_us != row.b_us:  # a step of one run only: nothing to set against
            continue
        low, high = sorted((int(row.a_launches), int(row.b_launches)))
        if high < LAUNCH_RATIO * max(low, 1) or high - low < LAUNCH_GAP:
            continue
        many = "A" if row.a_launches > row.b_launches else "B"
        wall, gpu = (row.a_us, row.a_gpu_us) if many == "A" else (row.b_us, row.b_gpu_us)
        text = (
            f"{row.step}: {many} launches {high} GPU kernels against {low}: the runs ran different code in this "
            "step (a reference implementation, a fallback, or a first call that compiles or autotunes)"
        )
        if gpu == gpu and gpu < wall / 2:  # NaN (no GPU events) fails the first test
            text += (
                f"; {many}'s {wall:,.1f} us of step time is mostly the CPU launching them (the GPU was busy "
                f"{gpu:,.1f} us): compare GPU time (a_gpu_us, b_gpu_us)"
            )
        caveats.append(text)
    return caveats


def compare_traces(a: Trace | str | Path, b: Trace | str | Path) -> TraceDiff:
    """Compare two traces (Trace objects, or anything load_trace accepts).

    >>> diff = md.compare_traces("profiles/tp1-run", "profiles/tp4-run")
    >>> print(diff.summary()); diff.per_step; diff.per_kernel; diff.warnings

    Traces without ``mla.<step>[<kernel>]`` ranges (recorded by another program) are compared kernel by
    kernel (or op by op) over the whole trace; `warnings` says so, along with anything else that makes
    the comparison weaker.
    """
    import pandas as pd

    a = a if isinstance(a, Trace) else load_trace(a)
    b = b if isinstance(b, Trace) else load_trace(b)
    scope = "steps" if _has_steps(a) and _has_steps(b) else "trace"
    # A loader's "no mla.<step> ranges" note is said once below, with what the comparison does instead.
    no_ranges = f"no {STEP_RANGE_PREFIX}<step>[<kernel>] ranges:"
    warnings = [
        f"{side}: {text}"
        for side, trace in (("A", a), ("B", b))
        for text in trace.warnings
        if not (scope == "trace" and text.startswith(no_ranges))
    ]
    differences, meta_warnings = _metadata_warnings(a, b)
    warnings += meta_warnings

    if scope == "trace":
        lacking = " and ".join(side for side, trace in (("A", a), ("B", b)) if not _has_steps(trace))
        warnings.append(
            f"no {STEP_RANGE_PREFIX}<step>[<kernel>] ranges in {lacking} (not recorded around an mla_debug "
            "layer run): per-step times are not compared; kernels (or ops) are compared by name over the "
            "whole trace"
        )
    a_steps, b_steps = _steps(a), _steps(b)
    if scope == "trace":
        a_steps, b_steps = a_steps.iloc[0:0], b_steps.iloc[0:0]
    merged = a_steps.merge(b_steps, on="step", how="outer", suffixes=("_a", "_b"), sort=False)
    order = list(dict.fromkeys([*a_steps["step"], *b_steps["step"]]))
    merged = merged.set_index("step").reindex(order).reset_index()
    per_step = pd.DataFrame(
        {
            "step": merged["step"],
            "a_us": merged["us_a"].astype(float),
            "b_us": merged["us_b"].astype(float),
        }
    )
    per_step["delta_us"] = per_step["b_us"] - per_step["a_us"]
    per_step["ratio"] = per_step["b_us"] / per_step["a_us"].where(per_step["a_us"] > 0)
    per_step["a_launches"] = merged["launches_a"].fillna(0).astype("int64")
    per_step["b_launches"] = merged["launches_b"].fillna(0).astype("int64")
    per_step["a_kernel"] = merged["kernel_a"]
    per_step["b_kernel"] = merged["kernel_b"]
    per_step["a_gpu_us"] = merged["gpu_us_a"].astype(float)
    per_step["b_gpu_us"] = merged["gpu_us_b"].astype(float)

    level = "gpu" if a.has_gpu and b.has_gpu else "cpu"
    if a.has_gpu != b.has_gpu:
        gpu_side, cpu_side = ("A", "B") if a.has_gpu else ("B", "A")
        warnings.append(
            f"{gpu_side} has GPU kernels and {cpu_side} has none (a CPU-only run?): CPU ops are compared, and "
            "a CPU op's time in a GPU run includes waiting for the GPU"
        )
    kind = KERNEL if level == "gpu" else CPU_OP
    whole = scope == "trace"
    a_ops, b_ops = _ops(a, kind, whole), _ops(b, kind, whole)
    per_kernel = _pair_kernels(a_ops, b_ops, [None] if whole else order, by_order=not whole)
    a_names = dict.fromkeys(a.events.loc[a.events["kind"] == kind, "name"])
    b_names = dict.fromkeys(b.events.loc[b.events["kind"] == kind, "name"])
    warnings += _timing_caveats(a, b, per_step)
    return TraceDiff(
        a=a,
        b=b,
        per_step=per_step[PER_STEP_DIFF_COLUMNS],
        per_kernel=per_kernel,
        added=[name for name in b_names if name not in a_names],
        removed=[name for name in a_names if name not in b_names],
        level=level,
        a_label=_label(a, "A"),
        b_label=_label(b, "B"),
        scope=scope,
        differences=differences,
        warnings=warnings,
    )
