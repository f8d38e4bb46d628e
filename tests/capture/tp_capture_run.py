"""Run by the capture tests under torchrun (never collected by pytest): load the tiny DeepSeek-V3 folder
with transformers' tensor parallelism and capture one layer on every rank.

    torchrun --standalone --nproc_per_node N tp_capture_run.py MODEL_DIR OUT all|kept

DeepSeek-V3's own base_model_tp_plan shards only the MLP; the attention rules added here are the ones
transformers ships for DeepSeek-V3.2 (models/deepseek_v32/configuration_deepseek_v32.py), whose
attention module is the same, so the attention really is split over the ranks.
"""

from __future__ import annotations

import sys

import torch
import transformers
from capture_models import KEPT, LAYER, input_ids

import mla_debug as md

ATTENTION_PLAN = {
    f"model.layers.*.self_attn.{name}": style
    for name, style in (
        ("q_b_proj", "colwise"),
        ("kv_a_proj_with_mqa", "mla_kv_a_proj"),
        ("kv_b_proj", "colwise"),
        ("o_proj", "rowwise"),
    )
}


def main() -> None:
    model_dir, out, which = sys.argv[1], sys.argv[2], sys.argv[3]
    model = transformers.AutoModelForCausalLM.from_pretrained(
        model_dir,
        distributed_config=transformers.DistributedConfig(tp_plan=ATTENTION_PLAN),
        attn_implementation="eager",
        dtype="auto",
    ).eval()
    tokens = None if which == "all" else list(KEPT)
    with md.capture(model, out, layer=LAYER, tokens=tokens, mode="prefill"):
        with torch.no_grad():
            model(input_ids())


if __name__ == "__main__":
    main()
