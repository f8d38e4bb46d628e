"""Our Triton kernels and aiter's own Triton kernels side by side on an NVIDIA GPU, on the same inputs.

  PYTHONPATH=. python3 benchmarks/aiter_bench.py --out aiter_bench.md [--quick] [--only normquant|gemm]
      [--reps N] [--diagnose]

- Fused RMSNorm + FP8 group quant at DeepSeek-V4-Flash (q 1024, kv 512) and V4-Pro (q 1536, kv 512)
  widths, q and kv split views of one projection output, COL_MAJOR scales (the model's order), M in
  {1, 4, 16, 64, 256, 1024, 4096, 16384}: our "triton" backend against aiter's fused_rms_fp8_group_quant
  (backend "aiter-triton"), each through the public op (validation and output allocation included).
- Block-scale GEMM on the DeepSeek-V3 shapes, M in {1, 16, 64, 256, 1024, 4096}: our plain Triton GEMM
  against aiter's Triton gemm_a8w8_blockscale with aiter's own config choice for an MI350X (the configs
  are tuned for that GPU, not an H200; the AMD-only launch options are dropped). Each row lists the
  config aiter chose. ``--diagnose`` times aiter's kernel once more with its config unchanged but twice
  the warps: aiter counts warps in 64-lane AMD wavefronts, so the same num_warps gives a program half
  as many threads on NVIDIA (32 lanes), which a large tile pays for in registers.

Every pair is checked first (the GEMM against the fp64 product within the fp32 + tensor-core bound,
`harness.check_gemm`; the norm + quant within one fp8 code and the fp32-sum bound of the scales), and
times are medians of CUDA-event-timed calls with the L2 cache flushed before each (`harness.EventTimer`).
aiter is the pinned amd-aiter (the ``aiter`` extra), run by `mla_debug.real_aiter`, never ``import aiter``.
"""

from __future__ import annotations

import argparse
import math
import time

import torch

import mla_debug as md
from benchmarks.harness import EventTimer, check_gemm, environment, markdown_table, require_cuda, write_report
from mla_debug import real_aiter
from mla_debug.gpu import aiter_triton
from mla_debug.gpu.gemm.launcher import triton_block_scaled_mm

NORMQUANT_SHAPES = {"V4-Flash": (1024, 512), "V4-Pro": (1536, 512)}
NORMQUANT_MS = [1, 4, 16, 64, 256, 1024, 4096, 16384]
GEMM_SHAPES = [(24576, 1536), (3072, 1536), (32768, 512), (4096, 512), (7168, 16384), (7168, 2048), (2112, 7168)]
GEMM_MS = [1, 16, 64, 256, 1024, 4096]
EPS = 1e-6
U = 2.0**-24


def ratio(ours_us: float, theirs_us: float) -> str:
    return f"{theirs_us / ours_us:.2f}x"


# --- norm + quant ---------------------------------------------------------------------------------------


def normquant_inputs(n1: int, n2: int, m: int, gen: torch.Generator):
    full = (torch.randn(m, n1 + n2 + 64, generator=gen) * 2).to(torch.bfloat16).cuda()
    q, k, _ = full.split([n1, n2, 64], dim=1)
    w = (1.0 + 0.2 * torch.randn(n1 + n2, generator=gen)).to(torch.bfloat16).cuda()
    q_w, k_w = w.split([n1, n2])
    return q, k, q_w, k_w


def normquant_row(label: str, n1: int, n2: int, m: int, gen: torch.Generator, timer: EventTimer) -> list:
    q, k, q_w, k_w = normquant_inputs(n1, n2, m, gen)

    def call(backend: str):
        return md.normquant.fused_qk_rmsnorm_group_quant(q, q_w, EPS, k, k_w, transpose_scale=True, backend=backend)

    ours, theirs = call("triton"), call("aiter-triton")
    a, b = theirs.q_quant.logical_scale().double(), ours.q_quant.logical_scale().double()
    if not ((a - b).abs() <= b * (n1 / 2 + 16) * U).all():
        raise SystemExit(f"norm+quant {label} M={m}: aiter's scales beyond the fp32-sum bound of ours")
    codes = (theirs.q_quant.data.view(torch.uint8).int() - ours.q_quant.data.view(torch.uint8).int()).abs()
    differ = int((codes != 0).sum())
    ours_us, theirs_us = timer(lambda: call("triton")), timer(lambda: call("aiter-triton"))
    return [label, m, f"{ours_us:.1f}", f"{theirs_us:.1f}", ratio(ours_us, theirs_us), differ]


# --- GEMM -----------------------------------------------------------------------------------------------


def gemm_operands(m: int, n: int, k: int, gen: torch.Generator):
    qw = md.layouts.quantize_blocks((torch.randn(n, k, generator=gen) * 0.02).cuda(), flavor="aiter")
    qa = md.quantize_groups(torch.randn(m, k, generator=gen).to(torch.bfloat16).cuda(), 128, flavor="aiter-hip")
    return qa, qw


def describe_config(config: dict) -> str:
    keys = (("BLOCK_SIZE_M", "M"), ("BLOCK_SIZE_N", "N"), ("BLOCK_SIZE_K", "K"))
    tile = "x".join(str(config[key]) for key, _ in keys)
    return f"{tile} w{config['num_warps']} s{config['num_stages']} ks{config['NUM_KSPLIT']}"


def gemm_row(n: int, k: int, m: int, gen: torch.Generator, timer: EventTimer, diagnose: bool) -> tuple[list, list]:
    qa, qw = gemm_operands(m, n, k, gen)
    config = aiter_triton.gemm_config(m, n, k, "gfx950", qa.data.device)

    def ours():
        return triton_block_scaled_mm(qa.data, qa.scale, md.ScaleLayout.ROW_MAJOR, qw.data, qw.scale, k)

    def theirs(cfg=config):
        return aiter_triton.gemm_a8w8_blockscale(qa.data, qw.data, qa.scale, qw.scale, "gfx950", config=cfg)

    notes = [check_gemm("ours", ours(), qa, qw), check_gemm("aiter", theirs(), qa, qw)]
    ours_us, theirs_us = timer(ours), timer(theirs)
    flops = 2.0 * m * n * k
    row = [f"{n}x{k}", m, f"{ours_us:.1f}", f"{theirs_us:.1f}", ratio(ours_us, theirs_us)]
    row += [f"{flops / ours_us / 1e6:.0f}", f"{flops / theirs_us / 1e6:.0f}", describe_config(config)]
    if diagnose:
        doubled = dict(config, num_warps=2 * config["num_warps"])
        notes.append(check_gemm("aiter 2x warps", theirs(doubled), qa, qw))
        row.append(f"{timer(lambda: theirs(doubled)):.1f}")
    return row, notes


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=None, help="also write the markdown here")
    parser.add_argument("--quick", action="store_true", help="fewer M values")
    parser.add_argument("--only", choices=("normquant", "gemm"), default=None)
    parser.add_argument("--reps", type=int, default=30)
    parser.add_argument("--diagnose", action="store_true", help="also time aiter's GEMM with twice its warps")
    args = parser.parse_args(argv)
    require_cuda("aiter_bench")
    why = aiter_triton.unavailable_reason(torch.device("cuda"))
    if why is not None:
        raise SystemExit(f"aiter_bench: {why}")
    timer = EventTimer(args.reps)
    gen = torch.Generator().manual_seed(0)
    start = time.perf_counter()
    sections = [
        f"{environment('cuda')}; amd-aiter {real_aiter.PINNED_VERSION}; median of {args.reps} calls, L2 flushed"
    ]
    if args.only in (None, "normquant"):
        ms = [1, 64, 4096] if args.quick else NORMQUANT_MS
        rows = []
        for label, (n1, n2) in NORMQUANT_SHAPES.items():
            for m in ms:
                rows.append(normquant_row(label, n1, n2, m, gen, timer))
                print(" | ".join(str(c) for c in rows[-1]), flush=True)
        header = ["shape", "M", "ours us", "aiter us", "aiter / ours", "fp8 bytes differing"]
        sections.append("Fused RMSNorm + FP8 group quant (COL_MAJOR scales)\n\n" + markdown_table(header, rows))
    if args.only in (None, "gemm"):
        ms = [1, 64, 1024] if args.quick else GEMM_MS
        rows, notes = [], []
        for n, k in GEMM_SHAPES[:2] if args.quick else GEMM_SHAPES:
            for m in ms:
                row, row_notes = gemm_row(n, k, m, gen, timer, args.diagnose)
                rows.append(row)
                notes += [note for note in row_notes if note]
                print(" | ".join(str(c) for c in row), flush=True)
        header = [
            "N x K",
            "M",
            "ours us",
            "aiter us",
            "aiter / ours",
            "ours TFLOP/s",
            "aiter TFLOP/s",
            "aiter config (MI350X)",
        ]
        if args.diagnose:
            header.append("aiter 2x warps us")
        times = [float(r[3]) / float(r[2]) for r in rows]
        geomean = math.exp(sum(math.log(t) for t in times) / len(times))
        sections.append(
            "Block-scale GEMM, DeepSeek-V3 shapes (plain weight, ROW_MAJOR scales)\n\n"
            + markdown_table(header, rows)
            + f"\n\naiter / ours geomean {geomean:.2f}x. Accuracy: "
            + ("; ".join(notes) if notes else "every element of both within the fp32 bound + 1 ulp")
        )
    sections.append(f"{time.perf_counter() - start:.0f} s")
    text = "\n\n".join(sections) + "\n"
    print(text)
    write_report(args.out, text)


if __name__ == "__main__":
    main()
