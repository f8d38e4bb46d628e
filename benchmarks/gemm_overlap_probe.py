"""Promotion overlapped with the next block's MMA (the Gluon kernels' overlapped loop), timed at large M.

  PYTHONPATH=. python3 benchmarks/gemm_overlap_probe.py [--cases 7168x16384:4096,...] [--stages 4,5]
      [--tiles 128x128,64x128] [--kernels overlap,persistent,specialized+persistent+tma_store]

Each K block's fp32 product must be scaled into the accumulator before the next block's product lands
in the same registers; the plain kernels wait for every MMA and then promote, so the tensor cores idle
while the CUDA cores multiply-add. With OVERLAP the Gluon kernel multiplies into two register tiles in
turn and promotes one while the other's MMA runs. Same MMA, same multiply-add order: the bytes must be
the plain Triton kernel's for the same tiles, which this checks before timing anything.

For each case, with gemm_bench's L2-flushed timer: the plain Triton kernel at the heuristic's config,
cuBLAS blockwise, the launcher's default for the preshuffled weight, and the overlapped loop for the
plain and the preshuffled weight at each stage count, tile shape (128 x 128 with 8 warps, 64 x 128 with
4) and kernel listed: "overlap", one program per tile (LaunchConfig.overlap), and "persistent", one
program per SM running its copy pipeline on across its tiles (LaunchConfig.persistent); "specialized"
(128 x 128 tiles only) the warp-specialized kernel, joined by '+' to "persistent" and "tma_store" for its
persistent form and TMA-store epilogue. Ratios are to cuBLAS.
"""

from __future__ import annotations

import argparse
from dataclasses import replace

import torch
from gemm_bench import SHAPES, Timer, check, cublas_call, operands, parse_cases

import mla_debug as md
from mla_debug.gpu.gemm.launcher import LaunchConfig, launch_config, triton_block_scaled_mm

CASES = [(n, k, m) for m in (1024, 4096, 8192) for n, k in SHAPES]
TILES = {"128x128": (128, 128, 8), "64x128": (64, 128, 4)}
FLAGS = ("overlap", "persistent", "specialized", "tma_store")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default=None, help="NxK:M,... instead of the built-in list")
    parser.add_argument("--stages", default="4,5")
    parser.add_argument("--tiles", default=",".join(TILES), help=f"tile shapes among {', '.join(TILES)}")
    parser.add_argument(
        "--kernels",
        default="overlap,persistent",
        help=f"kernels, each one or more of {', '.join(FLAGS)} joined by '+'",
    )
    parser.add_argument("--reps", type=int, default=20)
    args = parser.parse_args()
    cases = parse_cases(args.cases) if args.cases else CASES
    depths = [int(s) for s in args.stages.split(",")]
    tiles = [TILES[t] for t in args.tiles.split(",")]
    timer = Timer(args.reps)
    gen = torch.Generator().manual_seed(0)
    device = torch.device("cuda")
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}; medians of {args.reps} L2-flushed calls")
    print("TFLOP/s; each overlapped run checked bitwise against the plain Triton kernel with its tiles\n")
    kernels = args.kernels.split(",")
    if not {flag for kernel in kernels for flag in kernel.split("+")} <= set(FLAGS):
        raise SystemExit(f"--kernels: {args.kernels!r}: join flags among {', '.join(FLAGS)} by '+'")
    variants = [
        (bm, bn, w, s, kernel, sh) for kernel in kernels for bm, bn, w in tiles for s in depths for sh in (False, True)
    ]
    print(
        "| N x K | M | heuristic | cuBLAS | Triton | preshuffled (launcher) | "
        + " | ".join(f"{kernel} {bm}x{bn} s{s} {'shuf' if sh else 'plain'}" for bm, bn, w, s, kernel, sh in variants)
        + " | best plain / cuBLAS | best shuffled / cuBLAS |"
    )
    print("|---|---|---|---|---|---|" + "---|" * (len(variants) + 2))
    for n, k, m in cases:
        _, _, qw, qa = operands(m, n, k, gen)
        shuffled = qw.shuffled((16, 16), by="probe")
        col = qa.presented_as("col_major")
        flops = 2 * m * n * k

        def tflops(ms: float) -> float:
            return flops / ms / 1e9

        def plain(config=None):
            return triton_block_scaled_mm(
                qa.data, qa.scale, md.ScaleLayout.ROW_MAJOR, qw.data, qw.scale, k, config=config
            )

        def preshuffled(config=None):
            return triton_block_scaled_mm(
                col.data, col.scale, md.ScaleLayout.COL_MAJOR, shuffled.data, shuffled.scale, k, shuffled=True,
                config=config,
            )  # fmt: skip

        cfg = launch_config(m, n, k, device)
        if note := check("plain", plain(), qa, qw):
            print(f"  {note}")
        cublas = tflops(timer(cublas_call(qa, qw)))
        cells = [f"{cublas:.0f}", f"{tflops(timer(plain)):.0f}", f"{tflops(timer(preshuffled)):.0f}"]
        best = {False: 0.0, True: 0.0}
        references: dict[tuple, torch.Tensor] = {}
        for bm, bn, warps, stages, kernel, is_shuffled in variants:
            config = LaunchConfig(bm, bn, warps, stages, cfg.group_m, 1, **{flag: True for flag in kernel.split("+")})
            key = (bm, bn, warps)
            if key not in references:
                references[key] = plain(replace(config, **{flag: False for flag in FLAGS}, num_stages=3))
            run = preshuffled if is_shuffled else plain
            try:
                out = run(config)
            except Exception as err:  # more shared memory than a block may have
                cells.append(type(err).__name__)
                continue
            if not torch.equal(out, references[key]):
                raise SystemExit(
                    f"{n}x{k} M={m} {config} shuffled={is_shuffled}: bytes differ from the Triton kernel's"
                )
            value = tflops(timer(lambda run=run, config=config: run(config)))
            best[is_shuffled] = max(best[is_shuffled], value)
            cells.append(f"{value:.0f}")
        print(
            f"| {n}x{k} | {m} | {cfg} | " + " | ".join(cells)
            + f" | {best[False] / cublas:.2f} | {best[True] / cublas:.2f} |",
            flush=True,
        )  # fmt: skip


if __name__ == "__main__":
    main()
