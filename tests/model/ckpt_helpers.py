"""Builders and probes shared by the checkpoint tests."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import save_file

import mla_debug.model.checkpoint as checkpoint_module
from mla_debug.model import Checkpoint, MLAConfig

ATTN = "model.layers.{layer}.self_attn."


def bits(t: torch.Tensor) -> torch.Tensor:
    """The raw bytes of a tensor (so -0.0 != +0.0 and NaN == NaN)."""
    return t.detach().contiguous().reshape(-1).view(torch.uint8)


def same_bytes(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and a.dtype == b.dtype and torch.equal(bits(a), bits(b))


def assert_same_tensors(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert list(a) == list(b) or set(a) == set(b), (sorted(a), sorted(b))
    different = [k for k in a if not same_bytes(a[k], b[k])]
    assert different == [], f"tensors differ: {different}"


def prefixed(ckpt: Checkpoint, layer: int | None = None) -> dict[str, torch.Tensor]:
    """The checkpoint's tensors under a model's key names."""
    prefix = ATTN.format(layer=ckpt.layer if layer is None else layer)
    return {prefix + k: t for k, t in ckpt.tensors.items()}


def write_sharded(folder: Path, cfg: MLAConfig, shards: dict[str, dict[str, torch.Tensor]], index: bool = True) -> Path:
    """A Hugging Face folder: config.json, the given shard files and (optionally) the index."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(cfg.to_hf()))
    weight_map = {}
    for name, tensors in shards.items():
        save_file({k: t.contiguous() for k, t in tensors.items()}, str(folder / name))
        weight_map.update({key: name for key in tensors})
    if index:
        (folder / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    return folder


class SafeOpenSpy:
    """Wraps `safe_open` inside mla_debug.model.checkpoint, recording opened files and fetched keys."""

    def __init__(self, monkeypatch) -> None:
        self.opened: list[str] = []
        self.fetched: list[str] = []
        real = checkpoint_module.safe_open
        spy = self

        class Handle:
            def __init__(self, path, framework, **kwargs):
                spy.opened.append(Path(path).name)
                self._inner = real(path, framework=framework, **kwargs)

            def __enter__(self):
                self._handle = self._inner.__enter__()
                return self

            def __exit__(self, *exc):
                return self._inner.__exit__(*exc)

            def keys(self):
                return self._handle.keys()

            def get_tensor(self, key):
                spy.fetched.append(key)
                return self._handle.get_tensor(key)

        monkeypatch.setattr(checkpoint_module, "safe_open", Handle)
