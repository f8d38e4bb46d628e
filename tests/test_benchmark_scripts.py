"""The benchmarks on a machine without a GPU: every script starts and documents itself, the harness's
parsers, tables and fp64 check do what the GPU runs rely on, the CPU benchmarks run a tiny case, and
run_gpu_checks.sh runs every GPU benchmark.

The GPU benchmarks only run on a CUDA machine, where a broken import costs a device session to find;
`--help` runs each script's imports and argument parser and nothing else, so CI catches a renamed module
or a script that reads the GPU before parsing its arguments.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import mla_debug as md
from benchmarks import harness

ROOT = Path(__file__).resolve().parents[1]
BENCHMARKS = ROOT / "benchmarks"
SCRIPTS = sorted(p for p in BENCHMARKS.glob("*.py") if p.name not in ("__init__.py", "harness.py"))
# The CPU benchmarks and a case of each small enough for a test; every other script needs a GPU.
CPU_TINY = {
    "capture_explain.py": ["--model", "tiny", "--tp", "1,2", "--tokens", "4"],
    "capture_overhead.py": ["--model", "tiny", "--tokens", "4", "--repeats", "1"],
    "cpu_gemm_emulation.py": ["--shapes", "256x256", "--layer", "256x256", "--m", "4", "--repeats", "1"],
    "cpu_layer_bench.py": ["--model", "tiny", "--tp", "1,2", "--tokens", "4", "--repeats", "1"],
    "entry_binding.py": ["--calls", "100", "--repeats", "1"],
    "scan_overhead.py": ["--model", "tiny", "--layers", "1", "--tokens", "4", "--repeats", "1", "--scan-layers", "4"],
    "trace_bench.py": ["--mb", "0.5", "--repeats", "1"],
    "triage_bisect_bench.py": ["--model", "tiny", "--tp", "1,2", "--tokens", "4", "--modes", "decode"],
}


# Benchmarks that run in the engine tier's environment (.venv-vllm): only their --help runs here.
ENGINE_SCRIPTS = ("capture_engine_overhead.py",)


def run_script(script: Path, *args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    # From another folder, with the checkout on the path as the README's commands put it.
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run(
        [sys.executable, str(script), *args],
        cwd=script.parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_the_script_starts_and_prints_its_usage(script):
    done = run_script(script, "--help", timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "usage:" in done.stdout


def test_every_gpu_benchmark_runs_in_the_gpu_checks_and_the_script_parses():
    runner = (BENCHMARKS / "run_gpu_checks.sh").read_text()
    gpu_scripts = [p.name for p in SCRIPTS if p.name not in CPU_TINY and p.name not in ENGINE_SCRIPTS]
    assert gpu_scripts, "no GPU benchmark found"
    assert [name for name in gpu_scripts if f"benchmarks/{name}" not in runner] == []
    assert [name for name in CPU_TINY if (BENCHMARKS / name).exists()] == list(CPU_TINY)
    done = subprocess.run(["bash", "-n", str(BENCHMARKS / "run_gpu_checks.sh")], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("script", sorted(CPU_TINY), ids=str)
def test_the_cpu_benchmark_runs_a_tiny_case(script, tmp_path):
    out = tmp_path / "result.md"
    done = run_script(BENCHMARKS / script, *CPU_TINY[script], "--out", str(out))
    assert done.returncode == 0, done.stderr[-3000:]
    text = out.read_text()
    assert text.startswith(harness.environment().split(",")[0]) and "|---|" in text
    assert done.stdout.strip().endswith(text.strip().splitlines()[-1])


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without CUDA")
@pytest.mark.parametrize("script", ["gemm_bench.py", "normquant_bench.py", "triage_gpu_bench.py", "gpu_probe.py"])
def test_a_gpu_benchmark_refuses_to_run_without_cuda(script):
    done = run_script(BENCHMARKS / script, timeout=120)
    assert done.returncode == 2 and "needs a CUDA GPU" in done.stderr


# --- the harness -----------------------------------------------------------------------------------


def test_lists_parse_and_name_the_bad_item():
    assert harness.int_list("1,4,16") == [1, 4, 16]
    assert harness.shape_list("7168x2048,24576x1536") == [(7168, 2048), (24576, 1536)]
    assert harness.case_list("7168x2048:64,2112x7168:1") == [(7168, 2048, 64), (2112, 7168, 1)]
    for parse, bad, fragment in (
        (harness.int_list, "1,x", "comma-separated"),
        (harness.int_list, "0,4", "positive"),
        (harness.shape_list, "7168x", "'7168x' is not NxK"),
        (harness.case_list, "7168x2048", "is not NxK:M"),
        (harness.case_list, "7168x2048:m", "is not NxK:M"),
    ):
        with pytest.raises(argparse.ArgumentTypeError, match=fragment):
            parse(bad)


def test_markdown_table_and_the_report_file(tmp_path):
    table = harness.markdown_table(["a", "b"], [["1", 2]])
    assert table.splitlines() == ["| a | b |", "|---|---|", "| 1 | 2 |"]
    path = tmp_path / "deeper" / "r.md"
    harness.write_report(path, "first")
    harness.write_report(path, "second\n")
    assert path.read_text() == "second\n" and sorted(p.name for p in path.parent.iterdir()) == ["r.md"]
    harness.write_report(None, "nowhere")  # no --out: nothing written


def test_environment_line_names_the_versions():
    line = harness.environment()
    assert f"torch {torch.__version__}" in line and "threads" in line and "Python" in line


def test_the_bound_check_passes_the_exact_product_and_stops_a_misread_layout():
    gen = torch.Generator().manual_seed(0)
    qw = md.layouts.quantize_blocks(torch.randn(256, 512, generator=gen) * 0.02)
    qa = md.quantize_groups(torch.randn(5, 512, generator=gen).to(torch.bfloat16), 128)
    exact = (qa.dequantize().double() @ qw.dequantize_plain().double().t()).to(torch.bfloat16)
    assert harness.check_gemm("exact", exact, qa, qw) == ""
    # The scale read in the other byte order: what a layout bug does, off by whole magnitudes.
    wrong = qa.scale.t().contiguous().view(qa.scale.shape)
    misread = md.QuantizedActivation(qa.data, wrong, qa.scale_layout, qa.fmt, qa.group_size, "test")
    with pytest.raises(SystemExit, match="beyond the fp32 bound"):
        harness.check_gemm(
            "misread", (misread.dequantize().double() @ qw.dequantize_plain().double().t()).float(), qa, qw
        )


def test_median_seconds_and_peak_rss():
    calls = []
    assert harness.median_seconds(lambda: calls.append(1), 3) >= 0 and len(calls) == 3
    assert 0 < harness.peak_rss_gb() < 64


# --- the norm + quant benchmark's CPU-safe parts -----------------------------------------------------------


def test_normquant_bench_helpers():
    from benchmarks import normquant_bench as bench

    # V4-Flash, M=4: q 4*1024*2 + k 4*512*2 read; q fp8 4*1024, scales 4*8*4, k 4*512*2 written
    assert bench.fused_bytes(4, 1024, 512) == 8192 + 4096 + 4096 + 128 + 4096
    assert bench.fused_bytes(4, 1024, 512, residual=True) == bench.fused_bytes(4, 1024, 512) + 2 * 8192
    assert bench.speedup(30.0, 10.0) == "3.00x" and bench.speedup(None, 10.0) == "n/a"
    opts = bench.parse_args(["--quick", "--out", "x.md", "--no-compile", "--ms", "1,64"])
    assert opts.quick and opts.no_compile and str(opts.out) == "x.md" and opts.shapes == list(bench.SHAPES)
    assert opts.ms == [1, 64] and set(bench.MS) == {1, 4, 16, 64, 256, 1024, 4096, 16384}


@pytest.mark.parametrize("transpose", [False, True], ids=["row", "col"])
def test_normquant_bench_plain_torch_path_passes_its_own_check(transpose):
    # the plain-torch variant the benchmark times must pass the check it applies on the GPU
    from benchmarks import normquant_bench as bench
    from mla_debug.normquant import norm_then_quant_for_v4

    gen = torch.Generator().manual_seed(8)
    q, k = (torch.randn(6, n, generator=gen).to(torch.bfloat16) for n in (1024, 512))
    q_w, k_w = ((1 + 0.2 * torch.randn(n, generator=gen)).to(torch.bfloat16) for n in (1024, 512))
    ref = norm_then_quant_for_v4(q, q_w, 1e-6, k, k_w, transpose_scale=transpose)
    bench.check_plain("plain", bench.plain_unfused_v4(q, q_w, k, k_w, transpose), ref)
    broken = bench.plain_unfused_v4(q, q_w, k, k_w, not transpose)  # the other byte order must be caught
    with pytest.raises(AssertionError):
        bench.check_plain("plain", broken, ref)
