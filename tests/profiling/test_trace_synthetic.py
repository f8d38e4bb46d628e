"""load_trace / Trace / compare_traces on hand-written Chrome traces with exact expected numbers."""

from __future__ import annotations

import gzip
import json

import pandas as pd
import pytest
from profiling_helpers import cpu_events, gpu_events, write_trace

import mla_debug as md
from mla_debug.profiling import TraceWarning


@pytest.fixture
def gpu_trace(tmp_path) -> md.Trace:
    return md.load_trace(write_trace(tmp_path / "tool-export.json", gpu_events()))


def by_name(table, column: str = "name") -> dict:
    return {row[column]: row for row in table.to_dict("records")}


def test_begin_end_pairs_become_complete_events(gpu_trace):
    ev = gpu_trace.events
    assert set(ev["ph"]) == {"X"}
    mm = ev[ev["name"] == "aten::mm"].iloc[0]
    # Times count from the trace's first event (the q_b_proj range at ts 100).
    assert gpu_trace.origin_us == 100.0
    assert (mm["start_us"], mm["dur_us"], mm["kind"]) == (10.0, 40.0, "cpu_op")
    assert pd.isna(mm["category"])  # a missing category is tolerated
    launches = ev[ev["name"] == "cudaLaunchKernel"]
    assert list(launches["kind"]) == ["runtime"] * 3
    assert list(launches["correlation"]) == [1, 2, 3]
    assert gpu_trace.has_gpu
    assert gpu_trace.warnings == []


def test_kernels_follow_their_launch_then_overlap(gpu_trace):
    ev = gpu_trace.events
    step = dict(zip(ev["name"], ev["step"]))
    assert step["gemm_bpreshuffle"] == "q_b_proj"
    # Runs mostly during attention, but was launched inside q_b_proj: the correlation id decides.
    assert step["add_kernel"] == "q_b_proj"
    assert step["bmm_kernel"] == "attention"
    assert step["orphan_kernel"] == "attention"  # no correlation: the range it overlaps
    assert step["memcpy_HtoD"] == "q_b_proj"
    assert pd.isna(step["late_kernel"])  # outside every step: missing
    assert step["aten::add"] == "q_b_proj" and step["aten::bmm"] == "attention"
    kernel = dict(zip(ev["name"], ev["kernel"]))
    assert kernel["add_kernel"] == "aiter-bpreshuffle"
    # orphan_kernel has neither category nor args: the "GPU 0" process name marks it as a kernel.
    assert ev.loc[ev["name"] == "orphan_kernel", "kind"].item() == "kernel"
    assert ev.loc[ev["name"] == "memcpy_HtoD", "kind"].item() == "memcpy"
    nccl = ev[ev["name"] == "nccl:_all_gather_base"].iloc[0]
    assert nccl["kind"] == "gpu_annotation" and nccl["is_gpu"] and pd.isna(nccl["step"])


def test_per_step_exact(gpu_trace):
    table = gpu_trace.per_step()
    assert list(table.columns) == ["step", "kernel", "wall_us", "gpu_us", "cpu_ops", "gpu_kernels", "share", "calls"]
    rows = by_name(table, "step")
    assert list(table["step"]) == ["q_b_proj", "attention"]
    q, a = rows["q_b_proj"], rows["attention"]
    assert (q["kernel"], q["wall_us"], q["gpu_us"], q["cpu_ops"], q["gpu_kernels"]) == (
        "aiter-bpreshuffle",
        100.0,
        100.0,
        2,
        2,
    )
    assert (a["kernel"], a["wall_us"], a["gpu_us"], a["cpu_ops"], a["gpu_kernels"]) == ("attention", 90.0, 70.0, 1, 2)
    assert q["share"] == pytest.approx(100 / 190) and a["share"] == pytest.approx(90 / 190)


def test_launch_counts_exact(gpu_trace):
    table = gpu_trace.launch_counts()
    assert table.to_dict("records") == [
        {"step": "q_b_proj", "kernel": "aiter-bpreshuffle", "launches": 2, "gpu_kernels": 2, "runtime_launches": 2},
        {"step": "attention", "kernel": "attention", "launches": 2, "gpu_kernels": 2, "runtime_launches": 1},
    ]


def test_gpu_idle_gaps_exact(gpu_trace):
    gaps = gpu_trace.gpu_idle_gaps()
    assert list(gaps["stream"]) == ["7"] * 4  # stream 8 has a single copy: no gap
    assert list(gaps["gap_us"]) == [15.0, 5.0, 10.0, 80.0]
    assert list(gaps["before"]) == ["gemm_bpreshuffle", "add_kernel", "bmm_kernel", "orphan_kernel"]
    assert list(gaps["after"]) == ["add_kernel", "bmm_kernel", "orphan_kernel", "late_kernel"]
    assert list(gaps["start_us"]) == [80.0, 135.0, 170.0, 220.0]  # ts 180, 235, 270, 320 in the file
    assert list(gpu_trace.gpu_idle_gaps(min_us=10)["gap_us"]) == [15.0, 10.0, 80.0]


def test_op_table_exact(gpu_trace):
    cpu = gpu_trace.op_table(gpu=False)
    assert list(cpu["name"]) == ["aten::mm", "aten::bmm", "aten::add"]
    assert list(cpu["total_us"]) == [40.0, 40.0, 30.0]
    assert cpu["share"].sum() == pytest.approx(1.0) and cpu.loc[2, "share"] == pytest.approx(30 / 110)
    gpu = gpu_trace.op_table(gpu=True)
    assert set(gpu["name"]) == {
        "gemm_bpreshuffle",
        "add_kernel",
        "bmm_kernel",
        "orphan_kernel",
        "late_kernel",
        "memcpy_HtoD",
    }
    assert gpu["is_gpu"].all() and gpu["total_us"].sum() == 180.0
    assert list(gpu_trace.op_table(gpu=True, top=2)["name"]) == ["gemm_bpreshuffle", "add_kernel"]
    both = gpu_trace.op_table(step="attention")
    assert by_name(both)["bmm_kernel"]["count"] == 1 and set(both["name"]) == {
        "aten::bmm",
        "bmm_kernel",
        "orphan_kernel",
    }


def test_critical_sequence_exact(gpu_trace):
    seq = gpu_trace.critical_sequence("q_b_proj")
    assert list(seq["name"]) == [
        "aten::mm",
        "cudaLaunchKernel",
        "gemm_bpreshuffle",
        "memcpy_HtoD",
        "aten::add",
        "cudaLaunchKernel",
        "add_kernel",
    ]
    assert list(seq["offset_us"]) == [10.0, 20.0, 30.0, 50.0, 60.0, 70.0, 95.0]
    assert list(seq["dur_us"]) == [40.0, 5.0, 50.0, 10.0, 30.0, 2.0, 40.0]
    with pytest.raises(ValueError, match="not in this trace; its steps: q_b_proj, attention"):
        gpu_trace.critical_sequence("o_proj")
    with pytest.raises(ValueError, match="ran 1 time"):
        gpu_trace.critical_sequence("attention", occurrence=3)


def test_compare_pairs_renamed_kernels_by_order(tmp_path):
    a = md.load_trace(write_trace(tmp_path / "a" / "aiter.json", gpu_events()))
    b = md.load_trace(write_trace(tmp_path / "b" / "cublas.json", gpu_events("sm90_xmma_gemm", scale=0.5)))
    diff = md.compare_traces(a, b)
    assert diff.level == "gpu"
    steps = by_name(diff.per_step, "step")
    assert list(diff.per_step.columns[:7]) == ["step", "a_us", "b_us", "delta_us", "ratio", "a_launches", "b_launches"]
    assert (steps["q_b_proj"]["a_us"], steps["q_b_proj"]["b_us"]) == (100.0, 100.0)  # CPU wall unchanged
    assert steps["attention"]["a_launches"] == 2 and steps["attention"]["b_launches"] == 2
    kernels = diff.per_kernel
    gemm = kernels[(kernels["step"] == "q_b_proj") & (kernels["a_name"] == "gemm_bpreshuffle")].iloc[0]
    assert (gemm["b_name"], gemm["match"], gemm["a_us"], gemm["b_us"], gemm["ratio"]) == (
        "sm90_xmma_gemm",
        "order",
        50.0,
        25.0,
        0.5,
    )
    add = kernels[kernels["a_name"] == "add_kernel"].iloc[0]
    assert (add["b_name"], add["match"], add["delta_us"]) == ("add_kernel", "name", -20.0)
    assert diff.added == ["sm90_xmma_gemm"] and diff.removed == ["gemm_bpreshuffle"]
    text = diff.summary()
    assert "1 by order within a step" in text and "added in B: sm90_xmma_gemm" in text


def test_cpu_only_trace_gpu_methods_are_empty_with_a_warning(tmp_path):
    trace = md.load_trace(write_trace(tmp_path / "cpu.json", cpu_events()))
    assert not trace.has_gpu
    with pytest.warns(TraceWarning, match="no GPU events"):
        assert trace.op_table(gpu=True).empty
    with pytest.warns(TraceWarning, match="no GPU events"):
        assert trace.gpu_idle_gaps().empty
    with pytest.warns(TraceWarning, match="no GPU kernels"):
        assert trace.launch_counts().empty
    assert any("no GPU" in w for w in trace.warnings)
    table = trace.per_step()
    assert list(table["step"]) == ["rope", "o_proj"] and list(table["cpu_ops"]) == [2, 1]
    assert list(table["share"]) == [pytest.approx(50 / 200), pytest.approx(150 / 200)]
    # Two CPU-only traces compare at the op level.
    diff = md.compare_traces(trace, trace)
    assert diff.level == "cpu" and set(diff.per_kernel["match"]) == {"name"}
    assert (diff.per_step["ratio"] == 1.0).all()


def test_nested_ranges_attribute_to_the_innermost(tmp_path):
    events = [
        {"ph": "X", "name": "mla.outer[x]", "ts": 0, "dur": 100, "pid": 1, "tid": 1},
        {"ph": "X", "name": "aten::a", "ts": 5, "dur": 5, "pid": 1, "tid": 1},
        {"ph": "X", "name": "mla.inner[y]", "ts": 20, "dur": 30, "pid": 1, "tid": 1},
        {"ph": "X", "name": "aten::b", "ts": 25, "dur": 5, "pid": 1, "tid": 1},
        {"ph": "X", "name": "aten::c", "ts": 60, "dur": 5, "pid": 1, "tid": 1},
    ]
    ev = md.load_trace(write_trace(tmp_path / "nested.json", events)).events
    assert dict(zip(ev["name"], ev["step"])) == {
        "mla.outer[x]": "outer",
        "aten::a": "outer",
        "mla.inner[y]": "inner",
        "aten::b": "inner",
        "aten::c": "outer",
    }


def test_ranks_from_file_names_and_distributed_info(tmp_path):
    run = tmp_path / "run"
    write_trace(run / "rank0.1.pt.trace.json", cpu_events())
    write_trace(run / "rank1.2.pt.trace.json.gz", cpu_events())
    trace = md.load_trace(run)
    assert trace.ranks == [0, 1] and len(trace.events) == 10
    assert trace.per_step(by_rank=True)["rank"].tolist() == [0, 1, 0, 1]
    other = tmp_path / "other"
    write_trace(other / "worker.json", cpu_events(), header={"distributedInfo": {"rank": 3, "world_size": 4}})
    assert md.load_trace(other).ranks == [3]


def test_folder_of_runs(tmp_path):
    write_trace(tmp_path / "profiles" / "run-a" / "w.pt.trace.json", cpu_events())
    assert md.load_trace(tmp_path / "profiles").paths[0].parent.name == "run-a"  # exactly one run: loaded
    write_trace(tmp_path / "profiles" / "run-b" / "w.pt.trace.json", cpu_events())
    with pytest.raises(ValueError, match="holds 2 profiled runs; load one of them: run-a, run-b"):
        md.load_trace(tmp_path / "profiles")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="no Chrome trace files"):
        md.load_trace(tmp_path / "empty")
    with pytest.raises(FileNotFoundError):
        md.load_trace(tmp_path / "missing")


def test_meta_is_read_from_the_run_folder(tmp_path):
    run = tmp_path / "run"
    write_trace(run / "w.pt.trace.json", cpu_events())
    (run / "mla_debug_meta.json").write_text(json.dumps({"model": "tiny", "tp": 2}))
    assert md.load_trace(run).meta == {"model": "tiny", "tp": 2}
    assert md.load_trace(run / "w.pt.trace.json").meta["tp"] == 2


def test_truncated_json_names_the_file(tmp_path):
    good = json.dumps({"traceEvents": cpu_events()})
    path = tmp_path / "cut.pt.trace.json"
    path.write_text(good[: len(good) // 2])
    with pytest.raises(ValueError, match=r"cut\.pt\.trace\.json: not valid Chrome trace JSON .*truncated"):
        md.load_trace(path)


def test_truncated_gzip_names_the_file(tmp_path):
    packed = gzip.compress(json.dumps({"traceEvents": cpu_events() * 50}).encode())
    path = tmp_path / "cut.pt.trace.json.gz"
    path.write_bytes(packed[: len(packed) // 2])
    with pytest.raises(ValueError, match=r"cut\.pt\.trace\.json\.gz: not valid Chrome trace JSON"):
        md.load_trace(path)


def test_garbage_and_non_trace_json(tmp_path):
    garbage = tmp_path / "garbage.json"
    garbage.write_bytes(bytes(range(256)) * 8)
    with pytest.raises(ValueError, match=r"garbage\.json: not valid Chrome trace JSON"):
        md.load_trace(garbage)
    other = tmp_path / "config.json"
    other.write_text('{"hidden_size": 7168}')
    with pytest.raises(ValueError, match=r"config\.json: not valid Chrome trace JSON \(a dict without a 'traceEvents'"):
        md.load_trace(other)
    empty_file = tmp_path / "zero.json"
    empty_file.write_text("")
    with pytest.raises(ValueError, match="the file is empty"):
        md.load_trace(empty_file)


def test_empty_trace_loads_with_a_warning(tmp_path):
    trace = md.load_trace(write_trace(tmp_path / "empty.pt.trace.json", []))
    assert trace.events.empty and list(trace.events.columns)[:3] == ["name", "category", "ph"]
    assert not trace.has_gpu and trace.steps == []
    assert any("holds no events" in w for w in trace.warnings)
    with pytest.warns(TraceWarning, match="no mla"):
        assert trace.per_step().empty


def test_array_form_without_closing_bracket(tmp_path):
    # The Chrome trace format allows the array form to stop without its "]" (a killed tracer).
    path = tmp_path / "array.json"
    path.write_text("[" + ",\n".join(json.dumps(e) for e in cpu_events()) + ",\n")
    assert md.load_trace(path).steps == ["rope", "o_proj"]


def test_unbalanced_begin_end(tmp_path):
    events = [
        {"ph": "E", "ts": 1, "pid": 1, "tid": 1},
        {"ph": "B", "name": "mla.rope[rope]", "ts": 10, "pid": 1, "tid": 1},
        {"ph": "X", "name": "aten::mul", "ts": 12, "dur": 30, "pid": 1, "tid": 1},
    ]
    trace = md.load_trace(write_trace(tmp_path / "open.json", events))
    rope = trace.events[trace.events["name"] == "mla.rope[rope]"].iloc[0]
    assert rope["dur_us"] == 32.0  # closed at the last timestamp seen (12 + 30)
    assert any("without a matching 'B'" in w for w in trace.warnings)
    assert any("without an 'E'" in w for w in trace.warnings)


def test_times_count_from_the_first_event_at_kineto_magnitudes(tmp_path):
    """Kineto writes timestamps since boot (~5e12 us); tables show them from the trace's start."""
    base = 5_275_734_123_456.789
    events = [
        {
            "ph": "X",
            "name": "mla.q_b_proj[cublas]",
            "cat": "user_annotation",
            "ts": base,
            "dur": 50.5,
            "pid": 1,
            "tid": 1,
        },
        {"ph": "X", "name": "aten::mm", "cat": "cpu_op", "ts": base + 12.25, "dur": 20.0, "pid": 1, "tid": 1},
    ]
    trace = md.load_trace(write_trace(tmp_path / "kineto.json", events))
    assert trace.origin_us == base
    assert list(trace.events["start_us"]) == [0.0, 12.25]
    assert "e+12" not in trace.events.to_string()
    assert list(trace.events["start_us"] + trace.origin_us) == [base, base + 12.25]
