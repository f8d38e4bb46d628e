"""What a Hugging Face ``quantization_config`` says about one attention layer's linear weights.

Two methods are understood:

- ``fp8`` - DeepSeek's block FP8: e4m3 weights in ``weight_block_size`` blocks with a ``weight_scale_inv``,
  dynamic per-token 1x128 activations, and (DeepSeek-V3.1 on) ``scale_fmt: "ue8m0"``: every weight scale
  is a power of two, and the engines may quantize activations with power-of-two scales too (which ones
  do is each engine profile's business: `scenarios`).
- ``compressed-tensors`` - accepted when it leaves the attention alone, as Kimi-K2-Thinking and Kimi-K2.5/
  K2.6 do (INT4 routed experts; ``ignore`` names the attention): the attention is then unquantized, bf16.
  A module is quantized when a ``config_groups`` target names it - its checkpoint name exactly, a
  ``re:`` regular expression matched from the start of that name, or its class, ``Linear`` - and no
  ``ignore`` entry does (the matching rule of compressed-tensors, and of vLLM 0.33's
  ``compressed_tensors/utils.py`` ``find_matched_target`` / ``should_ignore_layer``). An attention that would
  be compressed-tensors quantized, or a quantized KV cache (``kv_cache_scheme``), is refused: not modelled.

Every other method is refused, naming it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

FP8 = "fp8"
COMPRESSED_TENSORS = "compressed-tensors"
FP8_FORMAT = "e4m3"
E4M3_NAMES = ("e4m3", "e4m3fn", "float8_e4m3fn")
DYNAMIC = "dynamic"
UE8M0 = "ue8m0"
SCALE_FORMATS = (UE8M0,)
# transformers 5.24 utils/quantization_config.py FineGrainedFP8Config: scale_fmt "float" (its default) or
# "ue8m0"; "float" means fp32 scales as amax/fp8-max gives them, what an absent scale_fmt means.
PLAIN_SCALES = "float"
DEFAULT_BLOCK = (128, 128)

# The attention linears of a DeepSeek-V3-style (MLA) layer, by checkpoint module name, and their class in
# transformers' modules (what a compressed-tensors class target names).
V3_ATTENTION_LINEARS = ("q_a_proj", "q_b_proj", "kv_a_proj_with_mqa", "kv_b_proj", "o_proj")
LINEAR_CLASS = "Linear"


@dataclass(frozen=True)
class AttentionQuantization:
    """How the checkpoint stores the attention's linear weights."""

    quantized: bool = False
    weight_block: tuple[int, int] = DEFAULT_BLOCK
    scale_fmt: str | None = None


def module_matches(name: str, target: str) -> bool:
    """Whether a compressed-tensors target or ignore entry names the attention linear `name`: a ``re:``
    regular expression matching from the start of the name, the name itself, or the module's class."""
    if target.startswith("re:"):
        return re.match(target[3:], name) is not None
    return target in (name, LINEAR_CLASS)


def _module_names(prefix: str, num_layers: int) -> list[str]:
    return [
        f"{prefix}model.layers.{layer}.self_attn.{module}"
        for layer in range(num_layers)
        for module in V3_ATTENTION_LINEARS
    ]


def _compressed_tensors(quant: dict, arch: str, prefix: str, num_layers: int) -> AttentionQuantization:
    if arch != "v3":
        raise ValueError(f"config.json: compressed-tensors checkpoints of a {arch} attention are not modelled")
    if quant.get("kv_cache_scheme") is not None:
        raise ValueError(
            f"config.json: compressed-tensors kv_cache_scheme {quant['kv_cache_scheme']!r} quantizes the KV cache, "
            "which is not modelled"
        )
    groups = quant.get("config_groups") or {}
    ignore = quant.get("ignore") or []
    if not isinstance(groups, dict) or not isinstance(ignore, list):
        raise ValueError("config.json: compressed-tensors config_groups must be an object and ignore a list")
    quantized = []
    for name in _module_names(prefix, num_layers):
        if any(module_matches(name, pattern) for pattern in ignore):
            continue
        for group_name, group in groups.items():
            targets = group.get("targets", []) if isinstance(group, dict) else []
            if any(module_matches(name, target) for target in targets):
                quantized.append(f"{name} (config_groups.{group_name})")
                break
    if quantized:
        shown = ", ".join(quantized[:3]) + (f" and {len(quantized) - 3} more" if len(quantized) > 3 else "")
        raise ValueError(
            f"config.json: compressed-tensors quantizes attention linears ({shown}); only attention left "
            "unquantized by compressed-tensors (named in 'ignore', as Kimi-K2-Thinking does) is modelled"
        )
    return AttentionQuantization(quantized=False)


def _fp8(quant: dict) -> AttentionQuantization:
    fmt = quant.get("fmt", FP8_FORMAT)
    if fmt not in E4M3_NAMES:
        raise ValueError(f"config.json: quantization_config.fmt {fmt!r} is not an e4m3 format")
    block = quant.get("weight_block_size", list(DEFAULT_BLOCK))
    if not (isinstance(block, (list, tuple)) and len(block) == 2 and all(isinstance(b, int) and b > 0 for b in block)):
        raise ValueError(f"config.json: quantization_config.weight_block_size must be two positive ints, got {block!r}")
    scheme = quant.get("activation_scheme", DYNAMIC)
    if scheme != DYNAMIC:
        raise ValueError(f"config.json: activation_scheme {scheme!r} is not 'dynamic' (per-token group quant)")
    scale_fmt = quant.get("scale_fmt")
    if scale_fmt == PLAIN_SCALES:
        scale_fmt = None  # transformers' spelling of "no format": its FineGrainedFP8Config writes it by default
    if scale_fmt is not None and scale_fmt not in SCALE_FORMATS:
        raise ValueError(
            f"config.json: quantization_config.scale_fmt {scale_fmt!r} is not modelled "
            f"(known: none, {PLAIN_SCALES!r}, {UE8M0!r})"
        )
    return AttentionQuantization(quantized=True, weight_block=(block[0], block[1]), scale_fmt=scale_fmt)


def read_quantization(quant: Any, arch: str, prefix: str = "", num_layers: int = 1) -> AttentionQuantization:
    """The attention's quantization from a parsed ``quantization_config`` (None: unquantized).

    `prefix` is the language model's module-name prefix in the checkpoint ("" or "language_model." for a
    multimodal wrapper) and `num_layers` how many layers to check a compressed-tensors config for.
    """
    if quant is None:
        return AttentionQuantization()
    if not isinstance(quant, dict):
        raise ValueError(f"config.json: quantization_config must be an object, got {quant!r}")
    method = quant.get("quant_method", FP8)
    if method == FP8:
        return _fp8(quant)
    if method == COMPRESSED_TENSORS:
        return _compressed_tensors(quant, arch, prefix, num_layers)
    raise ValueError(
        f"config.json: quantization_config.quant_method {method!r} is not modelled (known: {FP8!r}, block FP8 "
        f"weights; {COMPRESSED_TENSORS!r} with the attention left unquantized)"
    )


def write_quantization(weight_block: tuple[int, int], scale_fmt: str | None) -> dict[str, Any]:
    """DeepSeek's ``quantization_config`` for block-FP8 weights (fp8, e4m3, dynamic activations), with
    ``scale_fmt`` when there is one."""
    out: dict[str, Any] = {
        "quant_method": FP8,
        "fmt": FP8_FORMAT,
        "activation_scheme": DYNAMIC,
        "weight_block_size": list(weight_block),
    }
    if scale_fmt is not None:
        out["scale_fmt"] = scale_fmt
    return out
