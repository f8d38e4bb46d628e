"""The RoPE fields of a Hugging Face ``config.json``, read the way transformers 5.24 reads them and written
back so that they read to the same values.

Sources, all transformers 5.24: ``modeling_rope_utils.py`` (``standardize_rope_params``,
``_validate_yarn_rope_parameters``, ``_compute_yarn_parameters``) and ``models/deepseek_v3`` (the
attention's ``yarn_apply_mscale`` and the ``rope_interleave`` switch between ``apply_rotary_pos_emb`` and
``apply_rotary_pos_emb_interleave``). What each value means is `RopeScaling`'s docstring; what is refused,
and why, is in the messages below. In short:

- ``rope_scaling`` (the older key) and ``rope_parameters`` are merged; a value they disagree on is refused.
- ``rope_type`` (or ``type``) ``yarn`` / ``deepseek_yarn``: YaRN; ``default`` or absent: plain RoPE, and
  refused when scaling fields come with it (transformers would ignore them); any other type is refused.
- ``factor`` absent: refused (transformers raises "Missing required keys"); ``null``: max_position_embeddings
  / original_max_position_embeddings, unless ``mscale_all_dim`` is set (transformers' attention then fails).
- ``original_max_position_embeddings``: a top-level key wins over the RoPE dict's (transformers'
  priority), then the dict's, then ``max_position_embeddings``.
- ``beta_fast`` / ``beta_slow`` / ``mscale`` / ``mscale_all_dim`` ``null``: as if absent.
- ``partial_rotary_factor``: must name the qk_rope_head_dim rotated dimensions (1 for DeepSeek-V3, whose
  transformers head_dim is the rope width; qk_rope_head_dim / head_dim for V4); anything else is refused.
- ``rope_interleave`` (top level): true (also when absent, DeepSeek's convention) or false; anything else
  is refused (transformers would read ``null`` as false, silently).
"""

from __future__ import annotations

from dataclasses import MISSING, fields
from typing import TYPE_CHECKING, Any

from .rope_scaling import RopeScaling

if TYPE_CHECKING:
    from .config import MLAConfig

# rope_scaling / rope_parameters keys: RopeScaling's fields, plus the kind and theta spellings.
ROPE_SCALING_KEYS = tuple(f.name for f in fields(RopeScaling))
ROPE_KEYS = {"type", "rope_type", "rope_theta", "partial_rotary_factor", *ROPE_SCALING_KEYS}
YARN_NAMES = ("yarn", "deepseek_yarn")
INTERLEAVE_KEY = "rope_interleave"
# Model types whose transformers models ignore rope_interleave (always interleaved).
INTERLEAVED_ONLY = ("deepseek_v32", "deepseek_v4")
# Written only when they differ from what their absence means.
_OPTIONAL_WHEN = {"truncate": True, "attention_factor": None, "mscale": None}


def field_default(cls: type, attribute: str) -> Any:
    """The declared default of a dataclass field (every optional config.json field falls back on one)."""
    (f,) = (f for f in fields(cls) if f.name == attribute)
    assert f.default is not MISSING, f"{cls.__name__}.{attribute} has no default to fall back on"
    return f.default


def _number(spec: dict, key: str, default: float | None) -> float | None:
    value = spec.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"config.json: RoPE field {key!r} must be a number, got {value!r}")
    return float(value)


def _positive_int(where: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"config.json: {where} must be a positive integer, got {value!r}")
    return value


def _merged_spec(data: dict) -> dict[str, Any]:
    scaling = data.get("rope_scaling")
    params = data.get("rope_parameters")
    if isinstance(params, dict) and "main" in params:
        # DeepSeek-V4 (transformers): RoPE of the main (sliding-window) attention; the compressor's
        # branch ("compress") is out of scope.
        params = params["main"]
    for source in (scaling, params):
        if source is not None and not isinstance(source, dict):
            raise ValueError(f"config.json: rope_scaling/rope_parameters must be an object, got {source!r}")
    if scaling is not None and params is not None:
        both = set(scaling) & set(params)
        clashes = [k for k in sorted(both) if scaling[k] != params[k] and k not in ("type", "rope_type")]
        if clashes:
            raise ValueError(f"config.json: rope_scaling and rope_parameters disagree on {clashes}")
    spec: dict[str, Any] = {**(params or {}), **(scaling or {})}
    unknown = sorted(set(spec) - ROPE_KEYS)
    if unknown:
        raise ValueError(f"config.json: unknown RoPE fields {unknown}; known: {sorted(ROPE_KEYS)}")
    return spec


def _theta(data: dict, spec: dict, default: float) -> float:
    theta = data.get("rope_theta")
    if theta is not None and "rope_theta" in spec and float(spec["rope_theta"]) != float(theta):
        raise ValueError(f"config.json: rope_theta {theta} and rope_parameters.rope_theta {spec['rope_theta']} differ")
    return float(theta if theta is not None else spec.get("rope_theta", default))


def _check_partial_rotary(data: dict, spec: dict, arch: str) -> None:
    # transformers rotates int(head_dim * partial_rotary_factor) dimensions, with head_dim the rope width
    # for DeepSeek-V3 (DeepseekV3Config sets head_dim = qk_rope_head_dim) and the full head for V4.
    rope_dim, head_dim = data.get("qk_rope_head_dim"), data.get("qk_rope_head_dim" if arch == "v3" else "head_dim")
    for value in (data.get("partial_rotary_factor"), spec.get("partial_rotary_factor")):
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"config.json: partial_rotary_factor must be a number, got {value!r}")
        if not (isinstance(head_dim, int) and int(head_dim * value) == rope_dim):
            raise ValueError(
                f"config.json: partial_rotary_factor={value!r} rotates int({head_dim} * {value}) dimensions, not the "
                f"qk_rope_head_dim={rope_dim} the attention applies RoPE to (not modelled)"
            )


def _original_max(data: dict, spec: dict) -> int:
    top = data.get("original_max_position_embeddings")
    if top is not None:  # transformers' standardize_rope_params gives the top-level key priority
        return _positive_int("original_max_position_embeddings", top)
    if spec.get("original_max_position_embeddings") is not None:
        return _positive_int("rope_scaling.original_max_position_embeddings", spec["original_max_position_embeddings"])
    if data.get("max_position_embeddings") is None:
        raise ValueError(
            "config.json: yarn RoPE without original_max_position_embeddings takes max_position_embeddings "
            "(transformers 5.24), which this config.json does not set either"
        )
    return _positive_int("max_position_embeddings", data["max_position_embeddings"])


def _factor(data: dict, spec: dict, original_max: int, mscale_all_dim: float) -> float:
    if "factor" not in spec:
        raise ValueError(
            "config.json: yarn RoPE without 'factor' (transformers 5.24 refuses it: 'factor' is a required key "
            "of rope_type 'yarn')"
        )
    factor = _number(spec, "factor", None)
    if factor is not None:
        return factor
    if mscale_all_dim:
        raise ValueError(
            "config.json: yarn 'factor' is null and mscale_all_dim is set; transformers 5.24 derives the factor "
            "for the frequencies (max_position_embeddings / original_max_position_embeddings) but its DeepSeek "
            "attention's softmax mscale reads the null factor and fails - give the factor explicitly"
        )
    if data.get("max_position_embeddings") is None:
        raise ValueError("config.json: yarn 'factor' is null and max_position_embeddings, its numerator, is missing")
    return _positive_int("max_position_embeddings", data["max_position_embeddings"]) / original_max


def read_rope(data: dict, arch: str, default_theta: float) -> tuple[float, RopeScaling | None]:
    """(rope_theta, scaling) of a parsed config.json (the language model's part of it) of family `arch`;
    `default_theta` where it names none."""
    spec = _merged_spec(data)
    theta = _theta(data, spec, default_theta)
    _check_partial_rotary(data, spec, arch)
    kind = spec.get("rope_type", spec.get("type")) or "default"
    if kind == "default":
        stray = sorted(k for k in ROPE_SCALING_KEYS if spec.get(k) is not None)
        if stray:
            raise ValueError(
                f"config.json: RoPE fields {stray} without a scaling type; transformers 5.24 reads this as plain "
                "RoPE and ignores them - give rope_type 'yarn' or remove them"
            )
        return theta, None
    if kind not in YARN_NAMES:
        raise ValueError(f"config.json: RoPE type {kind!r} is not supported (only yarn / deepseek_yarn)")
    truncate = spec.get("truncate", True)
    if not isinstance(truncate, bool):
        raise ValueError(f"config.json: RoPE field 'truncate' must be true or false, got {truncate!r}")
    mscale_all_dim = _number(spec, "mscale_all_dim", field_default(RopeScaling, "mscale_all_dim"))
    original_max = _original_max(data, spec)
    try:
        scaling = RopeScaling(
            factor=_factor(data, spec, original_max, mscale_all_dim),
            beta_fast=_number(spec, "beta_fast", field_default(RopeScaling, "beta_fast")),
            beta_slow=_number(spec, "beta_slow", field_default(RopeScaling, "beta_slow")),
            mscale=_number(spec, "mscale", None),
            mscale_all_dim=mscale_all_dim,
            original_max_position_embeddings=original_max,
            truncate=truncate,
            attention_factor=_number(spec, "attention_factor", None),
        )
    except ValueError as err:
        raise ValueError(f"config.json: {err}") from None
    return theta, scaling


def read_interleave(data: dict) -> bool:
    """``rope_interleave``: True when absent (DeepSeek's interleaved pairs), else the bool it holds.

    transformers 5.24 reads the key for DeepSeek-V3-family configs only; its DeepSeek-V3.2 and V4 models
    always rotate interleaved pairs (``DeepseekV32Config`` removes the field), while SGLang 0.5.23 honours
    the key there too - so ``false`` in such a config is refused as ambiguous."""
    value = data.get(INTERLEAVE_KEY, True)
    if not isinstance(value, bool):
        raise ValueError(
            f"config.json: {INTERLEAVE_KEY} must be true or false, got {value!r} (transformers reads a non-bool "
            "by its truth value; say which pairing the checkpoint uses)"
        )
    model_type = str(data.get("model_type", ""))
    if not value and model_type.startswith(INTERLEAVED_ONLY):
        raise ValueError(
            f"config.json: {INTERLEAVE_KEY} false in a {model_type} config: transformers' {model_type} model always "
            "rotates interleaved pairs and ignores the key, SGLang honours it - which pairing the weights use is "
            "ambiguous, not modelled"
        )
    return value


def write_rope(cfg: MLAConfig) -> dict[str, Any]:
    """The config.json RoPE fields of `cfg` (rope_theta, rope_scaling, rope_interleave when False) that
    `read_rope` / `read_interleave` read back to the same values."""
    out: dict[str, Any] = {"rope_theta": cfg.rope_theta}
    if cfg.rope_scaling is not None:
        scaling: dict[str, Any] = {"type": "yarn"}
        for key in ROPE_SCALING_KEYS:
            value = getattr(cfg.rope_scaling, key)
            if key in _OPTIONAL_WHEN and value == _OPTIONAL_WHEN[key]:
                continue
            scaling[key] = value
        out["rope_scaling"] = scaling
    if not cfg.rope_interleave:
        out[INTERLEAVE_KEY] = False
    return out
