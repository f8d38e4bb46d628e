"""Checks of a layer run's options that cost nothing, made before any weight is built or read.

Building DeepSeek-V3's synthetic weights takes seconds and reading a real checkpoint's shards much
longer; a TP size that does not divide the heads is known from the config alone. So the config is
resolved first - a preset, or the checkpoint's config.json without touching its tensors - and every
option checked against it.

    cfg = check_layer_options("deepseek-v3", tp_sizes=(1, 2, 4, 8), tokens=16)
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from pathlib import Path

import torch

from .config import MLAConfig
from .weight_recipe import WeightRecipe, require_fp8


def layer_config(model: str | MLAConfig = "deepseek-v3", checkpoint=None) -> MLAConfig:
    """The config a run would use: a `Checkpoint`'s own, the config.json of a checkpoint folder (or of
    the folder of a .safetensors file), else the preset or MLAConfig `model`. Reads no tensor."""
    from .checkpoint import Checkpoint

    if checkpoint is None:
        if isinstance(model, MLAConfig):
            return model
        if not isinstance(model, str):
            raise TypeError(f"model must be a preset name or an MLAConfig, got {type(model).__name__}")
        return MLAConfig.preset(model)
    if isinstance(checkpoint, Checkpoint):
        return checkpoint.cfg
    if not isinstance(checkpoint, (str, os.PathLike)):
        raise TypeError(f"checkpoint must be a Checkpoint or a folder path, got {type(checkpoint).__name__}")
    path = Path(checkpoint).expanduser()
    if not path.exists():
        raise FileNotFoundError(f"checkpoint {path} does not exist")
    return MLAConfig.from_hf(path if path.is_dir() else path.parent)


def layer_positions(
    cfg: MLAConfig, tokens: int, start_position: int = 0, positions: Sequence[int] | torch.Tensor | None = None
) -> torch.Tensor:
    """The int64 positions of a run's `tokens` tokens: `positions` as given (one per token), else
    ``start_position .. start_position + tokens - 1``; every one inside ``0 .. max_position_embeddings - 1``
    of `cfg`. ValueError or TypeError naming the option and the rule."""
    if isinstance(start_position, bool) or not isinstance(start_position, int):
        raise TypeError(f"start_position={start_position!r} must be an int")
    if positions is None:
        if start_position < 0:
            raise ValueError(f"start_position={start_position} must be >= 0")
        values, what = torch.arange(start_position, start_position + tokens), f"start_position={start_position}"
    else:
        if start_position:
            raise ValueError(f"start_position={start_position} and positions= both given; pass one")
        values = torch.as_tensor(positions)
        if values.dim() != 1 or values.is_floating_point() or values.dtype == torch.bool:
            raise TypeError(
                f"positions must be a 1-D sequence of ints, got {values.dtype} of shape {tuple(values.shape)}"
            )
        if values.numel() != tokens:
            raise ValueError(f"positions holds {values.numel()} values, one per token is {tokens}")
        what = "positions"
        if values.numel() and values.min() < 0:
            raise ValueError(f"positions: {int(values.min())} is negative")
    last = int(values.max()) if values.numel() else 0
    if last >= cfg.max_position_embeddings:
        raise ValueError(
            f"{what} with {tokens} tokens puts a token at position {last}, past what {cfg.name} encodes: "
            f"max_position_embeddings {cfg.max_position_embeddings} (positions 0..{cfg.max_position_embeddings - 1})"
        )
    return values.to(torch.int64)


def check_layer_options(
    model: str | MLAConfig = "deepseek-v3",
    checkpoint=None,
    *,
    tp_sizes: Iterable[int] = (),
    tokens: int | None = None,
    layer: int = 0,
    start_position: int = 0,
    positions: Sequence[int] | torch.Tensor | None = None,
    quantize: str | None = None,
    ignore_extra: bool = False,
) -> MLAConfig:
    """Resolve the config (`layer_config`) and check every option against it: each TP size shards the
    layer (`MLAConfig.check_tp`) and is given once, tokens >= 1, layer >= 0, the tokens' positions lie
    within max_position_embeddings (`layer_positions`), and - for a checkpoint folder, from its files'
    headers - the layer's linear weights are FP8 or `quantize` names a recipe for them
    (`weight_recipe.require_fp8`). Returns the config; raises ValueError or TypeError naming the
    option and the rule."""
    for name, value in (("tokens", tokens), ("layer", layer)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            raise TypeError(f"{name}={value!r} must be an int")
    if tokens is not None and tokens < 1:
        raise ValueError(f"tokens={tokens} must be >= 1")
    if layer < 0:
        raise ValueError(f"layer={layer} must be >= 0")
    tp_sizes = list(tp_sizes)
    bad = [tp for tp in tp_sizes if isinstance(tp, bool) or not isinstance(tp, int)]
    if bad:
        raise TypeError(f"TP sizes must be ints, got {bad}")
    repeated = sorted({tp for tp in tp_sizes if tp_sizes.count(tp) > 1})
    if repeated:
        raise ValueError(f"TP sizes {tp_sizes}: {', '.join(map(str, repeated))} given more than once")
    cfg = layer_config(model, checkpoint)
    for tp in tp_sizes:
        cfg.check_tp(tp)
    if positions is not None and tokens is None:
        tokens = len(positions)
    layer_positions(cfg, 16 if tokens is None else tokens, start_position, positions)
    if quantize is not None:
        WeightRecipe.for_config(cfg, quantize)  # a bad recipe name fails before anything is read
    _check_weights_quantized(checkpoint, layer, cfg, quantize, ignore_extra)
    return cfg


def _check_weights_quantized(checkpoint, layer: int, cfg: MLAConfig, quantize: str | None, ignore_extra: bool) -> None:
    """`require_fp8` for what `checkpoint` would give: synthetic weights are FP8, a Checkpoint says, a
    folder's headers say."""
    from .checkpoint import Checkpoint, stored_fp8

    if checkpoint is None:
        if quantize is not None:
            raise ValueError(
                f"quantize={quantize}: synthetic weights are block-quantized already (DeepSeek's recipe); "
                "a recipe applies to a dense checkpoint"
            )
        return
    if isinstance(checkpoint, Checkpoint):
        require_fp8(
            checkpoint.quantized,
            quantize,
            f"checkpoint {checkpoint.source or checkpoint.cfg.name} layer {checkpoint.layer}",
        )
        return
    path = Path(checkpoint).expanduser()
    require_fp8(stored_fp8(path, layer, cfg, ignore_extra=ignore_extra), quantize, f"checkpoint {path} layer {layer}")
