"""Both directions of a Hugging Face ``config.json``: `from_hf_dict` (config.json -> MLAConfig, for
DeepSeek-V3/R1, DeepSeek-V3.2, Kimi-K2 and DeepSeek-V4 field names) and `to_hf_dict` (MLAConfig -> the fields that read
back to an equal config), with the key mapping in one table (`FIELDS`) that both directions use.

Only the fields an attention layer needs are read; the rest of a model config (MoE, vocabulary, ...) is
ignored. Fields that are read are checked: a missing or mistyped one, RoPE parameters given twice with
different values, unknown RoPE keys or a non-FP8 quantization each raise a ValueError naming the field.
Optional fields that are absent take `MLAConfig`'s defaults. `MLAConfig.from_hf` / `MLAConfig.to_hf` are
the public entries; `Checkpoint.save` writes `to_hf_dict`'s output.

The round trip ``from_hf_dict(to_hf_dict(cfg), cfg.name) == cfg`` holds for every valid config whose
``weight_block`` is (128, 128) or that is quantized (an unquantized config.json has no block size).
"""

from __future__ import annotations

from dataclasses import MISSING, dataclass, fields
from typing import Any

from .config import MLAConfig, RopeScaling


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

# rope_scaling / rope_parameters keys: RopeScaling's fields, plus the kind and theta spellings.
_ROPE_SCALING_KEYS = tuple(f.name for f in fields(RopeScaling))
_ROPE_KEYS = {"type", "rope_type", "rope_theta", "partial_rotary_factor", "truncate", *_ROPE_SCALING_KEYS}
_YARN_NAMES = {"yarn", "deepseek_yarn"}

# DeepSeek's quantization_config, the only one modelled: fp8 e4m3 weights in blocks, dynamic 1x128 activations.
_QUANT_METHOD, _QUANT_FMT, _ACTIVATION_SCHEME = "fp8", "e4m3", "dynamic"
_E4M3_NAMES = ("e4m3", "e4m3fn", "float8_e4m3fn")


def _default(cls: type, attribute: str) -> Any:
    (f,) = (f for f in fields(cls) if f.name == attribute)
    assert f.default is not MISSING, f"{cls.__name__}.{attribute} has no default to fall back on"
    return f.default


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


def _read(data: dict, field: HfField, arch: str) -> int | float:
    if field.required or (field.indexer and field.arch != arch):  # DeepSeek-V3.2 needs all its indexer fields
        return _int(data, field.key)
    default = _default(MLAConfig, field.attribute)
    if field.kind is float:
        return _float(data, field.key, default)
    return _int(data, field.key, False, default)


def _rope(data: dict) -> tuple[float, RopeScaling | None]:
    scaling = data.get("rope_scaling")
    params = data.get("rope_parameters")
    if isinstance(params, dict) and "main" in params:
        # DeepSeek-V4 (transformers): RoPE of the main (sliding-window) attention; the compressor's
        # branch ("compress") is out of scope.
        params = params["main"]
    if scaling is not None and params is not None:
        both = set(scaling) & set(params)
        clashes = [k for k in sorted(both) if scaling[k] != params[k] and k not in ("type", "rope_type")]
        if clashes:
            raise ValueError(f"config.json: rope_scaling and rope_parameters disagree on {clashes}")
    spec: dict[str, Any] = {**(params or {}), **(scaling or {})}
    for source in (scaling, params):
        if source is not None and not isinstance(source, dict):
            raise ValueError(f"config.json: rope_scaling/rope_parameters must be an object, got {source!r}")
    unknown = sorted(set(spec) - _ROPE_KEYS)
    if unknown:
        raise ValueError(f"config.json: unknown RoPE fields {unknown}; known: {sorted(_ROPE_KEYS)}")
    theta = data.get("rope_theta")
    if theta is not None and "rope_theta" in spec and float(spec["rope_theta"]) != float(theta):
        raise ValueError(f"config.json: rope_theta {theta} and rope_parameters.rope_theta {spec['rope_theta']} differ")
    theta = float(theta if theta is not None else spec.get("rope_theta", _default(MLAConfig, "rope_theta")))
    kind = spec.get("rope_type", spec.get("type", "default" if not spec.get("factor") else "yarn"))
    if kind in (None, "default"):
        return theta, None
    if kind not in _YARN_NAMES:
        raise ValueError(f"config.json: RoPE type {kind!r} is not supported (only deepseek-yarn / yarn)")
    values = {}
    for key in _ROPE_SCALING_KEYS:
        default = _default(RopeScaling, key)
        values[key] = _int(spec, key, False, default) if isinstance(default, int) else _float(spec, key, default)
    return theta, RopeScaling(**values)


def _quantization(data: dict) -> tuple[bool, tuple[int, int]]:
    default_block = _default(MLAConfig, "weight_block")
    quant = data.get("quantization_config")
    if quant is None:
        return False, default_block
    if not isinstance(quant, dict):
        raise ValueError(f"config.json: quantization_config must be an object, got {quant!r}")
    method = quant.get("quant_method", _QUANT_METHOD)
    if method != _QUANT_METHOD:
        raise ValueError(f"config.json: quantization_config.quant_method {method!r} is not {_QUANT_METHOD!r}")
    fmt = quant.get("fmt", _QUANT_FMT)
    if fmt not in _E4M3_NAMES:
        raise ValueError(f"config.json: quantization_config.fmt {fmt!r} is not an e4m3 format")
    block = quant.get("weight_block_size", list(default_block))
    if not (isinstance(block, (list, tuple)) and len(block) == 2 and all(isinstance(b, int) and b > 0 for b in block)):
        raise ValueError(f"config.json: quantization_config.weight_block_size must be two positive ints, got {block!r}")
    scheme = quant.get("activation_scheme", _ACTIVATION_SCHEME)
    if scheme != _ACTIVATION_SCHEME:
        raise ValueError(f"config.json: activation_scheme {scheme!r} is not 'dynamic' (per-token group quant)")
    return True, (block[0], block[1])


def from_hf_dict(data: dict, name: str) -> MLAConfig:
    """The MLAConfig a parsed config.json describes, named `name`."""
    if not isinstance(data, dict):
        raise ValueError(f"config.json must be a JSON object, got {type(data).__name__}")
    model_type = str(data.get("model_type", ""))
    is_v4 = model_type.startswith(MODEL_TYPES["v4"]) or "o_groups" in data
    if not is_v4 and "kv_lora_rank" not in data:
        raise ValueError(
            f"config.json ({model_type or 'no model_type'}): neither an MLA config (kv_lora_rank) nor a "
            "DeepSeek-V4 config (o_groups)"
        )
    if data.get("q_lora_rank", 0) is None:
        raise ValueError("config.json: q_lora_rank is null (a direct q_proj, DeepSeek-V2-Lite style) - not supported")
    arch = "v4" if is_v4 else "v3"
    indexer = not is_v4 and _is_v32(data)
    theta, scaling = _rope(data)
    quantized, block = _quantization(data)
    values = {f.attribute: _read(data, f, arch) for f in FIELDS if f.carried_by(arch, indexer)}
    return MLAConfig(
        name=name,
        arch=arch,
        rope_theta=theta,
        rope_scaling=scaling,
        weight_block=block,
        quantized=quantized,
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
    """The config.json fields `from_hf_dict` reads back to an equal config (name aside).

    ``quantized`` (default ``cfg.quantized``) adds DeepSeek's ``quantization_config`` (fp8, e4m3,
    dynamic activations, ``cfg.weight_block``). Every attention head has its own K/V in v3 (MLA
    expands the latent per head); v4 has one shared KV head.
    """
    quantized = cfg.quantized if quantized is None else quantized
    family = _family(cfg)
    out: dict[str, Any] = {"architectures": [ARCHITECTURES[family]], "model_type": MODEL_TYPES[family]}
    out.update({f.key: getattr(cfg, f.attribute) for f in FIELDS if f.carried_by(cfg.arch, family == "v3.2")})
    out.update(
        num_key_value_heads=cfg.num_heads if cfg.arch == "v3" else 1,
        rope_theta=cfg.rope_theta,
        torch_dtype="bfloat16",
    )
    if cfg.rope_scaling is not None:
        out["rope_scaling"] = {"type": "yarn", **{key: getattr(cfg.rope_scaling, key) for key in _ROPE_SCALING_KEYS}}
    if quantized:
        out["quantization_config"] = {
            "quant_method": _QUANT_METHOD,
            "fmt": _QUANT_FMT,
            "activation_scheme": _ACTIVATION_SCHEME,
            "weight_block_size": list(cfg.weight_block),
        }
    return out
