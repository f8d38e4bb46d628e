"""Checks of a layer run's options that cost nothing, made before any weight is built or read.

Building DeepSeek-V3's synthetic weights takes seconds and reading a real checkpoint's shards much
longer; a TP size that does not divide the heads is known from the config alone. So the config is
resolved first - a preset, or the checkpoint's config.json without touching its tensors - and every
option checked against it.

    cfg = check_layer_options("deepseek-v3", tp_sizes=(1, 2, 4, 8), tokens=16)
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from .config import MLAConfig


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


def check_layer_options(
    model: str | MLAConfig = "deepseek-v3",
    checkpoint=None,
    *,
    tp_sizes: Iterable[int] = (),
    tokens: int | None = None,
    layer: int = 0,
) -> MLAConfig:
    """Resolve the config (`layer_config`) and check every option against it: each TP size shards the
    layer (`MLAConfig.check_tp`) and is given once, tokens >= 1, layer >= 0. Returns the config; raises
    ValueError or TypeError naming the option and the rule."""
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
    return cfg
