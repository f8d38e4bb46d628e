"""Run by the scan tests under torchrun (never collected by pytest): load the tiny DeepSeek-V3 folder with
transformers' tensor parallelism, optionally plant the one-layer defect, and scan one forward.

    torchrun --standalone --nproc_per_node N tp_scan_run.py MODEL_DIR OUT [--defect L] [--dump DIR --dump-layer L] [--capture DIR]

With --dump, SGLang 0.5.23's own dumper (sglang/srt/debug_utils/dumper.py from the released wheel, on
PYTHONPATH: tests/sglang_package.py) records the same forward in its non-intrusive "all" mode - every
module's inputs and outputs under its module name - restricted by its own filter language to one layer's
attention, plus that attention's parameters (dump_model).

The attention plan is the one transformers ships for DeepSeek-V3.2 (same attention module), so the
attention really is split over the ranks; DeepSeek-V3's own plan shards the MLP.
"""

from __future__ import annotations

import argparse
import contextlib

import torch
import transformers
from scan_models import input_ids, plant_defect

import mla_debug as md
from mla_debug._rank_exit import leave_rank

ATTENTION_PLAN = {
    f"model.layers.*.self_attn.{name}": style
    for name, style in (("q_b_proj", "colwise"), ("kv_a_proj_with_mqa", "mla_kv_a_proj"), ("kv_b_proj", "colwise"), ("o_proj", "rowwise"))
}


def load(model_dir: str):
    return transformers.AutoModelForCausalLM.from_pretrained(
        model_dir,
        distributed_config=transformers.DistributedConfig(tp_plan=ATTENTION_PLAN),
        attn_implementation="eager",
        dtype="auto",
    ).eval()


def sglang_dumper(folder: str, layer: int, model):
    """SGLang's dumper singleton, configured as a user would (its documented DUMPER_* settings)."""
    from sglang.srt.debug_utils.dumper import dumper

    dumper.configure(
        enable=True,
        dir=folder,
        exp_name="dump",
        non_intrusive_mode="all",
        enable_model_value=True,
        enable_output_console=False,
        filter=f"(layer_id == {layer} and (search('self_attn', name) or name in ('positions', 'position_ids'))) or search(r'layers\\.{layer}\\.self_attn\\.', name)",
    )
    dumper.register_non_intrusive_dumper(model)
    return dumper


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("model_dir")
    parser.add_argument("out")
    parser.add_argument("--defect", type=int)
    parser.add_argument("--dump")
    parser.add_argument("--dump-layer", type=int, default=2)
    parser.add_argument("--capture", help="also md.capture the dumped layer in the same forward, into this folder")
    args = parser.parse_args()
    model = load(args.model_dir)
    if args.defect is not None:
        plant_defect(model, args.defect)
    dumper = sglang_dumper(args.dump, args.dump_layer, model) if args.dump else None
    if dumper is not None:
        dumper.dump_model(model)
    note = "clean" if args.defect is None else f"layer {args.defect}: kv_b_proj shuffled (16, 16) after loading"
    with contextlib.ExitStack() as stack:
        stack.enter_context(md.scan(model, args.out, note=note))
        if args.capture:
            stack.enter_context(md.capture(model, args.capture, layer=args.dump_layer, mode="prefill", note=note))
        with torch.no_grad():
            model(input_ids())
    if dumper is not None:
        dumper.step()
    leave_rank(0)  # every rank's output is written: exit past gloo's shutdown abort (mla_debug/_rank_exit.py)


if __name__ == "__main__":
    main()
