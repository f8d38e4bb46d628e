"""Trace analysis cost: load a ~100 MB Chrome trace, build its tables; and the profiler's cost on a layer run.

  PYTHONPATH=. python3 benchmarks/trace_bench.py [--mb 100] [--repeats 5] [--out FILE]

1. Writes a synthetic Kineto-style trace (CPU process with mla.<step>[kernel] ranges, aten ops with
   input shapes, cudaLaunchKernel calls, GPU kernels with correlation ids on a GPU stream,
   gpu_user_annotation ranges and flow events) of about `--mb` MB into a temporary folder.
2. In a fresh subprocess (so its peak RSS is its own, read from resource.getrusage): load_trace,
   per_step(), op_table() and launch_counts(), each timed, checked against the counts the generator put in.
3. A tiny-preset run_layer at TP2 (simulated), plain and under md.profile: medians of `--repeats` runs.
Prints a markdown table.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import tempfile
import time
from pathlib import Path

from benchmarks.harness import environment, markdown_table, median_seconds, peak_rss_gb, run_module, write_report

# V3 prefill steps and what runs inside each: (kernel label, [(op, gpu kernel, dims)] per call).
GEMM = [("aten::linear", "Cijk_Alik_Bljk_F8B8BS_MT256x256x128_gemm_a8w8_blockscale", [[16, 7168], [1536, 7168]])]
NORM = [("aten::rms_norm", "triton_red_fused_rmsnorm_0", [[16, 1536], [1536]])]
ELEMENTWISE = [
    ("aten::mul", "elementwise_kernel_mul", [[16, 128, 64], [16, 1, 64]]),
    ("aten::add", "elementwise_kernel_add", [[16, 128, 64], [16, 128, 64]]),
    ("aten::cat", "CatArrayBatchedCopy", [[16, 128, 128], [16, 128, 64]]),
]
ATTENTION = [
    ("aten::bmm", "Cijk_Ailk_Bljk_BBS_bmm", [[128, 16, 192], [128, 192, 16]]),
    ("aten::softmax", "softmax_warp_forward", [[128, 16, 16]]),
    ("aten::bmm", "Cijk_Ailk_Bljk_BBS_bmm", [[128, 16, 16], [128, 16, 128]]),
]
STEPS = [
    ("fused_qkv_a", "aiter-bpreshuffle", GEMM * 2),
    ("q_a_layernorm", "rmsnorm", NORM * 2),
    ("kv_a_layernorm", "rmsnorm", NORM * 2),
    ("q_b_proj", "aiter-bpreshuffle", GEMM * 2),
    ("rope", "rope", ELEMENTWISE * 2),
    ("kv_b_proj", "aiter-blockscale", GEMM * 2),
    ("attention", "attention", ATTENTION),
    ("o_proj", "aiter-bpreshuffle", GEMM * 2),
    ("all_reduce", "all_reduce", [("c10d::allreduce_", "ncclDevKernel_AllReduce_Sum_bf16_RING_LL", [[16, 7168]])]),
]
CPU_PID, CPU_TID, GPU_PID, GPU_STREAM = 4242, 4242, 0, 7


def _cpu_op(name: str, ts: float, dur: float, ext: int, dims: list, idx: int) -> dict:
    return {
        "ph": "X",
        "cat": "cpu_op",
        "name": name,
        "pid": CPU_PID,
        "tid": CPU_TID,
        "ts": round(ts, 3),
        "dur": round(dur, 3),
        "args": {
            "External id": ext,
            "Sequence number": ext,
            "Fwd thread id": 0,
            "Record function id": 0,
            "Concrete Inputs": [""] * len(dims),
            "Input type": ["c10::BFloat16"] * len(dims),
            "Input Strides": [[1] * len(d) for d in dims],
            "Input Dims": dims,
            "Ev Idx": idx,
        },
    }


def write_synthetic_trace(path: Path, target_mb: float, seed: int = 0) -> dict:
    """Write the trace; returns what it holds (forwards, kernels and ops per step) for checking."""
    rng = random.Random(seed)
    target = target_mb * 1e6
    header = {
        "schemaVersion": 1,
        "deviceProperties": [{"id": 0, "name": "AMD Instinct MI355X (synthetic)"}],
        "distributedInfo": {"backend": "nccl", "rank": 0, "world_size": 1},
        "displayTimeUnit": "ms",
        "baseTimeNanoseconds": 1790000000000000000,
    }
    meta = [
        {"ph": "M", "name": "process_name", "pid": CPU_PID, "tid": 0, "args": {"name": "python"}},
        {"ph": "M", "name": "thread_name", "pid": CPU_PID, "tid": CPU_TID, "args": {"name": "thread 4242 (python)"}},
        {"ph": "M", "name": "process_name", "pid": GPU_PID, "tid": 0, "args": {"name": "GPU 0"}},
        {"ph": "M", "name": "thread_name", "pid": GPU_PID, "tid": GPU_STREAM, "args": {"name": "stream 7"}},
    ]
    cpu_t, gpu_t, ext, corr, idx, written, forwards = 1.0e6, 1.0e6, 0, 0, 0, 0, 0
    with open(path, "w", encoding="utf-8") as out:
        head = json.dumps(header)[:-1] + ', "traceEvents": [\n'
        out.write(head)
        written += len(head)
        lines = [json.dumps(e) for e in meta]
        while written < target:
            forwards += 1
            for step, kernel, calls in STEPS:
                step_start, step_events, gpu_first = cpu_t, [], None
                cpu_t += 2.0
                for op, kname, dims in calls:
                    ext, corr, idx = ext + 1, corr + 1, idx + 1
                    op_start = cpu_t
                    launch_t = op_start + 3.0 + rng.random()
                    launch_dur = 4.0 + rng.random()
                    k_start = max(gpu_t + 1.5 + rng.random() * 3, launch_t + 5.0)
                    k_dur = 10.0 + rng.random() * 40
                    gpu_t = k_start + k_dur
                    gpu_first = k_start if gpu_first is None else gpu_first
                    op_dur = launch_t + launch_dur + 2.0 - op_start
                    step_events.append(_cpu_op(op, op_start, op_dur, ext, dims, idx))
                    step_events.append(
                        {
                            "ph": "X",
                            "cat": "cuda_runtime",
                            "name": "cudaLaunchKernel",
                            "pid": CPU_PID,
                            "tid": CPU_TID,
                            "ts": round(launch_t, 3),
                            "dur": round(launch_dur, 3),
                            "args": {"External id": ext, "cbid": 211, "correlation": corr},
                        }
                    )
                    step_events.append(
                        {
                            "ph": "X",
                            "cat": "kernel",
                            "name": kname,
                            "pid": GPU_PID,
                            "tid": GPU_STREAM,
                            "ts": round(k_start, 3),
                            "dur": round(k_dur, 3),
                            "args": {
                                "External id": ext,
                                "queued": 0,
                                "device": 0,
                                "context": 1,
                                "stream": GPU_STREAM,
                                "correlation": corr,
                                "registers per thread": 128,
                                "shared memory": 65536,
                                "blocks per SM": 1.5,
                                "warps per SM": 12.0,
                                "grid": [48, 6, 1],
                                "block": [256, 1, 1],
                                "est. achieved occupancy %": 25,
                            },
                        }
                    )
                    flow = {"id": corr, "pid": CPU_PID, "tid": CPU_TID, "ts": round(launch_t, 3), "cat": "ac2g"}
                    step_events.append({"ph": "s", "name": "ac2g", **flow})
                    step_events.append(
                        {
                            "ph": "f",
                            "bp": "e",
                            "name": "ac2g",
                            **flow,
                            "pid": GPU_PID,
                            "tid": GPU_STREAM,
                            "ts": round(k_start, 3),
                        }
                    )
                    cpu_t = op_start + op_dur + 1.0
                label = f"mla.{step}[{kernel}]"
                step_events.insert(
                    0,
                    {
                        "ph": "X",
                        "cat": "user_annotation",
                        "name": label,
                        "pid": CPU_PID,
                        "tid": CPU_TID,
                        "ts": round(step_start, 3),
                        "dur": round(cpu_t + 1.0 - step_start, 3),
                        "args": {"External id": ext, "Record function id": 0, "Ev Idx": idx},
                    },
                )
                step_events.append(
                    {
                        "ph": "X",
                        "cat": "gpu_user_annotation",
                        "name": label,
                        "pid": GPU_PID,
                        "tid": GPU_STREAM,
                        "ts": round(gpu_first, 3),
                        "dur": round(gpu_t - gpu_first, 3),
                        "args": {"External id": ext},
                    }
                )
                cpu_t += 3.0
                lines.extend(json.dumps(e) for e in step_events)
            chunk = ",\n".join(lines) + ",\n"
            out.write(chunk)
            written += len(chunk)
            lines = []
        tail = json.dumps({"ph": "i", "s": "g", "name": "Record Window End", "pid": "", "tid": "", "ts": cpu_t})
        out.write(tail + "\n]}\n")
    return {
        "forwards": forwards,
        "kernels_per_step": {step: len(calls) for step, _, calls in STEPS},
        "size_mb": path.stat().st_size / 1e6,
    }


def measure_load(path: str, expected: dict) -> dict:
    """Load and tabulate (run in its own process); checks the tables against what the generator wrote."""
    import mla_debug as md

    t0 = time.perf_counter()
    trace = md.load_trace(path)
    t1 = time.perf_counter()
    steps = trace.per_step()
    t2 = time.perf_counter()
    ops = trace.op_table()
    trace.op_table(gpu=True, top=20)
    t3 = time.perf_counter()
    launches = trace.launch_counts()
    gaps = trace.gpu_idle_gaps()
    t4 = time.perf_counter()
    forwards = expected["forwards"]
    for row in launches.itertuples():
        want = expected["kernels_per_step"][row.step] * forwards
        if row.launches != want:
            raise AssertionError(f"{row.step}: {row.launches} launches, the generator wrote {want}")
    if list(steps["step"]) != list(expected["kernels_per_step"]):
        raise AssertionError(f"per_step steps {list(steps['step'])} are not the generator's")
    return {
        "events": len(trace.events),
        "load_s": t1 - t0,
        "per_step_s": t2 - t1,
        "op_table_s": t3 - t2,
        "launch_gaps_s": t4 - t3,
        "ops": len(ops),
        "gaps": len(gaps),
        "peak_rss_gb": peak_rss_gb(),
    }


def measure_overhead(repeats: int, out_dir: str) -> dict:
    """Tiny preset, TP2 simulated prefill: run_layer plain vs wrapped in md.profile (medians)."""
    import torch

    import mla_debug as md

    cfg = md.MLAConfig.preset("tiny")
    ckpt = md.Checkpoint.synthetic(cfg, seed=0, progress=False)
    hidden = torch.randn(16, cfg.hidden_size, generator=torch.Generator().manual_seed(0))
    positions = torch.arange(16)
    md.run_layer(cfg, ckpt, hidden, positions, tp_size=2)  # warm-up: first-call caches, lazy imports
    t = time.perf_counter()
    # The first profile of a process pays the profiler's start-up (Kineto init): reported on its own.
    md.profile(md.run_layer, cfg, ckpt, hidden, positions, tp_size=2, out_dir=out_dir)
    first_s = time.perf_counter() - t

    def inside() -> float:
        # Only the forward while the profiler records (no start-up, no trace export and gzip).
        with md.profile(out_dir=out_dir):
            t = time.perf_counter()
            md.run_layer(cfg, ckpt, hidden, positions, tp_size=2)
            return time.perf_counter() - t

    plain_s = median_seconds(lambda: md.run_layer(cfg, ckpt, hidden, positions, tp_size=2), repeats)
    inside_s = statistics.median(inside() for _ in range(repeats))
    profiled_s = median_seconds(
        lambda: md.profile(md.run_layer, cfg, ckpt, hidden, positions, tp_size=2, out_dir=out_dir), repeats
    )
    return {
        "plain_s": plain_s,
        "inside_s": inside_s,
        "profiled_s": profiled_s,
        "ratio": profiled_s / plain_s,
        "inside_ratio": inside_s / plain_s,
        "first_s": first_s,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, default=100.0, help="size of the synthetic trace")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", default=None, help="also write the markdown here")
    parser.add_argument("--load", nargs=2, metavar=("TRACE", "EXPECTED_JSON"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.load:
        print(json.dumps(measure_load(args.load[0], json.loads(args.load[1]))))
        return
    with tempfile.TemporaryDirectory(prefix="mla-trace-bench-") as tmp:
        path = Path(tmp) / "synthetic.pt.trace.json"
        t = time.perf_counter()
        expected = write_synthetic_trace(path, args.mb)
        gen_s = time.perf_counter() - t
        out = run_module("trace_bench", "--load", str(path), json.dumps(expected))
        load = json.loads(out.strip().splitlines()[-1])
        overhead = measure_overhead(args.repeats, str(Path(tmp) / "profiles"))
    n = args.repeats
    rows = [
        [f"load_trace ({expected['size_mb']:.0f} MB, {load['events']} events)", f"{load['load_s']:.2f} s", "< 10 s"],
        ["per_step()", f"{load['per_step_s']:.3f} s", ""],
        ["op_table() + op_table(gpu=True, top=20)", f"{load['op_table_s']:.3f} s", ""],
        ["launch_counts() + gpu_idle_gaps()", f"{load['launch_gaps_s']:.3f} s", ""],
        ["peak RSS of the loading process", f"{load['peak_rss_gb']:.2f} GB", "< 2 GB"],
        [f"tiny run_layer TP2, plain (median of {n})", f"{overhead['plain_s'] * 1e3:.1f} ms", ""],
        [f"same, while the profiler records (median of {n})", f"{overhead['inside_s'] * 1e3:.1f} ms", ""],
        [
            f"whole md.profile call: run + trace export, gzip, meta (median of {n})",
            f"{overhead['profiled_s'] * 1e3:.1f} ms",
            "",
        ],
        ["overhead: recording / plain (warm)", f"{overhead['inside_ratio']:.2f}x", ""],
        ["overhead: whole md.profile call / plain (warm)", f"{overhead['ratio']:.2f}x", ""],
        ["first md.profile in a process (profiler start-up)", f"{overhead['first_s'] * 1e3:.0f} ms", ""],
    ]
    text = "\n".join(
        [
            environment(),
            "",
            f"synthetic trace: {expected['size_mb']:.1f} MB, {load['events']} events, {expected['forwards']} "
            f"forwards (written in {gen_s:.1f} s)",
            "",
            markdown_table(["measure", "value", "target"], rows),
        ]
    )
    print(text)
    write_report(args.out, text)


if __name__ == "__main__":
    main()
