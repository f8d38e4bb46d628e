"""Block-scaled FP8 GEMMs on an NVIDIA GPU, side by side in one run: Triton plain and preshuffled (the
preshuffled weight also with the Triton kernel's swizzled staging), cuBLAS scaled_mm blockwise, and a
bf16 torch.matmul of the same shape.

  PYTHONPATH=. python3 benchmarks/gemm_bench.py --out gemm_bench.md [--quick] [--autotune] [--swap-scales]
      [--shapes NxK,...] [--ms M,...] [--cases NxK:M,...]

Every variant is first checked against the fp64 product of the same quantized operands on fresh data
(`harness.check_gemm`): elements beyond the fp32-accumulation bound + 1 bf16 ulp are reported, and the
run stops if one exceeds it by more than Hopper's tensor-core accumulation allowance.
Times are medians of CUDA-event-timed calls with the L2 cache flushed before each (`harness.EventTimer`),
so small-M weight streams come from HBM as in serving. cuBLAS needs M % 4 == 0 (RESULTS.md): its
activation is padded to a multiple of 4 rows outside the timed region, so cuBLAS is timed at its best.
Prints a markdown table (TFLOP/s; GB/s of the bytes that must move; ratios) and the targets.
"""

from __future__ import annotations

import argparse
import math
import time

import torch

import mla_debug as md
from benchmarks.harness import (
    EventTimer,
    case_list,
    check_gemm,
    environment,
    int_list,
    markdown_table,
    require_cuda,
    shape_list,
    write_report,
)
from mla_debug.gpu.gemm.launcher import autotune, launch_config, triton_block_scaled_mm

SHAPES = [(24576, 1536), (3072, 1536), (32768, 512), (4096, 512), (7168, 16384), (7168, 2048), (2112, 7168)]
MS = [1, 16, 64, 256, 1024, 4096, 8192]


def operands(m: int, n: int, k: int, gen: torch.Generator):
    w = torch.randn(n, k, generator=gen) * 0.02
    x = torch.randn(m, k, generator=gen).to(torch.bfloat16)
    qw = md.layouts.quantize_blocks(w.cuda())
    qa = md.quantize_groups(x.cuda(), 128)
    return w.cuda().to(torch.bfloat16), x.cuda(), qw, qa


def cublas_call(qa: md.QuantizedActivation, qw: md.QuantizedWeight):
    from torch.nn.functional import ScalingType, scaled_mm

    m = qa.m
    rows = -(-m // 4) * 4
    data = torch.zeros((rows, qa.k), dtype=torch.uint8, device="cuda")
    data[:m] = qa.data.view(torch.uint8)
    logical = torch.ones((rows, qa.groups), device="cuda")
    logical[:m] = qa.logical_scale()
    a, scale = data.view(qa.data.dtype), logical.t().contiguous().t()
    w_scale = qw.scale.t()

    def call():
        return scaled_mm(
            a,
            qw.data.t(),
            scale,
            ScalingType.BlockWise1x128,
            w_scale,
            ScalingType.BlockWise128x128,
            output_dtype=torch.bfloat16,
        )[:m]

    return call


def triton_variants(qa: md.QuantizedActivation, qw: md.QuantizedWeight, k: int) -> dict:
    """The Triton GEMM calls compared: the plain weight, the preshuffled weight (default staging), and
    the same preshuffled launch with the weight tile staged in the Triton kernel's swizzled layout."""
    shuffled = qw.shuffled((16, 16), by="bench")
    col = qa.presented_as("col_major")

    def preshuffled(staging: str):
        return lambda: triton_block_scaled_mm(
            col.data, col.scale, md.ScaleLayout.COL_MAJOR, shuffled.data, shuffled.scale, k, shuffled=True,
            staging=staging,
        )  # fmt: skip

    return {
        "triton": lambda: triton_block_scaled_mm(qa.data, qa.scale, md.ScaleLayout.ROW_MAJOR, qw.data, qw.scale, k),
        "triton_preshuffled": preshuffled("auto"),
        "triton_preshuffled_swizzled": preshuffled("swizzled"),
    }


def run_case(m, n, k, gen, timer, tune: bool, swap_scales: bool = False) -> dict:
    w_bf16, x_bf16, qw, qa = operands(m, n, k, gen)
    variants = {
        **triton_variants(qa, qw, k),
        "cublas": cublas_call(qa, qw),
        "bf16": lambda: torch.matmul(x_bf16, w_bf16.t()),
    }
    if swap_scales:  # each weight layout with the other kernel's activation-scale byte order
        shuffled = qw.shuffled((16, 16), by="bench")
        col = qa.presented_as("col_major")
        variants["plain_colmajor_scales"] = lambda: triton_block_scaled_mm(
            col.data, col.scale, md.ScaleLayout.COL_MAJOR, qw.data, qw.scale, k
        )
        variants["preshuffled_rowmajor_scales"] = lambda: triton_block_scaled_mm(
            qa.data, qa.scale, md.ScaleLayout.ROW_MAJOR, shuffled.data, shuffled.scale, k, shuffled=True
        )
    checked = [name for name in variants if name != "bf16"]
    notes = [check_gemm(name, variants[name](), qa, qw) for name in checked]
    row = dict(N=n, K=k, M=m, config=str(launch_config(m, n, k, torch.device("cuda"))), notes=[x for x in notes if x])
    if tune:
        best, times = autotune(m, n, k)
        row["tuned_config"] = str(best)
        ranked = sorted(times.items(), key=lambda kv: kv[1] if kv[1] == kv[1] else 1e9)
        print(f"  autotune {n}x{k} M={m}: " + ", ".join(f"{c} {t * 1e3:.0f}us" for c, t in ranked[:12]), flush=True)
        row["notes"].append(check_gemm("triton (tuned)", variants["triton"](), qa, qw))
    flops = 2.0 * m * n * k
    moved = m * k + n * k + 2 * m * n + 4 * (m * k // 128 + n * k // 128 // 128)
    for name, fn in variants.items():
        us = timer(fn)
        row[f"{name}_us"] = us
        row[f"{name}_tflops"] = flops / us / 1e6
        row[f"{name}_gbs"] = moved / us / 1e3
    return row


def table(rows: list[dict]) -> str:
    header = [
        "N x K", "M", "config", "Triton TFLOP/s", "preshuffled TFLOP/s", "cuBLAS TFLOP/s", "bf16 TFLOP/s",
        "Triton GB/s", "Triton / cuBLAS", "preshuffled / plain", "Triton / bf16",
        "preshuffled, swizzled staging / plain",
    ]  # fmt: skip
    cells = [
        [
            f"{r['N']}x{r['K']}",
            r["M"],
            r.get("tuned_config", r["config"]),
            f"{r['triton_tflops']:.1f}",
            f"{r['triton_preshuffled_tflops']:.1f}",
            f"{r['cublas_tflops']:.1f}",
            f"{r['bf16_tflops']:.1f}",
            f"{r['triton_gbs']:.0f}",
            f"{r['triton_tflops'] / r['cublas_tflops']:.2f}",
            f"{r['triton_preshuffled_tflops'] / r['triton_tflops']:.3f}",
            f"{r['triton_tflops'] / r['bf16_tflops']:.2f}",
            f"{r['triton_preshuffled_swizzled_tflops'] / r['triton_tflops']:.3f}",
        ]
        for r in rows
    ]
    return markdown_table(header, cells)


def swapped_table(rows: list[dict]) -> str:
    """With --swap-scales: is the preshuffled kernel's cost its weight bytes or its scale byte order?"""
    if not rows or "plain_colmajor_scales_tflops" not in rows[0]:
        return ""
    header = [
        "N x K", "M", "plain, ROW_MAJOR scales", "plain, COL_MAJOR scales", "preshuffled, COL_MAJOR",
        "preshuffled, ROW_MAJOR",
    ]  # fmt: skip
    variants = ("triton", "plain_colmajor_scales", "triton_preshuffled", "preshuffled_rowmajor_scales")
    cells = [[f"{r['N']}x{r['K']}", r["M"], *(f"{r[v + '_tflops']:.1f}" for v in variants)] for r in rows]
    return "TFLOP/s by weight layout and activation-scale byte order:\n\n" + markdown_table(header, cells) + "\n\n"


def geomean(values) -> float:
    values = list(values)
    return math.exp(sum(math.log(v) for v in values) / len(values))


def targets(rows: list[dict]) -> str:
    large = [r for r in rows if r["M"] >= 1024]
    small = [r for r in rows if r["M"] <= 64]
    out = []
    if large:
        ratio = geomean(r["triton_tflops"] / r["cublas_tflops"] for r in large)
        out.append(f"- M >= 1024: Triton / cuBLAS TFLOP/s geomean {ratio:.2f} (target >= 0.80)")
    if small:
        ratio = geomean(r["triton_tflops"] / r["cublas_tflops"] for r in small)
        worst = min(small, key=lambda r: r["triton_tflops"] / r["cublas_tflops"])
        out.append(
            f"- M <= 64: Triton / cuBLAS speed geomean {ratio:.2f}, worst {worst['triton_tflops'] / worst['cublas_tflops']:.2f} "
            f"at {worst['N']}x{worst['K']} M={worst['M']} (target >= 1.0)"
        )
    pre = [r["triton_preshuffled_tflops"] / r["triton_tflops"] for r in rows]
    out.append(
        f"- preshuffled / plain: geomean {geomean(pre):.3f}, min {min(pre):.3f}, max {max(pre):.3f}, "
        f"{sum(p >= 0.95 for p in pre)} of {len(pre)} cases at 0.95 or more (target within 5%)"
    )
    return "\n".join(out)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=None, help="also write the markdown here")
    parser.add_argument("--quick", action="store_true", help="two shapes, three M values")
    parser.add_argument("--autotune", action="store_true", help="autotune each case first (slow; for tuning)")
    parser.add_argument("--shapes", type=shape_list, default=None, help="N1xK1,N2xK2,... instead of the DeepSeek list")
    parser.add_argument("--ms", type=int_list, default=None, help="M1,M2,... instead of the default list")
    parser.add_argument("--cases", type=case_list, default=None, help="NxK:M,... : these cases only")
    parser.add_argument("--reps", type=int, default=30)
    parser.add_argument(
        "--swap-scales", action="store_true", help="also time each weight layout with the other scale byte order"
    )
    args = parser.parse_args(argv)
    require_cuda("gemm_bench")
    shapes = args.shapes or (SHAPES[:2] if args.quick else SHAPES)
    ms = args.ms or ([1, 64, 4096] if args.quick else MS)
    cases = args.cases or [(n, k, m) for n, k in shapes for m in ms]

    timer = EventTimer(args.reps)
    gen = torch.Generator().manual_seed(0)
    rows = []
    start = time.perf_counter()
    for n, k, m in cases:
        rows.append(run_case(m, n, k, gen, timer, args.autotune, args.swap_scales))
        print(
            f"{n}x{k} M={m}: "
            + ", ".join(
                f"{v}={rows[-1][f'{v}_us']:.1f}us"
                for v in ("triton", "triton_preshuffled", "triton_preshuffled_swizzled", "cublas", "bf16")
            ),
            flush=True,
        )
    header = (
        f"{environment('cuda')}; median of {args.reps} CUDA-event-timed calls, L2 flushed; "
        f"{time.perf_counter() - start:.0f} s"
    )
    notes = [note for r in rows for note in r["notes"] if note] or ["every element within the fp32 bound + 1 ulp"]
    text = (
        f"{header}\n\n{table(rows)}\n\n{targets(rows)}\n\n{swapped_table(rows)}Accuracy checks:\n"
        + "\n".join(f"- {n}" for n in notes)
        + "\n"
    )
    print(text)
    write_report(args.out, text)


if __name__ == "__main__":
    main()
