"""`load_capture(path)`: every rank folder of one capture, checked against each other.

The ranks of one capture must agree on everything but their own tensors: format, engine, config,
layer, tp_size, kept tokens and positions. All of 0..T-1 must be present, each rank must hold the same
tensor names, and tensors recorded as replicated must hold the same bytes on every rank (else
`RankDisagreement`). Each problem is reported naming the folder and the field.
"""

from __future__ import annotations

import os
from pathlib import Path

from .gather import check_replicated, per_rank
from .roles import Shard
from .store import RANK_FOLDER, manifest_to_json, read_rank
from .types import Capture, CaptureManifest


def _rank_folders(root: Path) -> dict[tuple[int, int], Path]:
    found = {}
    for child in sorted(root.iterdir()):
        match = RANK_FOLDER.match(child.name)
        if match and child.is_dir():
            found[(int(match.group(1)), int(match.group(2)))] = child
    return found


def _compare(first: CaptureManifest, other: CaptureManifest, folder: Path, reference: Path) -> None:
    a, b = manifest_to_json(first), manifest_to_json(other)
    different = [key for key in a if a[key] != b[key]]
    if different:
        detail = "; ".join(f"{key}: {b[key]!r} vs {a[key]!r}" for key in different)
        raise ValueError(f"{folder.name}'s manifest differs from {reference.name}'s in {different} ({detail})")


def load_capture(path: str | os.PathLike, *, check: bool = True) -> Capture:
    """Load the capture folder `path` (the folder holding rank<r>-of-<T>/ folders, or one such rank
    folder when T is 1) and check its ranks against each other. ``check=False`` skips comparing the
    replicated tensors' bytes across ranks at load (`gathered` still compares the one it is asked for),
    so a capture whose ranks disagree can be inspected.

    >>> cap = md.load_capture("captures/tp4")
    >>> cap.gathered("q_b_proj.weight").shape    # the full weight, whatever the TP size
    """
    root = Path(path).expanduser()
    if not root.exists():
        raise FileNotFoundError(f"load_capture: {root} does not exist")
    if not root.is_dir():
        raise NotADirectoryError(f"load_capture: {root} is not a folder")
    own = RANK_FOLDER.match(root.name)
    if own and not _rank_folders(root):
        folders = {(int(own.group(1)), int(own.group(2))): root}
    else:
        folders = _rank_folders(root)
    if not folders:
        from .sglang_dump import is_sglang_dump, load_sglang_dump

        if is_sglang_dump(root):  # a folder SGLang's dumper wrote (its one layer; load_sglang_dump for options)
            return load_sglang_dump(root)
        raise FileNotFoundError(f"load_capture: {root} holds no rank<r>-of-<T> folders (not a capture)")
    sizes = sorted({tp for _, tp in folders})
    if len(sizes) > 1:
        raise ValueError(
            f"load_capture: {root} mixes captures of tp_size {sizes} "
            f"({sorted(p.name for p in folders.values())}); keep one TP size per folder"
        )
    tp_size = sizes[0]
    missing = [r for r in range(tp_size) if (r, tp_size) not in folders]
    if missing:
        raise FileNotFoundError(
            f"load_capture: {root} is a tp_size {tp_size} capture but lacks rank(s) {missing} "
            f"(missing folders: {[f'rank{r}-of-{tp_size}' for r in missing]})"
        )
    extra = sorted(p.name for (r, _), p in folders.items() if r >= tp_size)
    if extra:
        raise ValueError(f"load_capture: {root} has rank folders outside tp_size {tp_size}: {extra}")

    manifest, ranks, reference = None, [], None
    for r in range(tp_size):
        folder = folders[(r, tp_size)]
        own_manifest, rank = read_rank(folder)
        if rank.rank != r:
            raise ValueError(f"load_capture: {folder} holds rank {rank.rank}'s manifest, not rank {r}'s")
        if manifest is None:
            manifest, reference = own_manifest, folder
        else:
            _compare(manifest, own_manifest, folder, reference)
            if set(rank.tensors) != set(ranks[0].tensors):
                only_here = sorted(set(rank.tensors) - set(ranks[0].tensors))
                only_there = sorted(set(ranks[0].tensors) - set(rank.tensors))
                raise ValueError(
                    f"load_capture: {folder.name} and {reference.name} hold different tensors "
                    f"(only in {folder.name}: {only_here}; only in {reference.name}: {only_there})"
                )
        ranks.append(rank)
    capture = Capture(manifest=manifest, ranks=ranks)
    if check:
        _check_replicated(capture)
    return capture


def _check_replicated(capture: Capture) -> None:
    for name in capture.names():
        parts = per_rank(capture, name)
        if parts[0].shard is Shard.REPLICATED:
            check_replicated(name, parts)

