"""GPU timings of the block-scaled GEMM paths mla_debug can run on an NVIDIA GPU, side by side.

Variants, per DeepSeek-V3/V4 linear shape and M:
  cublas    - kernel "cublas-blockwise" (torch F.scaled_mm BlockWise1x128 x BlockWise128x128)
  bf16      - torch.matmul of bf16 operands (the unquantized baseline)
  emulated  - kernel "aiter-bpreshuffle" (accumulation="dequant") on CUDA tensors: the CPU emulation's
              code on the GPU (fp32 GEMM of the dequantized weight, cached)
Each variant is checked against the fp32 reference of the same quantized operands before timing.
Times: median of CUDA-event-timed runs (triton.testing.do_bench when available), inputs rotated so
the activation is not served from L2.
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

import torch

import mla_debug as md

SHAPES = [(24576, 1536), (3072, 1536), (32768, 512), (4096, 512), (7168, 16384), (7168, 2048), (2112, 7168)]
MS = [1, 16, 64, 256, 1024, 4096, 8192]


def bench(fn, reps: int = 50) -> float:
    """Median milliseconds of `fn` over `reps` timed runs after warm-up (CUDA events)."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default=None)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    shapes, ms = (SHAPES[:2], MS[:3]) if args.quick else (SHAPES, MS)
    gen = torch.Generator().manual_seed(0)
    rows = []
    for n, k in shapes:
        w = torch.randn(n, k, generator=gen) * 0.02
        qw = md.quantize_blocks(w.cuda())
        cublas = md.BlockScaledLinear("bench", qw).attach(md.get_kernel("cublas-blockwise"))
        emul = md.BlockScaledLinear("bench", md.QuantizedWeight(qw.data, qw.scale, qw.fmt)).attach(
            md.get_kernel("aiter-bpreshuffle", accumulation="dequant")
        )
        w_bf16 = w.cuda().to(torch.bfloat16)
        w_ref = qw.dequantize_plain()
        for m in ms:
            xs = [torch.randn(m, k, device="cuda", dtype=torch.bfloat16) for _ in range(4)]
            qas = [cublas.kernel.quantize_input(x, qw.fmt) for x in xs]
            qas_col = [emul.kernel.quantize_input(x, qw.fmt) for x in xs]
            ref = qas[0].dequantize() @ w_ref.t()
            try:
                err_cublas = md.error_metrics(cublas(qas[0]).float(), ref)["rel_l2"]
            except ValueError as err:  # cuBLAS refuses some shapes; record it instead of a time
                print(f"{n}x{k} M={m}: cublas-blockwise unsupported: {str(err)[-120:]}")
                err_cublas = None
            errs = {
                "cublas": err_cublas if err_cublas is not None else 0.0,
                "emulated": md.error_metrics(emul(qas_col[0]).float(), ref)["rel_l2"],
                "bf16": md.error_metrics((xs[0] @ w_bf16.t()).float(), xs[0].float() @ w.cuda().t())["rel_l2"],
            }
            assert all(e < 2e-2 for e in errs.values()), errs
            it = {"i": 0}

            def rotate(items):
                it["i"] = (it["i"] + 1) % len(items)
                return items[it["i"]]

            t_cublas = bench(lambda: cublas(rotate(qas))) if err_cublas is not None else float("nan")
            t_bf16 = bench(lambda: rotate(xs) @ w_bf16.t())
            t_emul = bench(lambda: emul(rotate(qas_col)), reps=10)
            flops = 2 * m * n * k
            weight_bytes = n * k  # fp8 weight read once dominates at small M
            rows.append(
                dict(
                    n=n,
                    k=k,
                    m=m,
                    cublas_tflops=flops / t_cublas / 1e9,
                    bf16_tflops=flops / t_bf16 / 1e9,
                    emul_tflops=flops / t_emul / 1e9,
                    cublas_gbs=weight_bytes / t_cublas / 1e6,
                    cublas_vs_bf16=t_bf16 / t_cublas,
                    err_cublas=errs["cublas"],
                    err_emul=errs["emulated"],
                )
            )
            r = rows[-1]
            print(
                f"{n:>6}x{k:<6} M={m:<5} cublas {r['cublas_tflops']:7.1f} TF/s ({r['cublas_gbs']:6.0f} GB/s weight)  "
                f"bf16 {r['bf16_tflops']:7.1f}  emulated {r['emul_tflops']:6.1f}  cublas/bf16 speed {r['cublas_vs_bf16']:.2f}x  "
                f"err {r['err_cublas']:.1e}/{r['err_emul']:.1e}",
                flush=True,
            )
    header = "| N x K | M | cuBLAS fp8 TFLOP/s | cuBLAS weight GB/s | bf16 TFLOP/s | emulated TFLOP/s | cuBLAS speed / bf16 |"
    lines = [header, "|" + "---|" * 7]
    for r in rows:
        lines.append(
            f"| {r['n']}x{r['k']} | {r['m']} | {r['cublas_tflops']:.1f} | {r['cublas_gbs']:.0f} | {r['bf16_tflops']:.1f} | "
            f"{r['emul_tflops']:.1f} | {r['cublas_vs_bf16']:.2f} |"
        )
    table = "\n".join(lines)
    print(table)
    if args.out:
        Path(args.out).write_text(table + "\n")


if __name__ == "__main__":
    main()
