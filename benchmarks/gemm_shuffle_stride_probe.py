"""Where the preshuffled GEMM still trails the plain one: does the distance between 16-row bands matter?

  PYTHONPATH=. python3 benchmarks/gemm_shuffle_stride_probe.py [--cases 2112x7168:256,...] [--pads 32,128]

In the (16, 16) order a 16-row band of the weight is one contiguous run of 16 x K bytes, so a tile's
copies of one K block are BLOCK_N / 16 runs of 2 KB, 16 x K bytes apart, where the plain weight's are
BLOCK_N rows of 128 bytes, K bytes apart. Where few tiles each stream a long K the interleaved kernel
waits about twice as long on its copies (RESULTS.md). This times, side by side and each checked against
the fp64 product first (gemm_bench.check):

- plain: the plain weight through the Triton kernel (the heuristic's config);
- plain+P: the same weight with rows P bytes longer (a strided view: the addresses move, nothing else);
- shuffled: the (16, 16)-preshuffled weight through the default staging;
- shuffled+P: preshuffled with K zero-padded by P bytes (`pad_k_to`), so bands lie 16 x (K + P) apart.

each with the L2 flushed before every call (the weight from HBM) and warm (repeated calls: a weight that
fits the 50 MB L2 comes from it). If padding closes the gap, the cost is where the band runs fall in the
memory system; if warm calls show the same gap, it is not HBM.
"""

from __future__ import annotations

import argparse
import statistics

import torch
from gemm_bench import Timer, check, operands, parse_cases  # benchmarks/ is on sys.path when run as a script

import mla_debug as md
from mla_debug.gpu.gemm.launcher import launch_config, triton_block_scaled_mm

CASES = [
    (2112, 7168, 256),
    (7168, 2048, 16),
    (7168, 2048, 64),
    (7168, 16384, 64),
    (7168, 16384, 256),
    (7168, 16384, 4096),
    (24576, 1536, 4096),
    (3072, 1536, 16),
]
PADS = (32, 128, 512, 2048)


def warm_us(fn, reps: int) -> float:
    for _ in range(3):
        fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(reps):
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times) * 1e3


def variants(qa: md.QuantizedActivation, qw: md.QuantizedWeight, k: int, pads) -> dict:
    col = qa.presented_as("col_major")
    found = {"plain": lambda: triton_block_scaled_mm(qa.data, qa.scale, md.ScaleLayout.ROW_MAJOR, qw.data, qw.scale, k)}
    for pad in pads:
        wide = torch.zeros((qw.n, k + pad), dtype=torch.uint8, device="cuda")
        wide[:, :k] = qw.data.view(torch.uint8)
        rows = wide[:, :k].view(qw.data.dtype)  # the same rows, pad bytes apart
        found[f"plain+{pad}"] = lambda rows=rows: triton_block_scaled_mm(
            qa.data, qa.scale, md.ScaleLayout.ROW_MAJOR, rows, qw.scale, k
        )
    for pad in (0, *pads):
        shuffled = qw.shuffled((16, 16), by="probe", pad_k_to=k + pad if pad else None)
        found["shuffled" + (f"+{pad}" if pad else "")] = lambda s=shuffled: triton_block_scaled_mm(
            col.data, col.scale, md.ScaleLayout.COL_MAJOR, s.data, s.scale, k, shuffled=True
        )
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default=None, help="NxK:M,... instead of the built-in list")
    parser.add_argument("--pads", default=",".join(map(str, PADS)), help="extra bytes per row, multiples of 32")
    parser.add_argument("--reps", type=int, default=20)
    args = parser.parse_args()
    cases = CASES
    if args.cases:
        cases = parse_cases(args.cases)
    pads = [int(p) for p in args.pads.split(",") if p]
    timer = Timer(args.reps)
    gen = torch.Generator().manual_seed(0)
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}; medians of {args.reps} calls, us\n")
    names = ["plain", *[f"plain+{p}" for p in pads], "shuffled", *[f"shuffled+{p}" for p in pads]]
    print("| N x K | M | config | timing | " + " | ".join(names) + " | shuffled / plain | best shuffled+P / plain |")
    print("|---|---|---|---|" + "---|" * (len(names) + 2))
    for n, k, m in cases:
        _, _, qw, qa = operands(m, n, k, gen)
        calls = variants(qa, qw, k, pads)
        notes = [check(name, call(), qa, qw) for name, call in calls.items()]
        for note in filter(None, notes):
            print(f"  {note}")
        cfg = launch_config(m, n, k, torch.device("cuda"))
        for label, measure in (("L2 flushed", lambda fn: timer(fn) * 1e3), ("warm", lambda fn: warm_us(fn, args.reps))):
            us = {name: measure(call) for name, call in calls.items()}
            padded = min(us[f"shuffled+{p}"] for p in pads) if pads else float("nan")
            cells = " | ".join(f"{us[name]:.1f}" for name in names)
            print(
                f"| {n}x{k} | {m} | {cfg} | {label} | {cells} | {us['plain'] / us['shuffled']:.3f} "
                f"| {us['plain'] / padded:.3f} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
