"""Both directions of a Hugging Face ``config.json``: `from_hf_fields` (config.json -> MLAConfig fields, for
DeepSeek-V3/R1/V3.1, DeepSeek-V3.2, Kimi-K2 (and K2.5/K2.6's ``text_config``) and DeepSeek-V4 field names) and
`to_hf_dict` (MLAConfig -> the fields that read back to an equal config), with the key mapping of the
attention's widths in one table (`FIELDS`) that both directions use; the RoPE fields (`hf_rope`) and the
quantization_config (`hf_quantization`) have their own shapes and modules.

Only the fields an attention layer needs are read; the rest of a model config (MoE, vocabulary, ...) is
ignored. Fields that are read are checked: a missing or mistyped one, RoPE parameters given twice with
different values, unknown or unmodelled RoPE keys, a quantization that is not modelled each raise a
ValueError naming the field and the reason. Optional fields that are absent take `MLAConfig`'s defaults
(``rope_interleave`` True; RoPE defaults as transformers 5.24 takes them, `hf_rope`). A multimodal wrapper
(``text_config`` with no attention fields of its own, Kimi-K2.5) is read through its ``text_config``.
`MLAConfig.from_hf` / `MLAConfig.to_hf` are the public entries; `Checkpoint.save` writes `to_hf_dict`'s
output.

The round trip ``MLAConfig.from_hf(to_hf_dict(cfg), cfg.name) == cfg`` holds for every valid config that is
quantized, or whose ``weight_block`` is (128, 128) and ``scale_fmt`` None (an unquantized config.json has
no quantization_config to carry them).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .hf_quantization import read_quantization, write_quantization
from .hf_rope import read_interleave, read_rope, write_rope

if TYPE_CHECKING:
    from .config import MLAConfig


@dataclass(frozen=True)
class HfField:
    """One MLAConfig attribute and the config.json key that holds it.

    `arch`: the family whose configs carry it (None: both). `required`: a config of that family without
    it is refused; otherwise MLAConfig's default stands in. `kind`: int or float (how it is checked;
    required fields are ints). `indexer`: DeepSeek-V3.2's configs (a v3 layer with the sparse indexer,
    model_type ``deepseek_v32``) carry it too, as a required field.
    """

    attribute: str
    key: str
    arch: str | None = None
    required: bool = True
    kind: type = int
    indexer: bool = False

    def carried_by(self, arch: str, indexer: bool) -> bool:
        """Whether a config of family `arch` (with DeepSeek-V3.2's indexer: `indexer`) carries the field."""
        return self.arch in (None, arch) or (self.indexer and indexer)


# In the order `to_hf_dict` writes them (DeepSeek's own config.json order, roughly).
FIELDS: tuple[HfField, ...] = (
    HfField("hidden_size", "hidden_size"),
    HfField("num_heads", "num_attention_heads"),
    HfField("q_lora_rank", "q_lora_rank"),
    HfField("qk_rope_head_dim", "qk_rope_head_dim"),
    HfField("kv_lora_rank", "kv_lora_rank", arch="v3"),
    HfField("qk_nope_head_dim", "qk_nope_head_dim", arch="v3"),
    HfField("v_head_dim", "v_head_dim", arch="v3"),
    HfField("head_dim", "head_dim", arch="v4"),
    HfField("o_groups", "o_groups", arch="v4"),
    HfField("o_lora_rank", "o_lora_rank", arch="v4"),
    HfField("index_n_heads", "index_n_heads", arch="v4", indexer=True),
    HfField("index_head_dim", "index_head_dim", arch="v4", indexer=True),
    HfField("index_topk", "index_topk", arch="v4", required=False, indexer=True),
    HfField("sliding_window", "sliding_window", arch="v4", required=False),
    HfField("rms_norm_eps", "rms_norm_eps", required=False, kind=float),
    HfField("max_position_embeddings", "max_position_embeddings", required=False),
)

# What each family writes besides FIELDS; read back only to tell the families apart. "v3.2" is a v3
# layer with DeepSeek-V3.2's indexer beside it.
MODEL_TYPES = {"v3": "deepseek_v3", "v3.2": "deepseek_v32", "v4": "deepseek_v4"}
ARCHITECTURES = {"v3": "DeepseekV3ForCausalLM", "v3.2": "DeepseekV32ForCausalLM", "v4": "DeepseekV4ForCausalLM"}
# A multimodal wrapper (Kimi-K2.5 / K2.6, model_type kimi_k25) nests the language model's config here, and
# its checkpoint names that model's modules under this prefix.
TEXT_CONFIG, TEXT_PREFIX = "text_config", "language_model."


def _read(data: dict, field: HfField, arch: str, defaults: Mapping[str, Any]) -> int | float:
    if field.required or (field.indexer and field.arch != arch):  # DeepSeek-V3.2 needs all its indexer fields
        return _int(data, field.key)
    default = defaults[field.attribute]
    if field.kind is float:
        return _float(data, field.key, default)
    return _int(data, field.key, False, default)


def _int(data: dict, key: str, required: bool = True, default: int = 0) -> int:
    value = data.get(key)
    if value is None:
        if required:
            raise ValueError(f"config.json: required field {key!r} is missing or null")
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"config.json: field {key!r} must be an integer, got {value!r}")
    return value


def _float(data: dict, key: str, default: float) -> float:
    value = data.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"config.json: field {key!r} must be a number, got {value!r}")
    return float(value)


def _is_attention_config(data: dict) -> bool:
    return "kv_lora_rank" in data or "o_groups" in data or str(data.get("model_type", "")).startswith(MODEL_TYPES["v4"])


def language_model(data: dict) -> tuple[dict, str, Any]:
    """The part of a parsed config.json that holds the attention, the checkpoint's module-name prefix for
    it, and the quantization_config that applies: the config itself, or a multimodal wrapper's
    ``text_config`` (whose quantization_config may sit at either level; two different ones are refused)."""
    text = data.get(TEXT_CONFIG)
    if _is_attention_config(data) or not isinstance(text, dict):
        return data, "", data.get("quantization_config")
    outer, inner = data.get("quantization_config"), text.get("quantization_config")
    if outer is not None and inner is not None and outer != inner:
        raise ValueError("config.json: quantization_config differs between the top level and text_config")
    return text, TEXT_PREFIX, outer if outer is not None else inner


def from_hf_fields(data: dict, defaults: Mapping[str, Any]) -> dict[str, Any]:
    """The MLAConfig fields (all but the name) a parsed config.json describes; `defaults` are the config
    class's, taken where an optional key is absent."""
    if not isinstance(data, dict):
        raise ValueError(f"config.json must be a JSON object, got {type(data).__name__}")
    data, prefix, quant = language_model(data)
    model_type = str(data.get("model_type", ""))
    is_v4 = model_type.startswith(MODEL_TYPES["v4"]) or "o_groups" in data
    if not is_v4 and "kv_lora_rank" not in data:
        raise ValueError(
            f"config.json ({model_type or 'no model_type'}): neither an MLA config (kv_lora_rank) nor a "
            "DeepSeek-V4 config (o_groups), nor a wrapper with such a text_config"
        )
    if data.get("q_lora_rank", 0) is None:
        raise ValueError("config.json: q_lora_rank is null (a direct q_proj, DeepSeek-V2-Lite style) - not supported")
    arch = "v4" if is_v4 else "v3"
    theta, scaling = read_rope(data, arch, defaults["rope_theta"])
    layers = data.get("num_hidden_layers")
    layers = layers if isinstance(layers, int) and not isinstance(layers, bool) and layers > 0 else 1
    quantization = read_quantization(quant, arch, prefix, layers)
    indexer = not is_v4 and _is_v32(data)
    values = {f.attribute: _read(data, f, arch, defaults) for f in FIELDS if f.carried_by(arch, indexer)}
    return dict(
        arch=arch,
        rope_theta=theta,
        rope_scaling=scaling,
        rope_interleave=read_interleave(data),
        weight_block=quantization.weight_block,
        quantized=quantization.quantized,
        scale_fmt=quantization.scale_fmt,
        **values,
    )


def _is_v32(data: dict) -> bool:
    """DeepSeek-V3.2's config: its model_type, or its architecture where a config names no model_type."""
    model_type = data.get("model_type")
    if model_type is not None:
        return model_type == MODEL_TYPES["v3.2"]
    return ARCHITECTURES["v3.2"] in (data.get("architectures") or ())


def _family(cfg: MLAConfig) -> str:
    return "v3.2" if cfg.arch == "v3" and cfg.has_indexer else cfg.arch


def to_hf_dict(cfg: MLAConfig, quantized: bool | None = None) -> dict[str, Any]:
    """The config.json fields `from_hf_fields` reads back to an equal config (name aside).

    ``quantized`` (default ``cfg.quantized``) adds DeepSeek's ``quantization_config`` (fp8, e4m3,
    dynamic activations, ``cfg.weight_block``, ``scale_fmt`` when set). Every attention head has its own
    K/V in v3 (MLA expands the latent per head); v4 has one shared KV head. ``rope_interleave`` is
    written only when False (its absence means True).
    """
    quantized = cfg.quantized if quantized is None else quantized
    family = _family(cfg)
    out: dict[str, Any] = {"architectures": [ARCHITECTURES[family]], "model_type": MODEL_TYPES[family]}
    out.update({f.key: getattr(cfg, f.attribute) for f in FIELDS if f.carried_by(cfg.arch, family == "v3.2")})
    out["num_key_value_heads"] = cfg.num_heads if cfg.arch == "v3" else 1
    out.update(write_rope(cfg))
    out["torch_dtype"] = "bfloat16"
    if quantized:
        out["quantization_config"] = write_quantization(cfg.weight_block, cfg.scale_fmt)
    return out
