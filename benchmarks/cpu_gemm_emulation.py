"""CPU cost of the aiter emulations against a plain fp32 F.linear, and of block-quantizing one layer.

  PYTHONPATH=. python3 benchmarks/cpu_gemm_emulation.py [--repeats 5] [--m 256] [--shapes NxK,...]
      [--layer NxK,...] [--out FILE]

Side by side in one process, per DeepSeek-V3 shape (M=256):
  linear_fp32           F.linear of fp32 x (M, K) and fp32 W (N, K) - the baseline
  <kernel> dequant      first call (decodes and caches the weight as the kernel reads it) and warm calls
  <kernel> blockwise    warm calls (per-128-K-block fp32 dots, the kernels' accumulation order)
and the time to block-quantize all weights of one DeepSeek-V3 attention layer (about 187M parameters).
Times are medians of `--repeats` runs (`harness.median_seconds`); ratios are against linear_fp32.
"""

from __future__ import annotations

import argparse
import time

import torch

import mla_debug as md
from benchmarks.harness import environment, markdown_table, median_seconds, shape_list, write_report

SHAPES = [(24576, 1536), (32768, 512), (7168, 16384)]
# One DeepSeek-V3 attention layer: fused_qkv_a_proj, q_b_proj, kv_b_proj, o_proj (N x K).
LAYER = [(2112, 7168), (24576, 1536), (32768, 512), (7168, 16384)]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--m", type=int, default=256)
    parser.add_argument("--shapes", type=shape_list, default=SHAPES, help="N1xK1,... instead of the V3 shapes")
    parser.add_argument("--layer", type=shape_list, default=LAYER, help="the weights block-quantized as one layer")
    parser.add_argument("--out", default=None, help="also write the markdown here")
    args = parser.parse_args(argv)
    gen = torch.Generator().manual_seed(0)
    rows = []
    for n, k in args.shapes:
        w = torch.randn(n, k, generator=gen) * 0.02
        qw = md.layouts.quantize_blocks(w)
        x = torch.randn(args.m, k, generator=gen).to(torch.bfloat16)
        x32, w32 = x.float(), qw.dequantize_plain()
        base = median_seconds(lambda: torch.nn.functional.linear(x32, w32), args.repeats)
        rows.append((n, k, "linear_fp32 (baseline)", base))
        for name in ("aiter-blockscale", "aiter-bpreshuffle"):
            for accumulation in ("dequant", "blockwise"):
                lin = md.kernels.BlockScaledLinear("bench", md.QuantizedWeight(qw.data, qw.scale, qw.fmt))
                lin.attach(md.get_kernel(name, accumulation=accumulation))
                qa = lin.kernel.quantize_input(x, qw.fmt)
                start = time.perf_counter()
                lin(qa)
                cold = time.perf_counter() - start
                warm = median_seconds(lambda: lin(qa), args.repeats)
                rows.append((n, k, f"{name} {accumulation} first call", cold))
                rows.append((n, k, f"{name} {accumulation} warm", warm))
    baselines = {(n, k): t for n, k, v, t in rows if v.startswith("linear_fp32")}
    table = markdown_table(
        ["N x K", "variant", "ms", "ratio"],
        [[f"{n}x{k}", variant, f"{t * 1e3:.1f}", f"{t / baselines[(n, k)]:.2f}"] for n, k, variant, t in rows],
    )

    weights = [torch.randn(n, k, generator=gen).to(torch.bfloat16) * 0.02 for n, k in args.layer]
    params = sum(w.numel() for w in weights)
    quant = median_seconds(lambda: [md.layouts.quantize_blocks(w) for w in weights], max(1, args.repeats // 2))
    text = "\n".join(
        [
            environment(),
            "",
            f"M={args.m}; median of {args.repeats}; ratio = time / linear_fp32 of the same shape",
            table,
            "",
            f"block-quantize one layer ({', '.join(f'{n}x{k}' for n, k in args.layer)}; "
            f"{params / 1e6:.1f}M bf16 params): {quant:.2f} s",
        ]
    )
    print(text)
    write_report(args.out, text)


if __name__ == "__main__":
    main()
