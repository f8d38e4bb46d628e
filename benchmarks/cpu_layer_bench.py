"""CPU cost of one DeepSeek-V3 attention layer (real dimensions, synthetic weights, FP8 emulation).

  PYTHONPATH=. python3 benchmarks/cpu_layer_bench.py [--tokens 64] [--repeats 3] [--mode decode]
      [--model deepseek-v3] [--tp 1,8] [--out FILE]

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
import time

from benchmarks.harness import (
    environment,
    int_list,
    markdown_table,
    median_seconds,
    peak_rss_gb,
    run_module,
    write_report,
)


def measure(model: str, tp: int, tokens: int, repeats: int, mode: str) -> dict:
    import torch

    import mla_debug as md

    cfg = md.MLAConfig.preset(model)
    start = time.perf_counter()
    ckpt = md.Checkpoint.synthetic(cfg, seed=0, progress=False)
    synth = time.perf_counter() - start
    synth_rss = peak_rss_gb()
    hidden = torch.randn(tokens, cfg.hidden_size, generator=torch.Generator().manual_seed(0))
    positions = torch.arange(tokens)
    start = time.perf_counter()
    layer = md.MLALayer(cfg, ckpt, tp_size=tp, platform="mi355x", scenario="vllm-pr56433")
    build = time.perf_counter() - start
    start = time.perf_counter()
    layer.run(hidden, positions, mode=mode)
    first = time.perf_counter() - start

    def timed(record: bool) -> float:
        return median_seconds(lambda: layer.run(hidden, positions, mode=mode, record=record), repeats)

    warm_on, warm_off = timed(True), timed(False)
    return dict(
        tp=tp,
        synth_s=synth,
        synth_rss_gb=synth_rss,
        build_s=build,
        first_s=first,
        warm_record_s=warm_on,
        warm_norecord_s=warm_off,
        peak_rss_gb=peak_rss_gb(),
        kernels={linear: choice.kernel for linear, choice in layer.kernels.items()},
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--mode", default="prefill", choices=["prefill", "decode"])
    parser.add_argument("--model", default="deepseek-v3", help="an MLAConfig preset")
    parser.add_argument("--tp", type=int_list, default=[1, 8], help="TP sizes, each in its own process")
    parser.add_argument("--out", default=None, help="also write the markdown here")
    parser.add_argument("--case", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.case is not None:
        print(json.dumps(measure(args.model, args.case, args.tokens, args.repeats, args.mode)))
        return
    rows = []
    for tp in args.tp:
        common = ["--tokens", str(args.tokens), "--repeats", str(args.repeats), "--mode", args.mode]
        out = run_module("cpu_layer_bench", "--case", str(tp), "--model", args.model, *common)
        rows.append(json.loads(out.strip().splitlines()[-1]))
    table = markdown_table(
        [
            "TP", "synthetic ckpt", "its peak RSS GB", "build", "first forward", "warm, recording",
            "warm, no recording", "peak RSS GB",
        ],
        [
            [
                r["tp"], f"{r['synth_s']:.2f}", f"{r['synth_rss_gb']:.2f}", f"{r['build_s']:.2f}", f"{r['first_s']:.2f}",
                f"{r['warm_record_s']:.2f}", f"{r['warm_norecord_s']:.2f}", f"{r['peak_rss_gb']:.2f}",
            ]
            for r in rows
        ],
    )  # fmt: skip
    lines = [
        environment(),
        "",
        f"{args.model}, {args.tokens} tokens, {args.mode}, mi355x / vllm-pr56433; times in s",
        table,
        "",
    ]
    first = rows[0]
    for r in rows[1:]:
        lines.append(
            f"TP{r['tp']} / TP{first['tp']} warm forward: {r['warm_record_s'] / first['warm_record_s']:.2f}x; "
            f"first forward: {r['first_s'] / first['first_s']:.2f}x; build: {r['build_s'] / first['build_s']:.2f}x"
        )
    lines += [f"TP{r['tp']} recording on / off: {r['warm_record_s'] / r['warm_norecord_s']:.3f}x" for r in rows]
    lines.append(f"kernels at TP{rows[-1]['tp']}: {rows[-1]['kernels']}")
    text = "\n".join(lines)
    print(text)
    write_report(args.out, text)


if __name__ == "__main__":
    main()
