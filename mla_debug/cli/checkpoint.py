"""`mla-debug checkpoint make`: write a seeded synthetic one-layer checkpoint as a Hugging Face folder."""

from __future__ import annotations

import argparse


def add_parser(sub) -> None:
    from ..model import PRESETS
    from .common import add_actions, add_command

    checkpoint = add_command(
        sub,
        "checkpoint",
        None,
        "make synthetic one-layer checkpoints",
        "Synthetic checkpoints: `checkpoint make` writes one seeded attention layer as a Hugging Face folder "
        "(config.json, model.safetensors and its index) that `triage --checkpoint` and `layouts` read.",
    )
    make = add_command(
        add_actions(checkpoint),
        "make",
        _cmd_checkpoint,
        "write a seeded synthetic layer as a Hugging Face folder",
        "Write a seeded synthetic attention layer (DeepSeek-like weight statistics, fp8 with 128x128 block "
        "scales unless --no-quantize) as a new Hugging Face folder.",
    )
    make.add_argument("--preset", required=True, help=f"model preset: {', '.join(PRESETS)}")
    make.add_argument("--out", required=True, help="new (or empty) folder to write; never overwritten")
    make.add_argument("--seed", type=int, default=0, help="seed of the weights; same seed, same bytes (default: 0)")
    make.add_argument("--layer", type=int, default=0, help="layer index used in the tensor names (default: 0)")
    make.add_argument("--no-quantize", action="store_true", help="keep bf16 weights (no fp8, no scales)")


def _cmd_checkpoint(args: argparse.Namespace) -> int:
    from ..model import Checkpoint, MLAConfig
    from ..model.checkpoint import check_new_folder

    # A DeepSeek-V3 layer takes seconds to build: a taken --out or a bad preset fails before that.
    MLAConfig.preset(args.preset)
    check_new_folder(args.out, f"--out {args.out}")
    ckpt = Checkpoint.synthetic(args.preset, seed=args.seed, quantize=not args.no_quantize, layer=args.layer)
    path = ckpt.save(args.out)
    files = sorted(p for p in path.iterdir() if p.is_file())
    kind = f"fp8 {ckpt.fmt.name}, 128x128 block scales" if ckpt.fmt else "bf16"
    print(f"wrote {path}: {ckpt.cfg.name} layer {ckpt.layer}, seed {args.seed}, {kind}")
    print(f"  {len(ckpt.tensors)} tensors, {ckpt.num_params:,} parameters, {ckpt.nbytes:,} bytes of tensors")
    for file in files:
        print(f"  {file.name}  {file.stat().st_size:,} bytes")
    return 0
