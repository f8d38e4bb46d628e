"""Hypothesis: step attribution against a brute-force oracle; B/E pairs load like the same X events."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import mla_debug as md
from mla_debug.profiling.attribution import attribute


@st.composite
def timelines(draw):
    """Disjoint step ranges on one rank, CPU ops anywhere, kernels with and without a launch."""
    ranges, t = [], 0
    for _ in range(draw(st.integers(1, 6))):
        t += draw(st.integers(1, 20))  # gaps of at least 1: ranges never touch
        length = draw(st.integers(0, 50))
        ranges.append((t, t + length))
        t += length
    horizon = t + 20
    ops = [(s, s + draw(st.integers(0, 10))) for s in draw(st.lists(st.integers(0, horizon), min_size=1, max_size=15))]
    kernels = [
        (s, s + draw(st.integers(0, 60)), draw(st.sampled_from([None, *range(len(ops))])))
        for s in draw(st.lists(st.integers(0, horizon), max_size=15))
    ]
    return ranges, ops, kernels


def oracle_cpu(start: int, ranges) -> int:
    hits = [i for i, (rs, re) in enumerate(ranges) if rs <= start <= re]
    return hits[-1] if hits else -1


def oracle_gpu(start: int, end: int, ranges) -> int:
    best, best_overlap = -1, None
    for i, (rs, re) in enumerate(ranges):
        overlap = min(end, re) - max(start, rs)
        touches = overlap > 0 or (overlap == 0 and rs <= start <= re)
        if touches and (best_overlap is None or overlap > best_overlap):
            best, best_overlap = i, overlap
    return best


@settings(max_examples=200, deadline=None)
@given(timelines())
def test_attribution_matches_brute_force(case):
    ranges, ops, kernels = case
    # Rows: ranges, then CPU ops (op i carries correlation i: it "launched" kernels that name it),
    # then kernels. Rows need not be sorted: attribute sorts ranges itself.
    starts = [rs for rs, _ in ranges] + [s for s, _ in ops] + [s for s, _, _ in kernels]
    ends = [re for _, re in ranges] + [e for _, e in ops] + [e for _, e, _ in kernels]
    n_r, n_o, n_k = len(ranges), len(ops), len(kernels)
    is_range = np.array([True] * n_r + [False] * (n_o + n_k))
    gpu = np.array([False] * (n_r + n_o) + [True] * n_k)
    correlation = np.array(
        [-1] * n_r + list(range(n_o)) + [(-1 if c is None else c) for _, _, c in kernels], dtype=np.int64
    )
    got = attribute(
        np.zeros(n_r + n_o + n_k, dtype=np.int64),
        np.array(starts, dtype=float),
        np.array(ends, dtype=float),
        is_range,
        ~gpu,
        gpu,
        correlation,
    )
    assert list(got[:n_r]) == list(range(n_r))
    op_ranges = [oracle_cpu(s, ranges) for s, _ in ops]
    assert list(got[n_r : n_r + n_o]) == op_ranges
    for k, (s, e, launched_by) in enumerate(kernels):
        expected = op_ranges[launched_by] if launched_by is not None else oracle_gpu(s, e, ranges)
        assert got[n_r + n_o + k] == expected, (s, e, launched_by)


@settings(max_examples=50, deadline=None)
@given(timelines())
def test_begin_end_pairs_load_like_complete_events(case):
    ranges, ops, _ = case
    slices = [(f"mla.s{i}[k]", rs, re) for i, (rs, re) in enumerate(ranges) if re > rs]
    # B/E pairs must nest on one thread: keep non-empty ops inside a range, clipped to it, that do
    # not overlap each other.
    last_end = -1
    for j, (s, e) in enumerate(sorted(ops)):
        r = oracle_cpu(s, ranges)
        if r < 0:
            continue
        e = min(e, ranges[r][1])
        if e > s >= last_end:
            slices.append((f"op{j}", s, e))
            last_end = e
    complete = [{"ph": "X", "name": n, "ts": s, "dur": e - s, "pid": 1, "tid": 1} for n, s, e in slices]
    marks = []
    for order, (n, s, e) in enumerate(slices):
        # At equal times: ends before begins, and an outer slice begins before (ends after) its ops.
        marks.append((s, 1, 0 if n.startswith("mla.") else 1, order, {"ph": "B", "name": n, "ts": s}))
        marks.append((e, 0, 1 if n.startswith("mla.") else 0, -order, {"ph": "E", "ts": e}))
    begin_end = [{**m[-1], "pid": 1, "tid": 1} for m in sorted(marks, key=lambda m: m[:4])]
    with tempfile.TemporaryDirectory() as tmp:
        tables = []
        for name, events in (("x.json", complete), ("be.json", begin_end)):
            path = Path(tmp) / name
            path.write_text(json.dumps({"traceEvents": events}))
            ev = md.load_trace(path).events
            tables.append(sorted(zip(ev["name"], ev["start_us"], ev["dur_us"], ev["step"].fillna(""))))
    assert tables[0] == tables[1]
