"""The scan folder format and `load_scan(path)`.

    <out>/rank<r>-of-<T>/scan.json           the manifest and, per (layer, step), the summary's facts
    <out>/rank<r>-of-<T>/scan.safetensors    norms, column samples and rows, named L<layer>.<step>.<part>

One folder per rank, written by that rank alone, whole or not at all; an existing one is never
overwritten. `load_scan` checks that every rank 0..T-1 is there, that the ranks' manifests agree and
that they hold the same (layer, step) summaries, naming the folder and the field otherwise.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from safetensors import SafetensorError, safe_open
from safetensors.torch import save_file

from .._files import folder_atomically
from .scan_types import SCAN_FORMAT_VERSION, RankScan, Scan, ScanManifest, ScanStep, StepSummary
from .store import RANK_FOLDER, rank_folder_name, read_rank_document

SCAN_FILE = "scan.json"
SCAN_TENSORS = "scan.safetensors"
_PARTS = ("token_norms", "columns", "rows")


def manifest_to_json(manifest: ScanManifest) -> dict[str, Any]:
    return {
        "kind": "mla_debug.scan",
        "format_version": manifest.format_version,
        "engine": manifest.engine,
        "engine_version": manifest.engine_version,
        "tp_size": manifest.tp_size,
        "layers": list(manifest.layers),
        "tokens": list(manifest.tokens),
        "columns": list(manifest.columns),
        "row_tokens": list(manifest.row_tokens),
        "layer_path": manifest.layer_path,
        "attention_attr": manifest.attention_attr,
        "map_key": manifest.map_key,
        "model_type": manifest.model_type,
        "hf_config": manifest.hf_config,
        "call": manifest.call,
        "versions": dict(manifest.versions),
        "note": manifest.note,
    }


def manifest_from_json(data: dict[str, Any], where: str) -> ScanManifest:
    if data.get("kind") != "mla_debug.scan":
        raise ValueError(f"{where}: not a scan manifest (kind {data.get('kind')!r})")
    if data.get("format_version") != SCAN_FORMAT_VERSION:
        raise ValueError(
            f"{where}: scan format version {data.get('format_version')}, this mla_debug reads version {SCAN_FORMAT_VERSION}"
        )
    try:
        return ScanManifest(
            engine=str(data["engine"]),
            engine_version=data.get("engine_version"),
            tp_size=int(data["tp_size"]),
            layers=data["layers"],
            tokens=data["tokens"],
            columns=data["columns"],
            row_tokens=data["row_tokens"],
            layer_path=str(data["layer_path"]),
            attention_attr=str(data["attention_attr"]),
            map_key=str(data["map_key"]),
            model_type=data.get("model_type"),
            hf_config=data.get("hf_config"),
            call=int(data.get("call", 0)),
            versions={str(k): str(v) for k, v in data.get("versions", {}).items()},
            note=str(data.get("note", "")),
        )
    except (KeyError, TypeError, ValueError) as err:
        raise ValueError(f"{where}: scan manifest is missing or has a malformed field ({err})") from None


def write_rank_scan(out: str | os.PathLike, manifest: ScanManifest, rank: int, summaries: dict) -> Path:
    """Write one rank's scan folder under `out`; returns it. FileExistsError when it exists already."""
    folder = Path(out) / rank_folder_name(rank, manifest.tp_size)
    entries, blobs = [], {}
    for (layer, step), summary in sorted(summaries.items(), key=lambda item: (item[0][0], list(ScanStep).index(item[0][1]))):
        entries.append(
            {
                "layer": layer,
                "step": step.value,
                "rows_total": summary.rows_total,
                "features": summary.features,
                "dtype": summary.dtype,
                "shard": summary.shard.value,
                "checksum": summary.checksum,
                "nonfinite": summary.nonfinite,
            }
        )
        for part in _PARTS:
            blobs[f"{summary.key}.{part}"] = getattr(summary, part).contiguous()
    document = {**manifest_to_json(manifest), "rank": rank, "summaries": entries}
    text = json.dumps(document, indent=1, default=str) + "\n"
    with folder_atomically(folder, f"scan rank folder {folder}") as temporary:
        save_file(blobs, str(temporary / SCAN_TENSORS), metadata={"format": "mla_debug.scan"})
        (temporary / SCAN_FILE).write_text(text, encoding="utf-8")
    return folder


def read_rank_scan(folder: Path) -> tuple[ScanManifest, RankScan]:
    path = folder / SCAN_FILE
    data = read_rank_document(folder, SCAN_FILE, "scan")
    manifest = manifest_from_json(data, str(path))
    tensors_path = folder / SCAN_TENSORS
    if not tensors_path.is_file():
        raise FileNotFoundError(f"{folder}: no {SCAN_TENSORS} beside its {SCAN_FILE}")
    summaries = {}
    try:
        with safe_open(str(tensors_path), framework="pt") as handle:
            stored = set(handle.keys())
            for entry in data.get("summaries", []):
                label = f"{tensors_path} [layer {entry.get('layer')} {entry.get('step')}]"
                try:
                    key = f"L{int(entry['layer'])}.{entry['step']}"
                    missing = [p for p in _PARTS if f"{key}.{p}" not in stored]
                    if missing:
                        raise ValueError(f"the file lacks {missing}")
                    summary = StepSummary(
                        layer=int(entry["layer"]),
                        step=ScanStep(entry["step"]),
                        rows_total=int(entry["rows_total"]),
                        features=int(entry["features"]),
                        dtype=str(entry["dtype"]),
                        shard=entry["shard"],
                        checksum=str(entry["checksum"]),
                        nonfinite=int(entry["nonfinite"]),
                        **{part: handle.get_tensor(f"{key}.{part}") for part in _PARTS},
                    )
                except (KeyError, TypeError, ValueError) as err:
                    raise ValueError(f"{label}: malformed summary ({err})") from None
                summaries[(summary.layer, summary.step)] = summary
    except SafetensorError as err:
        raise ValueError(f"{tensors_path}: not a readable safetensors file ({err}); the file is corrupt") from None
    try:
        rank = int(data["rank"])
    except (KeyError, TypeError, ValueError):
        raise ValueError(f"{path}: manifest has no valid 'rank'") from None
    return manifest, RankScan(rank=rank, tp_size=manifest.tp_size, summaries=summaries)


def _rank_folders(root: Path) -> dict[tuple[int, int], Path]:
    found = {}
    for child in sorted(root.iterdir()):
        match = RANK_FOLDER.match(child.name)
        if match and child.is_dir() and (child / SCAN_FILE).exists():
            found[(int(match.group(1)), int(match.group(2)))] = child
    return found


def is_scan(path: str | os.PathLike) -> bool:
    """Whether `path` is a scan folder (or one of its rank folders)."""
    root = Path(path)
    return root.is_dir() and ((root / SCAN_FILE).is_file() or bool(_rank_folders(root)))


def load_scan(path: str | os.PathLike) -> Scan:
    """Load the scan folder `path` (holding rank<r>-of-<T>/ folders, or one such folder when T is 1) and
    check its ranks against each other.

    >>> a = md.capture.load_scan("scans/tp2")
    """
    root = Path(path).expanduser()
    if not root.is_dir():
        raise FileNotFoundError(f"load_scan: {root} is not a folder")
    if (root / SCAN_FILE).is_file():
        folders = {(0, 0): root}
    else:
        folders = _rank_folders(root)
    if not folders:
        raise FileNotFoundError(f"load_scan: {root} holds no rank<r>-of-<T>/{SCAN_FILE} (not a scan)")
    read = [read_rank_scan(folder) + (folder,) for folder in folders.values()]
    sizes = sorted({m.tp_size for m, _, _ in read})
    if len(sizes) > 1:
        raise ValueError(f"load_scan: {root} mixes scans of tp_size {sizes}; keep one TP size per folder")
    tp_size = sizes[0]
    by_rank = {rank.rank: (m, rank, folder) for m, rank, folder in read}
    missing = [r for r in range(tp_size) if r not in by_rank]
    if missing:
        raise FileNotFoundError(f"load_scan: {root} is a tp_size {tp_size} scan but lacks rank(s) {missing}")
    first, rank0, folder0 = by_rank[0]
    reference = manifest_to_json(first)
    for r in range(1, tp_size):
        manifest, rank, folder = by_rank[r]
        other = manifest_to_json(manifest)
        different = [k for k in reference if k not in ("versions",) and reference[k] != other[k]]
        if different:
            raise ValueError(f"load_scan: {folder.name}'s manifest differs from {folder0.name}'s in {different}")
        if set(rank.summaries) != set(rank0.summaries):
            only = sorted(f"L{layer} {step.value}" for layer, step in set(rank.summaries) ^ set(rank0.summaries))
            raise ValueError(f"load_scan: {folder.name} and {folder0.name} hold different summaries ({only[:6]})")
    return Scan(manifest=first, ranks=[by_rank[r][1] for r in range(tp_size)], path=str(root))

