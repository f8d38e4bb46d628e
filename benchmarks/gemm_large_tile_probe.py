"""Large-M block-scaled GEMMs: 256-row tiles on the Gluon kernel against the Triton kernel and cuBLAS.

  PYTHONPATH=. python3 benchmarks/gemm_large_tile_probe.py [--cases 7168x16384:4096,...] [--stages 3,4]

At M >= 1024 the Triton kernel's 128 x 128 tiles move 32 KB of fp8 operands from L2 per 4.2 MFLOP; at
cuBLAS's rate that is more than the H200's L2 delivers. A 256 x 128 tile moves 48 KB per 8.4 MFLOP. This
times, with gemm_bench's L2-flushed timer and each checked bitwise against the Triton kernel's result
first (a wrong byte stops the run): the Triton kernel at the heuristic's config, the Gluon kernel with
256-row tiles (two 64-column MMAs per K block) for the plain and the preshuffled weight at each depth
listed, the preshuffled weight at the launcher's default, and cuBLAS.
"""

from __future__ import annotations

import argparse

import torch
from gemm_bench import Timer, check, cublas_call, operands  # benchmarks/ is on sys.path when run as a script

import mla_debug as md
from mla_debug.kernels.triton_gemm import LaunchConfig, launch_config, triton_block_scaled_mm

SHAPES = [(24576, 1536), (3072, 1536), (32768, 512), (4096, 512), (7168, 16384), (7168, 2048), (2112, 7168)]
CASES = [(n, k, m) for m in (1024, 4096, 8192) for n, k in SHAPES]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default=None, help="NxK:M,... instead of the built-in list")
    parser.add_argument("--stages", default="3,4")
    parser.add_argument("--reps", type=int, default=20)
    args = parser.parse_args()
    cases = CASES
    if args.cases:
        cases = [(*map(int, c.split(":")[0].split("x")), int(c.split(":")[1])) for c in args.cases.split(",")]
    depths = [int(s) for s in args.stages.split(",")]
    timer = Timer(args.reps)
    gen = torch.Generator().manual_seed(0)
    print(
        f"{torch.cuda.get_device_name()}, torch {torch.__version__}; TFLOP/s, medians of {args.reps} L2-flushed calls\n"
    )
    names = ["triton", "preshuffled (launcher)"]
    for d in depths:
        names += [f"gluon plain 256 s{d}", f"gluon shuffled 256 s{d}"]
    names.append("cuBLAS")
    print("| N x K | M | " + " | ".join(names) + " | best 256 / triton | best 256 / cuBLAS |")
    print("|---|---|" + "---|" * (len(names) + 2))
    for n, k, m in cases:
        _, _, qw, qa = operands(m, n, k, gen)
        shuffled = qw.shuffled((16, 16), by="probe")
        col = qa.presented_as("col_major")

        def plain(config=None):
            return triton_block_scaled_mm(
                qa.data, qa.scale, md.ScaleLayout.ROW_MAJOR, qw.data, qw.scale, k, config=config
            )

        def preshuffled(config=None):
            return triton_block_scaled_mm(
                col.data, col.scale, md.ScaleLayout.COL_MAJOR, shuffled.data, shuffled.scale, k, shuffled=True,
                config=config,
            )  # fmt: skip

        calls = {"triton": plain, "preshuffled (launcher)": preshuffled}
        for d in depths:
            cfg = LaunchConfig(256, 128, 8, d, 8, 1)
            calls[f"gluon plain 256 s{d}"] = lambda cfg=cfg: plain(cfg)
            calls[f"gluon shuffled 256 s{d}"] = lambda cfg=cfg: preshuffled(cfg)
        reference = plain()
        if note := check(f"triton {launch_config(m, n, k, torch.device('cuda'))}", reference, qa, qw):
            print(f"  {note}")
        for name, call in calls.items():
            if not torch.equal(call(), reference):
                raise SystemExit(f"{n}x{k} M={m} {name}: bytes differ from the Triton kernel's")
        calls["cuBLAS"] = cublas_call(qa, qw)
        flops = 2.0 * m * n * k
        tflops = {name: flops / (timer(call) * 1e-3) / 1e12 for name, call in calls.items()}
        best = max(v for name, v in tflops.items() if " 256 " in name)
        cells = " | ".join(f"{tflops[name]:.0f}" for name in names)
        print(
            f"| {n}x{k} | {m} | {cells} | {best / tflops['triton']:.3f} | {best / tflops['cuBLAS']:.3f} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
