"""Hand-written Chrome traces with known numbers, for the trace analysis tests.

`gpu_events()` is the shape a non-torch tool exports: CPU slices as B/E pairs without `cat` or `args`,
kernel launches (cudaLaunchKernel, B/E with only a correlation id) and GPU kernels as X events on a GPU
process. Times in microseconds:

  CPU (pid 1, tid 1)                             GPU stream 7 (pid 0, labelled "GPU 0")
  mla.q_b_proj[aiter-bpreshuffle]  100..200      gemm_bpreshuffle  130..180  corr 1 (launched in q_b_proj)
    aten::mm   110..150                          add_kernel        195..235  corr 2 (launched in q_b_proj,
      cudaLaunchKernel 120..125  corr 1                                      overlaps attention more)
    aten::add  160..190                          bmm_kernel        240..270  corr 3
      cudaLaunchKernel 170..172  corr 2          orphan_kernel     280..320  no cat, no corr: overlap -> attention
  mla.attention[attention]         210..300      late_kernel       400..410  no corr, outside every step
    aten::bmm  220..260                        GPU stream 8: memcpy_HtoD 150..160 (gpu_memcpy, no corr -> q_b_proj)
      cudaLaunchKernel 230..233  corr 3        plus a gpu_user_annotation "nccl:_all_gather_base" 240..260
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

GEMM_STEPS = ("fused_qkv_a", "q_b_proj", "kv_b_proj", "o_proj")


def write_trace(path: Path, events: list[dict], header: dict | None = None) -> Path:
    """A Chrome trace (object form) at `path`; gzipped when the name ends in .gz."""
    text = json.dumps({**(header or {}), "traceEvents": events})
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.name.endswith(".gz"):
        with gzip.open(path, "wt", encoding="utf-8") as handle:
            handle.write(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


def _slice(name: str, start: float, end: float, pid: int = 1, tid: int = 1, args: dict | None = None) -> list[dict]:
    begin = {"ph": "B", "name": name, "ts": start, "pid": pid, "tid": tid}
    if args:
        begin["args"] = args
    return [begin, {"ph": "E", "ts": end, "pid": pid, "tid": tid}]


def _kernel(name: str, start: float, dur: float, corr: int | None, tid: int = 7, cat: str | None = "kernel") -> dict:
    event = {"ph": "X", "name": name, "ts": start, "dur": dur, "pid": 0, "tid": tid}
    if cat:
        event["cat"] = cat
    if corr is not None:
        event["args"] = {"correlation": corr, "stream": tid, "device": 0}
    return event


def gpu_events(gemm_name: str = "gemm_bpreshuffle", scale: float = 1.0) -> list[dict]:
    """The trace drawn in the module docstring; `scale` stretches every GPU kernel's duration."""
    metadata = [
        {"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "python"}},
        # Kineto's way: the GPU's process is named after the program and labelled "GPU 0".
        {"ph": "M", "name": "process_name", "pid": 0, "args": {"name": "python3"}},
        {"ph": "M", "name": "process_labels", "pid": 0, "args": {"labels": "GPU 0"}},
        {"ph": "M", "name": "thread_name", "pid": 0, "tid": 7, "args": {"name": "stream 7"}},
    ]
    # B/E pairs nest (E closes the latest B of its thread), so they are listed in time order.
    cpu = (
        _slice("mla.q_b_proj[aiter-bpreshuffle]", 100, 200)[:1]
        + _slice("aten::mm", 110, 150)[:1]
        + _slice("cudaLaunchKernel", 120, 125, args={"correlation": 1})
        + [{"ph": "E", "ts": 150, "pid": 1, "tid": 1}]
        + _slice("aten::add", 160, 190)[:1]
        + _slice("cudaLaunchKernel", 170, 172, args={"correlation": 2})
        + [{"ph": "E", "ts": 190, "pid": 1, "tid": 1}, {"ph": "E", "ts": 200, "pid": 1, "tid": 1}]
        + _slice("mla.attention[attention]", 210, 300)[:1]
        + _slice("aten::bmm", 220, 260)[:1]
        + _slice("cudaLaunchKernel", 230, 233, args={"correlation": 3})
        + [{"ph": "E", "ts": 260, "pid": 1, "tid": 1}, {"ph": "E", "ts": 300, "pid": 1, "tid": 1}]
    )
    gpu = [
        _kernel(gemm_name, 130, 50 * scale, 1),
        _kernel("add_kernel", 195, 40 * scale, 2),
        _kernel("bmm_kernel", 240, 30 * scale, 3),
        _kernel("orphan_kernel", 280, 40 * scale, None, cat=None),
        _kernel("late_kernel", 400, 10 * scale, None),
        _kernel("memcpy_HtoD", 150, 10 * scale, None, tid=8, cat="gpu_memcpy"),
        # A GPU-side annotation that is not a step range (c10d's collectives draw these).
        _kernel("nccl:_all_gather_base", 240, 20, None, cat="gpu_user_annotation"),
    ]
    return metadata + cpu + gpu


def cpu_events() -> list[dict]:
    """A CPU-only Kineto-style trace: two steps with categorised X events."""

    def x(name: str, cat: str, ts: float, dur: float) -> dict:
        return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "pid": 9, "tid": 9, "args": {}}

    return [
        x("mla.rope[rope]", "user_annotation", 0, 50),
        x("aten::mul", "cpu_op", 5, 10),
        x("aten::cat", "cpu_op", 20, 20),
        x("mla.o_proj[torch-reference]", "user_annotation", 60, 150),
        x("aten::mm", "cpu_op", 70, 100),
    ]
