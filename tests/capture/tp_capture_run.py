"""Run by the capture tests under torchrun (never collected by pytest): load the tiny DeepSeek-V3 folder
with transformers' tensor parallelism and capture one layer on every rank.

    torchrun --standalone --nproc_per_node N tp_capture_run.py MODEL_DIR OUT all|kept [--layers 1,3]
        [--plant MODULE@RANKS PLANTED_OUT]...

With several --layers each is captured into OUT/layer<L>. Each --plant then shuffles MODULE's weight
shard (aiter's (16, 16) shuffle_weight, what a preshuffling kernel does at load) on RANKS ("all" or "2"
or "0,1") after the clean capture - transformers' linear keeps reading it as a plain matrix - captures
the same layers again into PLANTED_OUT, and puts the shard back: a load-time defect on chosen ranks only,
one per folder.

DeepSeek-V3's own base_model_tp_plan shards only the MLP; the attention rules added here are the ones
transformers ships for DeepSeek-V3.2 (models/deepseek_v32/configuration_deepseek_v32.py), whose
attention module is the same, so the attention really is split over the ranks.
"""

from __future__ import annotations

import argparse

import torch
import transformers
from capture_models import KEPT, LAYER, input_ids

import mla_debug as md
from mla_debug._rank_exit import leave_rank

ATTENTION_PLAN = {
    f"model.layers.*.self_attn.{name}": style
    for name, style in (
        ("q_b_proj", "colwise"),
        ("kv_a_proj_with_mqa", "mla_kv_a_proj"),
        ("kv_b_proj", "colwise"),
        ("o_proj", "rowwise"),
    )
}


def capture_layers(model, out: str, layers: list[int], tokens) -> None:
    """One forward inside a capture of every layer in `layers`."""
    from contextlib import ExitStack
    from pathlib import Path

    with ExitStack() as stack:
        for layer in layers:
            folder = out if len(layers) == 1 else str(Path(out) / f"layer{layer}")
            stack.enter_context(md.capture(model, folder, layer=layer, tokens=tokens, mode="prefill"))
        with torch.no_grad():
            model(input_ids())


def plant(model, layers: list[int], spec: str) -> list:
    """Shuffle MODULE's local weight shard on the ranks of `spec` (MODULE@RANKS), in every layer given;
    returns (shard, its clean bytes) pairs to put back."""
    from mla_debug.real_aiter import functions

    module, ranks = spec.split("@")
    rank = torch.distributed.get_rank()
    if ranks != "all" and rank not in {int(r) for r in ranks.split(",")}:
        return []
    shuffle = functions.shuffle_weight()
    planted = []
    for layer in layers:
        weight = getattr(model.model.layers[layer].self_attn, module).weight
        local = weight.to_local() if hasattr(weight, "to_local") else weight
        with torch.no_grad():
            planted.append((local, local.detach().clone()))
            local.copy_(shuffle(local.detach().clone()))
    return planted


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("model_dir")
    parser.add_argument("out")
    parser.add_argument("which", choices=("all", "kept"))
    parser.add_argument("--layers", default=str(LAYER))
    parser.add_argument("--plant", nargs=2, action="append", metavar=("MODULE@RANKS", "PLANTED_OUT"), default=[])
    args = parser.parse_args()
    model = transformers.AutoModelForCausalLM.from_pretrained(
        args.model_dir,
        distributed_config=transformers.DistributedConfig(tp_plan=ATTENTION_PLAN),
        attn_implementation="eager",
        dtype="auto",
    ).eval()
    tokens = None if args.which == "all" else list(KEPT)
    layers = [int(layer) for layer in args.layers.split(",")]
    capture_layers(model, args.out, layers, tokens)
    for spec, out in args.plant:
        planted = plant(model, layers, spec)
        capture_layers(model, out, layers, tokens)
        with torch.no_grad():
            for local, clean in planted:
                local.copy_(clean)
    leave_rank(0)  # every rank's output is written: exit past gloo's shutdown abort (mla_debug/_rank_exit.py)


if __name__ == "__main__":
    main()
