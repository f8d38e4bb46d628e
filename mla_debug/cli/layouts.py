"""`mla-debug layouts`: byte forensics of saved tensors against a reference (shuffled N times, scale
order, unrelated bytes), from checkpoint folders or .safetensors dumps."""

from __future__ import annotations

import argparse

from .table import print_columns


def add_parser(sub) -> None:
    from .args import add_ignore_extra
    from .common import add_command

    layouts = add_command(
        sub,
        "layouts",
        _cmd_layouts,
        "say how saved tensors' bytes relate to a reference: shuffled N times, scale order, unrelated",
        "Layout forensics on saved tensors. OBSERVED and --reference are each a checkpoint folder (Hugging Face, "
        "config.json + safetensors) or a .safetensors dump (safetensors.torch.save_file). Weights are matched "
        "against the reference shuffled 0..4 times with (16, 16) or (32, 16); 2-D float32 tensors named *_scale or "
        "*.scale are activation scales whose reference holds the logical (M, G) values. A dump keeps bytes, not "
        "strides. Without --reference, each tensor's shape, dtype and shuffle eligibility.",
    )
    layouts.add_argument(
        "observed", metavar="OBSERVED", help="checkpoint folder or .safetensors file whose bytes are examined"
    )
    layouts.add_argument(
        "--reference", default=None, metavar="REF", help="checkpoint folder or .safetensors file: the expected tensors"
    )
    layouts.add_argument(
        "--tensor",
        nargs="+",
        action="extend",
        default=None,
        metavar="NAME",
        help="only these tensors, e.g. o_proj.weight",
    )
    layouts.add_argument(
        "--layer",
        type=int,
        default=None,
        metavar="N",
        help="layer to read (default: 0 for a folder, the one layer of a dump)",
    )
    add_ignore_extra(layouts)


def _cmd_layouts(args: argparse.Namespace) -> int:
    """One line per tensor: how its bytes relate to the reference's (shuffles, scale order), or, without
    a reference, its shape, dtype and whether aiter's (16, 16) shuffle could apply to it. The verdicts are
    `layouts.compare_tensors`' records, said in words by `viz.forensics`."""
    from ..layouts.forensics import compare_tensors, shuffle_fit
    from ..viz.forensics import shuffle_fit_text, verdict_text

    observed, observed_about, layer = _layouts_load(args.observed, args.layer, "OBSERVED", args.ignore_extra)
    if args.reference is None:
        names = _layouts_pick(args.tensor, observed, None)
        print(f"observed   {args.observed}: {observed_about}")
        tensors = [(name, observed[name]) for name in names]
        rows = [
            (name, str(tuple(t.shape)), _dtype_name(t.dtype), shuffle_fit_text(shuffle_fit(t))) for name, t in tensors
        ]
        print_columns(("tensor", "shape", "dtype", "shuffle (16, 16) target"), rows)
        return 0
    # Without --layer, the layer a dump holds also picks the reference's layer, so both sides agree.
    reference, reference_about, _ = _layouts_load(
        args.reference, args.layer if args.layer is not None else layer, "REF", args.ignore_extra
    )
    comparison = compare_tensors(observed, reference, names=_layouts_pick(args.tensor, observed, reference))
    print(f"observed   {args.observed}: {observed_about}")
    print(f"reference  {args.reference}: {reference_about}")
    rows = [
        (v.name, str(v.observed_shape), _dtype_name(v.observed_dtype), verdict_text(v)) for v in comparison.verdicts
    ]
    print_columns(("tensor", "shape", "dtype", "bytes against the reference"), rows)
    if args.tensor is None:
        for side, alone in (("observed", comparison.only_in_observed), ("reference", comparison.only_in_reference)):
            if alone:
                print(f"only in {side}: {', '.join(alone)}")
    return 0


def _layouts_load(text: str, layer: int | None, role: str, ignore_extra: bool = False) -> tuple[dict, str, int | None]:
    """(tensors by short name, where they came from in words, the layer read) of a checkpoint folder
    (`Checkpoint.load`, whose skipped tensors - DeepSeek-V3.2's indexer, unknown ones under
    `ignore_extra` - are named in the words) or a .safetensors dump. Pickle files are refused."""
    from pathlib import Path

    from ..model.checkpoint import PICKLE_SUFFIXES, Checkpoint

    path = Path(text).expanduser()
    if path.suffix.lower() in PICKLE_SUFFIXES:
        raise ValueError(
            f"{role} {path}: {path.suffix} files are pickles and are refused, because unpickling can execute "
            "arbitrary code; save the tensors with safetensors.torch.save_file instead"
        )
    if layer is not None and layer < 0:
        raise ValueError(f"--layer {layer}: a layer index is >= 0")
    if not path.exists():
        raise FileNotFoundError(f"{role} {path} does not exist")
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise FileNotFoundError(
                f"{role} {path}: a checkpoint folder needs its config.json; to examine a dump of tensors, "
                "pass its .safetensors file"
            )
        ckpt = Checkpoint.load(path, layer=0 if layer is None else layer, ignore_extra=ignore_extra)
        about = f"checkpoint {ckpt.cfg.name} layer {ckpt.layer}, {len(ckpt.tensors)} tensors"
        if ckpt.unmodelled:
            about += (
                f"; indexer present, not modelled (DeepSeek-V3.2's sparse top-k indexer; "
                f"{len(ckpt.unmodelled)} tensors not read: {', '.join(ckpt.unmodelled)})"
            )
        if ckpt.ignored:
            about += f"; ignored (--ignore-extra): {', '.join(ckpt.ignored)}"
        return dict(ckpt.tensors), about, ckpt.layer
    if path.suffix.lower() != ".safetensors":
        raise ValueError(f"{role} {path}: neither a checkpoint folder nor a .safetensors file")
    return _layouts_read_dump(path, layer, role)


def _layouts_read_dump(path, layer: int | None, role: str) -> tuple[dict, str, int | None]:
    """A .safetensors dump's tensors. Keys like ``model.layers.3.self_attn.kv_b_proj.weight`` become
    ``kv_b_proj.weight`` (the checkpoint's short names) for the chosen layer; other layers are skipped."""
    from ..model.checkpoint import open_safetensors, split_layer_key

    with open_safetensors(path, f"{role} {path}") as handle:  # reads the header; tensors on demand
        keys = list(handle.keys())
        by_layer: dict[int, list[tuple[str, str]]] = {}
        unlayered: list[tuple[str, str]] = []
        for key in keys:
            split = split_layer_key(key)
            if split is None:
                unlayered.append((key.removeprefix("self_attn."), key))
            else:
                by_layer.setdefault(split[0], []).append((split[1].removeprefix("self_attn."), key))
        if layer is None and len(by_layer) > 1:
            raise LookupError(f"{role} {path} holds tensors of layers {sorted(by_layer)}; choose one with --layer")
        chosen = layer if layer is not None else next(iter(by_layer), None)
        if by_layer and chosen not in by_layer:
            raise LookupError(
                f"{role} {path} holds tensors of layers {sorted(by_layer)}, none of layer {chosen}; "
                "choose one with --layer"
            )
        names: dict[str, str] = {}
        for short, key in unlayered + by_layer.get(chosen, []):
            if short in names:
                raise ValueError(f"{role} {path}: keys {names[short]!r} and {key!r} both name tensor {short!r}")
            names[short] = key
        tensors = {short: handle.get_tensor(key) for short, key in names.items()}
    about = f"safetensors dump, {len(tensors)} tensors"
    if by_layer:
        about += f" of layer {chosen}"
    if len(keys) > len(tensors):
        about += f" ({len(keys) - len(tensors)} of other layers skipped)"
    return tensors, about, chosen if by_layer else layer


def _layouts_pick(wanted: list[str] | None, observed: dict, reference: dict | None) -> list[str]:
    """The names to show: the reference's order (the layer's own order for a checkpoint) of the names
    both sides hold, or the order asked with --tensor; an asked-for name missing on either side is an
    error."""
    if wanted is None:
        order = list(reference) if reference is not None else list(observed)
        return [name for name in order if name in observed]
    for side, tensors in (("OBSERVED", observed), ("REF", reference)):
        missing = [name for name in wanted if tensors is not None and name not in tensors]
        if missing:
            raise LookupError(f"--tensor {', '.join(missing)}: not in {side}; it has {', '.join(tensors) or 'nothing'}")
    return list(dict.fromkeys(wanted))


def _dtype_name(dtype) -> str:
    return str(dtype).removeprefix("torch.")
