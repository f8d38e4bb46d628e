"""`md.capture.load_sglang_dump(folder)`: a folder SGLang's dumper wrote, read into a `Capture` of one layer.

SGLang's dumper (sglang/srt/debug_utils/dumper.py, 0.5.23) writes one ``.pt`` file per value, per rank,
per forward step (layout and names: `sglang_dump_names`). The reader groups the files of one step by
rank, maps the dump names of one decoder layer's attention to canonical names, turns each value into a
`CapturedTensor` the way `md.capture` would have recorded it (activations as (rows, features) with the
rank's shard rule; parameters whole), and returns a `Capture`, so `diff_captures` and `explain_capture`
run on it. Dims the dump carries (``h[tp]``, ``h[tp:partial]``, ``# tp:replicated``) decide a tensor's
shard; otherwise the name map's rules do, as for a capture.

Files are loaded with ``torch.load(weights_only=True)`` only: a file that needs pickled code to load is
refused, naming the file and the reason, and nothing of it runs. (torch's own DTensor is allowed: a
dump of a model under transformers' tensor parallelism holds its parameters as DTensors.)
"""

from __future__ import annotations

import logging
import math
import os
import pickle
from collections import defaultdict
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch

from ..model import MLAConfig
from . import canonical as canon
from .names import NameMap, resolve_map
from .roles import Shard, TensorRole
from .sglang_dump_names import RELEASE, DumpName, all_maps, classify, parse_file_name
from .tensor_facts import local_tensor
from .types import Capture, CapturedTensor, CaptureManifest, EngineInfo, RankCapture


class RefusedDumpFile(ValueError):
    """A dump file that cannot be read without running pickled code (or is not a dump record)."""


def find_dump_folder(path: str | os.PathLike) -> Path | None:
    """The folder holding a dump's ``.pt`` files: `path` itself, or its only subfolder that holds some
    (the dumper writes into ``<dir>/<exp_name>/``); None when neither."""
    root = Path(path).expanduser()
    if not root.is_dir():
        return None
    if any(_dump_files(root)):
        return root
    found = [child for child in sorted(root.iterdir()) if child.is_dir() and any(_dump_files(child))]
    return found[0] if len(found) == 1 else None


def _dump_files(folder: Path):
    return (p for p in folder.glob("*.pt") if "name=" in p.name and "rank=" in p.name)


def is_sglang_dump(path: str | os.PathLike) -> bool:
    return find_dump_folder(path) is not None


@contextmanager
def _quiet_device_mesh():
    """Unpickling a DTensor's device mesh outside its run logs a warning per file; it is expected here."""
    logger = logging.getLogger("torch.distributed.device_mesh")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


def read_record(path: Path) -> tuple[Any, dict[str, Any]]:
    """(value, meta) of one dump file, loaded with weights_only=True; RefusedDumpFile otherwise."""
    try:
        import torch.distributed.tensor  # noqa: F401 - registers DTensor with the weights-only unpickler
    except ImportError:
        pass
    try:
        with _quiet_device_mesh():
            raw = torch.load(path, weights_only=True, map_location="cpu")
    except (pickle.UnpicklingError, RuntimeError, AttributeError, EOFError, ValueError) as err:
        reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise RefusedDumpFile(
            f"{path}: refused - it cannot be loaded with torch.load(weights_only=True) ({reason}); mla_debug never runs "
            "code from a file it reads. Re-dump plain tensors, or load it yourself if you trust it"
        ) from None
    if isinstance(raw, dict) and "value" in raw:
        meta = raw.get("meta", {})
        if not isinstance(meta, dict):
            raise RefusedDumpFile(f"{path}: its 'meta' is a {type(meta).__name__}, not a dict (not a dumper record)")
        return raw["value"], meta
    return raw, {}


def _config(config, metas: list[dict]) -> MLAConfig:
    if isinstance(config, MLAConfig):
        return config
    if isinstance(config, dict):
        return MLAConfig.from_hf(config)
    candidates = [config] if config is not None else [m.get("tokenizer_path") for m in metas if m.get("tokenizer_path")][:1]
    for candidate in candidates:
        path = Path(str(candidate)).expanduser()
        path = path / "config.json" if path.is_dir() else path
        if path.is_file():
            return MLAConfig.from_hf(str(path))
        raise FileNotFoundError(f"load_sglang_dump: no Hugging Face config at {path}")
    raise ValueError(
        "load_sglang_dump: the dump does not say which model it is; pass config= (the model's folder, its "
        "config.json, a dict or an MLAConfig)"
    )


def _pick_map(names, module_paths: set[str]) -> NameMap:
    if names is not None:
        return resolve_map(names)
    maps = all_maps()
    scored = sorted(maps, key=lambda m: -len({e.path for e in m.modules} & module_paths))
    return scored[0]


def _shard_from_dims(dims: str | None) -> tuple[Shard, int | None] | None:
    """The shard a comparator dims string states for the last (feature) dim, or None when it says nothing."""
    if not dims:
        return None
    shape, _, declarations = dims.partition("#")
    last = shape.split()[-1] if shape.split() else ""
    if "[" in last:
        modifiers = last[last.index("[") + 1 : last.rindex("]")]
        if "tp:partial" in modifiers or "tp:sharded+partial" in modifiers:
            return Shard.PARTIAL_SUM, None
        if any(m.strip().split(":")[0] == "tp" for m in modifiers.split(",")):
            return Shard.SPLIT, -1
    if "tp:replicated" in declarations.split():
        return Shard.REPLICATED, None
    return None


def _rows(cfg: MLAConfig, found: DumpName, x: torch.Tensor, tp_size: int, where: str) -> torch.Tensor:
    """`x` as (rows, features): the trailing dims whose product is the op's whole or per-rank width."""
    if found.canonical in (canon.LAYER_INPUT, canon.LAYER_OUTPUT):
        full = cfg.hidden_size
    else:
        op = found.canonical.rsplit(".", 1)[0]
        module = next(m for m in canon.MODULES.values() if m.op == op)
        full = module.widths(cfg)[1 if found.canonical.endswith(".output") else 0]
    widths = {full, full // tp_size}
    split = next((k for k in range(1, x.dim() + 1) if math.prod(x.shape[x.dim() - k :]) in widths), None)
    if split is None:
        raise ValueError(
            f"{where}: shape {tuple(x.shape)} ends in no dims of {sorted(widths)} features (the config's width of "
            f"{found.canonical}, whole or per rank at TP{tp_size}); wrong config=?"
        )
    return x.reshape(-1, math.prod(x.shape[x.dim() - split :]))


def load_sglang_dump(
    path: str | os.PathLike,
    *,
    layer: int | None = None,
    step: int | None = None,
    config: Any = None,
    names: NameMap | dict | str | None = None,
    mode: str | None = None,
) -> Capture:
    """Read the dump folder `path` (SGLang's ``<dir>/<exp_name>/``, or `<dir>` holding one such folder)
    into a Capture of decoder layer `layer`'s attention at forward step `step` (each defaults to the only
    one the dump holds). `config` is the model's Hugging Face config (folder, config.json, dict or
    MLAConfig; default: the tokenizer path SGLang records, where it is a model folder).

    >>> cap = md.capture.load_sglang_dump("/tmp/dumper/dump_20250101_000000_123", layer=3, config="DeepSeek-V3/")
    """
    folder = find_dump_folder(path)
    if folder is None:
        raise FileNotFoundError(f"load_sglang_dump: {path} holds no dump files (step=...___rank=...___name=....pt)")
    entries = []
    for file in sorted(_dump_files(folder)):
        tags = parse_file_name(file.stem)
        try:
            entries.append((file, tags, int(tags["step"]), int(tags["rank"]), int(tags.get("dump_index", 0))))
        except (KeyError, ValueError):
            raise ValueError(f"load_sglang_dump: {file.name}: its step/rank/dump_index tags are not integers") from None
    maps = all_maps() if names is None else [resolve_map(names)]
    classified = []
    for file, tags, file_step, rank, index in entries:
        tag_layer = int(tags["layer_id"]) if tags.get("layer_id", "").isdigit() else None
        found = classify(tags.get("name", ""), maps, tag_layer)
        if found is not None:
            classified.append((file, found, file_step, rank, index))
    layers = sorted({f.layer for _, f, *_ in classified if f.layer is not None and f.kind != "positions"})
    if not layers:
        raise ValueError(
            f"load_sglang_dump: {folder} holds no MLA attention tensors under names {RELEASE}'s dumper gives them "
            "(non_intrusive__...layers.<N>.self_attn...; enable DUMPER_NON_INTRUSIVE_MODE=all)"
        )
    if layer is None:
        if len(layers) > 1:
            raise ValueError(f"load_sglang_dump: {folder} holds layers {layers}; pass layer=")
        layer = layers[0]
    elif layer not in layers:
        raise ValueError(f"load_sglang_dump: {folder} holds no tensors of layer {layer}; it holds layers {layers}")
    mine = [c for c in classified if c[1].layer == layer or (c[1].kind == "positions" and c[1].layer is None)]
    steps = sorted({s for _, f, s, _, _ in mine if f.kind == "activation"})
    if step is None:
        if len(steps) > 1:
            raise ValueError(f"load_sglang_dump: layer {layer} was dumped at steps {steps}; pass step=")
        step = steps[0] if steps else 0
    elif step not in steps:
        raise ValueError(f"load_sglang_dump: layer {layer} has no activations at step {step}; steps: {steps}")
    # Parameters are dumped once (dump_model), at whatever step it ran: keep their latest.
    chosen = [c for c in mine if c[2] == step or c[1].kind == "weight"]
    return _build(folder, chosen, layer, step, config, names, mode)


def _build(folder, chosen, layer, step, config, names, mode) -> Capture:
    records: dict[int, dict[str, tuple[DumpName, Any, dict, Path]]] = defaultdict(dict)
    for file, found, _, rank, _index in sorted(chosen, key=lambda c: (c[3], c[4])):
        if found.canonical in records[rank]:
            continue  # the first call of a module within the step is the one kept, as a capture does
        value, meta = read_record(file)
        records[rank][found.canonical] = (found, value, meta, file)
    metas = [meta for rank in records.values() for _, _, meta, _ in rank.values()]
    tp_size, rank_of = _parallel(records, folder)
    cfg = _config(config, metas)
    name_map = _pick_map(names, {f.module_path for rank in records.values() for f, *_ in rank.values() if f.module_path})
    ranks = []
    positions = None
    for global_rank, held in sorted(records.items()):
        rank = rank_of[global_rank]
        tensors: dict[str, CapturedTensor] = {}
        for name, (found, value, meta, file) in held.items():
            x, attrs = local_tensor(value)
            if x is None or not isinstance(value, torch.Tensor):
                continue
            where = f"{file.name} ({name}, rank {rank})"
            source = str(meta.get("name", file.name))
            if found.kind == "positions":
                kept = x.reshape(-1).to(torch.long)
                positions = kept.tolist() if positions is None else positions
                tensors[canon.POSITIONS] = CapturedTensor(canon.POSITIONS, TensorRole.INPUT, kept.clone(), "rope", source)
                continue
            if found.kind == "weight":
                module = name.rsplit(".", 1)[0]
                role = TensorRole.WEIGHT_SCALE if ".weight_scale" in name else (
                    TensorRole.INPUT_SCALE if name.endswith(".input_scale") else TensorRole.WEIGHT)
                info = canon.MODULES[module]
                if info.is_linear and role is not TensorRole.INPUT_SCALE:
                    shard, dim = canon.weight_shard(cfg, module, name, tuple(x.shape), tp_size, role is TensorRole.WEIGHT_SCALE)
                else:
                    shard, dim = Shard.REPLICATED, None
                tensors[name] = CapturedTensor(name, role, x.detach().clone(), info.step, source, attrs, shard, dim)
                continue
            rows = _rows(cfg, found, x, tp_size, where).detach().clone()
            output = name.endswith(".output")
            module = "o_proj" if name == canon.LAYER_OUTPUT else (
                "fused_qkv_a_proj" if name == canon.LAYER_INPUT else
                next(m.name for m in canon.MODULES.values() if m.op == name.rsplit(".", 1)[0]))
            stated = _shard_from_dims(meta.get("dims"))
            if stated is not None:
                shard, dim = stated
            elif name == canon.LAYER_INPUT:
                shard, dim = Shard.REPLICATED, None
            else:
                reduced = name_map.row_output_reduced if module == "o_proj" else True
                shard, dim = canon.activation_shard(cfg, module, name, rows.shape[1], tp_size, output, reduced)
            step_name = "all_reduce" if name == canon.LAYER_OUTPUT else canon.MODULES[module].step
            attrs["op_shape"] = str(tuple(x.shape))
            role = TensorRole.OUTPUT if output else TensorRole.INPUT
            tensors[name] = CapturedTensor(name, role, rows, step_name, source, attrs, shard, dim)
        ranks.append(RankCapture(rank=rank, tp_size=tp_size, tensors=tensors))
    rows_total = next((t.tensor.shape[0] for t in ranks[0].tensors.values() if t.role is TensorRole.OUTPUT), 0)
    if positions is None:
        raise ValueError(
            f"load_sglang_dump: {folder} holds no positions for layer {layer} (the core field 'positions' or "
            "'position_ids', or the attention's inputs.positions); include them in the dump filter"
        )
    if len(positions) != rows_total:
        raise ValueError(f"load_sglang_dump: {len(positions)} positions for {rows_total} token rows of layer {layer}")
    names_held = [set(r.tensors) for r in ranks]
    if any(held != names_held[0] for held in names_held):
        differ = sorted(set.union(*names_held) - set.intersection(*names_held))
        raise ValueError(f"load_sglang_dump: the ranks hold different tensors of layer {layer}: {differ}")
    manifest = CaptureManifest(
        engine=EngineInfo(name_map.engine, name_map.version),
        cfg=cfg,
        layer=layer,
        tp_size=tp_size,
        positions=positions,
        tokens=list(range(rows_total)),
        model_type=None,
        mode=mode,
        versions={"sglang-dumper": RELEASE.split()[-1]},
        note=f"read from the dump folder {folder.name} (step {step}; names as {name_map.key})",
    )
    return Capture(manifest=manifest, ranks=sorted(ranks, key=lambda r: r.rank))


def _parallel(records: dict[int, dict], folder: Path) -> tuple[int, dict[int, int]]:
    """(tp_size, {global rank: tp rank}) from SGLang's parallel info, else the world size and rank."""
    rank_of, sizes = {}, set()
    for global_rank, held in records.items():
        meta = next(iter(held.values()))[2]
        info = meta.get("sglang_parallel_info") if isinstance(meta.get("sglang_parallel_info"), dict) else {}
        if int(info.get("attn_dp_size", 1) or 1) > 1:
            raise ValueError(
                f"load_sglang_dump: {folder} was dumped with data-parallel attention (attn_dp_size "
                f"{info['attn_dp_size']}): its ranks hold different requests; read one attention-TP group's files"
            )
        # The attention's own TP group (attn_tp_*, dumper.py l.1748) where SGLang recorded it, else the TP group.
        key = "attn_tp" if "attn_tp_rank" in info and "attn_tp_size" in info else "tp"
        if f"{key}_rank" in info and f"{key}_size" in info:
            rank_of[global_rank], size = int(info[f"{key}_rank"]), int(info[f"{key}_size"])
        else:
            rank_of[global_rank], size = global_rank, int(meta.get("world_size", len(records)))
        sizes.add(size)
    if len(sizes) != 1:
        raise ValueError(f"load_sglang_dump: {folder}'s files disagree on the TP size: {sorted(sizes)}")
    tp_size = sizes.pop()
    missing = sorted(set(range(tp_size)) - set(rank_of.values()))
    if missing or len(rank_of) != tp_size:
        raise FileNotFoundError(
            f"load_sglang_dump: {folder} is a TP{tp_size} dump but holds ranks {sorted(rank_of.values())} "
            f"(missing {missing}); every rank's files are needed"
        )
    return tp_size, rank_of
