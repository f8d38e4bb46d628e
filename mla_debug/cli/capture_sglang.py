"""`mla-debug capture import-sglang` and `capture export --format sglang`: SGLang dumper folders in and out.

`capture import-sglang DUMP OUT --config MODEL [--layer L] [--step S]` reads a folder SGLang's dumper
wrote (one layer's attention of one forward step) and writes it as a capture folder, which every other
`capture` action reads. `capture export CAPTURE OUT --format sglang` writes a capture in the dumper's
layout for SGLang's comparator (``python -m sglang.srt.debug_utils.comparator --baseline-path OUT_A
--target-path OUT_B --grouping-skip-keys rank``).
"""

from __future__ import annotations

import argparse

from .common import add_command


def add_import_parser(actions) -> None:
    parser = add_command(
        actions,
        "import-sglang",
        run_import,
        "read a folder SGLang's dumper wrote into a capture folder",
        "Read SGLang's dumper folder DUMP (files step=...___rank=...___name=....pt, every rank) - one "
        "decoder layer's attention at one forward step - and write it as the capture folder OUT. Files are read "
        "with torch.load(weights_only=True): one that needs pickled code is refused.",
    )
    parser.add_argument("dump", metavar="DUMP", help="the dump folder (<dir>/<exp_name>, or <dir> holding one)")
    parser.add_argument("out", metavar="OUT", help="the capture folder to write (never overwritten)")
    parser.add_argument("--config", help="the model's Hugging Face folder or config.json (default: the dump's tokenizer path)")
    parser.add_argument("--layer", type=int, help="which decoder layer (default: the only one dumped)")
    parser.add_argument("--step", type=int, help="which forward step (default: the only one dumped)")


def add_export_parser(actions) -> None:
    parser = add_command(
        actions,
        "export",
        run_export,
        "write a capture in another tool's layout (--format sglang: SGLang's dumper, for its comparator)",
        "Write capture CAPTURE under OUT/<exp-name>/ in SGLang 0.5.23's dumper layout (names, "
        "per-rank files, value+meta records with the comparator's dims and tp ranks).",
    )
    parser.add_argument("capture", metavar="CAPTURE", help="the capture folder to export")
    parser.add_argument("out", metavar="OUT", help="the folder to write OUT/<exp-name>/ in (never overwritten)")
    parser.add_argument("--format", choices=["sglang"], required=True, help="the layout: sglang (SGLang 0.5.23's dumper)")
    parser.add_argument("--exp-name", default="dump", help="the experiment folder under OUT (default: dump)")
    parser.add_argument("--weights", action="store_true", help="also export the linear weights (param__ names)")


def run_import(args: argparse.Namespace) -> int:
    from ..capture.sglang_dump import load_sglang_dump
    from ..capture.store import write_rank

    capture = load_sglang_dump(args.dump, layer=args.layer, step=args.step, config=args.config)
    folders = [write_rank(args.out, capture.manifest, rank) for rank in capture.ranks]
    m = capture.manifest
    print(f"capture written: {args.out} (layer {m.layer}, TP{m.tp_size}, {len(m.tokens)} tokens, "
          f"{len(capture.names())} tensors per rank, {len(folders)} rank folder(s))")
    return 0


def run_export(args: argparse.Namespace) -> int:
    from ..capture import load_capture
    from ..capture.sglang_dump_export import export_sglang_dump

    folder = export_sglang_dump(load_capture(args.capture), args.out, exp_name=args.exp_name, weights=args.weights)
    print(f"written in SGLang's dumper layout: {folder}")
    print(f"compare with: python -m sglang.srt.debug_utils.comparator --baseline-path <other> --target-path {folder} "
          "--grouping-skip-keys rank")
    return 0
