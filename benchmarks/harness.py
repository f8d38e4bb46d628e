"""What every benchmark shares: timers, the fp64 bound check, case parsing, tables, the run's header line.

- Timing. `median_seconds` on the CPU clock; on a GPU, `EventTimer` (CUDA events around single calls,
  the L2 cache flushed before each) and `time_graph` (CUDA-graph replay: device time without launch
  overhead), and `copy_bandwidth` as the ceiling a memory-bound kernel is compared with.
- Checking. `check_gemm` compares a block-scaled GEMM's output with the fp64 product of the same
  quantized operands, within what fp32 accumulation and Hopper's tensor cores allow, and stops the run
  beyond it: a benchmark never times a wrong result.
- Command lines. `int_list`, `shape_list` and `case_list` parse "1,4,16", "NxK,NxK" and "NxK:M,NxK:M"
  as argparse types; `require_cuda` refuses a GPU benchmark on a machine without one, after the
  arguments are parsed (so `--help` works anywhere).
- Results. `markdown_table`, `environment` (the line that heads a result in RESULTS.md: date, device,
  versions, commit) and `write_report` (atomic: a temporary file, then a rename).

The scripts import it as ``benchmarks.harness``: run them from the repository root with
``PYTHONPATH=. python3 benchmarks/<script>.py`` (or ``python3 -m benchmarks.<script>``).
"""

from __future__ import annotations

import argparse
import math
import platform
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    import mla_debug as md

ROOT = Path(__file__).resolve().parents[1]
# 1 GiB: writing it outlasts the host's enqueueing of the timed call, so host overhead is never timed,
# and it evicts the whole L2, so every timed call reads its operands from HBM as in serving.
FLUSH_BYTES = 1 << 30


# --- timing ---------------------------------------------------------------------------------------------


def median_seconds(fn: Callable[[], object], repeats: int) -> float:
    """Median wall-clock seconds of `repeats` calls (CPU work; no warm-up: call it first if it needs one)."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def peak_rss_gb() -> float:
    """This process's peak resident set so far, in GB (ru_maxrss is in KiB on Linux)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


class EventTimer:
    """Median microseconds of single calls on the current CUDA device, the L2 cache flushed (untimed)
    before each: every call starts cold, as a serving step that first ran other kernels would."""

    def __init__(self, reps: int, warmup: int = 3, flush_bytes: int = FLUSH_BYTES) -> None:
        self.reps = reps
        self.warmup = warmup
        self.flush = torch.empty(flush_bytes, dtype=torch.uint8, device="cuda")

    def __call__(self, fn: Callable[[], object]) -> float:
        for _ in range(self.warmup):
            fn()
        torch.cuda.synchronize()
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(self.reps)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(self.reps)]
        for start, end in zip(starts, ends):
            self.flush.zero_()  # also keeps the GPU busy while the host enqueues the timed call
            start.record()
            fn()
            end.record()
        torch.cuda.synchronize()
        return statistics.median(s.elapsed_time(e) for s, e in zip(starts, ends)) * 1000.0


def time_graph(fn: Callable[[], object] | Sequence[Callable[[], object]], calls: int, replays: int) -> float | None:
    """Microseconds per call of `calls` calls captured in one CUDA graph (median over `replays` replays):
    device time, without launch overhead. None (with the reason on stderr) where capture fails.

    Given a sequence, call i runs fns[i % len(fns)]: the same op on different buffers, so that consecutive
    calls do not find each other's data in L2.
    """
    fns = list(fn) if isinstance(fn, Sequence) else [fn]
    try:
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):  # compile and warm up outside the capture
            for f in fns:
                f()
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for i in range(calls):
                fns[i % len(fns)]()
    except Exception as err:  # e.g. a path that syncs or allocates in a way capture refuses
        print(f"  graph capture failed: {type(err).__name__}: {err}", file=sys.stderr)
        return None
    graph.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(replays):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1000.0 / calls)
    del graph
    return statistics.median(times)


def copy_bandwidth(nbytes: int = FLUSH_BYTES, iters: int = 20) -> float:
    """Device-to-device copy bandwidth in GB/s, (bytes read + bytes written) / time: the ceiling a
    memory-bound kernel is measured against."""
    src = torch.empty(nbytes, dtype=torch.uint8, device="cuda").fill_(1)
    dst = torch.empty_like(src)
    for _ in range(3):
        dst.copy_(src)
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        dst.copy_(src)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1000.0)
    del src, dst
    return 2 * nbytes / statistics.median(times) / 1e9


# --- checking -------------------------------------------------------------------------------------------

# Hopper's fp8 tensor cores keep about 14 bits while adding the products inside an MMA (DeepSeek-V3
# technical report, 3.3.2); the kernels promote to fp32 after every 128-wide K block, so each block's
# dot may be off by up to ~2^-13 of its sum of |products| beyond what fp32 accumulation explains.
TENSOR_CORE_REL = 2.0**-13


def check_gemm(name: str, out: torch.Tensor, qa: md.QuantizedActivation, qw: md.QuantizedWeight) -> str:
    """Compare `out` with the fp64 product of the same quantized operands element by element. Bound: fp32
    accumulation in any order, 2 (K + 3) 2^-24 sum|x w|, plus one bf16 ulp of the output. Elements beyond
    it are reported with their excess as a fraction of the tensor-core allowance TENSOR_CORE_REL sum|x w|;
    the run stops when any element exceeds bound + allowance, which no accumulation explains (a wrong
    layout is off by whole magnitudes). Returns "" when every element is within the bound, else a note."""
    x = qa.dequantize().double()
    w = qw.dequantize_plain().double()
    exact = x @ w.t()
    magnitude = x.abs() @ w.abs().t()
    bound = 2 * (qa.k + 3) * 2.0**-24 * magnitude
    got = out.double()
    larger = torch.maximum(exact.abs(), got.abs())  # the bf16 rounding is an ulp of the larger
    ulp = torch.exp2(torch.floor(torch.log2(larger.clamp_min(2.0**-126))) - 7)
    excess = ((got - exact).abs() - bound - ulp) / (TENSOR_CORE_REL * magnitude)
    worst = excess.max().item()
    if not math.isfinite(worst) or worst > 1:
        raise SystemExit(
            f"{name}: beyond the fp32 bound by {worst:.2f}x the tensor-core allowance at M={qa.m}, N={qw.n}, K={qw.k}"
        )
    outside = int((excess > 0).sum())
    if not outside:
        return ""
    return (
        f"{name} {qw.n}x{qw.k} M={qa.m}: {outside} of {exact.numel()} elements beyond the fp32 bound + 1 ulp, "
        f"worst by {worst:.3f} of the tensor-core allowance"
    )


# --- command lines --------------------------------------------------------------------------------------


def int_list(text: str) -> list[int]:
    """argparse type of "1,4,16": positive integers."""
    try:
        values = [int(v) for v in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of integers (e.g. 1,4,16)") from None
    if any(v <= 0 for v in values):
        raise argparse.ArgumentTypeError(f"{text!r}: every value must be positive")
    return values


def shape_list(text: str) -> list[tuple[int, int]]:
    """argparse type of "NxK,NxK": (N, K) weight shapes."""
    shapes = []
    for item in text.split(","):
        try:
            n, k = (int(v) for v in item.split("x"))
        except ValueError:
            raise argparse.ArgumentTypeError(f"{item!r} is not NxK (e.g. 7168x2048)") from None
        shapes.append((n, k))
    return shapes


def case_list(text: str) -> list[tuple[int, int, int]]:
    """argparse type of "NxK:M,NxK:M": (N, K, M) GEMM cases."""
    cases = []
    for item in text.split(","):
        shape, _, m = item.partition(":")
        try:
            ((n, k),) = shape_list(shape)
            cases.append((n, k, int(m)))
        except (argparse.ArgumentTypeError, ValueError):
            raise argparse.ArgumentTypeError(f"{item!r} is not NxK:M (e.g. 7168x2048:64)") from None
    return cases


def require_cuda(script: str) -> None:
    """Stop (exit status 2) where no CUDA GPU is visible: GPU benchmarks call it after parsing arguments."""
    if not torch.cuda.is_available():
        print(f"{script}: needs a CUDA GPU", file=sys.stderr)
        raise SystemExit(2)


# --- results --------------------------------------------------------------------------------------------


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def commit() -> str | None:
    """The checkout's commit (with "-dirty" for uncommitted changes), or None outside a git checkout."""
    try:
        done = subprocess.run(
            ["git", "describe", "--always", "--dirty", "--abbrev=7"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    if done.returncode != 0:
        return None
    return done.stdout.strip() or None


def environment(device: str = "cpu") -> str:
    """The line that heads a result: date, the device (the CUDA GPU's name, or the CPU's with torch's
    thread count), torch (and CUDA and triton on a GPU), Python, the commit."""
    parts = [time.strftime("%Y-%m-%d")]
    if device == "cuda":
        parts += [torch.cuda.get_device_name(), f"torch {torch.__version__}", f"CUDA {torch.version.cuda}"]
        try:
            import triton

            parts.append(f"triton {triton.__version__}")
        except ImportError:
            parts.append("triton not installed")
    else:
        cpu = platform.processor() or platform.machine()
        parts += [f"{cpu}, {torch.get_num_threads()} threads", f"torch {torch.__version__}"]
    parts.append(f"Python {platform.python_version()}")
    rev = commit()
    if rev:
        parts.append(f"commit {rev}")
    return ", ".join(parts)


def run_module(script: str, *args: str) -> str:
    """Run benchmarks/<script>.py in a fresh Python process from the repository root (so the checkout is
    what it imports, whatever the caller's path) and return its standard output; for measurements that
    must own their process (peak memory, cold imports)."""
    done = subprocess.run(
        [sys.executable, "-m", f"benchmarks.{script}", *args], cwd=ROOT, capture_output=True, text=True
    )
    if done.returncode != 0:
        raise SystemExit(f"benchmarks/{script}.py {' '.join(args)} failed:\n{done.stderr[-3000:]}")
    return done.stdout


def write_report(path: Path | str | None, text: str) -> None:
    """Write `text` to `path` (if given) through a temporary file and a rename, so that a reader never
    sees half a report and an interrupted run leaves the previous one whole."""
    if path is None:
        return
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text if text.endswith("\n") else text + "\n")
    tmp.replace(path)
