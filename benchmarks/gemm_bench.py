"""Block-scaled FP8 GEMMs on an NVIDIA GPU, side by side in one run: Triton plain and preshuffled (the
preshuffled weight also with the Triton kernel's swizzled staging), cuBLAS scaled_mm blockwise, and a
bf16 torch.matmul of the same shape.

  PYTHONPATH=. python3 benchmarks/gemm_bench.py --out gemm_bench.md [--quick] [--autotune] [--swap-scales]

Every variant is first checked against the fp64 product of the same quantized operands on fresh data:
elements beyond the fp32-accumulation bound + 1 bf16 ulp are reported, and the run stops if one exceeds
it by more than Hopper's tensor-core accumulation allowance (see `check`).
Times are medians of CUDA-event-timed calls with the L2 cache flushed before each (a 1 GB write outside
the timed region), so small-M weight streams come from HBM as in serving. cuBLAS needs M % 4 == 0 (measured, see RESULTS.md): its activation is padded to a
multiple of 4 rows outside the timed region, so cuBLAS is timed at its best. Prints a markdown table
(TFLOP/s; GB/s of the bytes that must move for M <= 64; ratios) and the issue's targets.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from pathlib import Path

import torch

import mla_debug as md
from mla_debug.gpu.gemm.launcher import autotune, launch_config, triton_block_scaled_mm

SHAPES = [(24576, 1536), (3072, 1536), (32768, 512), (4096, 512), (7168, 16384), (7168, 2048), (2112, 7168)]
MS = [1, 16, 64, 256, 1024, 4096, 8192]


class Timer:
    """Median milliseconds of a call, L2 flushed before each timed run."""

    def __init__(self, reps: int) -> None:
        self.reps = reps
        # 1 GB: longer to write than the host needs to enqueue the timed call, so host-side launch
        # overhead is not counted as GPU time.
        self.flush = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")

    def __call__(self, fn) -> float:
        for _ in range(3):
            fn()
        times = []
        for _ in range(self.reps):
            self.flush.fill_(1)
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
        return statistics.median(times)


def parse_cases(text: str) -> list[tuple[int, int, int]]:
    """(N, K, M) triples from the probes' --cases "NxK:M,NxK:M" argument."""
    cases = []
    for item in text.split(","):
        try:
            shape, m = item.split(":")
            n, k = shape.split("x")
            cases.append((int(n), int(k), int(m)))
        except ValueError:
            raise SystemExit(f"--cases: {item!r} is not NxK:M (e.g. 7168x2048:64)") from None
    return cases


def operands(m: int, n: int, k: int, gen: torch.Generator):
    w = torch.randn(n, k, generator=gen) * 0.02
    x = torch.randn(m, k, generator=gen).to(torch.bfloat16)
    qw = md.quantize_blocks(w.cuda())
    qa = md.quantize_groups(x.cuda(), 128)
    return w.cuda().to(torch.bfloat16), x.cuda(), qw, qa


# Hopper's fp8 tensor cores keep about 14 bits while adding the products inside an MMA (DeepSeek-V3
# technical report, 3.3.2); the kernels promote to fp32 after every 128-wide K block, so each block's
# dot may be off by up to ~2^-13 of its sum of |products| beyond what fp32 accumulation explains.
TENSOR_CORE_REL = 2.0**-13


def check(name: str, out: torch.Tensor, qa: md.QuantizedActivation, qw: md.QuantizedWeight) -> str:
    """Compare `out` with the fp64 product of the same quantized operands element by element. Bound: fp32
    accumulation in any order, 2 (K + 3) 2^-24 sum|x w|, plus one bf16 ulp of the output. Elements beyond
    it are reported with their excess as a fraction of the tensor-core allowance TENSOR_CORE_REL sum|x w|;
    the run stops when any element exceeds bound + allowance, which no accumulation explains (a wrong
    layout is off by whole magnitudes)."""
    x = qa.dequantize().double()
    w = qw.dequantize_plain().double()
    exact = x @ w.t()
    magnitude = x.abs() @ w.abs().t()
    bound = 2 * (qa.k + 3) * 2.0**-24 * magnitude
    larger = torch.maximum(exact.abs(), out.double().abs())  # the bf16 rounding is an ulp of the larger
    ulp = torch.exp2(torch.floor(torch.log2(larger.clamp_min(2.0**-126))) - 7)
    excess = ((out.double() - exact).abs() - bound - ulp) / (TENSOR_CORE_REL * magnitude)
    worst = excess.max().item()
    if not math.isfinite(worst) or worst > 1:
        sys.exit(
            f"{name}: beyond the fp32 bound by {worst:.2f}x the tensor-core allowance at M={qa.m}, N={qw.n}, K={qw.k}"
        )
    outside = int((excess > 0).sum())
    if not outside:
        return ""
    return (
        f"{name} {qw.n}x{qw.k} M={qa.m}: {outside} of {exact.numel()} elements beyond the fp32 bound + 1 ulp, "
        f"worst by {worst:.3f} of the tensor-core allowance"
    )


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
    notes = [check(name, variants[name](), qa, qw) for name in checked]
    row = dict(N=n, K=k, M=m, config=str(launch_config(m, n, k, torch.device("cuda"))), notes=[x for x in notes if x])
    if tune:
        best, times = autotune(m, n, k)
        row["tuned_config"] = str(best)
        ranked = sorted(times.items(), key=lambda kv: kv[1] if kv[1] == kv[1] else 1e9)
        print(f"  autotune {n}x{k} M={m}: " + ", ".join(f"{c} {t * 1e3:.0f}us" for c, t in ranked[:12]), flush=True)
        row["notes"].append(check("triton (tuned)", variants["triton"](), qa, qw))
    flops = 2.0 * m * n * k
    moved = m * k + n * k + 2 * m * n + 4 * (m * k // 128 + n * k // 128 // 128)
    for name, fn in variants.items():
        ms = timer(fn)
        row[f"{name}_us"] = ms * 1e3
        row[f"{name}_tflops"] = flops / ms / 1e9
        row[f"{name}_gbs"] = moved / ms / 1e6
    return row


def table(rows: list[dict]) -> str:
    head = (
        "| N x K | M | config | Triton TFLOP/s | preshuffled TFLOP/s | cuBLAS TFLOP/s | bf16 TFLOP/s | Triton GB/s "
        "| Triton / cuBLAS | preshuffled / plain | Triton / bf16 | preshuffled, swizzled staging / plain |"
    )
    lines = [head, "|" + "---|" * 12]
    for r in rows:
        lines.append(
            f"| {r['N']}x{r['K']} | {r['M']} | {r.get('tuned_config', r['config'])} | {r['triton_tflops']:.1f} "
            f"| {r['triton_preshuffled_tflops']:.1f} | {r['cublas_tflops']:.1f} | {r['bf16_tflops']:.1f} "
            f"| {r['triton_gbs']:.0f} | {r['triton_tflops'] / r['cublas_tflops']:.2f} "
            f"| {r['triton_preshuffled_tflops'] / r['triton_tflops']:.3f} | {r['triton_tflops'] / r['bf16_tflops']:.2f} "
            f"| {r['triton_preshuffled_swizzled_tflops'] / r['triton_tflops']:.3f} |"
        )
    return "\n".join(lines)


def swapped_table(rows: list[dict]) -> str:
    """With --swap-scales: is the preshuffled kernel's cost its weight bytes or its scale byte order?"""
    if not rows or "plain_colmajor_scales_tflops" not in rows[0]:
        return ""
    lines = [
        "| N x K | M | plain, ROW_MAJOR scales | plain, COL_MAJOR scales | preshuffled, COL_MAJOR | preshuffled, ROW_MAJOR |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        cells = ("triton", "plain_colmajor_scales", "triton_preshuffled", "preshuffled_rowmajor_scales")
        lines.append(f"| {r['N']}x{r['K']} | {r['M']} | " + " | ".join(f"{r[c + '_tflops']:.1f}" for c in cells) + " |")
    return "TFLOP/s by weight layout and activation-scale byte order:\n\n" + "\n".join(lines) + "\n\n"


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=None, help="also write the markdown here")
    parser.add_argument("--quick", action="store_true", help="two shapes, three M values")
    parser.add_argument("--autotune", action="store_true", help="autotune each case first (slow; for tuning)")
    parser.add_argument("--shapes", default=None, help="N1xK1,N2xK2,... instead of the DeepSeek list")
    parser.add_argument("--ms", default=None, help="M1,M2,... instead of the default list")
    parser.add_argument("--reps", type=int, default=30)
    parser.add_argument(
        "--swap-scales", action="store_true", help="also time each weight layout with the other scale byte order"
    )
    args = parser.parse_args()
    if not torch.cuda.is_available():
        sys.exit("gemm_bench needs a CUDA GPU")
    shapes = SHAPES[:2] if args.quick else SHAPES
    ms = [1, 64, 4096] if args.quick else MS
    if args.shapes:
        shapes = [tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",")]
    if args.ms:
        ms = [int(v) for v in args.ms.split(",")]
    import triton

    timer = Timer(args.reps)
    gen = torch.Generator().manual_seed(0)
    rows = []
    start = time.perf_counter()
    for n, k in shapes:
        for m in ms:
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
        f"{torch.cuda.get_device_name()}, torch {torch.__version__}, CUDA {torch.version.cuda}, "
        f"triton {triton.__version__}; median of {args.reps} CUDA-event-timed calls, L2 flushed; "
        f"{time.perf_counter() - start:.0f} s"
    )
    notes = [note for r in rows for note in r["notes"] if note] or ["every element within the fp32 bound + 1 ulp"]
    text = (
        f"{header}\n\n{table(rows)}\n\n{targets(rows)}\n\n{swapped_table(rows)}Accuracy checks:\n"
        + "\n".join(f"- {n}" for n in notes)
        + "\n"
    )
    print(text)
    if args.out:
        Path(args.out).write_text(text)


if __name__ == "__main__":
    main()
