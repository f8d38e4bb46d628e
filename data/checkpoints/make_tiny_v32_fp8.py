"""Regenerate ``tiny-v3.2-fp8/``: a two-layer DeepSeek-V3.2 checkpoint in DeepSeek's published FP8 format,
small enough to ship, so that ``--checkpoint`` examples and the notebooks run on a fresh clone.

    python data/checkpoints/make_tiny_v32_fp8.py                # writes data/checkpoints/tiny-v3.2-fp8
    python data/checkpoints/make_tiny_v32_fp8.py --out DIR      # writes DIR instead (must not exist)

What it is made of, none of it this package's code:

- the tensor names and shapes of transformers' ``DeepseekV32ForCausalLM`` (built on the meta device, so
  transformers' initialisers never run): embeddings, two layers of MLA attention with the V3.2 indexer
  and a dense MLP, the final norm and the LM head;
- values from a seeded generator (seed 0): bf16 weights, normal with std 0.5/sqrt(K);
- DeepSeek's published format (``tests/model/ckpt_helpers.py``, written from the convention, not with
  mla_debug): every attention/MLP linear weight e4m3fn in 128x128 blocks with a float32
  ``weight_scale_inv`` of max(amax, 1e-4) / 448 rounded up to a power of two (``scale_fmt: ue8m0``, as
  DeepSeek-V3.1 and V3.2 ship), the rest bf16; three shards named by ``model.safetensors.index.json``
  (layer 0 and the embeddings; layer 1's attention; layer 1's MLP, the final norm and the LM head);
- a config.json in DeepSeek's own style: V3.2's model type and indexer fields (4 heads of 128, top 32
  keys), DeepSeek-V3's head widths and yarn RoPE on 16 heads at hidden size 256.

The bytes depend only on torch's seeded CPU generator and safetensors' writer: ``tests/model/
test_sample_checkpoint.py`` regenerates the folder and compares every file byte for byte.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
NAME = "tiny-v3.2-fp8"
SEED = 0
# Layer 1's attention alone in the middle shard: loading that layer opens one file.
SHARDS = [
    ["model.embed_tokens.", "model.layers.0."],
    ["model.layers.1.self_attn."],
    ["model.layers.1.", "model.norm.", "lm_head."],
]


def make(out: Path) -> Path:
    """Write the checkpoint into the new folder `out` (written beside it first, then renamed)."""
    sys.path.insert(0, str(HERE.parents[1] / "tests" / "model"))
    import transformers
    from ckpt_helpers import (
        tiny_deepseek_config,
        transformers_config,
        transformers_model_state,
        write_deepseek_checkpoint,
        write_new_folder,
    )

    def write(folder: Path) -> None:
        config = tiny_deepseek_config("deepseek_v32")
        state = transformers_model_state(transformers.DeepseekV32ForCausalLM, transformers_config(config), SEED)
        write_deepseek_checkpoint(folder, config, state, SHARDS, ue8m0=True)

    return write_new_folder(out, write)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=HERE / NAME, help=f"new folder to write (default: {HERE / NAME})")
    path = make(parser.parse_args(argv).out)
    total = sum(f.stat().st_size for f in path.iterdir())
    print(f"wrote {path}: {', '.join(sorted(f.name for f in path.iterdir()))} ({total:,} bytes)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
