"""`mla-debug scan ...`: whole-model scans from the terminal.

`scan run MODEL OUT` scans one forward of a Hugging Face model folder with transformers (under torchrun
with ``--tp-plan auto`` each rank writes its own folder); `scan show DIR` prints what a scan holds;
`scan compare A B` names the first layer whose divergence its input does not explain and prints the
md.capture call for it.
"""

from __future__ import annotations

import argparse

from .._rank_exit import leave_rank
from .common import add_actions, add_command


def add_parser(sub) -> None:
    scan = add_command(
        sub,
        "scan",
        None,
        "summarize every decoder layer of one forward, and compare two scans (`scan run|show|compare`)",
        "Whole-model scans written by md.scan (or the vLLM recipe): one rank<r>-of-<T> folder per rank.",
    )
    actions = add_actions(scan)

    run = add_command(
        actions,
        "run",
        run_scan,
        "scan one forward of a Hugging Face model folder (transformers; under torchrun with --tp-plan auto)",
        "Load MODEL with transformers, run one forward on the given token ids and scan every decoder "
        "layer into OUT. Under torchrun, --tp-plan auto shards the model with transformers' own tensor parallelism "
        "and each rank writes OUT/rank<r>-of-<T>/.",
    )
    run.add_argument("model", metavar="MODEL", help="a Hugging Face model folder")
    run.add_argument("out", metavar="OUT", help="the scan folder to write (never overwritten)")
    group = run.add_mutually_exclusive_group()
    group.add_argument("--input-ids", help="comma-separated token ids of the one sequence to run")
    group.add_argument("--length", type=int, default=16, help="run this many token ids drawn with --seed (default 16)")
    run.add_argument("--seed", type=int, default=0, help="the seed of the drawn token ids (default 0)")
    run.add_argument("--tp-plan", default=None, help="transformers' tp_plan (e.g. auto) when run under torchrun")
    run.add_argument("--dtype", default="auto", help="the dtype to load the model in (default: the checkpoint's)")
    run.add_argument("--note", default="", help="a note kept in the scan's manifest")

    show = add_command(actions, "show", run_show, "a scan's manifest, layers and size", "Print what a scan holds.")
    show.add_argument("path", metavar="DIR", help="the scan folder (holding rank<r>-of-<T>/ folders)")

    compare = add_command(
        actions,
        "compare",
        run_compare,
        "the first layer whose divergence its own input does not explain, and how to capture it",
        "Compare scan B (under test) with scan A (the baseline) layer by layer: each step's difference "
        "judged against what its own input passed on; prints the first diverging layer and the md.capture call for it.",
    )
    compare.add_argument("a", metavar="A", help="the baseline scan (e.g. TP2)")
    compare.add_argument("b", metavar="B", help="the scan under test (e.g. TP4)")
    compare.add_argument("--every-step", action="store_true", help="print every step of every layer")
    compare.add_argument("--json", metavar="OUT.json", help="also write the comparison as JSON (never overwritten)")


def run_scan(args: argparse.Namespace) -> int:
    import torch
    import transformers

    from ..capture import scan

    options = {"dtype": args.dtype}
    if args.tp_plan:
        options["tp_plan"] = args.tp_plan
    model = transformers.AutoModelForCausalLM.from_pretrained(args.model, **options).eval()
    if args.input_ids:
        ids = torch.tensor([[int(t) for t in args.input_ids.split(",") if t.strip()]])
    else:
        generator = torch.Generator().manual_seed(args.seed)
        ids = torch.randint(0, model.config.vocab_size, (1, args.length), generator=generator)
    with scan(model, args.out, note=args.note) as recorded, torch.no_grad():
        model(ids)
    print(f"scan written: {recorded.path} ({len(recorded.layers)} layers, {ids.shape[1]} tokens)")
    leave_rank(0)  # under torchrun: exit here, past the shutdown abort gloo can hit (see _rank_exit)
    return 0


def run_show(args: argparse.Namespace) -> int:
    from pathlib import Path

    from ..capture import load_scan

    scan = load_scan(args.path)
    m = scan.manifest
    size = sum(p.stat().st_size for p in Path(args.path).rglob("*") if p.is_file())
    print(f"scan {args.path}: {m.engine} {m.engine_version or ''} TP{m.tp_size}, {m.model_type or 'model'}, "
          f"{len(m.layers)} layers ({m.layer_path}), call {m.call}")
    print(f"  kept token rows ({len(m.tokens)}): {list(m.tokens)}; whole rows of {list(m.row_tokens)}")
    print(f"  {len(m.columns)} sampled columns; {size / 1e6:.2f} MB on disk for {m.tp_size} rank(s)")
    if m.note:
        print(f"  note: {m.note}")
    return 0


def run_compare(args: argparse.Namespace) -> int:
    from ..capture import load_scan
    from ..explain.scan_compare import compare_scans
    from ..viz.scans import scan_lines

    comparison = compare_scans(load_scan(args.a), load_scan(args.b))
    for line in scan_lines(comparison, every_step=args.every_step):
        print(line)
    if args.json:
        print(f"written: {comparison.to_json(args.json)}")
    return 0
