"""What a whole-model scan (`md.scan`) adds to a forward, how much it writes, and how long comparing two
scans takes (CPU).

  PYTHONPATH=. python3 benchmarks/scan_overhead.py [--model deepseek-v3] [--layers 2] [--tokens 16]
      [--repeats 3] [--scan-layers 61] [--out FILE]

1. Overhead: transformers' own DeepseekV3ForCausalLM truncated to `--layers` decoder layers at the
   preset's real dimensions (attention and the dense MLP of DeepSeek-V3's first layers; a small vocabulary,
   since the embedding is not a layer's work), bf16, random weights, eager. Side by side, interleaved:
   the plain forward of `--tokens` tokens and the same forward inside `md.scan` whole (entering, the
   hooked forward, writing the rank folder), and the hooked forward alone. The ratio per layer is what a
   61-layer model sees (the scan's work and the forward's both grow with the layer count).
2. Size: a scan of a `--scan-layers`-layer stand-in whose decoder layers are cheap but as wide as the
   model (the summaries depend only on the width, the token count and the layer count), bf16, at
   `--tokens` tokens: the rank folder's bytes, exactly.
3. Compare: two such scans (the second with one middle layer's attention output perturbed) loaded and
   compared with `md.compare_scans`, median of `--repeats`; the comparison must name that layer.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from benchmarks.harness import environment, markdown_table, median_seconds, peak_rss_gb, write_report


def truncated_model(model: str, layers: int):
    import torch
    import transformers

    import mla_debug as md

    cfg = md.MLAConfig.preset(model)
    hf = {k: v for k, v in cfg.to_hf(quantized=False).items() if k != "architectures"}
    hf.update(num_hidden_layers=layers, first_k_dense_replace=layers, vocab_size=1024)
    # DeepSeek-V3's dense MLP (its first three layers); a smaller preset gets one twice its width.
    hf.setdefault("intermediate_size", 18432 if model == "deepseek-v3" else 2 * cfg.hidden_size)
    config = transformers.DeepseekV3Config(**hf)
    config._attn_implementation = "eager"
    torch.manual_seed(0)
    with torch.device("meta"):
        network = transformers.DeepseekV3ForCausalLM(config)
    network = network.to_empty(device="cpu").to(torch.bfloat16).eval()
    with torch.no_grad():
        for param in network.parameters():
            param.normal_(0, 0.02)
    return cfg, network


def overhead(model: str, layers: int, tokens: int, repeats: int) -> tuple[list[list[object]], dict]:
    import torch

    import mla_debug as md

    cfg, network = truncated_model(model, layers)
    ids = torch.randint(0, 1024, (1, tokens), generator=torch.Generator().manual_seed(1))

    def forward() -> None:
        with torch.no_grad():
            network(ids)

    forward()  # warm-up
    scratch = Path(tempfile.mkdtemp(prefix="mla-debug-scan-bench-"))
    parts: dict[str, list[float]] = {"plain": [], "whole": [], "hooked forward": [], "exit (write)": []}
    nbytes = 0
    try:
        for i in range(repeats):
            parts["plain"].append(median_seconds(forward, 1))
            start = time.perf_counter()
            scan = md.scan(network, scratch / f"scan-{i}")
            scan.__enter__()
            entered = time.perf_counter()
            forward()
            ran = time.perf_counter()
            scan.__exit__(None, None, None)
            done = time.perf_counter()
            parts["hooked forward"].append(ran - entered)
            parts["exit (write)"].append(done - ran)
            parts["whole"].append(done - start)
            nbytes = sum(f.stat().st_size for f in scan.path.iterdir())
            shutil.rmtree(scratch / f"scan-{i}")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    plain = statistics.median(parts["plain"])
    rows = [["forward (baseline)", f"{plain * 1e3:.1f}", "1.00"]]
    for name, label in (("whole", "scanned forward (whole)"), ("hooked forward", "  of which hooked forward"),
                        ("exit (write)", "  of which exit (write)")):
        seconds = statistics.median(parts[name])
        rows.append([label, f"{seconds * 1e3:.1f}", f"{seconds / plain:.3f}"])
    params = sum(p.numel() for p in network.parameters())
    return rows, {"params": params, "bytes": nbytes, "hidden": cfg.hidden_size}


def stand_in(layers: int, hidden: int, perturb: int | None = None):
    """A model of `layers` decoder layers as wide as the real one whose work is a few elementwise ops."""
    import torch
    from torch import nn

    class Attention(nn.Module):
        def __init__(self, index: int) -> None:
            super().__init__()
            self.index = index

        def forward(self, hidden_states):
            out = torch.tanh(hidden_states) * 0.5
            if self.index == perturb:
                out = out.flip(-1)  # a relayout of its output features
            return out

    class Layer(nn.Module):
        def __init__(self, index: int) -> None:
            super().__init__()
            self.self_attn = Attention(index)

        def forward(self, hidden_states):
            normed = hidden_states / hidden_states.float().pow(2).mean(-1, keepdim=True).sqrt().to(hidden_states.dtype)
            return hidden_states + self.self_attn(hidden_states=normed)

    class Model(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = nn.Module()
            self.model.layers = nn.ModuleList(Layer(i) for i in range(layers))

        def forward(self, x):
            for layer in self.model.layers:
                x = layer(x)
            return x

    return Model()


def size_and_compare(layers: int, hidden: int, tokens: int, repeats: int) -> tuple[list[list[object]], dict]:
    import torch

    import mla_debug as md

    scratch = Path(tempfile.mkdtemp(prefix="mla-debug-scan-size-"))
    middle = layers // 2
    try:
        x = torch.randn(1, tokens, hidden, generator=torch.Generator().manual_seed(2)).to(torch.bfloat16)
        for name, perturb in (("a", None), ("b", middle)):
            network = stand_in(layers, hidden, perturb)
            with md.scan(network, scratch / name, names={}), torch.no_grad():
                network(x)
        folder = scratch / "a" / "rank0-of-1"
        nbytes = sum(f.stat().st_size for f in folder.iterdir())
        found = []

        def compare() -> None:
            found.append(md.compare_scans(scratch / "a", scratch / "b").first_divergent_layer)

        seconds = median_seconds(compare, repeats)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    if set(found) != {middle}:
        raise SystemExit(f"the comparison named layers {sorted(set(found), key=str)}, not the perturbed layer {middle}")
    rows = [
        [f"scan folder, {layers} layers x {hidden} wide, {tokens} tokens, one rank", f"{nbytes / 1e6:.2f} MB"],
        [f"load + compare two {layers}-layer scans (median of {repeats})", f"{seconds:.3f} s"],
    ]
    return rows, {"bytes": nbytes, "seconds": seconds}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="deepseek-v3", help="an MLAConfig preset (its V3 dimensions)")
    parser.add_argument("--layers", type=int, default=2, help="decoder layers of the truncated real-size model")
    parser.add_argument("--tokens", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--scan-layers", type=int, default=61, help="layers of the stand-in for size and compare")
    parser.add_argument("--out", default=None, help="also write the markdown here")
    args = parser.parse_args(argv)
    rows, facts = overhead(args.model, args.layers, args.tokens, args.repeats)
    size_rows, _ = size_and_compare(args.scan_layers, facts["hidden"], args.tokens, args.repeats)
    text = (
        f"{environment()}\n\n"
        f"{args.model} truncated to {args.layers} decoder layers ({facts['params']:,} parameters, bf16), "
        f"{args.tokens} tokens, median of {args.repeats}; its scan folder {facts['bytes'] / 1e3:.0f} kB; "
        f"peak RSS {peak_rss_gb():.1f} GB\n\n"
        + markdown_table(["what", "ms", "ratio"], rows)
        + "\n\n"
        + markdown_table(["what", "value"], size_rows)
        + "\n"
    )
    print(text, end="")
    write_report(args.out, text)


if __name__ == "__main__":
    main()
