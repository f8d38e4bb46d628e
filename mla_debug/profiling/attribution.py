"""Which `mla.<step>[...]` range each event belongs to (numpy only, no per-event Python loop).

CPU-side events belong to the innermost step range of the same rank that contains their start. GPU
work runs asynchronously - a kernel launched in one step may run while the CPU is already in the next -
so a kernel first follows its correlation id to the CPU call that launched it (cudaLaunchKernel and
friends) and takes that call's range; only kernels without a usable correlation fall back to the step
range they overlap most in time.
"""

from __future__ import annotations

import numpy as np


def _parents(starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """For ranges sorted by start: the index of the range enclosing each one, or -1 (top level)."""
    parent = np.full(len(starts), -1, dtype=np.int64)
    stack: list[int] = []
    # A Python loop over ranges, not events: a layer has ~10 steps per forward, so this stays small.
    for i, (start, end) in enumerate(zip(starts.tolist(), ends.tolist())):
        while stack and ends[stack[-1]] < end:
            stack.pop()
        if stack and starts[stack[-1]] <= start:
            parent[i] = stack[-1]
        stack.append(i)
    return parent


def _containing(points: np.ndarray, starts: np.ndarray, ends: np.ndarray, parent: np.ndarray) -> np.ndarray:
    """Index of the innermost range (sorted by start) whose [start, end] holds each point, or -1."""
    pos = np.searchsorted(starts, points, side="right") - 1
    # The last range starting before the point; climb to its enclosing ranges while it ended too early.
    # Disjoint ranges (the usual case) never climb.
    while True:
        valid = pos >= 0
        outside = np.zeros(len(pos), dtype=bool)
        outside[valid] = points[valid] > ends[pos[valid]]
        if not outside.any():
            return pos
        pos[outside] = parent[pos[outside]]


def _most_overlapping(starts_ev: np.ndarray, ends_ev: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """For each [start, end] interval: the index of the disjoint sorted range it overlaps most, or -1."""
    n = len(starts_ev)
    best = np.full(n, -1, dtype=np.int64)
    if n == 0 or len(starts) == 0:
        return best
    first = np.searchsorted(ends, starts_ev, side="left")  # first range ending at or after the start
    best_overlap = np.full(n, -np.inf)
    # Kernels are short next to a step, so they touch one or two ranges; spanning more is rare and is
    # settled by the loop below, one extra candidate per iteration, only for the intervals that need it.
    offset = 0
    pending = np.ones(n, dtype=bool)
    while pending.any():
        idx = np.flatnonzero(pending)
        cand = first[idx] + offset
        inside = cand < len(starts)
        idx, cand = idx[inside], cand[inside]
        overlap = np.minimum(ends_ev[idx], ends[cand]) - np.maximum(starts_ev[idx], starts[cand])
        # A zero-length kernel at a range's edge overlaps by 0: it counts when its start is inside.
        touches = (overlap > 0) | ((overlap == 0) & (starts[cand] <= starts_ev[idx]) & (starts_ev[idx] <= ends[cand]))
        better = touches & (overlap > best_overlap[idx])
        best[idx[better]] = cand[better]
        best_overlap[idx[better]] = overlap[better]
        pending[:] = False
        more = cand + 1 < len(starts)
        pending[idx[more]] = starts[cand[more] + 1] < ends_ev[idx[more]]
        offset += 1
    return best


def attribute(
    rank: np.ndarray,
    start: np.ndarray,
    end: np.ndarray,
    is_range: np.ndarray,
    cpu_side: np.ndarray,
    gpu_work: np.ndarray,
    correlation: np.ndarray,
) -> np.ndarray:
    """The row index of each event's enclosing step range (a range's own index for a range), else -1.

    rank/start/end: per event; is_range marks the step ranges (CPU side); cpu_side marks events
    attributed by time containment; gpu_work marks GPU kernels/copies (attributed through their
    correlation id to a CPU event, else by time overlap); correlation is -1 when absent.
    """
    n = len(rank)
    range_id = np.full(n, -1, dtype=np.int64)
    ranges_all = np.flatnonzero(is_range)
    range_id[ranges_all] = ranges_all
    for r in np.unique(rank):
        on_rank = rank == r
        ranges = ranges_all[rank[ranges_all] == r]
        ranges = ranges[np.argsort(start[ranges], kind="stable")]
        r_start, r_end = start[ranges], end[ranges]
        parent = _parents(r_start, r_end)

        cpu = np.flatnonzero(on_rank & cpu_side & ~is_range)
        if len(ranges) and len(cpu):
            pos = _containing(start[cpu], r_start, r_end, parent)
            hit = pos >= 0
            range_id[cpu[hit]] = ranges[pos[hit]]

        gpu = np.flatnonzero(on_rank & gpu_work)
        if not len(gpu) or not len(ranges):
            continue
        # Correlation: CPU events of this rank that carry an id (the launch calls) -> their range.
        launch = np.flatnonzero(on_rank & ~gpu_work & (correlation >= 0))
        resolved = np.zeros(len(gpu), dtype=bool)
        if len(launch):
            keys = correlation[launch]
            order = np.argsort(keys, kind="stable")
            keys, launch = keys[order], launch[order]
            wanted = correlation[gpu]
            slot = np.searchsorted(keys, wanted)
            slot_ok = slot < len(keys)
            found = np.zeros(len(gpu), dtype=bool)
            found[slot_ok] = (keys[slot[slot_ok]] == wanted[slot_ok]) & (wanted[slot_ok] >= 0)
            # The launch call's range is authoritative, even "outside every step".
            range_id[gpu[found]] = range_id[launch[slot[found]]]
            resolved = found
        rest = gpu[~resolved]
        if len(rest):
            top = parent < 0  # overlap is measured against top-level (disjoint) ranges
            t_start, t_end, t_rows = r_start[top], r_end[top], ranges[top]
            best = _most_overlapping(start[rest], end[rest], t_start, t_end)
            hit = best >= 0
            range_id[rest[hit]] = t_rows[best[hit]]
    return range_id
