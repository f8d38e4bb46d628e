"""Launch configurations of the Triton block-scaled GEMM for decode-sized M, timed against cuBLAS.

  PYTHONPATH=. python3 benchmarks/gemm_decode_sweep.py [--cases 7168x16384:1,2112x7168:16] [--top 5]

Decode GEMMs stream the weight once: their speed is how many bytes each SM keeps in flight and how
evenly the tiles cover the SMs. For each case this times, with gemm_bench's L2-flushed timer, cuBLAS
and every configuration of the grid below (the heuristic's first), after checking each output against
the fp64 product (gemm_bench.check), and prints the fastest with their ratio to cuBLAS. What the
decode branch of the launch heuristic (kernels/triton_gemm.py) is tuned from.
"""

from __future__ import annotations

import argparse
import itertools

import torch
from gemm_bench import (  # benchmarks/ is on sys.path when run as a script
    Timer,
    check,
    cublas_call,
    operands,
    parse_cases,
)

import mla_debug as md
from mla_debug.gpu.gemm.launcher import BLOCK, LaunchConfig, launch_config, triton_block_scaled_mm

# The decode cases where the heuristic was slower than cuBLAS (RESULTS.md), and two where it was not.
CASES = [
    (7168, 16384, 1),
    (7168, 16384, 16),
    (7168, 16384, 64),
    (2112, 7168, 1),
    (2112, 7168, 16),
    (7168, 2048, 1),
    (3072, 1536, 1),
    (24576, 1536, 16),
    (32768, 512, 1),
]
BLOCK_NS = (16, 32, 64, 128)
STAGES = (3, 4, 6, 8)
SPLITS = (1, 2, 4, 8)


def grid(m: int, n: int, k: int) -> list[LaunchConfig]:
    block_m = 16 if m <= 16 else 64
    found = []
    for bn, stages, split in itertools.product(BLOCK_NS, STAGES, SPLITS):
        if split > 1 and k // BLOCK // split < 4:
            continue
        found.append(LaunchConfig(block_m, bn, 4, stages, 8, split))
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default=None, help="NxK:M,... instead of the built-in list")
    parser.add_argument("--top", type=int, default=5)
    parser.add_argument("--reps", type=int, default=20)
    args = parser.parse_args()
    cases = CASES
    if args.cases:
        cases = parse_cases(args.cases)
    timer = Timer(args.reps)
    gen = torch.Generator().manual_seed(0)
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}; median of {args.reps} L2-flushed calls\n")
    print("| N x K | M | cuBLAS us | heuristic | us | / cuBLAS | fastest (us, / cuBLAS) |")
    print("|---|---|---|---|---|---|---|")
    for n, k, m in cases:
        _, _, qw, qa = operands(m, n, k, gen)
        cublas_us = timer(cublas_call(qa, qw)) * 1000
        heuristic = launch_config(m, n, k, torch.device("cuda"))
        results = []
        for cfg in [heuristic] + [c for c in grid(m, n, k) if c != heuristic]:

            def call(cfg=cfg):
                return triton_block_scaled_mm(
                    qa.data, qa.scale, md.ScaleLayout.ROW_MAJOR, qw.data, qw.scale, k, config=cfg
                )

            try:
                note = check(str(cfg), call(), qa, qw)
            except Exception as err:  # shared memory too small for the stages, etc.
                print(f"  {cfg}: {type(err).__name__}", flush=True)
                continue
            if note:
                print(f"  {note}")
            results.append((timer(call) * 1000, str(cfg)))
        base_us = results[0][0]
        fastest = sorted(results)[: args.top]
        best = ", ".join(f"{c} {t:.1f} ({cublas_us / t:.2f})" for t, c in fastest)
        print(
            f"| {n}x{k} | {m} | {cublas_us:.1f} | {heuristic} | {base_us:.1f} | {cublas_us / base_us:.2f} | {best} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
