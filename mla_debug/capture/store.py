"""The capture folder format: one folder per rank, written by that rank alone.

    <out>/rank<r>-of-<T>/manifest.json       what the capture shares + every tensor's role and layout
    <out>/rank<r>-of-<T>/tensors.safetensors  the bytes each tensor spans, as uint8 (see tensor_bytes)

A rank needs no coordination with the others (an engine worker writes its own folder), and a rank
folder is written whole or not at all (a hidden temporary folder renamed at the end); an existing rank
folder is never overwritten (FileExistsError naming it).
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError, safe_open

from .._files import folder_atomically
from ..model import MLAConfig
from .roles import Shard, TensorRole
from .tensor_bytes import TensorLayout, layout_of, rebuild, spanned_bytes
from .types import FORMAT_VERSION, CapturedTensor, CaptureManifest, EngineInfo, RankCapture, Unrecorded

MANIFEST_FILE = "manifest.json"
TENSORS_FILE = "tensors.safetensors"
RANK_FOLDER = re.compile(r"^rank(\d+)-of-(\d+)$")


def rank_folder_name(rank: int, tp_size: int) -> str:
    return f"rank{rank}-of-{tp_size}"


def _rank_and_size(rank: int | None, tp_size: int | None) -> tuple[int, int]:
    if rank is not None and tp_size is not None:
        return int(rank), int(tp_size)
    dist = torch.distributed
    if dist.is_available() and dist.is_initialized():
        return (int(rank) if rank is not None else dist.get_rank(),
                int(tp_size) if tp_size is not None else dist.get_world_size())
    return (int(rank) if rank is not None else 0, int(tp_size) if tp_size is not None else 1)


def rank_destination(
    what: str, out: str | os.PathLike, rank: int | None, tp_size: int | None
) -> tuple[Path, int, int, Path]:
    """(out, rank, tp_size, the rank's folder under out) where `what` ("capture", "scan") writes one rank:
    rank and size default to torch.distributed's (else 0 of 1); a rank outside the size, or a folder that
    exists already, is refused."""
    out = Path(out).expanduser()
    rank, tp_size = _rank_and_size(rank, tp_size)
    if not 0 <= rank < tp_size:
        raise ValueError(f"{what}: rank {rank} is outside tp_size {tp_size}")
    folder = out / rank_folder_name(rank, tp_size)
    if folder.exists():
        raise FileExistsError(f"{what}: {folder} already exists; refusing to overwrite it (choose a new out)")
    return out, rank, tp_size, folder


def read_rank_document(folder: Path, name: str, what: str) -> Any:
    """The JSON document `name` of a `what` rank folder ("capture", "scan"), or why there is none."""
    path = folder / name
    if not path.is_file():
        raise FileNotFoundError(f"{folder}: no {name} (not a {what} rank folder, or an interrupted write)")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ValueError(f"{path}: not valid JSON ({err}); the file is corrupt") from None


def manifest_to_json(manifest: CaptureManifest) -> dict[str, Any]:
    document = {
        "format_version": manifest.format_version,
        "engine": {"name": manifest.engine.name, "version": manifest.engine.version},
        "versions": dict(manifest.versions),
        "model_type": manifest.model_type,
        "cfg_name": manifest.cfg.name,
        "cfg": manifest.cfg.to_hf(),
        "layer": manifest.layer,
        "tp_size": manifest.tp_size,
        "positions": list(manifest.positions),
        "tokens": list(manifest.tokens),
        "mode": manifest.mode,
        "note": manifest.note,
        # Optional (readers of this format version that predate it ignore it): see CaptureManifest.
        "key_positions": None if manifest.key_positions is None else list(manifest.key_positions),
    }
    # Written only when set, so that captures of engines without them keep their bytes.
    if manifest.attention_backend is not None:
        document["attention_backend"] = manifest.attention_backend
    if manifest.unrecorded:
        document["unrecorded"] = [item.to_json() for item in manifest.unrecorded]
    return document


def manifest_from_json(data: dict[str, Any], where: str) -> CaptureManifest:
    try:
        version = data["format_version"]
        if version != FORMAT_VERSION:
            raise ValueError(f"{where}: capture format version {version}, this mla_debug reads version {FORMAT_VERSION}")
        engine = data["engine"]
        return CaptureManifest(
            engine=EngineInfo(str(engine["name"]), engine.get("version")),
            cfg=MLAConfig.from_hf(data["cfg"], name=data.get("cfg_name")),
            layer=int(data["layer"]),
            tp_size=int(data["tp_size"]),
            positions=data["positions"],
            tokens=data["tokens"],
            model_type=data.get("model_type"),
            mode=data.get("mode"),
            versions={str(k): str(v) for k, v in data.get("versions", {}).items()},
            note=str(data.get("note", "")),
            key_positions=data.get("key_positions"),
            attention_backend=data.get("attention_backend"),
            unrecorded=tuple(Unrecorded.from_json(item) for item in data.get("unrecorded", [])),
        )
    except (KeyError, TypeError, AttributeError) as err:
        raise ValueError(f"{where}: manifest is missing or has a malformed field ({err!r})") from None


def write_byte_tensors(path: Path, blobs: dict[str, torch.Tensor], metadata: dict[str, str]) -> None:
    """Write 1-D uint8 tensors as a safetensors file (an 8-byte little-endian header length, the JSON
    header, then the bytes in header order), straight from the tensors' memory.

    The format is safetensors' own, read back by `safe_open`; the library's writer is not used because it
    made the folder of a real-size layer (hundreds of MB) several times slower to write than the disk is.
    """
    header: dict[str, Any] = {"__metadata__": metadata}
    offset = 0
    for name, blob in blobs.items():
        header[name] = {"dtype": "U8", "shape": [blob.numel()], "data_offsets": [offset, offset + blob.numel()]}
        offset += blob.numel()
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)  # the data starts 8-byte aligned, as safetensors' writer does it
    with open(path, "wb") as file:
        file.write(len(text).to_bytes(8, "little"))
        file.write(text)
        for blob in blobs.values():
            if blob.numel():
                file.write(memoryview(blob.numpy()))


def write_rank(out: str | os.PathLike, manifest: CaptureManifest, rank: RankCapture) -> Path:
    """Write `rank`'s folder under `out`; returns it. FileExistsError when it exists already."""
    if rank.tp_size != manifest.tp_size:
        raise ValueError(f"rank {rank.rank} has tp_size {rank.tp_size}, the manifest {manifest.tp_size}")
    folder = Path(out) / rank_folder_name(rank.rank, rank.tp_size)
    entries: dict[str, Any] = {}
    blobs: dict[str, torch.Tensor] = {}
    for name, captured in rank.tensors.items():
        blobs[name] = spanned_bytes(captured.tensor)
        entries[name] = {
            "role": captured.role.value,
            "step": captured.step,
            "source_name": captured.source_name,
            "attrs": dict(captured.attrs),
            "shard": captured.shard.value,
            "shard_dim": captured.shard_dim,
            "layout": layout_of(captured.tensor).to_json(),
        }
    document = {**manifest_to_json(manifest), "rank": rank.rank, "tensors": entries}
    with folder_atomically(folder, f"capture rank folder {folder}") as temporary:
        write_byte_tensors(temporary / TENSORS_FILE, blobs, {"format": "mla_debug.capture"})
        (temporary / MANIFEST_FILE).write_text(json.dumps(document, indent=1) + "\n", encoding="utf-8")
    return folder


def read_manifest(folder: Path) -> dict[str, Any]:
    path = folder / MANIFEST_FILE
    data = read_rank_document(folder, MANIFEST_FILE, "capture")
    if not isinstance(data, dict) or not isinstance(data.get("tensors"), dict):
        raise ValueError(f"{path}: not a capture manifest (no 'tensors' table)")
    return data


def read_rank(folder: Path) -> tuple[CaptureManifest, RankCapture]:
    """One rank folder: its manifest and its tensors rebuilt with their exact layouts."""
    data = read_manifest(folder)
    where = str(folder / MANIFEST_FILE)
    manifest = manifest_from_json(data, where)
    try:
        rank = int(data["rank"])
    except (KeyError, TypeError, ValueError):
        raise ValueError(f"{where}: manifest has no valid 'rank'") from None
    tensors_path = folder / TENSORS_FILE
    if not tensors_path.is_file():
        raise FileNotFoundError(f"{folder}: no {TENSORS_FILE} beside its manifest")
    tensors: dict[str, CapturedTensor] = {}
    try:
        with safe_open(str(tensors_path), framework="pt") as handle:
            stored = set(handle.keys())
            missing = sorted(set(data["tensors"]) - stored)
            if missing:
                raise ValueError(f"{tensors_path}: the manifest lists tensors the file lacks: {missing}")
            for name, entry in data["tensors"].items():
                label = f"{tensors_path} [{name}]"
                layout = TensorLayout.from_json(entry.get("layout", {}), label)
                tensor = rebuild(handle.get_tensor(name), layout, label, owned=True)  # read once, held by nothing else
                tensors[name] = _captured(name, entry, tensor, label)
    except SafetensorError as err:
        raise ValueError(f"{tensors_path}: not a readable safetensors file ({err}); the file is corrupt") from None
    return manifest, RankCapture(rank=rank, tp_size=manifest.tp_size, tensors=tensors)


def _captured(name: str, entry: dict, tensor: torch.Tensor, where: str) -> CapturedTensor:
    try:
        return CapturedTensor(
            name=name,
            role=TensorRole(entry["role"]),
            tensor=tensor,
            step=entry.get("step"),
            source_name=str(entry.get("source_name", "")),
            attrs=dict(entry.get("attrs", {})),
            shard=Shard(entry.get("shard", Shard.REPLICATED.value)),
            shard_dim=entry.get("shard_dim"),
        )
    except (KeyError, ValueError, TypeError) as err:
        raise ValueError(f"{where}: malformed tensor entry ({err})") from None
