"""Loading, diffing and explaining two captures of a real-size DeepSeek-V3 layer: TP2 against TP8.

  PYTHONPATH=. python3 benchmarks/capture_explain.py [--model deepseek-v3] [--tokens 16] [--tp 2,8]
      [--input-differs] [--workdir DIR] [--out FILE]

Setup (not timed): a synthetic checkpoint of the layer (seed 0), mla_debug's reference run at each TP
size as a capture (`explain.run_capture`: real per-rank weight and activation shards), and in the larger
TP size a planted defect - kv_b_proj's bytes shuffled (16, 16) once on every rank, with kv_b_proj's output
what a plain reader of those bytes computes - written with the capture store to `--workdir`. With
`--input-differs` the larger TP size runs on a layer input moved by one bf16 rounding step here and there
(what earlier layers' partial sums in another order leave), so the diff also propagates that difference
through the fp32 truth on each side's input.

Measured, in a fresh process (so the peak is its own): `md.load_capture` of both folders,
`md.diff_captures(tp2, tp8)` (per-rank byte forensics of every weight and scale against the TP2 capture's
checkpoint, the noise floor's reference and truth runs at both TP sizes, per-step errors) and
`md.explain_capture(tp8, checkpoint, diff=diff)` (every story on each diverging step). Wall seconds per
phase and the peak resident set (VmHWM of /proc/self/status, the high-water mark of the measuring
process only).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from benchmarks.harness import environment, int_list, markdown_table, run_module, write_report


def vm_hwm_gb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 2**20
    return float("nan")


def _nudged(hidden, seed: int = 2):
    """`hidden` with about one element in four moved by about one bf16 step (2^-7 relative), as sums in another
    order leave it."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    step = torch.randint(-1, 2, hidden.shape, generator=gen) * (torch.rand(hidden.shape, generator=gen) < 0.25)
    return (hidden.float() * (1 + step * 2.0**-7)).to(hidden.dtype)


def make_captures(model: str, tokens: int, tps: list[int], workdir: Path, input_differs: bool = False) -> list[Path]:
    import torch

    import mla_debug as md
    from mla_debug.capture.store import write_rank
    from mla_debug.explain import run_capture

    cfg = md.MLAConfig.preset(model)
    ckpt = md.Checkpoint.synthetic(cfg, seed=0, progress=False)
    first = torch.randn(tokens, cfg.hidden_size, generator=torch.Generator().manual_seed(1)).to(torch.bfloat16)
    positions = torch.arange(tokens)
    folders = []
    for tp in tps:
        hidden = _nudged(first) if input_differs and tp == max(tps) else first
        run = md.run_layer(cfg, ckpt, hidden, positions, tp_size=tp)
        capture = run_capture(run, ckpt, hidden, positions, note="benchmarks/capture_explain.py")
        folder = workdir / f"tp{tp}"
        for rank in capture.ranks:
            if tp == max(tps):
                _plant_shuffled_kv_b(rank, md)
            write_rank(folder, capture.manifest, rank)
        folders.append(folder)
        del run, capture
    return folders


def _plant_shuffled_kv_b(rank, md) -> None:
    """kv_b_proj's bytes shuffled once, and its output as a plain reader of those bytes computes it."""
    from dataclasses import replace

    from mla_debug.numerics.quantize import block_dequantize

    weight = rank.tensors["kv_b_proj.weight"]
    shuffled = md.shuffle_weight(weight.tensor)
    rank.tensors["kv_b_proj.weight"] = replace(weight, tensor=shuffled)
    x = rank.tensors["kv_b_proj.input"].tensor
    w = block_dequantize(shuffled, rank.tensors["kv_b_proj.weight_scale_inv"].tensor)
    out = rank.tensors["kv_b_proj.output"]
    rank.tensors["kv_b_proj.output"] = replace(out, tensor=(x.float() @ w.t()).to(out.tensor.dtype))


def measure(folders: list[str]) -> dict:
    import mla_debug as md

    start = time.perf_counter()
    a, b = (md.load_capture(f) for f in folders)
    loaded = time.perf_counter()
    diff = md.diff_captures(a, b)
    diffed = time.perf_counter()
    explanation = md.explain_capture(b, a.checkpoint(), diff=diff)
    explained = time.perf_counter()
    return {
        "load_s": loaded - start,
        "diff_s": diffed - loaded,
        "explain_s": explained - diffed,
        "total_s": explained - start,
        "peak_gb": vm_hwm_gb(),
        "diverged": diff.diverged_steps,
        "stories": [(e.step, [k.value for k in e.story]) for e in explanation.stories],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="deepseek-v3")
    parser.add_argument("--tokens", type=int, default=16)
    parser.add_argument("--tp", type=int_list, default=[2, 8], help="two TP sizes, e.g. 2,8")
    parser.add_argument("--input-differs", action="store_true", help="the larger TP size's layer input nudged")
    parser.add_argument("--workdir", type=Path, default=None, help="where the captures go (default: a temp folder)")
    parser.add_argument("--out", default=None, help="also write the markdown table here")
    parser.add_argument("--measure", nargs=2, default=None, help=argparse.SUPPRESS)  # the child process
    args = parser.parse_args()
    if args.measure:
        print(json.dumps(measure(args.measure)))
        return
    with tempfile.TemporaryDirectory(dir=args.workdir) as tmp:
        folders = make_captures(args.model, args.tokens, args.tp, Path(tmp), args.input_differs)
        result = json.loads(run_module("capture_explain", "--measure", *map(str, folders)).strip().splitlines()[-1])
    rows = [
        (
            f"{args.model} TP{args.tp[0]} vs TP{args.tp[1]}, {args.tokens} tokens"
            + (", layer inputs differ" if args.input_differs else ""),
            f"{result['load_s']:.1f}",
            f"{result['diff_s']:.1f}",
            f"{result['explain_s']:.1f}",
            f"{result['total_s']:.1f}",
            f"{result['peak_gb']:.2f}",
        )
    ]
    text = "\n".join(
        [
            environment(),
            "",
            markdown_table(("captures", "load s", "diff s", "explain s", "total s", "peak RSS GB (VmHWM)"), rows),
            "",
            f"diverged: {', '.join(result['diverged'])}; stories: {result['stories']}",
        ]
    )
    print(text)
    write_report(args.out, text)


if __name__ == "__main__":
    main()
