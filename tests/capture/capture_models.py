"""The engine under test for the capture tests: transformers' own DeepSeek-V3 (tiny, random weights,
eager attention), saved as a Hugging Face folder so torchrun ranks load it the way a user would."""

from __future__ import annotations

from pathlib import Path

import torch
from torchrun_launch import run_torchrun as run_torchrun_script

HERE = Path(__file__).resolve().parent
TP_SCRIPT = HERE / "tp_capture_run.py"
LAYER = 1  # the second decoder layer: its input is a real hidden state, not an embedding
TOKENS = 12
# Rows kept by the bounded captures (the forward runs all TOKENS rows).
KEPT = (1, 4, 5, 11)


def tiny_config(dtype: torch.dtype = torch.float32, layers: int = 2, kv_lora_rank: int = 128):
    """8 heads (so TP 2 and 4 split them), the real head dims P=R=V=64 scaled down, dense MLPs only."""
    import transformers

    config = transformers.DeepseekV3Config(
        vocab_size=96,
        hidden_size=256,
        intermediate_size=256,
        moe_intermediate_size=64,
        num_hidden_layers=layers,
        first_k_dense_replace=layers,
        n_routed_experts=4,
        num_experts_per_tok=2,
        n_group=1,
        topk_group=1,
        num_attention_heads=8,
        num_key_value_heads=8,
        q_lora_rank=128,
        kv_lora_rank=kv_lora_rank,
        qk_nope_head_dim=32,
        qk_rope_head_dim=32,
        v_head_dim=32,
        rope_interleave=True,
        max_position_embeddings=4096,
        dtype=dtype,
    )
    config._attn_implementation = "eager"
    return config


def save_tiny_model(folder: Path, dtype: torch.dtype = torch.float32, seed: int = 0, **config) -> Path:
    """The tiny model saved as a Hugging Face folder; `config` goes to `tiny_config` (layers, kv_lora_rank)."""
    import transformers

    torch.manual_seed(seed)
    model = transformers.DeepseekV3ForCausalLM(tiny_config(dtype, **config)).to(dtype).eval()
    with torch.no_grad():  # norm weights other than ones, so the norms are really exercised
        for name, param in model.named_parameters():
            if name.endswith("layernorm.weight"):
                param.uniform_(0.5, 1.5)
    model.save_pretrained(folder)
    return folder


def input_ids() -> torch.Tensor:
    return (torch.arange(TOKENS) * 7 % 96).unsqueeze(0)


def run_torchrun(
    model_dir: Path, out: Path, tp_size: int, tokens: str = "all", timeout: float = 240, extra: tuple[str, ...] = ()
) -> None:
    """Capture layer LAYER at `tp_size` through transformers' own tensor parallelism (gloo on CPU);
    `extra` are tp_capture_run.py's options (--layers, --plant)."""
    run_torchrun_script(TP_SCRIPT, tp_size, str(model_dir), str(out), tokens, *extra, timeout=timeout)
