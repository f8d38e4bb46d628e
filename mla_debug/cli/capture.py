"""`mla-debug capture ...`: work with layer captures from the terminal.

`capture show DIR` prints what a capture holds: its manifest, then per rank every tensor with its role,
step, dtype, shape, strides, storage offset, how it shards and the engine attributes recorded with it.
`capture diff A B` and `capture explain A` (cli/capture_explain.py) diff captures and explain them.
The group is open: each action is one `add_*` function in ACTIONS that registers its own subparser.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

from .capture_explain import add_diff_parser, add_explain_parser
from .capture_sglang import add_export_parser, add_import_parser
from .common import add_actions, add_command
from .table import print_columns


def add_parser(sub) -> None:
    """Register `capture` and its actions on the `mla-debug` subparsers."""
    capture = add_command(
        sub,
        "capture",
        None,
        "inspect, diff and explain layer captures taken from a running model (`capture show|diff|explain`)",
        "Layer captures written by md.capture (or the engine recipes): one rank<r>-of-<T> folder "
        "per rank. `capture show DIR` prints what one holds.",
    )
    actions = add_actions(capture)
    for register in ACTIONS:
        register(actions)


def add_show(actions) -> None:
    show = add_command(
        actions,
        "show",
        run_show,
        "the manifest and, per rank, every tensor's dtype, shape, strides and attributes",
        "Print a capture's manifest and, per rank, each tensor: role, step, dtype, shape, "
        "strides, storage offset, how it shards over ranks, and the engine attributes recorded with it.",
    )
    show.add_argument("path", metavar="DIR", help="the capture folder (holding rank<r>-of-<T>/ folders)")
    show.add_argument("--rank", type=int, default=None, help="show only this rank's tensors")
    show.add_argument(
        "--no-check",
        action="store_true",
        help="show a capture whose ranks disagree on a replicated tensor instead of stopping at the first",
    )


ACTIONS: list[Callable] = [add_show, add_diff_parser, add_explain_parser, add_import_parser, add_export_parser]


def _shape(values) -> str:
    return str(tuple(int(v) for v in values))


def _shard(tensor) -> str:
    return tensor.shard.value if tensor.shard_dim is None else f"{tensor.shard.value} dim {tensor.shard_dim}"


def _attrs(tensor) -> str:
    return " ".join(f"{key}={value}" for key, value in sorted(tensor.attrs.items())) or "-"


def run_show(args: argparse.Namespace) -> int:
    from ..capture import load_capture
    from ..capture.tensor_bytes import dtype_name

    cap = load_capture(args.path, check=not args.no_check)
    m = cap.manifest
    engine = m.engine.name + (f" {m.engine.version}" if m.engine.version else "")
    print(f"capture {args.path}: {engine}, {m.cfg.name} layer {m.layer}, tp_size {m.tp_size}, mode {m.mode or 'unknown'}")
    print(f"  model_type: {m.model_type or 'unknown'}; format version {m.format_version}")
    print(f"  versions: {', '.join(f'{k} {v}' for k, v in sorted(m.versions.items())) or 'none recorded'}")
    print(f"  kept token rows ({len(m.tokens)}): {list(m.tokens)}")
    print(f"  their positions: {list(m.positions)}")
    if m.note:
        print(f"  note: {m.note}")
    ranks = cap.ranks if args.rank is None else [cap.rank(args.rank)]
    for rank in ranks:
        print(f"\nrank {rank.rank} of {rank.tp_size}: {len(rank.tensors)} tensors")
        rows = [
            (
                name,
                t.role.value,
                t.step or "-",
                dtype_name(t.tensor.dtype),
                _shape(t.tensor.shape),
                _shape(t.tensor.stride()),
                str(t.tensor.storage_offset()),
                _shard(t),
                _attrs(t),
            )
            for name, t in rank.tensors.items()
        ]
        print_columns(("tensor", "role", "step", "dtype", "shape", "stride", "offset", "shard", "attrs"), rows)
    return 0
