"""Write a tiny DeepSeek-V3 checkpoint in DeepSeek's published FP8 format that vLLM's CPU build can serve:
the engine tier's model (tests/engine), written into a build folder, never shipped.

    python data/checkpoints/make_tiny_v3_fp8.py --out DIR      # DIR must not exist

What it is made of, none of it this package's code:

- the tensor names and shapes of transformers' ``DeepseekV3ForCausalLM`` (built on the meta device, so no
  initialiser runs): embeddings, four layers of MLA attention with dense MLPs (``first_k_dense_replace``
  covers every layer: vLLM 0.32's CPU FP8 MoE kernels need AMX-FP8 or AMX), the final norm, the LM head;
- values from torch's seeded CPU generator (seed 0): bf16, linear weights normal with std 0.5/sqrt(K),
  norm weights uniform in [0.5, 1.5];
- DeepSeek's published FP8 format (``tests/model/ckpt_helpers.py``): every attention and MLP linear
  weight e4m3fn in 128x128 blocks with a float32 ``weight_scale_inv`` of max(amax, 1e-4)/448, the rest
  bf16, one shard per layer so that a middle layer can be replaced on its own;
- DeepSeek-V3's head widths (qk_nope 128, qk_rope 64, v 128, kv_lora_rank 512: the attention head of
  576 that vLLM 0.32's CPU MLA backends require) on 4 heads at hidden size 256, q_lora_rank 128: every
  per-rank shard at TP2 is a multiple of 128 (the block size). Vocabulary 64: prompts are token ids.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
SEED = 0
NUM_LAYERS = 4
OVERRIDES = {
    "architectures": ["DeepseekV3ForCausalLM"],
    "num_hidden_layers": NUM_LAYERS,
    "first_k_dense_replace": NUM_LAYERS,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "hidden_size": 256,
    "intermediate_size": 256,
    "q_lora_rank": 128,
    "kv_lora_rank": 512,
    "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64,
    "v_head_dim": 128,
    "vocab_size": 64,
    "max_position_embeddings": 4096,
}
SHARDS = [["model.embed_tokens."]] + [[f"model.layers.{i}."] for i in range(NUM_LAYERS)] + [["model.norm.", "lm_head."]]


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
        config = tiny_deepseek_config("deepseek_v3", **OVERRIDES)
        state = transformers_model_state(transformers.DeepseekV3ForCausalLM, transformers_config(config), SEED)
        write_deepseek_checkpoint(folder, config, state, SHARDS)

    return write_new_folder(out, write)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="new folder to write")
    path = make(parser.parse_args(argv).out)
    total = sum(f.stat().st_size for f in path.iterdir())
    print(f"wrote {path}: {len(list(path.iterdir()))} files ({total:,} bytes)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
