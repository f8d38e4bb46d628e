"""One launch of the Triton GEMM per variant, for a hardware-counter profiler to read.

  ncu --clock-control none -k regex:gemm_kernel --section ... \\
      python3 benchmarks/gemm_ncu_probe.py [--cases 3072x1536:8192,24576x1536:1024]

Each case runs the plain kernel and the preshuffled one (in each shared-memory staging of the weight
tile, see triton_block_scaled_mm) once each on the same quantized operands, after checking each against
the fp64 product (gemm_bench.check). Nothing is timed here: the profiler
replays each launch and reads the counters (L2 hit rate, per-slice load, DRAM bytes, warp stalls) that
tell why one byte order of the same weight is slower than the other. Launch order per case: plain,
preshuffled (default staging), preshuffled with the swizzled staging.
"""

from __future__ import annotations

import argparse

import torch
from gemm_bench import check, operands, parse_cases, triton_variants  # benchmarks/ is on sys.path when run as a script

from mla_debug.gpu.gemm.launcher import launch_config

CASES = [(3072, 1536, 8192), (24576, 1536, 1024), (24576, 1536, 1), (7168, 16384, 256)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default=None, help="NxK:M,... instead of the built-in list")
    args = parser.parse_args()
    cases = CASES
    if args.cases:
        cases = parse_cases(args.cases)
    gen = torch.Generator().manual_seed(0)
    for n, k, m in cases:
        _, _, qw, qa = operands(m, n, k, gen)
        # One launch each, in the order plain, preshuffled (default staging), preshuffled swizzled.
        outs = {name: call() for name, call in triton_variants(qa, qw, k).items()}
        torch.cuda.synchronize()
        notes = [check(name, out, qa, qw) for name, out in outs.items()]
        print(f"{n}x{k} M={m} {launch_config(m, n, k, torch.device('cuda'))}", *[x for x in notes if x], flush=True)


if __name__ == "__main__":
    main()
