"""`mla-debug capture diff` and `capture explain`: the layout diff and the stories of captured layers
(folders written by `md.capture`); actions of the `capture` group (cli/capture.py).

  capture diff A B [--checkpoint C] [--json OUT]    per step and rank, where b leaves a; weights' bytes
  capture diff A --reference [--checkpoint C]       a against mla_debug's reference run on its inputs
  capture explain A [--checkpoint C] [--against B]  the layout stories that explain a's diverging steps

--checkpoint is a Hugging Face checkpoint folder (the layer is the capture's) or another capture folder
whose weights are in checkpoint layout. The data are `explain.diff` / `explain.explain`
records; the words are `viz.captures`'.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from .common import add_command
from .table import print_columns


def _checkpoint_option(parser) -> None:
    parser.add_argument(
        "--checkpoint",
        default=None,
        metavar="C",
        help="the layer's weights as the engine loaded them: a Hugging Face checkpoint folder or a capture folder "
        "whose weights are in checkpoint layout (default: the captures' own, when they are - the output names "
        "which weights every verdict rests on)",
    )
    parser.add_argument(
        "--json", default=None, metavar="OUT.json", help="also write the result as JSON (never overwrites)"
    )


def add_diff_parser(actions) -> None:
    diff = add_command(
        actions,
        "diff",
        _cmd_diff,
        "per step and rank, where capture B leaves capture A; weights' bytes in layout or value",
        "Diff two captures of one layer (e.g. TP2 and TP4) on the same tokens: each step's error "
        "of B against A, less what the two layer inputs' own difference explains, judged by the FP8 noise floor; "
        "and each weight's and scale's bytes on every rank against the checkpoint (same bytes, shuffled N times, "
        "scale order, other values). Without --checkpoint it says which weights it judged against, the same "
        "whichever capture comes first.",
    )
    diff.add_argument("a", metavar="A", help="capture folder: the baseline (B is judged against it)")
    diff.add_argument("b", metavar="B", nargs="?", default=None, help="capture folder under test")
    diff.add_argument("--reference", action="store_true", help="diff A against mla_debug's reference run (no B)")
    _checkpoint_option(diff)


def add_explain_parser(actions) -> None:
    explain = add_command(
        actions,
        "explain",
        _cmd_explain,
        "which layout story explains each diverging step of a capture",
        "For each step of capture A that diverges (from mla_debug's reference run, or from capture "
        "--against B) and each derived weight (W_UK, W_UV), compute the known layout stories from the captured "
        "tensors and rank them by how well each reproduces what the engine produced.",
    )
    explain.add_argument("a", metavar="A", help="capture folder to explain")
    explain.add_argument(
        "--against",
        default=None,
        metavar="B",
        help="find the diverging steps against this capture (default: the reference run)",
    )
    _checkpoint_option(explain)


def _load(path: str, label: str):
    from ..capture import load_capture

    if not Path(path).is_dir():
        raise FileNotFoundError(f"{label} {path}: no such capture folder")
    return load_capture(path)


def _is_capture(path: Path) -> bool:
    return path.is_dir() and any(child.is_dir() and child.name.startswith("rank") for child in path.iterdir())


def load_checkpoint(path: str | None, layer: int):
    """The checkpoint of --checkpoint: a capture folder's weights, or a Hugging Face folder's layer."""
    if path is None:
        return None
    from ..model import Checkpoint

    folder = Path(path)
    if _is_capture(folder):
        return _load(path, "--checkpoint").checkpoint()
    return Checkpoint.load(folder, layer=layer)


def _write_json(result, path: str | None) -> None:
    if path is None:
        return
    if not path.endswith(".json"):
        raise ValueError(f"--json {path}: must end in .json")
    written = result.to_json(path)
    print(f"wrote {written}")


def _cmd_diff(args: argparse.Namespace) -> int:
    from ..explain.diff import diff_captures
    from ..viz.captures import diff_lines

    if (args.b is None) == (not args.reference):
        raise ValueError("give a second capture B, or --reference (not both)")
    a = _load(args.a, "A")
    ckpt = load_checkpoint(args.checkpoint, a.manifest.layer)
    if args.reference:
        diff = diff_captures(a, reference=True, checkpoint=ckpt)
    else:
        diff = diff_captures(a, _load(args.b, "B"), ckpt)
    for line in diff_lines(diff):
        print(line)
    _write_json(diff, args.json)
    return 0


def _cmd_explain(args: argparse.Namespace) -> int:
    from ..explain.diff import diff_captures, own_checkpoint
    from ..explain.explain import explain_capture
    from ..explain.truth import Truth, TruthSource
    from ..viz.captures import explanation_lines, ranking_rows

    a = _load(args.a, "A")
    ckpt = load_checkpoint(args.checkpoint, a.manifest.layer)
    diff, truth = None, None
    if args.against is not None:
        b = _load(args.against, "--against")
        diff = diff_captures(b, a, ckpt)
        if ckpt is None and diff.truth.source is TruthSource.SIDE_A:
            # The weights the diff decided for are --against's: explain A against them, saying so.
            ckpt, truth = own_checkpoint(b), Truth(TruthSource.OTHER_CAPTURE)
        elif ckpt is None and diff.truth.source is TruthSource.SIDE_B:
            ckpt, truth = own_checkpoint(a), diff.truth
    if ckpt is not None and truth is None and args.checkpoint is not None and _is_capture(Path(args.checkpoint)):
        truth = Truth(TruthSource.OTHER_CAPTURE)  # another capture's weights, not the engine's checkpoint
    explanation = explain_capture(a, ckpt, diff=diff, truth=truth)
    for line in explanation_lines(explanation):
        print(line)
    for e in explanation.explanations:
        if e.candidates and e.outcome.value != "correct_from_inputs":
            print(f"\n{e.tensor or e.step}: candidates ranked by how well each reproduces the capture")
            print_columns(("place", "story", "on ranks", "rel err"), ranking_rows(e))
    _write_json(explanation, args.json)
    return 0
