"""`compare_traces`: what got slower or faster between two profiled runs, step by step and kernel by kernel.

Steps pair by name. Kernels pair by (enclosing step, name); two backends rarely name their kernels
alike (aiter's ``gemm_a8w8_blockscale_bpreshuffle_...`` vs cuBLAS's ``sm90_xmma_...``), so names left
over on both sides of one step pair in order of appearance - the n-th unmatched kernel of a step in A
with the n-th in B. Without GPU events on both sides the CPU ops are compared instead.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from .trace import CPU_OP, KERNEL, Trace, load_trace

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
]
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
    """Two traces side by side. per_step: step, a_us, b_us, delta_us (b - a), ratio (b / a),
    a_launches, b_launches, a_kernel, b_kernel. per_kernel: step, a_name, b_name, match ("name",
    "order", "only_a", "only_b"), counts, times, delta, ratio. added / removed: op or kernel names found
    only in b / only in a. level: "gpu" (kernels) or "cpu" (ops) - what per_kernel compares."""

    a: Trace
    b: Trace
    per_step: pd.DataFrame
    per_kernel: pd.DataFrame
    added: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    level: str = "gpu"
    a_label: str = "A"
    b_label: str = "B"

    def summary(self) -> str:
        """A few lines: totals, the steps that moved most, how kernels paired, what appeared/vanished."""
        steps = self.per_step
        a_total, b_total = steps["a_us"].sum(), steps["b_us"].sum()
        ratio = f"{b_total / a_total:.2f}x" if a_total > 0 else "n/a"
        lines = [
            f"A = {self.a_label}: {a_total / 1000:.3f} ms in {int(steps['a_us'].notna().sum())} steps",
            f"B = {self.b_label}: {b_total / 1000:.3f} ms in {int(steps['b_us'].notna().sum())} steps (B/A {ratio})",
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
        what = "kernels" if self.level == "gpu" else "CPU ops"
        counts = self.per_kernel["match"].value_counts() if len(self.per_kernel) else {}
        lines.append(
            f"{what}: {counts.get('name', 0)} paired by name, {counts.get('order', 0)} by order within a step, "
            f"{counts.get('only_a', 0)} only in A, {counts.get('only_b', 0)} only in B"
        )
        if self.added:
            lines.append(f"added in B: {', '.join(self.added[:8])}" + (" ..." if len(self.added) > 8 else ""))
        if self.removed:
            lines.append(f"removed in B: {', '.join(self.removed[:8])}" + (" ..." if len(self.removed) > 8 else ""))
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


def _steps(trace: Trace) -> pd.DataFrame:
    """Per step (kernels of several calls joined): wall_us, launches, kernel - in order."""
    import pandas as pd

    table = trace.per_step() if (trace.events["kind"] == "step").any() else pd.DataFrame(columns=["step"])
    if table.empty:
        return pd.DataFrame(columns=["step", "us", "launches", "kernel"])
    launches = trace.launch_counts(warn=False)
    if launches.empty:
        launches = table[["step", "kernel"]].assign(launches=0)
    table = table.merge(launches[["step", "kernel", "launches"]], on=["step", "kernel"], how="left")
    return (
        table.groupby("step", sort=False)
        .agg(
            us=("wall_us", "sum"),
            launches=("launches", "sum"),
            kernel=("kernel", lambda k: ", ".join(dict.fromkeys(k))),
        )
        .reset_index()
    )


def _ops(trace: Trace, kind: str) -> pd.DataFrame:
    """(step, name) -> count and time, slowest rank's (like per_step), in order of first appearance."""
    ev = trace.events
    chosen = ev[(ev["kind"] == kind) & ev["step"].notna()]
    per_rank = chosen.groupby(["rank", "step", "name"], sort=False).agg(
        n=("dur_us", "size"), us=("dur_us", "sum"), first=("start_us", "min")
    )
    table = per_rank.groupby(["step", "name"], sort=False).agg(n=("n", "max"), us=("us", "max"), first=("first", "min"))
    return table.reset_index().sort_values("first", kind="stable")


def _pair_kernels(a_ops: pd.DataFrame, b_ops: pd.DataFrame, step_order: list[str]) -> pd.DataFrame:
    import pandas as pd

    rows = []
    a_by_step = {step: group for step, group in a_ops.groupby("step", sort=False)}
    b_by_step = {step: group for step, group in b_ops.groupby("step", sort=False)}
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
        for a_row, b_row in zip(a_left, b_left):  # differently named kernels: n-th with n-th
            rows.append((step, a_row.name, b_row.name, "order", a_row, b_row))
        for a_row in a_left[len(b_left) :]:
            rows.append((step, a_row.name, None, "only_a", a_row, None))
        for b_row in b_left[len(a_left) :]:
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


def compare_traces(a: Trace | str | Path, b: Trace | str | Path) -> TraceDiff:
    """Compare two traces (Trace objects, or anything load_trace accepts).

    >>> diff = md.compare_traces("profiles/tp1-run", "profiles/tp4-run")
    >>> print(diff.summary()); diff.per_step; diff.per_kernel
    """
    import pandas as pd

    a = a if isinstance(a, Trace) else load_trace(a)
    b = b if isinstance(b, Trace) else load_trace(b)
    a_steps, b_steps = _steps(a), _steps(b)
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

    level = "gpu" if a.has_gpu and b.has_gpu else "cpu"
    kind = KERNEL if level == "gpu" else CPU_OP
    a_ops, b_ops = _ops(a, kind), _ops(b, kind)
    per_kernel = _pair_kernels(a_ops, b_ops, order)
    a_names = dict.fromkeys(a.events.loc[a.events["kind"] == kind, "name"])
    b_names = dict.fromkeys(b.events.loc[b.events["kind"] == kind, "name"])
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
    )
