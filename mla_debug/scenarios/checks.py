"""Validation of the scenario keys that shape a kernel policy and the model's behaviour, shared by the
scenario file's top level and by an engine profile rule's ``then``.

Every check raises ValueError naming where the value came from (`where`: the file or scenario), the key,
the value found and what was expected, so a bad file fails when it is loaded, not in the middle of a run.
Kernel and norm+quant backend names are checked against their registries (an unknown name lists the
registered ones), kernel options against the kernel class's constructor.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from dataclasses import fields
from typing import Any

from ..implementations import Registry
from ..kernels import KERNELS, Kernel, parse_disabled
from ..normquant import NORM_QUANT_BACKENDS
from ..numerics import quant_flavor
from .behaviour import CHOICES, ModelBehaviour

# The policy and behaviour keys and the type each takes, in words: the error messages quote these.
POLICY_KEYS: dict[str, str] = {
    "priority": "a non-empty list of kernel names (or null for the platform's default order)",
    "preshuffled_first": "a bool (true or false)",
    "disabled": "a list of kernel names or one comma-separated string",
    "overrides": "a mapping {layer name: kernel name}",
    "kernel_options": "a mapping {kernel name: {option: value}}",
    "behaviour": (
        "a mapping {ModelBehaviour field: value of the field's type, norm_quant_backend: name, or one of the "
        "listed values for " + ", ".join(CHOICES) + "}"
    ),
}


def type_error(where: str, key: str, value: Any, expected: str) -> ValueError:
    return ValueError(f"{where}: {key!r} must be {expected}, got {value!r} ({type(value).__name__})")


def reject_unknown(where: str, what: str, given: Mapping, valid: list[str]) -> None:
    unknown = [key for key in given if key not in valid]
    if unknown:
        listed = ", ".join(str(k) for k in unknown)
        raise ValueError(f"{where}: unknown {what} {listed}; valid: {', '.join(valid) or '(none)'}")


def string(where: str, key: str, value: Any, expected: str, allow_empty: bool = False) -> str:
    if not isinstance(value, str) or (not allow_empty and not value.strip()):
        raise type_error(where, key, value, expected)
    return value


def string_list(where: str, key: str, value: Any, expected: str) -> list[str]:
    if not isinstance(value, (list, tuple)) or not all(isinstance(item, str) for item in value):
        raise type_error(where, key, value, expected)
    return list(value)


def registered(where: str, key: str, registry: Registry, name: Any) -> str:
    """`name` as `registry` registers it (a keyword such as "auto" as it is); the registry's error, which
    lists the valid names, otherwise. Kernels and norm+quant backends are checked this one way."""
    if not isinstance(name, str):
        raise type_error(where, key, name, f"a {registry.noun} name (string)")
    try:
        return registry.check_name(name)
    except ValueError as err:
        raise ValueError(f"{where}: {key}: {err}") from None


def kernel(where: str, key: str, name: Any) -> type[Kernel]:
    """The kernel class for `name` (a kernel name or vLLM class name)."""
    return KERNELS.get(registered(where, key, KERNELS, name))


def _unique(names: list[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(names))


def priority(where: str, value: Any, key: str = "priority") -> tuple[str, ...] | None:
    if value is None:
        return None
    names = string_list(where, key, value, POLICY_KEYS["priority"])
    if not names:
        raise type_error(where, key, value, POLICY_KEYS["priority"])
    return tuple(kernel(where, key, name).name for name in names)


def disabled(where: str, value: Any, key: str = "disabled") -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        names = parse_disabled(value)
    else:
        names = string_list(where, key, value, POLICY_KEYS["disabled"])
    return _unique([kernel(where, key, name).name for name in names])


def overrides(where: str, value: Any, key: str = "overrides") -> dict[str, str]:
    if not isinstance(value, Mapping):
        raise type_error(where, key, value, POLICY_KEYS["overrides"])
    out: dict[str, str] = {}
    for layer, name in value.items():
        string(where, key, layer, "a mapping whose keys are layer names (non-empty strings)")
        out[layer] = kernel(where, f"{key}.{layer}", name).name
    return out


def kernel_option_parameters(cls: type[Kernel]) -> tuple[dict[str, inspect.Parameter], bool]:
    """The keyword options `cls`'s constructor takes, and whether it also takes any (``**kwargs``)."""
    params: dict[str, inspect.Parameter] = {}
    open_ended = False
    for param in inspect.signature(cls).parameters.values():
        if param.kind is inspect.Parameter.VAR_KEYWORD:
            open_ended = True
        elif param.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY):
            params[param.name] = param
    return params, open_ended


def matches_default_type(value: Any, default: Any) -> bool:
    """Whether `value` has the type of a parameter's or field's default (the only type information that
    survives ``from __future__ import annotations`` without evaluating annotations). Strict about bool:
    the string "false" from a quoted YAML value would otherwise switch an option ON."""
    if default is inspect.Parameter.empty or default is None:
        return True
    if isinstance(default, bool):
        return isinstance(value, bool)
    if isinstance(default, int):
        return isinstance(value, int) and not isinstance(value, bool)
    if isinstance(default, float):
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return isinstance(value, type(default))


def _type_words(default: Any) -> str:
    if isinstance(default, bool):
        return "a bool (true or false)"
    return f"a {type(default).__name__} (like its default {default!r})"


def kernel_options(where: str, value: Any, key: str = "kernel_options") -> dict[str, dict[str, Any]]:
    if not isinstance(value, Mapping):
        raise type_error(where, key, value, POLICY_KEYS["kernel_options"])
    out: dict[str, dict[str, Any]] = {}
    for name, options in value.items():
        cls = kernel(where, key, name)
        at = f"{key}.{cls.name}"
        if not isinstance(options, Mapping):
            raise type_error(where, at, options, "a mapping {option: value}")
        params, open_ended = kernel_option_parameters(cls)
        if not open_ended:
            reject_unknown(where, f"option(s) of kernel {cls.name!r} in {key}:", options, list(params))
        for option, setting in options.items():
            param = params.get(option)
            if param is not None and not matches_default_type(setting, param.default):
                expected = f"a {type(param.default).__name__} (like its default {param.default!r})"
                raise type_error(where, f"{at}.{option}", setting, expected)
        merged = {**out.get(cls.name, {}), **options}  # a kernel named twice (name and vLLM class name)
        if "flavor" in merged:
            # Kernels keep the flavor name and look it up only when they quantize, i.e. mid-run.
            try:
                quant_flavor(merged["flavor"])
            except ValueError as err:
                raise ValueError(f"{where}: {at}.flavor: {err}") from None
        try:
            cls(**merged)  # the constructor's own checks (e.g. accumulation), now rather than mid-run
        except (TypeError, ValueError) as err:
            raise ValueError(f"{where}: {at}: {err}") from None
        out[cls.name] = merged
    return out


# Behaviour fields under their earlier names (files and reports written before the rename still load).
RENAMED_BEHAVIOUR = {"v4_norm_quant_backend": "norm_quant_backend"}


def behaviour(where: str, value: Any, key: str = "behaviour") -> dict[str, Any]:
    """ModelBehaviour fields by name, each of its field's type (the default's type: a bool field takes
    only true/false, a string field only a string); the norm+quant backend is checked by its registry, a
    field with fixed values (`behaviour.CHOICES`) against them (the error lists them)."""
    if not isinstance(value, Mapping):
        raise type_error(where, key, value, POLICY_KEYS["behaviour"])
    value = {RENAMED_BEHAVIOUR.get(flag, flag): setting for flag, setting in value.items()}
    known = {f.name: f for f in fields(ModelBehaviour)}
    reject_unknown(where, "behaviour field(s)", value, list(known))
    for flag, setting in value.items():
        if flag == "norm_quant_backend":
            registered(where, f"{key}.{flag}", NORM_QUANT_BACKENDS, setting)
        elif flag in CHOICES:
            if not isinstance(setting, str) or setting not in CHOICES[flag]:
                allowed = ", ".join(repr(choice) for choice in CHOICES[flag])
                raise type_error(where, f"{key}.{flag}", setting, f"one of {allowed}")
        elif not matches_default_type(setting, known[flag].default):
            raise type_error(where, f"{key}.{flag}", setting, _type_words(known[flag].default))
    return dict(value)
