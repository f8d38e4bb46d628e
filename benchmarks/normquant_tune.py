"""Sweep the launch configuration of the fused RMSNorm + FP8 group quant kernel on a CUDA GPU.

  PYTHONPATH=. python3 benchmarks/normquant_tune.py [--ms 1,64,4096,16384]

For each DeepSeek-V4 shape and M, times every candidate (rows per program, warps, whether a program
does the k row after its q row or k rows get programs of their own, and `short_chain`) as CUDA-graph replays (pure GPU time)
next to the heuristic's choice, after checking that the candidate's outputs are bitwise those of the
heuristic's. What the heuristic in normquant/_triton_support.py is tuned from.
"""

from __future__ import annotations

import argparse
import itertools

import torch
from normquant_bench import time_graph  # benchmarks/ is on sys.path when this file runs as a script

from mla_debug.gpu.normquant import support
from mla_debug.normquant import triton_fused
from mla_debug.normquant._inputs import validate_inputs

SHAPES = {"V4-Flash": (1024, 512), "V4-Pro/R1-MLA": (1536, 512)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ms", default="64,16384")
    args = parser.parse_args()
    gen = torch.Generator(device="cuda").manual_seed(0)
    for name, (n1, n2) in SHAPES.items():
        for m in (int(v) for v in args.ms.split(",")):
            q = torch.randn(m, n1, device="cuda", generator=gen).to(torch.bfloat16)
            k = torch.randn(m, n2, device="cuda", generator=gen).to(torch.bfloat16)
            w1 = torch.rand(n1, device="cuda", generator=gen).to(torch.bfloat16)
            w2 = torch.rand(n2, device="cuda", generator=gen).to(torch.bfloat16)
            nq = validate_inputs("tune", q, w1, 1e-6, k, w2, None, None, 128, False, "e4m3fn", "aiter", False)
            base_cfg = support.launch_for(m, (n1, n2), q.device)
            base_out = triton_fused.allocate_outputs(nq, False)
            triton_fused.make_launch(nq, base_out, base_cfg)()
            results = []
            for block_m, warps, k_with_q, short in itertools.product(
                (1, 2, 4, 8), (1, 2, 4, 8, 16), *[(False, True)] * 2
            ):
                cfg = support.RowLaunch(block_m, warps, k_with_q, short)
                out = triton_fused.allocate_outputs(nq, False)
                try:
                    launch = triton_fused.make_launch(nq, out, cfg)
                    launch()
                except Exception as err:  # a configuration the compiler rejects
                    print(f"  {cfg}: {type(err).__name__}")
                    continue
                same = [torch.equal(getattr(out, f), getattr(base_out, f)) for f in ("q_bytes", "scale", "k_out")]
                assert all(same), cfg
                us = time_graph(launch, 50, 10)
                if us is not None:
                    results.append((us, str(cfg)))
            results.sort()
            base = time_graph(triton_fused.make_launch(nq, base_out, base_cfg), 50, 10)
            best = ", ".join(f"{c} {t:.1f}" for t, c in results[:5])
            print(f"{name} M={m}: heuristic {base_cfg} {base:.1f} us; best {best}", flush=True)


if __name__ == "__main__":
    main()
