"""Pipeline depth of the interleaved (Gluon) preshuffled GEMM, timed next to the plain Triton kernel.

  PYTHONPATH=. python3 benchmarks/gemm_interleaved_stages_sweep.py [--cases 2112x7168:256,...] [--stages 2,3,4,6,8]

The stage count is the one launch parameter the interleaved kernel may choose apart from the plain
kernel: it changes no arithmetic, so both still give the same bytes (tile width, warps and split-K
would change the K order, and stay the heuristic's). For each case this times, with gemm_bench's
L2-flushed timer, the plain kernel at the heuristic's config, the preshuffled weight at
`interleaved_stages`' depth (what the launcher runs), and at every depth listed, each checked
bitwise against the plain kernel first. What `interleaved_stages` in kernels/triton_gemm.py is tuned from.
"""

from __future__ import annotations

import argparse
from dataclasses import replace

import torch
from gemm_bench import Timer, check, operands, parse_cases  # benchmarks/ is on sys.path when run as a script

import mla_debug as md
from mla_debug.gpu import triton_env
from mla_debug.gpu.gemm.launcher import interleaved_stages, launch_config, triton_block_scaled_mm

SHAPES = [(24576, 1536), (3072, 1536), (32768, 512), (4096, 512), (7168, 16384), (7168, 2048), (2112, 7168)]
CASES = [(n, k, m) for m in (64, 256, 1024, 4096) for n, k in SHAPES]
STAGES = (2, 3, 4, 5, 6, 8)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default=None, help="NxK:M,... instead of the built-in list")
    parser.add_argument("--stages", default=",".join(map(str, STAGES)))
    parser.add_argument("--reps", type=int, default=20)
    args = parser.parse_args()
    cases = CASES
    if args.cases:
        cases = parse_cases(args.cases)
    depths = [int(s) for s in args.stages.split(",")]
    timer = Timer(args.reps)
    gen = torch.Generator().manual_seed(0)
    device = torch.device("cuda")
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}; medians of {args.reps} L2-flushed calls\n")
    print(
        "| N x K | M | config | plain us | launcher's depth | us | / plain | "
        + " | ".join(f"s{d}" for d in depths)
        + " | best / plain |"
    )
    print("|---|---|---|---|---|---|---|" + "---|" * (len(depths) + 1))
    for n, k, m in cases:
        _, _, qw, qa = operands(m, n, k, gen)
        shuffled = qw.shuffled((16, 16), by="sweep")
        col = qa.presented_as("col_major")
        cfg = launch_config(m, n, k, device)

        def plain():
            return triton_block_scaled_mm(qa.data, qa.scale, md.ScaleLayout.ROW_MAJOR, qw.data, qw.scale, k)

        def interleaved(config=None):
            return triton_block_scaled_mm(
                col.data, col.scale, md.ScaleLayout.COL_MAJOR, shuffled.data, shuffled.scale, k, shuffled=True,
                config=config, staging="interleaved",
            )  # fmt: skip

        reference = plain()
        if note := check("plain", reference, qa, qw):
            print(f"  {note}")
        launcher = interleaved_stages(cfg, m, n, k, triton_env.sm_count(device)).num_stages
        plain_us = timer(plain) * 1e3
        default_us = timer(interleaved) * 1e3
        cells = []
        best = default_us
        for depth in depths:
            config = replace(cfg, num_stages=depth)
            try:
                out = interleaved(config)
            except Exception as err:  # more shared memory than a block may have
                cells.append(type(err).__name__)
                continue
            if not torch.equal(out, reference):
                raise SystemExit(f"{n}x{k} M={m} {config}: interleaved bytes differ from the plain kernel's")
            us = timer(lambda config=config: interleaved(config)) * 1e3
            best = min(best, us)
            cells.append(f"{us:.1f}")
        print(
            f"| {n}x{k} | {m} | {cfg} | {plain_us:.1f} | s{launcher} | {default_us:.1f} | {plain_us / default_us:.3f} | "
            + " | ".join(cells)
            + f" | {plain_us / best:.3f} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
