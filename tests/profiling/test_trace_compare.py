"""compare_traces beyond two mla_debug runs: traces recorded by plain torch.profiler (as serving engines
write them), runs that are not like for like, and timings that hold one-time or launch-bound work."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from profiling_helpers import cpu_events, gpu_events, write_trace

import mla_debug as md
from mla_debug.cli import main
from mla_debug.profiling import META_NAME

SAMPLES = Path(md.__file__).resolve().parents[1] / "profiles" / "samples"


def engine_trace(folder: Path, softmax: bool) -> Path:
    """What an engine's profiler writes: torch.profiler over plain torch ops, tensorboard_trace_handler
    output, no mla.<step> ranges and no mla_debug metadata."""
    gen = torch.Generator().manual_seed(0)
    x, w = torch.randn(32, 64, generator=gen), torch.randn(64, 64, generator=gen)
    handler = torch.profiler.tensorboard_trace_handler(str(folder), worker_name="engine", use_gzip=True)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], on_trace_ready=handler):
        with torch.profiler.record_function("forward"):  # engines annotate too, just not with mla.<step>
            y = torch.relu(x @ w) if not softmax else torch.softmax(x @ w @ w, dim=-1)
            y.sum()
    return folder


@pytest.fixture(scope="module")
def engine_runs(tmp_path_factory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("engine")
    return engine_trace(root / "relu", softmax=False), engine_trace(root / "softmax", softmax=True)


def test_engine_traces_are_compared_op_by_op_over_the_whole_trace(engine_runs):
    a_dir, b_dir = engine_runs
    assert not (a_dir / META_NAME).exists()
    a, b = md.load_trace(a_dir), md.load_trace(b_dir)
    diff = md.compare_traces(a, b)
    assert (diff.scope, diff.level) == ("trace", "cpu")
    assert diff.per_step.empty
    kernels = diff.per_kernel
    assert kernels["step"].isna().all()
    # Every CPU op of each trace, counted and timed exactly as its events say.
    for side, trace in (("a", a), ("b", b)):
        ops = trace.events[trace.events["kind"] == "cpu_op"]
        name_col = f"{side}_name"
        for name, group in ops.groupby("name"):
            row = kernels[kernels[name_col] == name].iloc[0]
            assert row[f"{side}_count"] == len(group)
            # Summed in another order than Series.sum: equal up to rounding of the last bits.
            assert row[f"{side}_us"] == pytest.approx(group["dur_us"].sum(), rel=1e-12)
    mm = kernels[kernels["a_name"] == "aten::mm"].iloc[0]
    assert (mm["match"], mm["a_count"], mm["b_count"]) == ("name", 1, 2)
    assert "aten::softmax" in diff.added and "aten::relu" in diff.removed
    assert set(kernels.loc[kernels["match"] == "only_b", "b_name"]) == set(diff.added)
    assert not (kernels["match"] == "order").any()  # leftovers of a whole trace are unrelated
    assert diff.warnings == [
        "neither trace has run metadata (mla_debug_meta.json beside the trace, written by md.profile): cannot "
        "check that the runs are comparable (model, platform, tp, mode, tokens, device, executor, scenario)",
        "no mla.<step>[<kernel>] ranges in A and B (not recorded around an mla_debug layer run): per-step "
        "times are not compared; kernels (or ops) are compared by name over the whole trace",
    ]  # the loaders' own "no mla.<step> ranges" notes are folded into the second
    summary = diff.summary()
    assert "whole trace" in summary and "added in B: " in summary


def test_cli_compares_engine_traces_and_prints_the_warnings(engine_runs, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    a_dir, b_dir = engine_runs
    assert main(["traces", "compare", str(a_dir), str(b_dir)]) == 0
    out = capsys.readouterr().out
    diff = md.compare_traces(a_dir, b_dir)
    for warning in diff.warnings:
        assert f"warning: {warning}" in out
    assert "per step" not in out  # no empty step table
    shown = min(15, len(diff.per_kernel))
    assert f"CPU ops, whole trace: the {shown} largest changes of {len(diff.per_kernel)} (us)" in out
    assert f"added in B ({len(diff.added)}):" in out and len(diff.added) > 0
    assert "total CPU ops time" not in out  # nested ops would count twice


def test_gpu_kernels_of_traces_without_steps_are_totalled(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")

    def without_steps(events):
        # The GPU side and the process names: an engine's kernels, with no mla.<step> range anywhere.
        return [e for e in events if e.get("ph") in ("X", "M")]

    a = write_trace(tmp_path / "a" / "engine.json", without_steps(gpu_events()))
    b = write_trace(tmp_path / "b" / "engine.json", without_steps(gpu_events("sm90_xmma_gemm", scale=0.5)))
    diff = md.compare_traces(a, b)
    assert (diff.scope, diff.level) == ("trace", "gpu") and len(diff.warnings) == 2  # no metadata, no steps
    kernels = diff.per_kernel.set_index("a_name")
    assert (kernels.loc["add_kernel", "a_us"], kernels.loc["add_kernel", "b_us"]) == (40.0, 20.0)
    assert kernels.loc["gemm_bpreshuffle", "match"] == "only_a"  # renamed kernels are not paired by order
    assert main(["traces", "compare", str(a), str(b)]) == 0
    out = capsys.readouterr().out
    a_total, b_total = diff.per_kernel["a_us"].sum(), diff.per_kernel["b_us"].sum()
    assert f"total GPU kernels time: A {a_total:,.1f} us in 5, B {b_total:,.1f} us in 5 (B/A 0.50x)" in out


def test_a_run_of_ours_against_an_engine_trace(engine_runs, tmp_path):
    ours = md.load_trace(write_trace(tmp_path / "ours" / "x.json", cpu_events()))
    diff = md.compare_traces(ours, engine_runs[0])
    assert diff.scope == "trace"
    assert any("no mla.<step>[<kernel>] ranges in B " in w for w in diff.warnings)
    assert any(w.startswith("neither trace has run metadata") for w in diff.warnings)


def run_folder(tmp_path: Path, name: str, meta: dict, events=None) -> Path:
    folder = tmp_path / name
    write_trace(folder / "run.pt.trace.json", events or gpu_events())
    (folder / META_NAME).write_text(json.dumps(meta))
    return folder


BASE = dict(model="deepseek-v3", platform="mi355x", scenario="vllm-pr51692", tp=4, mode="decode", tokens=16)


def test_runs_of_different_work_are_flagged_field_by_field(tmp_path):
    a = run_folder(tmp_path, "a", {**BASE, "device": "AMD Instinct MI355X"})
    b = run_folder(tmp_path, "b", {**BASE, "model": "kimi-k2", "tokens": 64, "device": "NVIDIA H200"})
    diff = md.compare_traces(a, b)
    assert diff.differences == {
        "model": ("deepseek-v3", "kimi-k2"),
        "tokens": (16, 64),
        "device": ("AMD Instinct MI355X", "NVIDIA H200"),
    }
    (warning,) = [w for w in diff.warnings if "like for like" in w]
    assert warning == (
        "the runs are not like for like: they differ in model (A: deepseek-v3, B: kimi-k2); tokens (A: 16, B: 64); "
        "device (A: AMD Instinct MI355X, B: NVIDIA H200); their times compare different work"
    )


def test_a_different_scenario_alone_is_what_is_compared_not_a_warning(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    a = run_folder(tmp_path, "a", BASE)
    b = run_folder(tmp_path, "b", {**BASE, "scenario": "vllm-pr56433"})
    diff = md.compare_traces(a, b)
    assert diff.differences == {"scenario": ("vllm-pr51692", "vllm-pr56433")}
    assert diff.warnings == [] and diff.scope == "steps"
    assert main(["traces", "compare", str(a), str(b)]) == 0
    out = capsys.readouterr().out
    assert "the runs differ in scenario (A: vllm-pr51692, B: vllm-pr56433)" in out and "warning:" not in out


def test_loader_warnings_reach_the_diff_and_the_terminal(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    a = run_folder(tmp_path, "a", BASE)
    broken = gpu_events() + [{"ph": "E", "ts": 500, "pid": 1, "tid": 1}, "not an event"]
    b = run_folder(tmp_path, "b", BASE, events=broken)
    diff = md.compare_traces(a, b)
    assert diff.warnings == [
        "B: run.pt.trace.json: skipped 1 malformed event(s) (not an object, or a non-numeric ts)",
        "B: run.pt.trace.json: ignored 1 'E' event(s) without a matching 'B'",
    ]
    assert main(["traces", "compare", str(a), str(b)]) == 0
    out = capsys.readouterr().out
    for warning in diff.warnings:
        assert f"warning: {warning}" in out


def test_one_time_work_in_a_trace_is_called_out(tmp_path):
    a = run_folder(tmp_path, "a", BASE)
    compile_events = [
        {"ph": "X", "cat": "user_annotation", "name": "_compile.compile_inner (dynamo_timed)", "ts": 102, "dur": 5},
        {"ph": "X", "cat": "cuda_driver", "name": "cuModuleLoadData", "ts": 103, "dur": 1, "pid": 1, "tid": 1},
    ]
    b = run_folder(tmp_path, "b", BASE, events=gpu_events() + compile_events)
    diff = md.compare_traces(a, b)
    assert diff.warnings == [
        "B contains one-time work (2 compilation, autotuning or code-loading events, e.g. "
        "_compile.compile_inner (dynamo_timed), cuModuleLoadData): its times include it; profile after a warm-up run"
    ]
    assert md.compare_traces(a, a).warnings == []


def test_the_fused_sample_is_flagged_as_launch_bound(tmp_path):
    if not (SAMPLES / "v4flash-fused").is_dir():
        pytest.skip("the GPU sample traces are not in this checkout")
    # Copies, so nothing is written beside the committed samples.
    unfused = shutil.copytree(SAMPLES / "v4flash-unfused", tmp_path / "unfused")
    fused = shutil.copytree(SAMPLES / "v4flash-fused", tmp_path / "fused")
    diff = md.compare_traces(unfused, fused)
    assert diff.differences == {"scenario": ("reference-unfused-norm-quant", "reference-fused-norm-quant")}
    q_norm = diff.per_step.set_index("step").loc["q_norm"]
    assert (q_norm["a_launches"], q_norm["b_launches"]) == (9, 97)
    assert (round(q_norm["b_us"], 1), round(q_norm["b_gpu_us"], 1)) == (2818.7, 130.7)
    assert diff.warnings == [
        "q_norm: B launches 97 GPU kernels against 9: the runs ran different code in this step (a reference "
        "implementation, a fallback, or a first call that compiles or autotunes); B's 2,818.7 us of step time is "
        "mostly the CPU launching them (the GPU was busy 130.7 us): compare GPU time (a_gpu_us, b_gpu_us)"
    ]
