"""`mla-debug layouts`: byte forensics of saved tensors against a reference (shuffled N times, scale
order, unrelated bytes), from checkpoint folders or .safetensors dumps."""

from __future__ import annotations

import argparse

from .table import print_columns


def add_parser(sub) -> None:
    layouts = sub.add_parser(
        "layouts",
        help="say how saved tensors' bytes relate to a reference: shuffled N times, scale order, unrelated",
        description="Layout forensics on saved tensors. OBSERVED and --reference are each a checkpoint folder "
        "(Hugging Face, config.json + safetensors) or a .safetensors dump (safetensors.torch.save_file). Weights "
        "are matched against the reference shuffled 0..4 times with (16, 16) or (32, 16); 2-D float32 tensors "
        "named *_scale or *.scale are activation scales whose reference holds the logical (M, G) values. A dump "
        "keeps bytes, not strides. Without --reference, each tensor's shape, dtype and shuffle eligibility.",
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
    layouts.set_defaults(func=_cmd_layouts)


def _cmd_layouts(args: argparse.Namespace) -> int:
    """One line per tensor: how its bytes relate to the reference's (shuffles, scale order), or, without
    a reference, its shape, dtype and whether aiter's (16, 16) shuffle could apply to it."""
    observed, observed_about, layer = _layouts_load(args.observed, args.layer, "OBSERVED")
    if args.reference is None:
        names = _layouts_pick(args.tensor, observed, None)
        print(f"observed   {args.observed}: {observed_about}")
        rows = [(name, _layouts_shape(t), _layouts_dtype(t), _layouts_shuffle_target(t)) for name, t in names]
        print_columns(("tensor", "shape", "dtype", "shuffle (16, 16) target"), rows)
        return 0
    # Without --layer, the layer a dump holds also picks the reference's layer, so both sides agree.
    reference, reference_about, _ = _layouts_load(
        args.reference, args.layer if args.layer is not None else layer, "REF"
    )
    pairs = _layouts_pick(args.tensor, observed, reference)
    print(f"observed   {args.observed}: {observed_about}")
    print(f"reference  {args.reference}: {reference_about}")
    rows = [
        (name, _layouts_shape(t), _layouts_dtype(t), _layouts_verdict(name, t, reference[name])) for name, t in pairs
    ]
    print_columns(("tensor", "shape", "dtype", "bytes against the reference"), rows)
    if args.tensor is None:
        for side, mine, other in (("observed", observed, reference), ("reference", reference, observed)):
            alone = [name for name in mine if name not in other]
            if alone:
                print(f"only in {side}: {', '.join(alone)}")
    return 0


def _layouts_load(text: str, layer: int | None, role: str) -> tuple[dict, str, int | None]:
    """(tensors by short name, where they came from in words, the layer read) of a checkpoint folder
    (`Checkpoint.load`) or a .safetensors dump. Pickle files are refused."""
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
        ckpt = Checkpoint.load(path, layer=0 if layer is None else layer)
        return (
            dict(ckpt.tensors),
            f"checkpoint {ckpt.cfg.name} layer {ckpt.layer}, {len(ckpt.tensors)} tensors",
            ckpt.layer,
        )
    if path.suffix.lower() != ".safetensors":
        raise ValueError(f"{role} {path}: neither a checkpoint folder nor a .safetensors file")
    return _layouts_read_dump(path, layer, role)


def _layouts_read_dump(path, layer: int | None, role: str) -> tuple[dict, str, int | None]:
    """A .safetensors dump's tensors. Keys like ``model.layers.3.self_attn.kv_b_proj.weight`` become
    ``kv_b_proj.weight`` (the checkpoint's short names) for the chosen layer; other layers are skipped."""
    import re

    from ..model.checkpoint import open_safetensors

    layer_key = re.compile(r"^(?:.*?\.)?layers\.(\d+)\.(.+)$")
    with open_safetensors(path, f"{role} {path}") as handle:  # reads the header; tensors on demand
        keys = list(handle.keys())
        by_layer: dict[int, list[tuple[str, str]]] = {}
        unlayered: list[tuple[str, str]] = []
        for key in keys:
            match = layer_key.match(key)
            if match is None:
                unlayered.append((key.removeprefix("self_attn."), key))
            else:
                by_layer.setdefault(int(match.group(1)), []).append((match.group(2).removeprefix("self_attn."), key))
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


def _layouts_pick(wanted: list[str] | None, observed: dict, reference: dict | None) -> list[tuple[str, object]]:
    """(name, observed tensor) in the reference's order (the layer's own order for a checkpoint), or in
    the order asked with --tensor; an asked-for name missing on either side is an error."""
    if wanted is None:
        order = list(reference) if reference is not None else list(observed)
        return [(name, observed[name]) for name in order if name in observed]
    for side, tensors in (("OBSERVED", observed), ("REF", reference)):
        missing = [name for name in wanted if tensors is not None and name not in tensors]
        if missing:
            raise LookupError(f"--tensor {', '.join(missing)}: not in {side}; it has {', '.join(tensors) or 'nothing'}")
    return [(name, observed[name]) for name in dict.fromkeys(wanted)]


def _layouts_shape(t) -> str:
    return str(tuple(t.shape))


def _layouts_dtype(t) -> str:
    return str(t.dtype).removeprefix("torch.")


def _layouts_shuffle_target(t) -> str:
    """Whether aiter's (16, 16) shuffle applies (N % 16 == 0 and K % 32 == 0, 1/2/4-byte elements)."""
    if t.dim() < 2:
        return f"no ({t.dim()}-D)"
    n, k = t.shape[-2], t.shape[-1]
    problems = [f"N={n} is not a multiple of 16"] if n % 16 else []
    problems += [f"K={k} is not a multiple of 32"] if k % 32 else []
    problems += [f"{t.element_size()}-byte elements"] if t.element_size() not in (1, 2, 4) else []
    return "yes" if not problems else "no: " + ", ".join(problems)


def _layouts_is_activation_scale(name: str, observed, reference) -> bool:
    import torch

    return (
        (name.endswith("_scale") or name.endswith(".scale"))
        and observed.dim() == 2
        and reference.dim() == 2
        and observed.dtype == torch.float32
        and reference.dtype == torch.float32
    )


def _layouts_scale_verdict(found: tuple) -> str:
    if not found:
        return "activation scale: unrelated bytes (no presentation of the reference's values)"
    if len(found) > 1:
        return f"activation scale: {' = '.join(map(str, found))} (M == 1 or G == 1: the presentations coincide)"
    layout = found[0]
    if layout.name == "COL_MAJOR":
        return "activation scale written COL_MAJOR (column-major bytes under ROW_MAJOR's shape and strides)"
    return f"activation scale written {layout}"


def _layouts_verdict(name: str, observed, reference) -> str:
    """How `observed`'s bytes relate to `reference`'s, in words."""
    import torch

    from ..layouts import LAYOUTS, identify_scale_layout, identify_weight_layout, shuffle_period

    scale_pair = _layouts_is_activation_scale(name, observed, reference)
    if observed.shape != reference.shape:
        # A COL_MAJOR_STRIDED buffer has no contiguous (M, G) form; its memory saves as the (G, M) transpose.
        if scale_pair and tuple(observed.shape) == tuple(reference.shape)[::-1]:
            found = identify_scale_layout(observed.t(), reference)
            if found:
                return f"activation scale stored as its (G, M) transpose: {' = '.join(map(str, found))} memory"
        return f"shape differs: observed {tuple(observed.shape)}, reference {tuple(reference.shape)}"
    if observed.element_size() != reference.element_size():
        return f"dtype differs: observed {observed.dtype}, reference {reference.dtype} (bytes not comparable)"
    note = "" if observed.dtype == reference.dtype else f" [bytes compared: {observed.dtype} vs {reference.dtype}]"
    if scale_pair:
        return _layouts_scale_verdict(identify_scale_layout(observed, reference)) + note
    if observed.dim() == 0:
        same = torch.equal(observed.reshape(1).view(torch.uint8), reference.reshape(1).view(torch.uint8))
        return ("plain (bytes equal the reference)" if same else "different value") + note
    match = identify_weight_layout(observed, reference)
    n, k, size = (observed.shape[-2] if observed.dim() >= 2 else 0), observed.shape[-1], observed.element_size()
    shufflable = [layout for layout in LAYOUTS if observed.dim() >= 2 and not n % layout[0] and not k % (2 * layout[1])]
    if match is None:
        if not shufflable:
            return f"unrelated bytes (not equal; shape {tuple(observed.shape)} admits no shuffle to try)" + note
        # identify_weight_layout tries up to 4 shuffles, fewer when the period repeats sooner.
        counts = {layout: min(4, shuffle_period(k, size, layout) - 1) for layout in shufflable}
        tried = ", ".join(
            f"{'1 shuffle' if count == 1 else f'1-{count} shuffles'} with {layout}" for layout, count in counts.items()
        )
        return f"unrelated bytes (neither plain nor {tried})" + note
    text = str(match)
    if match.shuffles == 0 and (16, 16) in shufflable and shuffle_period(k, size) == 2:
        # A 256-byte row: the (16, 16) shuffle is an involution, so two shuffles give these bytes too.
        text += "; 2 shuffles with (16, 16) look the same here (period 2)"
    return text + note
