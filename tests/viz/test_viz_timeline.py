"""Timelines, per-step bars and trace tables: rows, colours, nesting, downsampling and highlights,
on hand-written events with known numbers and on real profiled tiny runs."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from types import SimpleNamespace

import pandas as pd
import pytest
import torch

import mla_debug as md
from mla_debug.viz import (
    kernel_table_styler,
    short_name,
    step_bars,
    timeline,
    trace_diff_styler,
    trace_table_styler,
)
from mla_debug.viz.timeline import (
    DEPTH_SHRINK,
    NO_STEP,
    NO_STEP_COLOUR,
    ROW_HEIGHT,
    depth_colour,
    nesting_depths,
    step_colours,
)
from mla_debug.viz.trace_tables import CHANGED_CELL, FASTER_ROW, SLOWER_ROW


@dataclass
class TraceLike:
    """What the timeline reads of a Trace: the events table and the run's metadata."""

    events: pd.DataFrame
    meta: dict = field(default_factory=dict)
    has_gpu: bool = False


def event(name, start, dur, rank, pid, tid, step=None, is_gpu=False, kernel=None, shapes=None, ph="X", cat="cpu_op"):
    return dict(
        name=name,
        category=cat,
        ph=ph,
        start_us=float(start),
        dur_us=float(dur),
        pid=pid,
        tid=tid,
        rank=rank,
        is_gpu=is_gpu,
        step=step,
        kernel=kernel,
        shapes=shapes,
    )


def two_rank_trace() -> TraceLike:
    """Two ranks, each with a CPU thread and a GPU stream; times in us.

    rank 0 CPU 100: mla.q_b_proj 0..100 > aten::mm 10..60 > aten::add 20..30; aten::copy_ 110..130 (no step)
    rank 0 GPU 0 stream 7: gemm<128> 40..90 (q_b_proj)
    rank 1 CPU 200: mla.attention 5..105 > aten::bmm 10..50;  rank 1 GPU 1 stream 7: bmm_kernel 30..45
    plus the profiler's own span and an instant, which are not drawn.
    """
    rows = [
        event("mla.q_b_proj[aiter-bpreshuffle]", 0, 100, 0, "100", "100", "q_b_proj", kernel="aiter-bpreshuffle"),
        event(
            "aten::mm", 10, 50, 0, "100", "100", "q_b_proj", kernel="aiter-bpreshuffle", shapes="[[8, 512], [512, 64]]"
        ),
        event("aten::add", 20, 10, 0, "100", "100", "q_b_proj", kernel="aiter-bpreshuffle"),
        event("aten::copy_", 110, 20, 0, "100", "100"),
        event("gemm<128>", 40, 50, 0, "0", "7", "q_b_proj", is_gpu=True, kernel="aiter-bpreshuffle", cat="kernel"),
        event("mla.attention[attention]", 5, 100, 1, "200", "200", "attention", kernel="attention"),
        event("aten::bmm", 10, 40, 1, "200", "200", "attention", kernel="attention"),
        event("bmm_kernel", 30, 15, 1, "1", "7", "attention", is_gpu=True, kernel="attention", cat="kernel"),
        event("PyTorch Profiler (0)", 0, 200, 0, "Spans", "PyTorch Profiler", cat="Trace"),
        event("marker", 50, 0, 0, "100", "100", ph="i"),
    ]
    return TraceLike(pd.DataFrame(rows), meta={"model": "tiny", "tp": 2, "mode": "decode"}, has_gpu=True)


def bars(fig) -> dict[str, dict]:
    """Every drawn bar by its event name: row, start, duration, height, colour and legend group."""
    out = {}
    for trace in fig.data:
        for i, custom in enumerate(trace.customdata):
            out[custom[0]] = dict(
                row=trace.y[i], base=trace.base[i], dur=trace.x[i], width=trace.width[i], colour=trace.marker.color[i]
            ) | {"step": trace.name, "custom": list(custom)}
    return out


# -- helpers -------------------------------------------------------------------------------------------
def test_nesting_depths_counts_enclosing_events():
    # a 0..100 holds b 10..60, which holds c 20..30; d 60..70 starts when b ends; e after everything.
    starts = [0, 10, 20, 60, 120]
    ends = [100, 60, 30, 70, 130]
    assert nesting_depths(starts, ends) == [0, 1, 2, 1, 0]


def test_short_name_drops_the_signature_of_demangled_kernels():
    name = "void at::native::vectorized_elementwise_kernel<4, at::native::Mul<float> >(int, at::native::Mul<float>)"
    assert short_name(name) == "at::native::vectorized_elementwise_kernel<4, at::native::Mul<float> >"
    assert short_name(name, width=20) == "at::native::vectori\u2026"
    assert short_name("Memcpy HtoD (Pageable -> Device)") == "Memcpy HtoD (Pageable -> Device)"
    assert short_name("aten::mm") == "aten::mm"


# -- timeline on hand-written events -------------------------------------------------------------------
def test_timeline_rows_per_rank_and_stream_gpu_above_cpu():
    fig = timeline(two_rank_trace())
    assert list(fig.layout.yaxis.ticktext) == [
        "rank 0 | GPU 0 stream 7",
        "rank 1 | GPU 1 stream 7",
        "rank 0 | CPU thread 100",
        "rank 1 | CPU thread 200",
    ]
    assert list(fig.layout.yaxis.tickvals) == [0, 1, 2, 3]
    (line,) = fig.layout.shapes  # the dashed line between the GPU streams and the CPU threads
    assert (line.y0, line.y1, line.line.dash) == (1.5, 1.5, "dash")
    drawn = bars(fig)
    # The profiler's own span and the instant are not drawn; everything else is, once.
    assert sorted(drawn) == sorted(
        ["mla.q_b_proj[aiter-bpreshuffle]", "aten::mm", "aten::add", "aten::copy_", "gemm&lt;128&gt;"]
        + ["mla.attention[attention]", "aten::bmm", "bmm_kernel"]
    )
    assert {name: d["row"] for name, d in drawn.items()} == {
        "gemm&lt;128&gt;": 0,
        "bmm_kernel": 1,
        "mla.q_b_proj[aiter-bpreshuffle]": 2,
        "aten::mm": 2,
        "aten::add": 2,
        "aten::copy_": 2,
        "mla.attention[attention]": 3,
        "aten::bmm": 3,
    }
    assert fig.layout.xaxis.title.text == "time since the first event (us)"
    assert fig.layout.title.text == "tiny TP2 decode: 8 events on 4 rows"


def test_timeline_colours_by_step_and_draws_callees_thinner_on_their_callers():
    fig = timeline(two_rank_trace())
    # One legend entry per step in order of first start; events outside every step come first, in grey.
    assert [t.name for t in fig.data] == [NO_STEP, "q_b_proj", "attention"]
    colours = step_colours([NO_STEP, "q_b_proj", "attention"])
    assert colours[NO_STEP] == NO_STEP_COLOUR and colours["q_b_proj"] != colours["attention"]
    drawn = bars(fig)
    depth = {
        "mla.q_b_proj[aiter-bpreshuffle]": 0,
        "aten::mm": 1,
        "aten::add": 2,
        "aten::copy_": 0,
        "gemm&lt;128&gt;": 0,
        "mla.attention[attention]": 0,
        "aten::bmm": 1,
        "bmm_kernel": 0,
    }
    for name, d in drawn.items():
        assert d["colour"] == depth_colour(colours[d["step"]], depth[name]), name
        assert d["width"] == pytest.approx(ROW_HEIGHT * DEPTH_SHRINK ** depth[name]), name
    assert (drawn["aten::add"]["base"], drawn["aten::add"]["dur"]) == (20.0, 10.0)
    assert drawn["aten::copy_"]["step"] == NO_STEP
    # Callers are drawn before their callees, so a callee is never hidden under its caller.
    q_b = next(t for t in fig.data if t.name == "q_b_proj")
    assert [c[0] for c in q_b.customdata][:2] == ["mla.q_b_proj[aiter-bpreshuffle]", "gemm&lt;128&gt;"]


def test_timeline_hover_names_kernel_step_shapes_and_duration():
    custom = bars(timeline(two_rank_trace()))["aten::mm"]["custom"]
    assert custom == [
        "aten::mm",
        "aiter-bpreshuffle",
        "q_b_proj",
        "[[8, 512], [512, 64]]",
        "50.00 us",
        "10.000 us",
        "rank 0 | CPU thread 100",
    ]


def test_timeline_of_some_ranks_and_bad_arguments():
    trace = two_rank_trace()
    fig = timeline(trace, ranks=[1])
    assert list(fig.layout.yaxis.ticktext) == ["rank 1 | GPU 1 stream 7", "rank 1 | CPU thread 200"]
    assert sorted(bars(fig)) == ["aten::bmm", "bmm_kernel", "mla.attention[attention]"]
    with pytest.raises(ValueError, match=re.escape("ranks [2] are not in this trace; it has ranks [0, 1]")):
        timeline(trace, ranks=[2])
    with pytest.raises(ValueError, match="max_events=0 must be a positive integer"):
        timeline(trace, max_events=0)
    with pytest.raises(TypeError, match="expected a Trace"):
        timeline(object())
    with pytest.raises(ValueError, match="no timed events"):
        timeline(TraceLike(trace.events.iloc[-2:]))  # only the profiler span and an instant


def test_downsampling_keeps_the_longest_events():
    trace = two_rank_trace()
    fig = timeline(trace, max_events=3)
    # Durations: copy_ 20 ... the two step ranges (100 each) and aten::mm and gemm (50 each, mm first).
    assert sorted(bars(fig)) == ["aten::mm", "mla.attention[attention]", "mla.q_b_proj[aiter-bpreshuffle]"]
    assert fig.layout.title.text == "tiny TP2 decode: 3 events on 2 rows (the 3 longest of 8)"
    # Time zero stays the first event of the whole selection, not of what is kept.
    assert bars(fig)["mla.attention[attention]"]["base"] == 5.0


def test_timeline_switches_to_ms_for_long_runs():
    events = two_rank_trace().events.copy()
    events["start_us"] *= 1000.0
    events["dur_us"] *= 1000.0
    fig = timeline(TraceLike(events))
    assert fig.layout.xaxis.title.text == "time since the first event (ms)"
    assert bars(fig)["aten::add"]["base"] == pytest.approx(20.0)


# -- real profiled runs --------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def traces(tmp_path_factory) -> dict[str, md.Trace]:
    """tiny at TP2 on an MI355X under vLLM PR #51692, decode and prefill, profiled on this CPU."""
    cfg = md.MLAConfig.preset("tiny")
    ckpt = md.Checkpoint.synthetic(cfg, seed=0)
    hidden = torch.randn(8, cfg.hidden_size, generator=torch.Generator().manual_seed(0)).to(torch.bfloat16)
    positions = torch.arange(8)
    out = tmp_path_factory.mktemp("profiles")
    found = {}
    for mode in ("decode", "prefill"):
        options = dict(tp_size=2, mode=mode, platform="mi355x", scenario="vllm-pr51692")
        _, session = md.profile(md.run_layer, cfg, ckpt, hidden, positions, out_dir=out, **options)
        found[mode] = session.trace()
    return found


def test_timeline_of_a_real_run_draws_every_timed_event_coloured_by_its_step(traces):
    trace = traces["decode"]
    ev = trace.events
    timed = ev[(ev["ph"] == "X") & ~ev["category"].str.lower().isin(["trace", "overhead"])]
    fig = timeline(trace)
    assert sum(len(t.x) for t in fig.data) == len(timed)
    threads = sorted(timed["tid"].unique(), key=int)
    assert list(fig.layout.yaxis.ticktext) == [f"rank 0 | CPU thread {tid}" for tid in threads]
    assert [t.name for t in fig.data] == [NO_STEP, *trace.steps]
    colours = step_colours([NO_STEP, *trace.steps])
    for t in fig.data:
        allowed = {depth_colour(colours[t.name], d) for d in range(9)}
        assert set(t.marker.color) <= allowed, t.name
    # Each step's bars are the events attributed to it.
    per_step = {t.name: len(t.x) for t in fig.data}
    assert per_step == {NO_STEP: int(timed["step"].isna().sum())} | {
        step: int((timed["step"] == step).sum()) for step in trace.steps
    }


def test_timeline_of_a_real_run_with_a_gpu_stream_added(traces):
    """The real decode run with each aten::mm also drawn as a kernel on a GPU stream (what a CUDA trace
    holds): the stream gets a row above the CPU thread, its kernels in their step's colours."""
    ev = traces["decode"].events
    kernels = ev[ev["name"] == "aten::mm"].assign(name="gemm_kernel", pid="0", tid="7", is_gpu=True, category="kernel")
    trace = TraceLike(pd.concat([ev, kernels], ignore_index=True), meta=traces["decode"].meta, has_gpu=True)
    fig = timeline(trace)
    cpu_tid = ev.loc[ev["name"] == "aten::mm", "tid"].iloc[0]
    assert list(fig.layout.yaxis.ticktext)[:2] == ["rank 0 | GPU 0 stream 7", f"rank 0 | CPU thread {cpu_tid}"]
    colours = step_colours([NO_STEP, *traces["decode"].steps])
    on_gpu = [(t.name, c) for t in fig.data for y, c in zip(t.y, t.marker.color) if y == 0]
    assert len(on_gpu) == len(kernels)
    assert all(c == depth_colour(colours[step], 0) for step, c in on_gpu)  # kernels do not nest


def test_downsampling_a_real_run_keeps_its_longest_events(traces):
    trace = traces["decode"]
    ev = trace.events
    timed = ev[(ev["ph"] == "X") & ~ev["category"].str.lower().isin(["trace", "overhead"])]
    fig = timeline(trace, max_events=50)
    scale = 1000.0 if fig.layout.xaxis.title.text.endswith("(ms)") else 1.0
    drawn = sorted(d * scale for t in fig.data for d in t.x)
    assert drawn == pytest.approx(sorted(timed["dur_us"].nlargest(50).tolist()), rel=1e-12)
    assert "(the 50 longest of" in fig.layout.title.text


def test_step_bars_stack_each_runs_step_times(traces):
    fig = step_bars(traces)
    decode, prefill = (traces[m].per_step().set_index("step") for m in ("decode", "prefill"))
    order = list(dict.fromkeys([*decode.index, *prefill.index]))
    assert [t.name for t in fig.data] == order  # absorb_uk etc. only in decode, kv_b_proj only in prefill
    assert fig.layout.barmode == "stack"
    for t in fig.data:
        assert list(t.x) == ["decode", "prefill"]
        expected = [float(f.at[t.name, "wall_us"]) if t.name in f.index else None for f in (decode, prefill)]
        assert list(t.y) == expected
    assert [a.text for a in fig.layout.annotations] == [
        f"{decode['wall_us'].sum():,.0f} us",
        f"{prefill['wall_us'].sum():,.0f} us",
    ]
    assert fig.layout.yaxis.title.text == "wall time (us)"


def test_step_bars_use_gpu_time_when_every_run_has_it():
    table = pd.DataFrame(
        {
            "step": ["q_b_proj", "attention"],
            "kernel": ["cublas-blockwise", "attention"],
            "wall_us": [50.0, 40.0],
            "gpu_us": [12.5, 7.5],
            "cpu_ops": [10, 20],
            "gpu_kernels": [3, 5],
            "share": [0.55, 0.45],
        }
    )
    run = SimpleNamespace(has_gpu=True, per_step=lambda: table)
    fig = step_bars({"h200": run})
    assert [(t.name, list(t.y)) for t in fig.data] == [("q_b_proj", [12.5]), ("attention", [7.5])]
    assert fig.data[0].customdata[0] == ["cublas-blockwise", "62.5%", "3", "h200"]
    assert fig.layout.annotations[0].text == "20 us"
    with pytest.raises(ValueError, match="metric 'bogus_us' is not a per_step"):
        step_bars({"h200": run}, metric="bogus_us")
    with pytest.raises(ValueError, match="non-empty"):
        step_bars({})


# -- styled tables -------------------------------------------------------------------------------------
def _cells_with(styler, props: str) -> set[tuple[int, int]]:
    """(row, col) positions whose CSS rule holds `props`, read from the rendered HTML."""
    found = set()
    for selectors, body in re.findall(r"([^{}]+)\{([^}]*)\}", styler.to_html()):
        if props.split(": ")[1] in body:
            found.update((int(r), int(c)) for r, c in re.findall(r"_row(\d+)_col(\d+)", selectors))
    return found


def _rows_with(styler, props: str) -> set[int]:
    return {row for row, _ in _cells_with(styler, props)}


def test_kernel_table_styler_renders_the_top_ops(traces):
    trace = traces["decode"]
    table = trace.op_table(gpu=False, top=5)
    styler = kernel_table_styler(trace, top=5)
    text = styler.to_html()
    assert "Top 5 CPU ops by total time: 5 rows" in text
    assert list(styler.data.columns) == ["name", "count", "total_us", "mean_us", "min_us", "max_us", "share"]
    assert styler.data["name"].tolist() == table["name"].tolist()
    assert f"{table['total_us'].iloc[0]:,.1f}" in text and f"{table['share'].iloc[0]:.1%}" in text
    assert "linear-gradient" in text  # the share bars


def test_trace_tables_show_times_from_the_trace_start_with_one_decimal(traces):
    trace = traces["decode"]
    events = trace.events
    assert events["start_us"].min() == 0.0 and trace.origin_us > 1e6  # the tracer's clock is far from 0
    columns = ["name", "kind", "start_us", "dur_us", "rank", "step", "correlation"]
    shown = events[events["step"].notna()].nlargest(5, "dur_us")[columns]
    styler = trace_table_styler(shown, "longest ops inside steps")
    text = styler.to_html()
    assert "longest ops inside steps" in text and "e+" not in text
    for value in shown["start_us"].tolist() + shown["dur_us"].tolist():
        assert f">{value:,.1f}<" in text
    assert styler.data["start_us"].tolist() == shown["start_us"].tolist()  # raw numbers kept underneath
    gaps = pd.DataFrame({"start_us": [12345.678], "gap_us": [2.25], "before": ["k" * 300], "after": ["b"]})
    html = trace_table_styler(gaps).to_html()
    assert ">12,345.7<" in html and ">2.2<" in html and "k" * 300 not in html  # long names cut


def test_trace_tables_show_ids_whole_and_other_floats_short():
    frame = pd.DataFrame({"correlation": [123456789.0, float("nan")], "x": [0.000123456, 2.0]})
    text = trace_table_styler(frame).to_html()
    assert ">123456789<" in text and ">0.0001235<" in text and ">-<" in text


def _diff(per_step: pd.DataFrame, per_kernel: pd.DataFrame | None = None) -> SimpleNamespace:
    return SimpleNamespace(per_step=per_step, per_kernel=per_kernel, a_label="run A", b_label="run B")


PER_STEP = pd.DataFrame(
    {
        # same; 2x slower; 4x faster; only in B (appeared); 3x slower but 2 us in a 400 us run
        "step": ["fused_qkv_a", "q_b_proj", "attention", "kv_b_proj", "rope"],
        "a_us": [100.0, 100.0, 200.0, math.nan, 1.0],
        "b_us": [100.0, 200.0, 50.0, 80.0, 3.0],
        "delta_us": [0.0, 100.0, -150.0, math.nan, 2.0],
        "ratio": [1.0, 2.0, 0.25, math.nan, 3.0],
        "a_launches": [1, 1, 1, 0, 1],
        "b_launches": [1, 2, 1, 3, 1],
    }
)


def test_trace_diff_styler_highlights_big_changes_and_changed_launches():
    styler = trace_diff_styler(_diff(PER_STEP))
    assert _rows_with(styler, SLOWER_ROW) == {1, 3}
    assert _rows_with(styler, FASTER_ROW) == {2}
    launch_cols = {PER_STEP.columns.get_loc(c) for c in ("a_launches", "b_launches")}
    assert _cells_with(styler, CHANGED_CELL) == {(r, c) for r in (1, 3) for c in launch_cols}
    text = styler.to_html()
    assert "A = run A (401.0 us), B = run B (433.0 us, 1.08x)" in text
    assert "2 rows markedly slower and 1 markedly faster in B" in text
    assert "2.00x" in text and "-150.0" in text


def test_trace_diff_styler_keeps_the_largest_changes_and_escapes_kernel_names():
    styler = trace_diff_styler(_diff(PER_STEP), top=2)
    assert styler.data["step"].tolist() == ["attention", "q_b_proj"]
    assert _rows_with(styler, FASTER_ROW) == {0} and _rows_with(styler, SLOWER_ROW) == {1}
    assert "the 2 largest changes of 5 rows" in styler.to_html()
    per_kernel = pd.DataFrame(
        {
            "step": ["q_b_proj"],
            "a_name": ["void gemm<float, 128>(float const*, int)"],
            "b_name": ["<script>x</script>"],
            "match": ["order"],
            "a_count": [1],
            "b_count": [1],
            "a_us": [10.0],
            "b_us": [30.0],
            "delta_us": [20.0],
            "ratio": [3.0],
        }
    )
    text = trace_diff_styler(_diff(PER_STEP, per_kernel), table="per_kernel").to_html()
    assert "gemm&lt;float, 128&gt;" in text and "float const*" not in text  # short name, escaped
    assert "<script>" not in text and "&lt;script&gt;" in text
    with pytest.raises(ValueError, match="table='steps' is not 'per_step' or 'per_kernel'"):
        trace_diff_styler(_diff(PER_STEP), table="steps")


def test_trace_diff_styler_renders_a_real_comparison(traces):
    diff = md.compare_traces(traces["decode"], traces["prefill"])
    text = trace_diff_styler(diff).to_html()
    for step in diff.per_step["step"]:
        assert step in text
    assert "per kernel" in trace_diff_styler(diff, table="per_kernel", top=10).to_html()
