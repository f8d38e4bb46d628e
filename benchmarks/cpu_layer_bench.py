"""CPU cost of one DeepSeek-V3 attention layer (real dimensions, synthetic weights, FP8 emulation).

Run: .venv/bin/python benchmarks/cpu_layer_bench.py [--tokens 64] [--repeats 3]

Each TP size runs in a fresh subprocess (so its peak RSS is its own), side by side in one invocation:
  synthetic ckpt - generate the layer's weights (Checkpoint.synthetic, seed 0) and quantize them; its peak
            RSS is the subprocess's right after, torch included
  build   - shard the checkpoint and load every linear (kernel choice, load-time shuffles)
  first   - the first forward (decodes and caches each weight as its kernel reads it)
  warm    - median of `--repeats` further forwards, with step recording on and off
Platform mi355x, scenario vllm-pr56433 (aiter-bpreshuffle and aiter-blockscale emulations), prefill.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time


def measure(tp: int, tokens: int, repeats: int, mode: str) -> dict:
    import torch

    import mla_debug as md

    cfg = md.MLAConfig.preset("deepseek-v3")
    start = time.perf_counter()
    ckpt = md.Checkpoint.synthetic(cfg, seed=0, progress=False)
    synth = time.perf_counter() - start
    synth_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    hidden = torch.randn(tokens, cfg.hidden_size, generator=torch.Generator().manual_seed(0))
    positions = torch.arange(tokens)
    start = time.perf_counter()
    layer = md.MLALayer(cfg, ckpt, tp_size=tp, platform="mi355x", scenario="vllm-pr56433")
    build = time.perf_counter() - start
    start = time.perf_counter()
    layer.run(hidden, positions, mode=mode)
    first = time.perf_counter() - start

    def timed(record: bool) -> float:
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            layer.run(hidden, positions, mode=mode, record=record)
            times.append(time.perf_counter() - t0)
        return statistics.median(times)

    warm_on, warm_off = timed(True), timed(False)
    return dict(
        tp=tp,
        synth_s=synth,
        synth_rss_gb=synth_rss,
        build_s=build,
        first_s=first,
        warm_record_s=warm_on,
        warm_norecord_s=warm_off,
        peak_rss_gb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
        kernels={k: v.split(":")[0] for k, v in layer.kernels.items()},
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--mode", default="prefill")
    parser.add_argument("--case", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.case is not None:
        print(json.dumps(measure(args.case, args.tokens, args.repeats, args.mode)))
        return
    rows = []
    for tp in (1, 8):
        out = subprocess.run(
            [
                sys.executable,
                __file__,
                "--case",
                str(tp),
                "--tokens",
                str(args.tokens),
                "--repeats",
                str(args.repeats),
                "--mode",
                args.mode,
            ],
            capture_output=True,
            text=True,
            check=True,
        )
        rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
    print(f"DeepSeek-V3 real dims, {args.tokens} tokens, {args.mode}, mi355x / vllm-pr56433; times in s")
    print(
        "| TP | synthetic ckpt | its peak RSS GB | build | first forward | warm, recording | warm, no recording "
        "| peak RSS GB |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['tp']} | {r['synth_s']:.2f} | {r['synth_rss_gb']:.2f} | {r['build_s']:.2f} | {r['first_s']:.2f} | "
            f"{r['warm_record_s']:.2f} | {r['warm_norecord_s']:.2f} | {r['peak_rss_gb']:.2f} |"
        )
    tp1, tp8 = rows
    print(
        f"\nTP8 / TP1 warm forward: {tp8['warm_record_s'] / tp1['warm_record_s']:.2f}x; "
        f"first forward: {tp8['first_s'] / tp1['first_s']:.2f}x; build: {tp8['build_s'] / tp1['build_s']:.2f}x"
    )
    for r in rows:
        print(f"TP{r['tp']} recording on / off: {r['warm_record_s'] / r['warm_norecord_s']:.3f}x")
    print(f"kernels at TP8: {tp8['kernels']}")


if __name__ == "__main__":
    main()
