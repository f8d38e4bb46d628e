"""`load_trace` and `Trace`: a profiled run as one events table, with per-step and per-op tables.

A run folder written by `md.profile` holds one Chrome trace per process (one per rank for the
distributed executor) and `mla_debug_meta.json`. Every event is attributed to the `mla.<step>[kernel]`
range that `md.profile`'s step observer opens around each step of a run (`profiling.observers`; the
names come from `mla_debug.model.program.step_label`), so the tables answer "which step spent how long, in which ops and kernels".

pandas is imported inside the functions that build tables: `import mla_debug` stays pandas-free.
"""

from __future__ import annotations

import json
import re
import warnings
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ..model.program import STEP_RANGE_PREFIX
from .attribution import attribute
from .chrome import RawTrace, is_trace_file, parse_trace_file

if TYPE_CHECKING:
    import pandas as pd

META_NAME = "mla_debug_meta.json"

# Event kinds (the `kind` column). GPU_WORK occupies a GPU stream; annotations only label time.
STEP = "step"
CPU_OP = "cpu_op"
RUNTIME = "runtime"
KERNEL = "kernel"
MEMCPY = "memcpy"
MEMSET = "memset"
GPU_ANNOTATION = "gpu_annotation"
ANNOTATION = "annotation"
INSTANT = "instant"
OTHER = "other"
GPU_WORK = (KERNEL, MEMCPY, MEMSET)
GPU_KINDS = (*GPU_WORK, GPU_ANNOTATION)

_STEP_NAME = re.compile(re.escape(STEP_RANGE_PREFIX) + r"([^\[\]]+)(?:\[(.*)\])?$")
# Kineto categories -> kinds; an unknown category on a CPU thread counts as an op (other tracers).
_CATEGORY_KINDS = {
    "kernel": KERNEL,
    "gpu_memcpy": MEMCPY,
    "memcpy": MEMCPY,
    "gpu_memset": MEMSET,
    "memset": MEMSET,
    "gpu_user_annotation": GPU_ANNOTATION,
    "user_annotation": ANNOTATION,
    "cpu_op": CPU_OP,
    "operator": CPU_OP,
    "trace": OTHER,
    "overhead": OTHER,
    "python_function": OTHER,
    "cpu_instant_event": OTHER,
    "fwdbwd": OTHER,
    "ac2g": OTHER,
}
_RUNTIME_CATEGORY = re.compile(r".*_(runtime|driver)$")
# Runtime API names, for events without a category (cudaMemcpyAsync, cuLaunchKernel, hipModuleLaunchKernel, ...).
_RUNTIME_NAME = re.compile(r"^(cuda|cu|hip|hipExt|nccl)[A-Z]\w*$")
# The calls that launch GPU work; launch_counts counts them when the trace has no GPU activity.
_LAUNCH_NAME = re.compile(r"^(cuda|cu|hip|hipExt|hipModule|hipExtModule)\w*Launch\w*$")
# Process/thread names that mark a GPU timeline (Kineto: process "GPU 0", threads "stream 7").
_GPU_TIMELINE = re.compile(r"\b(gpu|cuda|hip|rocm|stream)\b", re.IGNORECASE)

EVENT_COLUMNS = [
    "name",
    "category",
    "ph",
    "start_us",
    "dur_us",
    "pid",
    "tid",
    "rank",
    "is_gpu",
    "step",
    "kernel",
    "shapes",
    "kind",
    "correlation",
    "range_id",
    "source",
]
PER_STEP_COLUMNS = ["step", "kernel", "wall_us", "gpu_us", "cpu_ops", "gpu_kernels", "share", "calls"]
OP_COLUMNS = ["name", "count", "total_us", "mean_us", "min_us", "max_us", "share", "is_gpu"]
LAUNCH_COLUMNS = ["step", "kernel", "launches", "gpu_kernels", "runtime_launches"]
GAP_COLUMNS = ["rank", "pid", "stream", "start_us", "end_us", "gap_us", "before", "after", "step"]
SEQUENCE_COLUMNS = ["name", "kind", "is_gpu", "offset_us", "dur_us", "tid", "shapes", "correlation"]


class TraceWarning(UserWarning):
    """A trace lacks what an analysis needs (no GPU events, no step ranges); the result is empty."""


def parse_step_name(name: str) -> tuple[str, str] | None:
    """('q_b_proj', 'aiter-bpreshuffle') for 'mla.q_b_proj[aiter-bpreshuffle]'; None for other names."""
    match = _STEP_NAME.match(name)
    if match is None:
        return None
    return match.group(1), match.group(2) or ""


class Trace:
    """Timing events of one profiled run (every rank), attributed to the layer's steps.

    >>> trace = md.load_trace("profiles/20261130-101500-1a2b3c")
    >>> trace.per_step()          # step, kernel, wall_us, gpu_us, cpu_ops, gpu_kernels, share, calls
    >>> trace.op_table(gpu=False, top=10)

    `events` columns: name, category, ph, start_us, dur_us, pid, tid (as strings), rank, is_gpu,
    step and kernel (of the enclosing ``mla.<step>[<kernel>]`` range; missing outside every step),
    shapes (record_shapes input dims), kind (step, cpu_op, runtime, kernel, memcpy, memset,
    gpu_annotation, annotation, instant, other), correlation (launch <-> kernel id), range_id (row of
    the enclosing step range, -1 outside) and source (the file). start_us counts from the trace's
    first event (0.0), every rank on one clock (files of different ranks aligned by their base time);
    `origin_us` is that zero in the tracer's own timestamps (Kineto's are since boot, ~1e12 us), so
    ``start_us + origin_us`` is the time written in the file.
    """

    def __init__(
        self,
        events: pd.DataFrame,
        meta: dict | None = None,
        warnings: Iterable[str] = (),  # shadows the module only inside __init__, which does not use it
        paths: Iterable[Path] = (),
        origin_us: float = 0.0,
    ) -> None:
        self.events = events
        self.meta: dict = dict(meta or {})
        self.warnings: list[str] = list(warnings)
        self.paths: list[Path] = list(paths)
        self.origin_us = float(origin_us)

    # -- basic facts ---------------------------------------------------------------------------------
    @property
    def has_gpu(self) -> bool:
        """True when the trace holds GPU kernels, copies or memsets."""
        return bool(self.events["kind"].isin(GPU_WORK).any())

    @property
    def ranks(self) -> list[int]:
        return sorted(int(r) for r in self.events["rank"].unique())

    @property
    def steps(self) -> list[str]:
        """Step names in order of first appearance."""
        ranges = self.events[self.events["kind"] == STEP]
        return list(dict.fromkeys(ranges.sort_values("start_us", kind="stable")["step"]))

    def __repr__(self) -> str:
        where = self.paths[0].parent if self.paths else "?"
        return (
            f"Trace({len(self.paths)} file(s) in {where}, {len(self.events)} events, ranks {self.ranks}, "
            f"{len(self.steps)} steps, has_gpu={self.has_gpu}, {len(self.warnings)} warning(s))"
        )

    def _warn(self, message: str) -> None:
        if message not in self.warnings:
            self.warnings.append(message)
        warnings.warn(message, TraceWarning, stacklevel=3)

    # -- tables --------------------------------------------------------------------------------------
    def _step_figures(self) -> pd.DataFrame:
        """Per (rank, step, kernel): wall time, GPU time, op / kernel / launch counts, first start."""
        import pandas as pd

        ev = self.events
        keys = ["rank", "step", "kernel"]
        ranges = ev[ev["kind"] == STEP]
        if ranges.empty:
            return pd.DataFrame(columns=[*keys, "wall_us", "calls", "first_us"])
        table = ranges.groupby(keys, sort=False, dropna=False).agg(
            wall_us=("dur_us", "sum"), calls=("dur_us", "size"), first_us=("start_us", "min")
        )
        inside = ev[(ev["range_id"] >= 0) & (ev["kind"] != STEP)]
        groups = {
            "gpu_us": inside[inside["kind"].isin(GPU_WORK)].groupby(keys, dropna=False)["dur_us"].sum(),
            "cpu_ops": inside[inside["kind"] == CPU_OP].groupby(keys, dropna=False).size(),
            "gpu_kernels": inside[inside["kind"] == KERNEL].groupby(keys, dropna=False).size(),
            "runtime_launches": inside[(inside["kind"] == RUNTIME) & inside["name"].str.match(_LAUNCH_NAME)]
            .groupby(keys, dropna=False)
            .size(),
        }
        for column, values in groups.items():
            table[column] = values.reindex(table.index).fillna(0)
        for column in ("cpu_ops", "gpu_kernels", "runtime_launches"):
            table[column] = table[column].astype("int64")
        return table.reset_index()

    def per_step(self, by_rank: bool = False) -> pd.DataFrame:
        """One row per step (and kernel), in order: wall_us, gpu_us, cpu_ops, gpu_kernels, share, calls.

        wall_us is the summed duration of the step's ranges (calls of them) on a rank; across ranks the
        slowest rank's figures are kept (a TP step lasts as long as its slowest rank). share is wall_us
        over the summed wall_us of all steps. by_rank=True keeps one row per rank instead.
        """
        import pandas as pd

        figures = self._step_figures()
        columns = (["rank"] if by_rank else []) + PER_STEP_COLUMNS
        if figures.empty:
            self._warn(
                f"no {STEP_RANGE_PREFIX}<step>[<kernel>] ranges in this trace: per-step tables are empty "
                "(was it recorded around an mla_debug layer run?)"
            )
            return pd.DataFrame(columns=columns)
        if not by_rank:
            figures = figures.groupby(["step", "kernel"], sort=False, dropna=False).agg(
                {name: ("min" if name == "first_us" else "max") for name in figures.columns[3:]}
            )
            figures = figures.reset_index()
        figures = figures.sort_values(["first_us"] + (["rank"] if by_rank else []), kind="stable")
        total = figures["wall_us"].sum()
        figures["share"] = figures["wall_us"] / total if total > 0 else 0.0
        return figures[columns].reset_index(drop=True)

    def op_table(self, gpu: bool | None = None, top: int | None = None, step: str | None = None) -> pd.DataFrame:
        """Ops by name: count, total_us, mean_us, min_us, max_us, share (of the table's total), is_gpu.

        gpu=True: GPU kernels, copies and memsets only; gpu=False: CPU ops only; None: both. step
        restricts to the events inside that step; top keeps the `top` largest by total time.
        """
        import pandas as pd

        ev = self.events
        if gpu and not self.has_gpu:
            self._warn("the trace has no GPU events: op_table(gpu=True) is empty")
            return pd.DataFrame(columns=OP_COLUMNS)
        kinds = GPU_WORK if gpu else (CPU_OP,) if gpu is False else (*GPU_WORK, CPU_OP)
        chosen = ev[ev["kind"].isin(kinds)]
        if step is not None:
            self._check_step(step)
            chosen = chosen[chosen["step"] == step]
        if chosen.empty:
            return pd.DataFrame(columns=OP_COLUMNS)
        table = chosen.groupby(["name", "is_gpu"], sort=False).agg(
            count=("dur_us", "size"),
            total_us=("dur_us", "sum"),
            mean_us=("dur_us", "mean"),
            min_us=("dur_us", "min"),
            max_us=("dur_us", "max"),
        )
        table = table.reset_index().sort_values("total_us", ascending=False, kind="stable")
        total = table["total_us"].sum()
        table["share"] = table["total_us"] / total if total > 0 else 0.0
        if top is not None:
            table = table.head(top)
        return table[OP_COLUMNS].reset_index(drop=True)

    def launch_counts(self, warn: bool = True) -> pd.DataFrame:
        """Per step: GPU kernel launches (`launches`: kernels on the GPU when the trace has any, else the
        CPU's launch calls such as cudaLaunchKernel), plus both counts (slowest rank's, like per_step)."""
        import pandas as pd

        figures = self._step_figures()
        if figures.empty or (not self.has_gpu and not figures["runtime_launches"].any()):
            if warn:
                self._warn("the trace has no GPU kernels and no kernel launch calls: launch_counts() is empty")
            return pd.DataFrame(columns=LAUNCH_COLUMNS)
        figures = figures.groupby(["step", "kernel"], sort=False, dropna=False).agg(
            gpu_kernels=("gpu_kernels", "max"),
            runtime_launches=("runtime_launches", "max"),
            first_us=("first_us", "min"),
        )
        figures = figures.reset_index().sort_values("first_us", kind="stable")
        figures["launches"] = figures["gpu_kernels"] if self.has_gpu else figures["runtime_launches"]
        return figures[LAUNCH_COLUMNS].reset_index(drop=True)

    def gpu_idle_gaps(self, min_us: float = 1.0) -> pd.DataFrame:
        """Idle time between consecutive GPU kernels (and copies) of each stream, gaps of at least min_us.

        start_us is when the stream went idle, end_us when the next kernel (`after`) began; `before`
        is the last one that ran; step is the step of `after`.
        """
        import pandas as pd

        if not self.has_gpu:
            self._warn("the trace has no GPU events: gpu_idle_gaps() is empty")
            return pd.DataFrame(columns=GAP_COLUMNS)
        work = self.events[self.events["kind"].isin(GPU_WORK)]
        work = work.sort_values(["rank", "pid", "tid", "start_us"], kind="stable")
        stream = [work["rank"], work["pid"], work["tid"]]
        end = work["start_us"] + work["dur_us"]
        # The stream is busy until the latest end so far (copies may overlap kernels on one stream).
        busy_until = end.groupby(stream, sort=False).cummax()
        previous_end = busy_until.groupby(stream, sort=False).shift(1)
        previous_name = work["name"].groupby(stream, sort=False).shift(1)
        gaps = pd.DataFrame(
            {
                "rank": work["rank"],
                "pid": work["pid"],
                "stream": work["tid"],
                "start_us": previous_end,
                "end_us": work["start_us"],
                "gap_us": work["start_us"] - previous_end,
                "before": previous_name,
                "after": work["name"],
                "step": work["step"],
            }
        )
        gaps = gaps[gaps["gap_us"].notna() & (gaps["gap_us"] >= min_us)]
        return gaps[GAP_COLUMNS].reset_index(drop=True)

    def critical_sequence(self, step: str, occurrence: int = 0, rank: int | None = None) -> pd.DataFrame:
        """The ops, launch calls and kernels of one call of `step`, in start order.

        occurrence picks the call (0 = first) on `rank` (default: the lowest rank); offset_us is the
        start relative to the step range's start.
        """
        self._check_step(step)
        ev = self.events
        ranges = ev[(ev["kind"] == STEP) & (ev["step"] == step)]
        rank = int(ranges["rank"].min()) if rank is None else rank
        ranges = ranges[ranges["rank"] == rank].sort_values("start_us", kind="stable")
        if ranges.empty:
            raise ValueError(f"step {step!r} has no range on rank {rank} (ranks: {self.ranks})")
        if not -len(ranges) <= occurrence < len(ranges):
            raise ValueError(f"step {step!r} ran {len(ranges)} time(s) on rank {rank}; occurrence={occurrence}")
        row = ranges.index[occurrence]
        inside = ev[(ev["range_id"] == row) & (ev.index != row)].sort_values("start_us", kind="stable")
        table = inside.assign(offset_us=inside["start_us"] - ev.at[row, "start_us"])
        return table[SEQUENCE_COLUMNS].reset_index(drop=True)

    def _check_step(self, step: str) -> None:
        known = self.steps
        if step not in known:
            raise ValueError(f"step {step!r} is not in this trace; its steps: {', '.join(known) or '(none)'}")


# -- loading ---------------------------------------------------------------------------------------------
def _trace_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if is_trace_file(p) and p.name != META_NAME)


def _resolve(path: Path) -> tuple[list[Path], Path]:
    """(trace files, run folder) for a trace file, a run folder or a folder holding one run."""
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such trace file or folder")
    if path.is_file():
        return [path], path.parent
    files = _trace_files(path)
    if files:
        return files, path
    runs = sorted(child for child in path.iterdir() if child.is_dir() and _trace_files(child))
    if len(runs) == 1:
        return _trace_files(runs[0]), runs[0]
    if not runs:
        raise ValueError(f"{path}: no Chrome trace files (*.json, *.json.gz) in it or in its sub-folders")
    names = ", ".join(run.name for run in runs)
    raise ValueError(f"{path} holds {len(runs)} profiled runs; load one of them: {names}")


def _read_meta(folder: Path, notes: list[str]) -> dict:
    meta_path = folder / META_NAME
    if not meta_path.is_file():
        return {}
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        notes.append(f"{meta_path}: unreadable run metadata ignored ({err})")
        return {}
    if not isinstance(meta, dict):
        notes.append(f"{meta_path}: run metadata is not a JSON object; ignored")
        return {}
    return meta


def _assign_ranks(raws: list[RawTrace], notes: list[str]) -> list[int]:
    known = [raw.rank for raw in raws]
    if all(rank is None for rank in known):
        if len(raws) > 1:
            notes.append(
                f"{len(raws)} trace files without a rank (no 'rank<r>' in their names, no distributedInfo): "
                "numbered 0.. in file-name order"
            )
        return list(range(len(raws)))
    taken = {rank for rank in known if rank is not None}
    spare = (r for r in range(len(raws) + len(taken)) if r not in taken)
    ranks = [rank if rank is not None else next(spare) for rank in known]
    unnamed = [raw.path.name for raw in raws if raw.rank is None]
    if unnamed:
        notes.append(f"trace files without a rank got the spare numbers: {', '.join(unnamed)}")
    return ranks


def _is_gpu_timeline(raw: RawTrace) -> tuple[set[str], set[tuple[str, str]]]:
    pids = {pid for pid, label in raw.process_names.items() if _GPU_TIMELINE.search(label)}
    threads = {key for key, label in raw.thread_names.items() if _GPU_TIMELINE.search(label) and "python" not in label}
    return pids, threads


def _kinds(raw: RawTrace) -> np.ndarray:
    """The kind of every event of one file, from its category, name and whether it sits on a GPU timeline."""
    import pandas as pd

    n = len(raw)
    cat_codes, cats = pd.factorize(pd.Series(raw.category, dtype=object), use_na_sentinel=True)
    kind_of_cat = np.array([_CATEGORY_KINDS.get(str(c).lower(), None) for c in cats] + [None], dtype=object)
    runtime_cat = np.array([bool(_RUNTIME_CATEGORY.match(str(c).lower())) for c in cats] + [False])
    kinds = kind_of_cat[cat_codes]  # code -1 (no category) picks the trailing None
    kinds[runtime_cat[cat_codes]] = RUNTIME
    name_codes, names = pd.factorize(pd.Series(raw.name, dtype=object))
    step_name = np.array([parse_step_name(name) is not None for name in names], dtype=bool)[name_codes]
    runtime_name = np.array([bool(_RUNTIME_NAME.match(name)) for name in names], dtype=bool)[name_codes]

    gpu_pids, gpu_threads = _is_gpu_timeline(raw)
    on_gpu = np.zeros(n, dtype=bool)
    if gpu_pids or gpu_threads:
        on_gpu = np.fromiter(
            ((pid in gpu_pids) or ((pid, tid) in gpu_threads) for pid, tid in zip(raw.pid, raw.tid)), bool, n
        )
    unknown = pd.isna(kinds) if n else np.zeros(0, dtype=bool)
    uncategorised = cat_codes < 0
    # Unknown or missing categories: a GPU timeline means a kernel, a runtime API name a runtime call,
    # anything else an op (tracers other than Kineto rarely categorise their slices).
    kinds[unknown & on_gpu] = KERNEL
    kinds[unknown & ~on_gpu & uncategorised & runtime_name] = RUNTIME
    kinds[pd.isna(kinds)] = CPU_OP
    gpu = np.isin(kinds, GPU_KINDS)
    kinds[step_name & ~gpu] = STEP
    kinds[step_name & (kinds == KERNEL)] = GPU_ANNOTATION  # a step range drawn on a GPU timeline
    kinds[np.asarray(raw.ph, dtype=object) == "i"] = INSTANT
    return kinds


def build_events(raws: list[RawTrace], ranks: list[int], notes: list[str]) -> pd.DataFrame:
    """The attributed events table of several parsed files (one per rank/worker)."""
    import pandas as pd

    bases = [raw.base_time_ns for raw in raws]
    aligned = all(bases) and len(raws) > 1
    if len(raws) > 1 and not all(bases):
        notes.append("some trace files have no baseTimeNanoseconds: ranks' clocks are not aligned")
    lowest = min(bases) if aligned else 0
    columns: dict[str, list] = {key: [] for key in ("name", "category", "ph", "pid", "tid", "shapes", "kind")}
    numbers: dict[str, list[np.ndarray]] = {key: [] for key in ("start_us", "dur_us", "rank", "correlation", "source")}
    sources = []
    for index, (raw, rank) in enumerate(zip(raws, ranks)):
        columns["name"].extend(raw.name)
        columns["category"].extend(raw.category)
        columns["ph"].extend(raw.ph)
        columns["pid"].extend(raw.pid)
        columns["tid"].extend(raw.tid)
        columns["shapes"].extend(raw.shapes)
        columns["kind"].append(_kinds(raw))
        offset = (raw.base_time_ns - lowest) / 1000.0 if aligned else 0.0
        numbers["start_us"].append(raw.ts + offset)
        numbers["dur_us"].append(np.maximum(raw.dur, 0.0))
        numbers["rank"].append(np.full(len(raw), rank, dtype=np.int64))
        numbers["correlation"].append(raw.correlation)
        numbers["source"].append(np.full(len(raw), index, dtype=np.int64))
        sources.append(raw.path.name)
    kind = np.concatenate(columns.pop("kind")) if raws else np.zeros(0, dtype=object)
    num = {key: np.concatenate(parts) if parts else np.zeros(0) for key, parts in numbers.items()}
    rank = num["rank"].astype(np.int64)
    start, dur = num["start_us"].astype(np.float64), num["dur_us"].astype(np.float64)
    order = np.lexsort((start, rank))

    def pick(values) -> np.ndarray:
        array = np.empty(len(values), dtype=object)
        array[:] = values
        return array[order]

    kind = kind[order].astype(object)
    start, dur, rank = start[order], dur[order], rank[order]
    correlation = num["correlation"].astype(np.int64)[order]
    is_gpu = np.isin(kind, GPU_KINDS)
    names = pick(columns["name"])
    range_id = attribute(
        rank,
        start,
        start + dur,
        is_range=kind == STEP,
        cpu_side=~is_gpu & (kind != INSTANT),
        gpu_work=np.isin(kind, GPU_WORK),
        correlation=correlation,
    )
    # Step and kernel come from the enclosing range's name; a GPU-timeline step range names itself
    # (other GPU annotations, such as nccl's, stay unattributed).
    parsed = {name: parse_step_name(name) for name in set(names[(kind == STEP) | (kind == GPU_ANNOTATION)])}
    gpu_step_range = (kind == GPU_ANNOTATION) & np.array([parsed.get(name) is not None for name in names], dtype=bool)
    owner = np.where(gpu_step_range, np.arange(len(kind)), range_id)
    step = np.full(len(kind), None, dtype=object)
    kernel = np.full(len(kind), None, dtype=object)
    has_owner = owner >= 0
    owner_names = names[owner[has_owner]]
    step[has_owner] = [parsed[name][0] for name in owner_names]
    kernel[has_owner] = [parsed[name][1] for name in owner_names]

    correlation_column = pd.array(np.where(correlation >= 0, correlation, 0), dtype="Int64")
    correlation_column[correlation < 0] = pd.NA
    source_codes = num["source"].astype(np.int64)[order]
    # Object arrays of strings: pandas 3 stores them as its "str" dtype, pandas 2 as object.
    return pd.DataFrame(
        {
            "name": names,
            "category": pick(columns["category"]),
            "ph": pick(columns["ph"]),
            "start_us": start,
            "dur_us": dur,
            "pid": pick(columns["pid"]),
            "tid": pick(columns["tid"]),
            "rank": rank,
            "is_gpu": is_gpu,
            "step": step,
            "kernel": kernel,
            "shapes": pick(columns["shapes"]),
            "kind": kind,
            "correlation": correlation_column,
            "range_id": range_id,
            "source": pd.Categorical.from_codes(source_codes, categories=sources),
        },
        columns=EVENT_COLUMNS,
    )


def load_trace(path_or_dir: str | Path) -> Trace:
    """Load a Chrome trace (``.json`` / ``.json.gz``), a run folder (every rank's file), or a folder
    holding exactly one run, into a `Trace`.

    >>> trace = md.load_trace(session.folder)   # or a file, or the out_dir of a single run
    >>> trace.per_step(); trace.op_table(gpu=True, top=20); trace.warnings

    Raises ValueError naming the file for anything that is not Chrome trace JSON (truncated, corrupt,
    not JSON at all), and for a folder holding several runs (listing them).
    """
    files, folder = _resolve(Path(path_or_dir))
    notes: list[str] = []
    raws = []
    for file in files:
        raw = parse_trace_file(file)
        notes.extend(raw.warnings)
        raws.append(raw)
    ranks = _assign_ranks(raws, notes)
    events = build_events(raws, ranks, notes)
    # Relative times: absolute Kineto timestamps (~5e12 us) print as 5.275734e+12 and hide the
    # differences that matter; the shift is one subtraction, exact at these magnitudes.
    origin = float(events["start_us"].min()) if len(events) else 0.0
    events["start_us"] = events["start_us"] - origin
    meta = _read_meta(folder, notes)
    if len(events) and not (events["kind"] == STEP).any():
        notes.append(
            f"no {STEP_RANGE_PREFIX}<step>[<kernel>] ranges: events are not attributed to steps "
            "(profile an mla_debug layer run, or a run of this version of mla_debug)"
        )
    return Trace(events, meta, notes, files, origin_us=origin)
