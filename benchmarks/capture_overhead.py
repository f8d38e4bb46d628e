"""What capturing one real-size DeepSeek-V3 attention layer adds to its forward pass (CPU).

  PYTHONPATH=. python3 benchmarks/capture_overhead.py [--model deepseek-v3] [--tokens 16] [--repeats 3]
      [--dtype bfloat16] [--out FILE]

The layer is transformers' own DeepseekV3Attention at the preset's dimensions (random weights, eager),
the module a user's model holds; side by side in one run, interleaved (plain, captured, plain, ...):
  forward          - median of `--repeats` plain forwards of `--tokens` tokens
  captured forward - median of the same forward inside `md.capture` (every token kept), whole: entering
                     (finding the modules, holding every weight as stored), the forward with its hooks
                     (which copy each op's inputs and outputs), and leaving (writing the rank folder,
                     weights included, to a fresh temporary folder, removed afterwards)
and the three parts of the captured forward on their own, each with its ratio to the plain forward; the
last row writes as many bytes as the capture folder holds in one plain file write, right after each
capture, so the write's share can be told from the disk's speed at the time.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from benchmarks.harness import environment, markdown_table, median_seconds, peak_rss_gb, write_report


def build_attention(model: str, dtype_name: str):
    import torch
    import transformers
    from transformers.models.deepseek_v3 import modeling_deepseek_v3 as hf

    import mla_debug as md

    cfg = md.MLAConfig.preset(model)
    config = transformers.DeepseekV3Config(**{k: v for k, v in cfg.to_hf(quantized=False).items() if k != "architectures"})
    config._attn_implementation = "eager"
    dtype = getattr(torch, dtype_name)
    torch.manual_seed(0)
    with torch.device("meta"):
        attention = hf.DeepseekV3Attention(config, layer_idx=0)
    attention = attention.to_empty(device="cpu").to(dtype).eval()
    with torch.no_grad():
        for param in attention.parameters():
            param.normal_(0, 0.02)
    rotary = hf.DeepseekV3RotaryEmbedding(config)
    return cfg, config, attention, rotary, dtype


def measure(model: str, tokens: int, repeats: int, dtype_name: str) -> tuple[list[list[object]], dict]:
    import torch

    import mla_debug as md

    cfg, _, attention, rotary, dtype = build_attention(model, dtype_name)
    hidden = torch.randn(1, tokens, cfg.hidden_size, generator=torch.Generator().manual_seed(1)).to(dtype)
    positions = torch.arange(tokens)
    cos, sin = rotary(hidden, positions.unsqueeze(0))
    mask = torch.full((tokens, tokens), float("-inf")).triu(1).view(1, 1, tokens, tokens).to(dtype)

    def forward() -> None:
        with torch.no_grad():
            attention(hidden, position_embeddings=(cos, sin), attention_mask=mask)

    forward()  # warm-up: first-call allocations are not the capture's
    scratch = Path(tempfile.mkdtemp(prefix="mla-debug-capture-bench-"))
    parts: dict[str, list[float]] = {
        "plain": [], "enter": [], "hooked forward": [], "exit (write)": [], "whole": [], "disk": []
    }
    nbytes = 0
    try:
        # Interleaved, so the plain and the captured forward share whatever else the machine is doing
        # (the previous capture's file write-back included).
        for i in range(repeats):
            parts["plain"].append(median_seconds(forward, 1))
            out = scratch / f"capture-{i}"
            start = time.perf_counter()
            cap = md.capture(attention, out, layer=0, cfg=cfg, positions=positions.tolist())
            cap.__enter__()
            entered = time.perf_counter()
            forward()
            ran = time.perf_counter()
            cap.__exit__(None, None, None)
            done = time.perf_counter()
            parts["enter"].append(entered - start)
            parts["hooked forward"].append(ran - entered)
            parts["exit (write)"].append(done - ran)
            parts["whole"].append(done - start)
            nbytes = sum(f.stat().st_size for f in cap.path.iterdir())
            shutil.rmtree(out)
            # The disk's own speed at that moment: the same number of bytes in one plain file write.
            blob = torch.zeros(nbytes, dtype=torch.uint8).numpy()
            start = time.perf_counter()
            blob.tofile(scratch / "disk-reference.bin")
            parts["disk"].append(time.perf_counter() - start)
            (scratch / "disk-reference.bin").unlink()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    plain = statistics.median(parts["plain"])
    rows = [["forward (baseline)", f"{plain * 1e3:.1f}", "1.00"]]
    for name in ("whole", "enter", "hooked forward", "exit (write)", "disk"):
        seconds = statistics.median(parts[name])
        label = {"whole": "captured forward (whole)", "disk": "disk reference: one plain write of as many bytes"}.get(
            name, f"  of which {name}"
        )
        rows.append([label, f"{seconds * 1e3:.1f}", f"{seconds / plain:.2f}"])
    params = sum(p.numel() for p in attention.parameters())
    return rows, {"params": params, "bytes": nbytes, "rss": peak_rss_gb()}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="deepseek-v3", help="an MLAConfig preset (its V3 attention dims)")
    parser.add_argument("--tokens", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"])
    parser.add_argument("--out", default=None, help="also write the markdown here")
    args = parser.parse_args(argv)
    rows, facts = measure(args.model, args.tokens, args.repeats, args.dtype)
    text = (
        f"{environment()}\n\n"
        f"{args.model} attention, {facts['params']:,} parameters in {args.dtype}, {args.tokens} tokens, "
        f"median of {args.repeats}; capture folder {facts['bytes'] / 2**20:.0f} MiB; peak RSS {facts['rss']:.1f} GB\n\n"
        + markdown_table(["what", "ms", "ratio"], rows)
        + "\n"
    )
    print(text, end="")
    write_report(args.out, text)


if __name__ == "__main__":
    main()
