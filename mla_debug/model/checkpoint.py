"""One attention layer's weights: synthetic, from a state dict, or from a Hugging Face safetensors folder.

A `Checkpoint` holds the tensors of ONE layer's attention under Hugging Face short names
(``q_b_proj.weight``, ``q_b_proj.weight_scale_inv``, ...), validated against the `MLAConfig`: every
tensor present, each with its expected shape and dtype. Linear weights are either all FP8 with an fp32
128x128 block scale (``weight_scale_inv``, which MULTIPLIES on dequantization, docs/semantics.md §3) or all dense
(bf16/fp16/fp32); norm weights are never quantized. Tensors the toolkit recognises and does not model
(DeepSeek-V3.2's indexer, `model.indexer`) are skipped and named; a dense layer is quantized by a named
recipe with `quantized_with` (`model.weight_recipe`).

Loading reads only the requested layer's ``self_attn`` tensors, lazily, from the shards that hold them
(a DeepSeek-V3 checkpoint is 163 files and ~700 GB). Only safetensors is read: pickle files (``.bin``,
``.pt``) can execute code when loaded.

    ckpt = Checkpoint.synthetic(MLAConfig.preset("tiny"), seed=0)
    path = ckpt.save("data/tiny-seed0")
    same = Checkpoint.load(path)
"""

from __future__ import annotations

import json
import math
import os
import re
import stat
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import save_file

from .._checks import describe
from .._files import check_new_folder, folder_atomically
from ..layouts.quantized import QuantizedWeight
from ..numerics import FORMATS, Fp8Format, QuantFlavor, block_dequantize, block_quantize, fp8_format, quant_flavor
from .config import MLAConfig
from .hf_config import to_hf_dict
from .hf_quantization import UE8M0
from .indexer import PREFIX as INDEXER_PREFIX
from .indexer import indexer_keys
from .synthetic import synthetic_tensors
from .weight_recipe import WeightRecipe

SCALE_SUFFIX = ".weight_scale_inv"
WEIGHT_SUFFIX = ".weight"
ATTN_PREFIX = "self_attn."
DENSE_DTYPES = (torch.bfloat16, torch.float16, torch.float32)
FP8_DTYPES = tuple(fmt.dtype for fmt in FORMATS.values())
SAFETENSORS_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".pkl", ".ckpt")
# Progress bars only for layers big enough to take a noticeable time (the real V3 layer is 187M).
PROGRESS_MIN_PARAMS = 50_000_000

# `<anything.>layers.<N>.<rest>`: model.layers.3.self_attn.q_a_proj.weight, language_model.model.layers.3...
_LAYER_KEY = re.compile(r"^(?:.*?\.)?layers\.(\d+)\.(.+)$")


def split_layer_key(key: str) -> tuple[int, str] | None:
    """(N, rest) of a tensor name ``<anything.>layers.<N>.<rest>``; None for a name outside the layers."""
    match = _LAYER_KEY.match(key)
    return None if match is None else (int(match.group(1)), match.group(2))


# -- expected tensors ------------------------------------------------------------------------------


def _shape_rules(cfg: MLAConfig) -> dict[str, tuple[tuple[int, ...], str]]:
    """key -> (shape, the rule in the notation of docs/semantics.md §1), in the order the layer uses them."""
    h, nh, lq = cfg.hidden_size, cfg.num_heads, cfg.q_lora_rank
    r = cfg.qk_rope_head_dim
    if cfg.arch == "v3":
        lkv, p, v = cfg.kv_lora_rank, cfg.qk_nope_head_dim, cfg.v_head_dim
        return {
            "q_a_proj.weight": ((lq, h), "(Lq, H)"),
            "q_a_layernorm.weight": ((lq,), "(Lq,)"),
            "q_b_proj.weight": ((nh * (p + r), lq), "(Nh*(P+R), Lq)"),
            "kv_a_proj_with_mqa.weight": ((lkv + r, h), "(Lkv+R, H)"),
            "kv_a_layernorm.weight": ((lkv,), "(Lkv,)"),
            "kv_b_proj.weight": ((nh * (p + v), lkv), "(Nh*(P+V), Lkv)"),
            "o_proj.weight": ((h, nh * v), "(H, Nh*V)"),
        }
    d, g, o = cfg.head_dim, cfg.o_groups, cfg.o_lora_rank
    return {
        "wq_a.weight": ((lq, h), "(Lq, H)"),
        "wkv.weight": ((d, h), "(head_dim, H)"),
        "q_norm.weight": ((lq,), "(Lq,)"),
        "kv_norm.weight": ((d,), "(head_dim,)"),
        "wq_b.weight": ((nh * d, lq), "(Nh*head_dim, Lq)"),
        "wo_a.weight": ((g * o, nh * d // g), "(o_groups*o_lora_rank, Nh*head_dim/o_groups)"),
        "wo_b.weight": ((h, g * o), "(H, o_groups*o_lora_rank)"),
        "indexer.wq_b.weight": ((cfg.index_n_heads * cfg.index_head_dim, lq), "(index_n_heads*index_head_dim, Lq)"),
    }


def _scale_shape(shape: tuple[int, ...], block: tuple[int, int]) -> tuple[int, int]:
    return (-(-shape[0] // block[0]), -(-shape[1] // block[1]))


def expected_shapes(cfg: MLAConfig, *, scales: bool = False) -> dict[str, tuple[int, ...]]:
    """Full (unsharded) shape of every tensor of one attention layer, keyed by Hugging Face short name.

    With ``scales=True`` each 2-D weight is followed by its ``<module>.weight_scale_inv`` of shape
    (ceil(N/bn), ceil(K/bk)) for ``cfg.weight_block``; norm weights never have one.

    >>> expected_shapes(MLAConfig.preset("deepseek-v3"))["q_b_proj.weight"]
    (24576, 1536)
    """
    out: dict[str, tuple[int, ...]] = {}
    for key, (shape, _) in _shape_rules(cfg).items():
        out[key] = shape
        if scales and len(shape) == 2:
            out[key.removesuffix(WEIGHT_SUFFIX) + SCALE_SUFFIX] = _scale_shape(shape, cfg.weight_block)
    return out


def _default_flavor(fmt: Fp8Format) -> QuantFlavor:
    # DeepSeek's recipe maps amax to 448, which on e4m3fnuz (max 240) would turn the largest values into
    # NaN; a native fnuz checkpoint is quantized to the format's own max (aiter's recipe) instead.
    return quant_flavor("deepseek" if fmt.name == "e4m3fn" else "aiter")


# -- validation ------------------------------------------------------------------------------------


def _validate(cfg: MLAConfig, tensors: Mapping[str, Any], where: str) -> Fp8Format | None:
    """Check presence, shape and dtype of every tensor; return the fp8 format (None when dense)."""
    rules = _shape_rules(cfg)
    problems: list[str] = []
    allowed = set(expected_shapes(cfg, scales=True))
    extra = sorted(k for k in tensors if k not in allowed)
    if extra:
        problems.append(f"unexpected tensors {extra} (a {cfg.arch} attention layer has {sorted(allowed)})")
    for key, value in tensors.items():
        if not isinstance(value, torch.Tensor):
            problems.append(f"{key}: expected a torch.Tensor, got {type(value).__name__}")
    if problems:
        raise ValueError(f"{where}: " + "; ".join(problems))

    formats: dict[str, Fp8Format] = {}
    dense: list[str] = []
    for key, (shape, rule) in rules.items():
        want = f"expected shape {shape} = {rule}"
        t = tensors.get(key)
        if t is None:
            problems.append(f"missing tensor {key!r} ({want})")
            continue
        if tuple(t.shape) != shape:
            problems.append(f"{key}: {describe(t)} does not match the {want}")
        if len(shape) == 1:
            if t.dtype not in DENSE_DTYPES:
                problems.append(
                    f"{key}: {describe(t)} has the wrong dtype; a norm weight is never quantized, "
                    f"expected one of {_names(DENSE_DTYPES)}"
                )
            continue
        scale_key = key.removesuffix(WEIGHT_SUFFIX) + SCALE_SUFFIX
        scale = tensors.get(scale_key)
        if t.dtype in FP8_DTYPES:
            formats[key] = fp8_format(t.dtype)
            want_scale = _scale_shape(shape, cfg.weight_block)
            if scale is None:
                problems.append(
                    f"missing tensor {scale_key!r} (fp32, shape {want_scale}): the fp8 weight {key} "
                    f"needs its {cfg.weight_block[0]}x{cfg.weight_block[1]} block scale"
                )
            elif scale.dtype != torch.float32 or tuple(scale.shape) != want_scale:
                problems.append(
                    f"{scale_key}: {describe(scale)} must be torch.float32 of shape {want_scale} "
                    f"= (ceil(N/{cfg.weight_block[0]}), ceil(K/{cfg.weight_block[1]})) for {key} {shape}"
                )
        elif t.dtype in DENSE_DTYPES:
            dense.append(key)
            if scale is not None:
                problems.append(f"{scale_key}: present but {key} is {t.dtype}, not fp8 (a dense weight has no scale)")
        else:
            problems.append(
                f"{key}: {describe(t)} has the wrong dtype; a linear weight must be fp8 "
                f"({_names(FP8_DTYPES)}) with a weight_scale_inv, or dense ({_names(DENSE_DTYPES)})"
            )
    if formats and dense:
        problems.append(
            f"mixed linear weights: fp8 {sorted(formats)} and dense {dense}; "
            "a layer is quantized as a whole (use from_state_dict(..., quantize=True))"
        )
    if len(set(formats.values())) > 1:
        seen = ", ".join(f"{k} {f.name}" for k, f in formats.items())
        problems.append(f"fp8 weights in different formats ({seen}); convert them to one format first")
    if problems:
        raise ValueError(f"{where}: " + "; ".join(problems))
    return next(iter(formats.values()), None)


def _names(dtypes: Iterable[torch.dtype]) -> str:
    return ", ".join(str(d) for d in dtypes)


def _ranges(values: list[int]) -> str:
    """[0, 1, 2, 5] -> '0-2, 5' (a DeepSeek-V3 checkpoint has 62 layers; do not print them all)."""
    parts, start = [], None
    for i, v in enumerate(values):
        if start is None:
            start = v
        if i + 1 == len(values) or values[i + 1] != v + 1:
            parts.append(str(start) if start == v else f"{start}-{v}")
            start = None
    return ", ".join(parts)


@dataclass(frozen=True)
class _Selection:
    """One layer's attention tensors picked out of a key list: {short key: original key} of those read,
    and the short keys skipped - recognised but not modelled (V3.2's indexer), or unknown and ignored."""

    layer: int
    mapping: dict[str, str]
    unmodelled: tuple[str, ...]
    ignored: tuple[str, ...]


def _select_attention(
    keys: Iterable[str], layer: int | None, cfg: MLAConfig, where: str, ignore_extra: bool
) -> _Selection:
    """Pick one layer's attention tensors out of a key list.

    Keys may be bare (an attention module's state dict), ``self_attn.``-prefixed (a decoder layer's) or
    ``...layers.N.self_attn.``-prefixed (a model's). Keys under another namespace (mlp, other layers,
    embeddings) are clearly outside the attention and ignored. Inside the attention, DeepSeek-V3.2's
    indexer tensors (when `cfg` has the indexer) are recognised and skipped as not modelled; any other
    unknown key (a bias, a module this toolkit does not know) is an error unless ``ignore_extra``, which
    skips it and names it.
    """
    keys = list(keys)
    known = expected_shapes(cfg, scales=True)
    roots = {k.split(".")[0] for k in known}
    by_layer: dict[int, dict[str, str]] = {}
    bare: list[str] = []
    for key in keys:
        split = split_layer_key(key)
        if split is None:
            bare.append(key)
        elif split[1].startswith(ATTN_PREFIX):
            by_layer.setdefault(split[0], {})[split[1].removeprefix(ATTN_PREFIX)] = key
    prefixed = len(bare) < len(keys)
    if prefixed:
        stray = [k for k in bare if k.split(".")[0] in roots or k.startswith(ATTN_PREFIX)]
        if stray:
            raise ValueError(
                f"{where}: keys {stray[:8]} have no 'layers.N.self_attn.' prefix while others do; "
                "it is ambiguous which layer they belong to"
            )
        if not by_layer:
            raise ValueError(f"{where}: no 'layers.N.self_attn.' tensors among {len(keys)} keys (first: {keys[:5]})")
        if layer is None:
            if len(by_layer) > 1:
                raise ValueError(
                    f"{where}: holds the attention of layers {_ranges(sorted(by_layer))}; pass layer= to pick one"
                )
            layer = next(iter(by_layer))
        elif layer not in by_layer:
            raise ValueError(
                f"{where}: no self_attn tensors for layer {layer}; layers present: {_ranges(sorted(by_layer))}"
            )
        mapping = by_layer[layer]
    elif any(k.startswith(ATTN_PREFIX) for k in bare):
        # A decoder layer's state dict: mlp / input_layernorm / ... are outside the attention.
        mapping = {k.removeprefix(ATTN_PREFIX): k for k in bare if k.startswith(ATTN_PREFIX)}
        layer = 0 if layer is None else layer
    else:
        mapping = {k: k for k in bare}
        layer = 0 if layer is None else layer
    indexer = set(indexer_keys(cfg))
    unmodelled = tuple(sorted(short for short in mapping if short in indexer))
    extra = sorted(short for short in mapping if short not in known and short not in indexer)
    if extra and not ignore_extra:
        hint = ""
        if any(short.startswith(INDEXER_PREFIX) for short in extra) and cfg.arch == "v3":
            hint = (
                " (DeepSeek-V3.2's indexer is recognised when the config is V3.2's: model_type deepseek_v32 "
                "with index_n_heads, index_head_dim and index_topk)"
            )
        raise ValueError(
            f"{where}: tensors {[mapping[s] for s in extra]} are not part of a {cfg.arch} attention layer "
            f"(expected {sorted(known)}){hint}; biases and unknown modules are refused - pass "
            "ignore_extra=True (CLI: --ignore-extra) to skip them"
        )
    mapping = {s: k for s, k in mapping.items() if s in known}
    return _Selection(layer, mapping, unmodelled, tuple(extra))


def _check_layer(layer: object) -> int:
    if isinstance(layer, bool) or not isinstance(layer, int) or layer < 0:
        raise ValueError(f"layer={layer!r} must be a non-negative int")
    return layer


# -- the checkpoint --------------------------------------------------------------------------------


def _check_scale_format(cfg: MLAConfig, tensors: Mapping[str, torch.Tensor], where: str) -> None:
    """A ``scale_fmt: "ue8m0"`` config promises power-of-two weight scales (DeepSeek-V3.1's format, which
    the engines' ue8m0 kernels read as exponents): refuse, naming the tensor, the first scale that is not."""
    if cfg.scale_fmt != UE8M0:
        return
    for key in sorted(k for k in tensors if k.endswith(SCALE_SUFFIX)):
        scale = tensors[key]
        mantissa, _ = torch.frexp(scale)
        bad = ((mantissa != 0.5) | ~torch.isfinite(scale)).nonzero()
        if len(bad):
            index = tuple(int(i) for i in bad[0])
            raise ValueError(
                f"{where}: {key}{list(index)} = {scale[index].item()!r} is not a power of two, but config.json's "
                f"quantization_config.scale_fmt {UE8M0!r} says every block scale is one"
            )


@dataclass(eq=False, repr=False)
class Checkpoint:
    """The weights of one attention layer, keyed by Hugging Face short name.

    ``tensors`` holds ``<module>.weight`` for every linear and norm module of ``cfg.arch`` and, when
    ``quantized``, ``<module>.weight_scale_inv`` (fp32, one value per 128x128 block) for every linear.
    The constructor validates presence, shapes and dtypes and sets ``cfg.quantized`` to ``quantized``.
    Tensors are not copied: a checkpoint built from a module's state dict shares its storage.

    ``unmodelled`` names the tensors the layer's source holds that this toolkit recognises and does not
    model (DeepSeek-V3.2's indexer, `model.indexer`); ``ignored`` the unknown ones skipped by
    ``ignore_extra``. Neither is read: both are sorted tuples of short names.
    """

    cfg: MLAConfig
    layer: int
    tensors: dict[str, torch.Tensor]
    quantized: bool
    source: str = ""
    unmodelled: tuple[str, ...] = ()
    ignored: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.cfg, MLAConfig):
            raise TypeError(f"Checkpoint: cfg must be an MLAConfig, got {type(self.cfg).__name__}")
        _check_layer(self.layer)
        if not isinstance(self.tensors, Mapping):
            raise TypeError(f"Checkpoint: tensors must be a dict, got {type(self.tensors).__name__}")
        self.tensors = dict(self.tensors)
        fmt = _validate(self.cfg, self.tensors, self._where())
        _check_scale_format(self.cfg, self.tensors, self._where())
        if self.quantized != (fmt is not None):
            have = f"{fmt.name} weights" if fmt else "dense weights"
            raise ValueError(f"{self._where()}: quantized={self.quantized} but the checkpoint holds {have}")
        if self.cfg.quantized != self.quantized:
            self.cfg = self.cfg.with_(quantized=self.quantized)
        for name in ("unmodelled", "ignored"):
            keys = getattr(self, name)
            if isinstance(keys, str) or not all(isinstance(k, str) for k in keys):
                raise TypeError(f"{self._where()}: {name} must be a sequence of tensor names, got {keys!r}")
            setattr(self, name, tuple(keys))

    def _where(self) -> str:
        return f"checkpoint {self.source or self.cfg.name} layer {self.layer}"

    def __repr__(self) -> str:
        kind = f"fp8 {self.fmt.name}" if self.fmt else "dense"
        skipped = "".join(
            f", {len(keys)} {what}"
            for what, keys in (("not modelled", self.unmodelled), ("ignored", self.ignored))
            if keys
        )
        return (
            f"Checkpoint({self.cfg.name}, layer {self.layer}, {kind}, {len(self.tensors)} tensors, "
            f"{self.num_params / 1e6:.1f}M params{skipped}, source={self.source!r})"
        )

    # -- views -------------------------------------------------------------------------------------
    @property
    def fmt(self) -> Fp8Format | None:
        """The fp8 format of the linear weights (None when dense)."""
        if not self.quantized:
            return None
        return fp8_format(self.tensors[self.linear_modules()[0] + WEIGHT_SUFFIX].dtype)

    @property
    def num_params(self) -> int:
        """Weight elements (scales not counted)."""
        return sum(t.numel() for k, t in self.tensors.items() if k.endswith(WEIGHT_SUFFIX))

    @property
    def nbytes(self) -> int:
        """Bytes of all tensors, scales included."""
        return sum(t.numel() * t.element_size() for t in self.tensors.values())

    def to(self, device: torch.device | str) -> Checkpoint:
        """The same checkpoint with every tensor on `device` (self when already there)."""
        device = torch.device(device)
        if device.type == "cuda" and device.index is None:
            # Tensors report "cuda:0"; compare with that, or every call would copy the checkpoint again.
            device = torch.device("cuda", torch.cuda.current_device())
        if all(t.device == device for t in self.tensors.values()):
            return self
        moved = {key: t.to(device) for key, t in self.tensors.items()}
        return Checkpoint(self.cfg, self.layer, moved, self.quantized, self.source, self.unmodelled, self.ignored)

    def linear_modules(self) -> list[str]:
        """Module names of the 2-D (linear) weights, e.g. ``["q_a_proj", "q_b_proj", ...]``."""
        return [k.removesuffix(WEIGHT_SUFFIX) for k, s in expected_shapes(self.cfg).items() if len(s) == 2]

    def norm_modules(self) -> list[str]:
        """Module names of the RMSNorm weights, e.g. ``["q_a_layernorm", "kv_a_layernorm"]``."""
        return [k.removesuffix(WEIGHT_SUFFIX) for k, s in expected_shapes(self.cfg).items() if len(s) == 1]

    def _module(self, module: str, kinds: list[str], what: str) -> str:
        name = module.removesuffix(WEIGHT_SUFFIX) if isinstance(module, str) else module
        if name not in kinds:
            raise ValueError(
                f"{self._where()}: {module!r} is not a {what} module of a {self.cfg.arch} layer; valid: {kinds}"
            )
        return name

    def quantized_weight(self, module: str) -> QuantizedWeight:
        """The fp8 bytes and block scale of a linear module (plain layout, format from the dtype).

        >>> ckpt.quantized_weight("q_b_proj").scale.shape
        torch.Size([24, 2])
        """
        name = self._module(module, self.linear_modules(), "linear")
        if not self.quantized:
            raise ValueError(
                f"{self._where()}: {name} is dense ({self.tensors[name + WEIGHT_SUFFIX].dtype}); "
                "quantize the checkpoint first: Checkpoint.from_state_dict(cfg, ckpt.tensors, "
                "quantize=True)"
            )
        return QuantizedWeight(
            data=self.tensors[name + WEIGHT_SUFFIX],
            scale=self.tensors[name + SCALE_SUFFIX],
            fmt=fp8_format(self.tensors[name + WEIGHT_SUFFIX].dtype),
            block=tuple(self.cfg.weight_block),
        )

    def dense_weight(self, module: str, dtype: torch.dtype = torch.float32, copy: bool = True) -> torch.Tensor:
        """A linear module's weight as values: fp8 times its block scale when quantized (always a new
        tensor); a dense checkpoint's own tensor when ``copy=False`` and it already has `dtype` (for
        readers that never write, such as a layer built on it)."""
        name = self._module(module, self.linear_modules(), "linear")
        weight = self.tensors[name + WEIGHT_SUFFIX]
        if self.quantized:
            values = block_dequantize(weight, self.tensors[name + SCALE_SUFFIX], tuple(self.cfg.weight_block))
            return values.to(dtype)
        return weight.to(dtype=dtype, copy=copy)

    def norm_weight(self, module: str, dtype: torch.dtype | None = None) -> torch.Tensor:
        """An RMSNorm weight as stored (or cast to `dtype`)."""
        name = self._module(module, self.norm_modules(), "norm")
        weight = self.tensors[name + WEIGHT_SUFFIX]
        return weight if dtype is None else weight.to(dtype)

    def quantized_with(self, recipe: WeightRecipe) -> Checkpoint:
        """This dense checkpoint with its linear weights block-quantized by `recipe`
        (`model.weight_recipe`; norms stay as they are); the names of skipped tensors carry over.
        ValueError when it is FP8 already.

        >>> fp8 = dense.quantized_with(WeightRecipe.for_config(dense.cfg))   # DeepSeek's recipe
        """
        if not isinstance(recipe, WeightRecipe):
            raise TypeError(f"{self._where()}: recipe must be a WeightRecipe, got {type(recipe).__name__}")
        if self.quantized:
            raise ValueError(
                f"{self._where()}: the linear weights are {self.fmt.name} already; a recipe quantizes dense ones"
            )
        cfg = self.cfg.with_(weight_block=recipe.block)
        tensors = _quantize_dense(
            cfg, self.tensors, fp8_format(recipe.fmt), recipe.flavor, self._where(), ue8m0=recipe.ue8m0
        )
        return Checkpoint(cfg, self.layer, tensors, True, self.source, self.unmodelled, self.ignored)

    # -- constructors ------------------------------------------------------------------------------
    @classmethod
    def synthetic(
        cls,
        cfg: MLAConfig | str,
        seed: int = 0,
        quantize: bool = True,
        layer: int = 0,
        fmt: Fp8Format | str = "e4m3fn",
        progress: bool | None = None,
        *,
        flavor: QuantFlavor | str | None = None,
    ) -> Checkpoint:
        """Seeded weights with DeepSeek-like statistics (see `mla_debug.model.synthetic` for the choices).

        Linear weights: normal, std 0.5/sqrt(K), times a log-uniform [0.25, 4] factor per 128x128 block,
        times 8..20 on 3 outlier input columns; norm weights uniform 0.2..1.5. Made in float32, rounded to
        bf16, then (``quantize``) block-quantized to `fmt` with the "deepseek" flavor (amax/448, DeepGEMM's
        recipe; "aiter" for e4m3fnuz, whose max is 240). Same seed, same bytes; `layer` is only a label.
        ``progress`` None shows a tqdm bar for layers of >= 50M parameters.

        >>> ckpt = Checkpoint.synthetic("deepseek-v3", seed=0)   # ~187M params, a few seconds
        """
        cfg = MLAConfig.preset(cfg) if isinstance(cfg, str) else cfg
        if not isinstance(cfg, MLAConfig):
            raise TypeError(f"Checkpoint.synthetic: cfg must be an MLAConfig or preset name, got {type(cfg).__name__}")
        layer = _check_layer(layer)
        fmt = fp8_format(fmt)
        flavor = _default_flavor(fmt) if flavor is None else quant_flavor(flavor)
        shapes = expected_shapes(cfg)
        if progress is None:
            progress = sum(math.prod(shape) for shape in shapes.values()) >= PROGRESS_MIN_PARAMS
        tensors = synthetic_tensors(
            shapes,
            seed,
            block=tuple(cfg.weight_block),
            quantize=quantize,
            fmt=fmt,
            flavor=flavor,
            progress=bool(progress),
            desc=f"synthetic {cfg.name} layer {layer}",
            ue8m0=cfg.scale_fmt == UE8M0,
        )
        source = f"synthetic(seed={seed}" + (f", {fmt.name}, {flavor.name})" if quantize else ", bf16)")
        return cls(cfg=cfg, layer=layer, tensors=tensors, quantized=quantize, source=source)

    @classmethod
    def from_state_dict(
        cls,
        cfg: MLAConfig,
        state_dict: Mapping[str, torch.Tensor],
        quantize: bool = False,
        layer: int | None = None,
        fmt: Fp8Format | str = "e4m3fn",
        *,
        flavor: QuantFlavor | str | None = None,
        ignore_extra: bool = False,
        source: str = "state_dict",
    ) -> Checkpoint:
        """One layer's attention from a state dict (transformers/HF key names, prefixed or not).

        Keys may be bare (``q_a_proj.weight``, an attention module's state dict), ``self_attn.``-prefixed
        or ``model.layers.N.self_attn.``-prefixed; with several layers present `layer` picks one. Keys
        outside the attention (mlp, other layers) are ignored; DeepSeek-V3.2's indexer tensors (for a
        config with the indexer) are skipped and named in ``unmodelled``; other unknown attention keys
        (biases) raise unless ``ignore_extra``, which skips them and names them in ``ignored``. Already-fp8 weights need their ``weight_scale_inv``. ``quantize=True``
        block-quantizes dense linear weights to `fmt` (deepseek flavor). Tensors are detached, not copied.

        >>> attn = DeepseekV3Attention(config, layer_idx=0)
        >>> ckpt = Checkpoint.from_state_dict(cfg, attn.state_dict(), quantize=True)
        """
        if not isinstance(cfg, MLAConfig):
            raise TypeError(f"Checkpoint.from_state_dict: cfg must be an MLAConfig, got {type(cfg).__name__}")
        if not isinstance(state_dict, Mapping):
            raise TypeError(
                f"Checkpoint.from_state_dict: state_dict must be a mapping, got {type(state_dict).__name__}"
            )
        if layer is not None:
            _check_layer(layer)
        bad_keys = [k for k in state_dict if not isinstance(k, str)]
        if bad_keys:
            raise TypeError(f"{source}: keys must be str, got {bad_keys[:5]}")
        picked = _select_attention(state_dict, layer, cfg, source, ignore_extra)
        layer = picked.layer
        tensors: dict[str, Any] = {}
        for short, key in picked.mapping.items():
            value = state_dict[key]
            tensors[short] = value.detach() if isinstance(value, torch.Tensor) else value
        if quantize:
            tensors = _quantize_dense(cfg, tensors, fp8_format(fmt), flavor, f"{source} layer {layer}")
        return cls._picked(cfg, layer, tensors, source, picked)

    @classmethod
    def load(
        cls,
        path: str | os.PathLike,
        layer: int = 0,
        cfg: MLAConfig | None = None,
        *,
        ignore_extra: bool = False,
    ) -> Checkpoint:
        """Read layer `layer`'s attention from a Hugging Face safetensors folder (or one .safetensors file).

        The config comes from ``config.json`` unless `cfg` is given. With ``model.safetensors.index.json``
        only the shards that hold the layer's ``self_attn`` tensors are opened; without one, each file's
        header is read (safetensors opens lazily) and only the layer's tensors are fetched. Pickle
        weights (.bin/.pt/.pth) are refused. DeepSeek-V3.2's indexer tensors are named in ``unmodelled``
        and never read; ``ignore_extra`` skips other unknown attention tensors (named in ``ignored``)
        instead of refusing them.

        >>> ckpt = Checkpoint.load("/models/DeepSeek-V3", layer=3)
        """
        path = Path(path)
        layer = _check_layer(layer)
        if not path.exists():
            raise FileNotFoundError(f"Checkpoint.load: {path} does not exist")
        folder = path if path.is_dir() else path.parent
        if cfg is None:
            cfg = MLAConfig.from_hf(folder)
        elif not isinstance(cfg, MLAConfig):
            raise TypeError(f"Checkpoint.load: cfg must be an MLAConfig, got {type(cfg).__name__}")
        key_files = _key_files(path)
        where = str(path)
        picked = _select_attention(key_files, layer, cfg, where, ignore_extra)
        by_file: dict[Path, list[tuple[str, str]]] = {}
        for short, key in picked.mapping.items():
            by_file.setdefault(key_files[key], []).append((short, key))
        tensors: dict[str, torch.Tensor] = {}
        for file, items in by_file.items():
            if not file.is_file():
                raise FileNotFoundError(f"Checkpoint.load: shard {file} (listed in {INDEX_FILE}) does not exist")
            with open_safetensors(file, f"Checkpoint.load: {file}") as handle:
                for short, key in items:
                    tensors[short] = handle.get_tensor(key)
        return cls._picked(cfg, layer, tensors, where, picked)

    @classmethod
    def _picked(cls, cfg: MLAConfig, layer: int, tensors: dict, source: str, picked: _Selection) -> Checkpoint:
        """The checkpoint of a layer's attention tensors read from `source` (`picked`: what
        `_select_attention` chose and left out), validated."""
        fp8 = _validate(cfg, tensors, f"{source} layer {layer}")
        return cls(
            cfg=cfg,
            layer=layer,
            tensors=tensors,
            quantized=fp8 is not None,
            source=source,
            unmodelled=picked.unmodelled,
            ignored=picked.ignored,
        )

    # -- writing -----------------------------------------------------------------------------------
    def save(self, out_dir: str | os.PathLike) -> Path:
        """Write a Hugging Face folder: config.json, model.safetensors, model.safetensors.index.json.

        Keys are ``model.layers.{layer}.self_attn.<short name>``. Refuses (FileExistsError) when `out_dir`
        exists and is not an empty folder; the files are written into a temporary sibling folder that is
        renamed into place, so `out_dir` is either complete or absent. Returns `out_dir`.
        """
        label = f"Checkpoint.save: {Path(out_dir).expanduser()}"
        out = check_new_folder(out_dir, label)
        prefix = f"model.layers.{self.layer}.{ATTN_PREFIX}"
        payload = {prefix + k: t.detach().contiguous().cpu() for k, t in self.tensors.items()}
        index = {
            "metadata": {"total_size": self.nbytes},
            "weight_map": {key: SAFETENSORS_FILE for key in payload},
        }
        config = to_hf_dict(self.cfg, self.quantized)
        config["mla_debug"] = {"preset": self.cfg.name, "layer": self.layer, "source": self.source}
        with folder_atomically(out, label) as tmp:
            (tmp / "config.json").write_text(json.dumps(config, indent=2) + "\n")
            save_file(payload, str(tmp / SAFETENSORS_FILE), metadata={"format": "pt"})
            # safetensors writes through a private 0600 temporary file; give the checkpoint the mode the
            # umask gives any new file (config.json's), so others can read it as they can the folder.
            os.chmod(tmp / SAFETENSORS_FILE, stat.S_IMODE((tmp / "config.json").stat().st_mode))
            (tmp / INDEX_FILE).write_text(json.dumps(index, indent=2) + "\n")
        return out


def _quantize_dense(
    cfg: MLAConfig,
    tensors: dict[str, Any],
    fmt: Fp8Format,
    flavor: QuantFlavor | str | None,
    where: str,
    ue8m0: bool = False,
) -> dict[str, Any]:
    """Block-quantize every dense linear weight (scales rounded up to powers of two with `ue8m0` or when
    the config's scale_fmt is ue8m0); already-fp8 weights must be in `fmt` and stay as they are."""
    flavor = _default_flavor(fmt) if flavor is None else quant_flavor(flavor)
    ue8m0 = ue8m0 or cfg.scale_fmt == UE8M0
    out = dict(tensors)
    for key, shape in expected_shapes(cfg).items():
        t = tensors.get(key)
        if len(shape) != 2 or not isinstance(t, torch.Tensor):
            continue  # norms are never quantized; a missing weight is reported by _validate
        if t.dtype in FP8_DTYPES:
            if t.dtype != fmt.dtype:
                raise ValueError(
                    f"{where}: {key} is already {t.dtype}, not {fmt.name}; converting between fp8 "
                    "formats is a load-time transform, not re-quantization"
                )
            continue
        if t.dtype not in DENSE_DTYPES or tuple(t.shape) != shape:
            continue  # reported with the expected shape/dtype by _validate
        scale_key = key.removesuffix(WEIGHT_SUFFIX) + SCALE_SUFFIX
        if scale_key in tensors:
            continue  # a dense weight with a scale is inconsistent; _validate names it
        out[key], out[scale_key], _ = block_quantize(t, tuple(cfg.weight_block), fmt, flavor, ue8m0=ue8m0, name=key)
    return out


def stored_fp8(path: str | os.PathLike, layer: int, cfg: MLAConfig, *, ignore_extra: bool = False) -> bool:
    """Whether layer `layer`'s linear weights in the safetensors checkpoint at `path` are stored as FP8,
    from the files' headers alone (no tensor is read): what a triage must know before it reads a real
    checkpoint's weights (`model.weight_recipe.require_fp8`). The layer's tensors are picked as
    `Checkpoint.load` picks them, so an unknown tensor is refused here already."""
    path = Path(path)
    key_files = _key_files(path)
    picked = _select_attention(key_files, _check_layer(layer), cfg, str(path), ignore_extra)
    linears = [key for key, shape in expected_shapes(cfg).items() if len(shape) == 2]
    wanted = {short: picked.mapping[short] for short in linears if short in picked.mapping}
    if not wanted:
        raise ValueError(f"Checkpoint.load: {path} layer {layer} holds none of the linear weights {linears}")
    dtypes = set()
    for file in sorted({key_files[key] for key in wanted.values()}):
        with open_safetensors(file, f"Checkpoint.load: {file}") as handle:
            dtypes |= {handle.get_slice(key).get_dtype() for key in wanted.values() if key_files[key] == file}
    # safetensors spells every fp8 dtype F8_*: F8_E4M3 (e4m3fn), F8_E4M3FNUZ, ...
    return all(dtype.startswith("F8") for dtype in dtypes)


def _key_files(path: Path) -> dict[str, Path]:
    """Every tensor key of a safetensors checkpoint and the file that holds it, reading headers only."""
    if path.is_file():
        if path.suffix != ".safetensors":
            raise ValueError(f"Checkpoint.load: {path} is not a .safetensors file{_pickle_reason(path.suffix)}")
        return _file_keys([path])
    index = path / INDEX_FILE
    if not index.is_file():
        others = sorted(path.glob("*.safetensors.index.json"))
        index = others[0] if len(others) == 1 else index
    if index.is_file():
        try:
            data = json.loads(index.read_text())
        except json.JSONDecodeError as err:
            raise ValueError(f"Checkpoint.load: {index} is not valid JSON ({err})") from None
        weight_map = data.get("weight_map") if isinstance(data, dict) else None
        if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
            raise ValueError(f"Checkpoint.load: {index} has no 'weight_map' object of key -> shard file")
        return {key: path / shard for key, shard in weight_map.items()}
    files = sorted(path.glob("*.safetensors"))
    if not files:
        pickles = sorted(p.name for p in path.iterdir() if p.suffix in PICKLE_SUFFIXES)
        if pickles:
            raise ValueError(
                f"Checkpoint.load: {path} holds only pickle weights ({', '.join(pickles[:5])}); only safetensors "
                "is loaded, because unpickling a file can execute arbitrary code. Convert it to safetensors "
                "in a trusted environment first."
            )
        raise FileNotFoundError(f"Checkpoint.load: no *.safetensors files in {path}")
    return _file_keys(files)


def _file_keys(files: list[Path]) -> dict[str, Path]:
    out: dict[str, Path] = {}
    for file in files:
        with open_safetensors(file, f"Checkpoint.load: {file}") as handle:  # reads the JSON header, no tensor data
            for key in handle.keys():
                if key in out:
                    raise ValueError(f"Checkpoint.load: tensor {key!r} is in both {out[key].name} and {file.name}")
                out[key] = file
    return out


def _pickle_reason(suffix: str) -> str:
    if suffix in PICKLE_SUFFIXES:
        return " (pickle formats are refused: unpickling can execute arbitrary code)"
    return ""


# -- reading safetensors files ---------------------------------------------------------------------


@contextmanager
def open_safetensors(path: str | os.PathLike, label: str | None = None) -> Iterator[Any]:
    """`safe_open` (header read now, tensors on demand) whose failures name the file, its size and what is
    wrong with it - a truncated download is the usual cause - as a ValueError instead of a bare
    SafetensorError. `label` is how messages name the file (default: its path).

    >>> with open_safetensors("ckpt/model-00001-of-00163.safetensors") as handle: ...
    """
    path = Path(path)
    label = str(path) if label is None else label
    try:
        handle = safe_open(str(path), framework="pt")
    except FileNotFoundError:
        raise FileNotFoundError(f"{label} does not exist") from None
    except SafetensorError as err:
        raise ValueError(safetensors_problem(path, err, label)) from None
    except OSError as err:
        raise ValueError(f"{label} cannot be read ({err.strerror or err})") from None
    with handle:
        try:
            yield handle
        except SafetensorError as err:
            raise ValueError(safetensors_problem(path, err, label)) from None


def safetensors_problem(path: Path, err: Exception, label: str | None = None) -> str:
    """What is wrong with a safetensors file that failed to open, in words, from its own bytes.

    The format is an 8-byte little-endian header length, that many bytes of JSON naming each tensor's
    byte range (``data_offsets``) in the data that follows, then the data; the file ends where the data
    does. Each way of breaking that gets its own sentence; anything else falls back to `err`.
    """
    label = str(path) if label is None else label
    try:
        size = path.stat().st_size
        with open(path, "rb") as file:
            head = file.read(8)
            if len(head) < 8:
                return (
                    f"{label} holds {size:,} bytes, fewer than the 8-byte header length a safetensors file "
                    "starts with: truncated, or not a safetensors file"
                )
            header_len = int.from_bytes(head, "little")
            if header_len > size - 8:
                return (
                    f"{label} ({size:,} bytes): its first 8 bytes announce a {header_len:,}-byte header, more "
                    "than the file holds: truncated, or not a safetensors file"
                )
            raw = file.read(header_len)
    except OSError as os_err:
        return f"{label} cannot be read ({os_err.strerror or os_err})"
    try:
        header = json.loads(raw)
        ends = [entry["data_offsets"][1] for key, entry in header.items() if key != "__metadata__"]
        if not all(isinstance(end, int) and not isinstance(end, bool) for end in ends):
            raise TypeError("data_offsets are not integers")
        data_len = max(ends, default=0)
    except (ValueError, TypeError, KeyError, IndexError, AttributeError):
        return f"{label} ({size:,} bytes): its {header_len:,}-byte header is not a safetensors header ({err})"
    held = size - 8 - header_len
    if held < data_len:
        return (
            f"{label} ({size:,} bytes): the header says {data_len:,} bytes of tensor data, the file holds "
            f"{held:,}: truncated (an interrupted download or copy?)"
        )
    if held > data_len:
        return (
            f"{label} ({size:,} bytes): the file holds {held - data_len:,} bytes more than the {data_len:,} "
            "bytes of tensor data its header describes: not written by safetensors, or two files run together"
        )
    return f"{label} ({size:,} bytes) is not a readable safetensors file ({err})"
