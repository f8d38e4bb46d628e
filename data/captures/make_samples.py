"""Write the sample captures of data/captures/: transformers' DeepSeek-V3 attention (tiny, seeded random
weights, bf16, eager) captured with `md.capture` at TP2 (clean) and at TP4 with a planted layout defect:
kv_b_proj's weight shuffled (16, 16) once after loading while transformers' nn.Linear keeps reading it as
a plain matrix - what a kernel's load-time shuffle does to a weight that another reader takes directly.

Tensor parallelism is emulated rank by rank, the way transformers' tp_plan shards MLA (q_b_proj and
kv_b_proj by rows, o_proj by columns, o_proj's output a partial sum): each rank is its own
DeepseekV3Attention with Nh/t heads, captured with `md.capture(..., rank=r, tp_size=t)`. That keeps the
script a few seconds long and free of torch.distributed and accelerate; the capture tests run
transformers' own tensor parallelism under torchrun.

    python data/captures/make_samples.py            # writes data/captures/tp2 and data/captures/tp4-kv-b-shuffled
    python data/captures/make_samples.py --out DIR  # elsewhere (an existing folder is refused)
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

import mla_debug as md

HERE = Path(__file__).resolve().parent
SEED, TOKENS, HEADS = 0, 8, 8
# The defect: the TP size it is planted at, the weight, and the folder names.
CLEAN, DEFECT = ("tp2", 2), ("tp4-kv-b-shuffled", 4)


def hf_config(heads: int = HEADS):
    import transformers

    config = transformers.DeepseekV3Config(
        hidden_size=256,
        num_attention_heads=heads,
        num_key_value_heads=heads,
        q_lora_rank=128,
        kv_lora_rank=128,
        qk_nope_head_dim=32,
        qk_rope_head_dim=32,
        v_head_dim=32,
        rms_norm_eps=1e-6,
        max_position_embeddings=4096,
        rope_interleave=True,
        attention_bias=False,
    )
    config._attn_implementation = "eager"
    return config


def loaded_state() -> dict[str, torch.Tensor]:
    """The layer's checkpoint: a seeded attention's weights in bf16 (norm weights away from one)."""
    from transformers.models.deepseek_v3.modeling_deepseek_v3 import DeepseekV3Attention

    torch.manual_seed(SEED)
    attention = DeepseekV3Attention(hf_config(), layer_idx=0)
    with torch.no_grad():
        attention.q_a_layernorm.weight.uniform_(0.5, 1.5)
        attention.kv_a_layernorm.weight.uniform_(0.5, 1.5)
    return {k: v.detach().to(torch.bfloat16) for k, v in attention.state_dict().items()}


def rank_attention(state: dict[str, torch.Tensor], rank: int, tp: int):
    """Rank `rank` of `tp`: Nh/t heads, its rows of q_b_proj / kv_b_proj and columns of o_proj."""
    from transformers.models.deepseek_v3.modeling_deepseek_v3 import DeepseekV3Attention

    attention = DeepseekV3Attention(hf_config(HEADS // tp), layer_idx=0).to(torch.bfloat16).eval()
    with torch.no_grad():
        for name, param in attention.state_dict().items():
            full = state[name]
            if name.startswith(("q_b_proj.", "kv_b_proj.")):
                full = full.chunk(tp, dim=0)[rank]
            elif name.startswith("o_proj."):
                full = full.chunk(tp, dim=1)[rank]
            param.copy_(full)
    return attention


def plant_shuffled_kv_b(attention) -> None:
    """The defect: kv_b_proj's bytes shuffled (16, 16) once after loading, read plainly by nn.Linear."""
    with torch.no_grad():
        attention.kv_b_proj.weight.data = md.shuffle_weight(attention.kv_b_proj.weight.data)


def capture_at(out: Path, tp: int, defect: bool) -> Path:
    import transformers
    from transformers.models.deepseek_v3.modeling_deepseek_v3 import DeepseekV3RotaryEmbedding

    state = loaded_state()
    cfg = md.MLAConfig.from_hf(hf_config().to_dict(), name="deepseek_v3-tiny")
    gen = torch.Generator().manual_seed(SEED + 1)
    hidden = torch.randn(1, TOKENS, cfg.hidden_size, generator=gen).to(torch.bfloat16)
    positions = torch.arange(TOKENS)
    cos, sin = DeepseekV3RotaryEmbedding(hf_config())(hidden.float(), positions.unsqueeze(0))
    mask = torch.full((TOKENS, TOKENS), float("-inf")).triu(1).view(1, 1, TOKENS, TOKENS).to(torch.bfloat16)
    note = "kv_b_proj shuffled (16, 16) once after loading, read plainly" if defect else "clean"
    for rank in range(tp):
        attention = rank_attention(state, rank, tp)
        if defect:
            plant_shuffled_kv_b(attention)
        with (
            md.capture(
                attention,
                out,
                layer=0,
                cfg=cfg,
                rank=rank,
                tp_size=tp,
                positions=positions.tolist(),
                engine=md.capture.EngineInfo("transformers", transformers.__version__),
                mode="prefill",
                row_output_reduced=False,  # each emulated rank returns its o_proj partial sum, un-reduced
                note=f"make_samples.py, seed {SEED}, rank-by-rank TP emulation: {note}",
            ),
            torch.no_grad(),
        ):
            attention(hidden, position_embeddings=(cos.to(hidden.dtype), sin.to(hidden.dtype)), attention_mask=mask)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=HERE, help="folder to write the two captures into")
    args = parser.parse_args(argv)
    for (name, tp), defect in ((CLEAN, False), (DEFECT, True)):
        folder = capture_at(args.out / name, tp, defect)
        size = sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())
        print(f"wrote {folder} ({size / 1e3:.0f} kB)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
