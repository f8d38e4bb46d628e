"""Hugging Face config.json -> MLAConfig (DeepSeek-V3/R1, Kimi-K2 and DeepSeek-V4 field names).

Only the fields an attention layer needs are read; the rest of a model config (MoE, vocabulary, ...) is
ignored. Fields that are read are checked: a missing or mistyped one, RoPE parameters given twice with
different values, unknown RoPE keys or a non-FP8 quantization each raise a ValueError naming the field.
"""

from __future__ import annotations

from typing import Any

from .config import MLAConfig, RopeScaling

_ROPE_KEYS = {
    "type",
    "rope_type",
    "factor",
    "beta_fast",
    "beta_slow",
    "mscale",
    "mscale_all_dim",
    "original_max_position_embeddings",
    "rope_theta",
    "partial_rotary_factor",
    "truncate",
}
_YARN_NAMES = {"yarn", "deepseek_yarn"}
_V4_FIELDS = ("head_dim", "o_groups", "o_lora_rank", "index_n_heads", "index_head_dim", "index_topk", "sliding_window")


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
    theta = float(theta if theta is not None else spec.get("rope_theta", 10000.0))
    kind = spec.get("rope_type", spec.get("type", "default" if not spec.get("factor") else "yarn"))
    if kind in (None, "default"):
        return theta, None
    if kind not in _YARN_NAMES:
        raise ValueError(f"config.json: RoPE type {kind!r} is not supported (only deepseek-yarn / yarn)")
    return theta, RopeScaling(
        factor=_float(spec, "factor", 1.0),
        beta_fast=_float(spec, "beta_fast", 32.0),
        beta_slow=_float(spec, "beta_slow", 1.0),
        mscale=_float(spec, "mscale", 1.0),
        mscale_all_dim=_float(spec, "mscale_all_dim", 0.0),
        original_max_position_embeddings=_int(spec, "original_max_position_embeddings", False, 4096),
    )


def _quantization(data: dict) -> tuple[bool, tuple[int, int]]:
    quant = data.get("quantization_config")
    if quant is None:
        return False, (128, 128)
    if not isinstance(quant, dict):
        raise ValueError(f"config.json: quantization_config must be an object, got {quant!r}")
    method = quant.get("quant_method", "fp8")
    if method != "fp8":
        raise ValueError(f"config.json: quantization_config.quant_method {method!r} is not 'fp8'")
    fmt = quant.get("fmt", "e4m3")
    if fmt not in ("e4m3", "e4m3fn", "float8_e4m3fn"):
        raise ValueError(f"config.json: quantization_config.fmt {fmt!r} is not an e4m3 format")
    block = quant.get("weight_block_size", [128, 128])
    if not (isinstance(block, (list, tuple)) and len(block) == 2 and all(isinstance(b, int) and b > 0 for b in block)):
        raise ValueError(f"config.json: quantization_config.weight_block_size must be two positive ints, got {block!r}")
    scheme = quant.get("activation_scheme", "dynamic")
    if scheme != "dynamic":
        raise ValueError(f"config.json: activation_scheme {scheme!r} is not 'dynamic' (per-token group quant)")
    return True, (block[0], block[1])


def config_from_hf(data: dict, name: str) -> MLAConfig:
    if not isinstance(data, dict):
        raise ValueError(f"config.json must be a JSON object, got {type(data).__name__}")
    model_type = str(data.get("model_type", ""))
    is_v4 = model_type.startswith("deepseek_v4") or "o_groups" in data
    if not is_v4 and "kv_lora_rank" not in data:
        raise ValueError(
            f"config.json ({model_type or 'no model_type'}): neither an MLA config (kv_lora_rank) nor a "
            "DeepSeek-V4 config (o_groups)"
        )
    if data.get("q_lora_rank", 0) is None:
        raise ValueError("config.json: q_lora_rank is null (a direct q_proj, DeepSeek-V2-Lite style) - not supported")
    theta, scaling = _rope(data)
    quantized, block = _quantization(data)
    common = dict(
        name=name,
        hidden_size=_int(data, "hidden_size"),
        num_heads=_int(data, "num_attention_heads"),
        q_lora_rank=_int(data, "q_lora_rank"),
        qk_rope_head_dim=_int(data, "qk_rope_head_dim"),
        rms_norm_eps=_float(data, "rms_norm_eps", 1e-6),
        rope_theta=theta,
        rope_scaling=scaling,
        max_position_embeddings=_int(data, "max_position_embeddings", False, 163840),
        weight_block=block,
        quantized=quantized,
    )
    if is_v4:
        v4 = {key: _int(data, key, required=key not in ("index_topk", "sliding_window")) for key in _V4_FIELDS}
        return MLAConfig(arch="v4", **common, **v4)
    v3 = {key: _int(data, key) for key in ("kv_lora_rank", "qk_nope_head_dim", "v_head_dim")}
    return MLAConfig(arch="v3", **common, **v3)
