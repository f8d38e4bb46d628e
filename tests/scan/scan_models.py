"""The engine under test for the scan tests: transformers' own DeepSeek-V3, tiny, several decoder layers,
saved as a Hugging Face folder and run at TP1 in this process or at TP2/TP4 through transformers' own
tensor parallelism (torchrun, gloo on CPU: tests/scan/tp_scan_run.py). A defect can be planted in one
middle layer only: its kv_b_proj weight shuffled (16, 16) once after loading on every rank, and read as
a plain matrix by nn.Linear - a loader's relayout applied to one layer."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
TP_SCRIPT = HERE / "tp_scan_run.py"
LAYERS = 5
DEFECT_LAYER = 2  # a middle layer: two clean layers before it, two after
TOKENS = 12


@dataclass(frozen=True)
class Run:
    """What one torchrun of tp_scan_run.py wrote: the scan, SGLang's dump of one layer, md.capture's of it."""

    scan: Path
    dump: Path
    capture: Path


def dumped(run: Run) -> Path:
    """The run's SGLang dump folder; skips the test when SGLang's wheel was not there to write it."""
    if not run.dump.exists():
        import engine_wheels

        engine_wheels.require("sglang")
    return run.dump


def tiny_config(dtype: torch.dtype = torch.bfloat16, layers: int = LAYERS):
    """8 heads (TP 2 and 4 split them), DeepSeek-V3's head structure scaled down, dense MLPs only."""
    import transformers

    config = transformers.DeepseekV3Config(
        vocab_size=96, hidden_size=256, intermediate_size=256, moe_intermediate_size=64,
        num_hidden_layers=layers, first_k_dense_replace=layers, n_routed_experts=4, num_experts_per_tok=2,
        n_group=1, topk_group=1, num_attention_heads=8, num_key_value_heads=8, q_lora_rank=128,
        kv_lora_rank=128, qk_nope_head_dim=32, qk_rope_head_dim=32, v_head_dim=32, rope_interleave=True,
        max_position_embeddings=4096, dtype=dtype,
    )
    config._attn_implementation = "eager"
    return config


def save_tiny_model(folder: Path, dtype: torch.dtype = torch.bfloat16, seed: int = 0, layers: int = LAYERS) -> Path:
    import transformers

    torch.manual_seed(seed)
    model = transformers.DeepseekV3ForCausalLM(tiny_config(dtype, layers)).to(dtype).eval()
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("layernorm.weight"):
                param.uniform_(0.5, 1.5)
    model.save_pretrained(folder)
    return folder


def input_ids() -> torch.Tensor:
    return (torch.arange(TOKENS) * 7 % 96).unsqueeze(0)


def plant_defect(model, layer: int) -> None:
    """kv_b_proj of decoder layer `layer` shuffled (16, 16) in place, on this rank's shard."""
    import mla_debug as md

    weight = model.model.layers[layer].self_attn.kv_b_proj.weight
    local = weight.to_local() if type(weight).__name__ == "DTensor" else weight
    with torch.no_grad():
        local.copy_(md.shuffle_weight(local.detach().clone()))
