"""Scenarios as data: read a YAML / JSON scenario file and validate a scenario mapping into Scenario fields.

A scenario file is a mapping; every key is optional except ``name`` (which may also come from the
argument or the file's stem)::

    name: ignore-flags
    description: the preshuffled GEMM first, layer flags ignored (like vLLM PR #51692)
    base: vllm-baseline                 # a built-in scenario whose fields are the defaults
    priority: [aiter-bpreshuffle, aiter-blockscale, torch-reference]   # absent: the platform default
    preshuffled_first: true             # only shapes the platform default (no explicit priority)
    disabled: AiterFp8BlockScaledMMKernel           # or a list; kernel names or vLLM class names
    overrides: {kv_b_proj: torch-reference}         # layer -> kernel
    kernel_options: {aiter-bpreshuffle: {honour_layer_flags: false}}
    behaviour: {v4_fused_norm_quant: true}          # ModelBehaviour fields
    tuned: ./aiter-configs                          # CSV file(s) or configs/ folder; relative to the file
    triton_configs: ./aiter-triton-gemm             # folder(s) of aiter Triton config JSON files (same rule)
    upstream: vLLM PR #51692                        # the upstream change this scenario models (words)
    fixed_by: vllm-pr56433                          # the built-in scenario modelling its known fix

Inheritance from ``base``: scalars and lists replace the base's value; mappings (``overrides``,
``kernel_options`` per kernel, ``behaviour``) are merged key by key, so a file changes only what it
names. Everything is validated here, eagerly - kernel and norm+quant backend names against their
registries (`implementations.Registry`: an unknown name lists the registered ones), kernel options
against the kernel class's constructor, tuned tables and Triton config folders by reading them - so a bad file fails when it is
loaded, not in the middle of a run.
"""

from __future__ import annotations

import inspect
import json
import os
from collections.abc import Mapping
from dataclasses import MISSING, fields, replace
from pathlib import Path
from typing import Any

from ..implementations import Registry
from ..kernels import KERNELS, Kernel, TritonConfigTable, TunedTable, parse_disabled
from ..normquant import NORM_QUANT_BACKENDS
from ..numerics import quant_flavor
from .behaviour import ModelBehaviour

SUFFIXES = (".yml", ".yaml", ".json")

# Every accepted key and the type it takes, in words: the error messages quote these.
KEYS: dict[str, str] = {
    "name": "a non-empty string",
    "description": "a string",
    "base": "the name of a built-in scenario",
    "priority": "a non-empty list of kernel names (or null for the platform's default order)",
    "preshuffled_first": "a bool (true or false)",
    "disabled": "a list of kernel names or one comma-separated string",
    "overrides": "a mapping {layer name: kernel name}",
    "kernel_options": "a mapping {kernel name: {option: value}}",
    "behaviour": "a mapping {ModelBehaviour field: bool, or v4_norm_quant_backend: name}",
    "tuned": "a path or a list of paths (aiter tuned CSV files or a configs/ folder)",
    "triton_configs": "a path or a list of paths (folders of aiter Triton config JSON files, or such files)",
    "upstream": "a string naming the upstream change the scenario models",
    "fixed_by": "the name of a built-in scenario",
}


# -- files -----------------------------------------------------------------------------------------


def is_scenario_file_name(text: str) -> bool:
    """Whether `text` ends like a scenario file (.yml, .yaml or .json)."""
    return str(text).lower().endswith(SUFFIXES)


def read_scenario_file(path: str | os.PathLike) -> Any:
    """The parsed content of a .yml/.yaml/.json scenario file (not yet validated)."""
    path = Path(path).expanduser()
    if not is_scenario_file_name(path.name):
        raise ValueError(f"scenario file {path}: the name must end in .yml, .yaml or .json to say how to parse it")
    if not path.exists():
        raise FileNotFoundError(f"scenario file {path} does not exist")
    if not path.is_file():
        raise ValueError(f"scenario file {path} is not a regular file")
    text = path.read_text(encoding="utf-8")
    if path.suffix.lower() == ".json":
        try:
            data = json.loads(text) if text.strip() else None
        except json.JSONDecodeError as err:
            raise ValueError(f"scenario file {path} is not valid JSON ({err})") from None
    else:
        import yaml

        try:
            # safe_load, never yaml.load: a full loader can construct arbitrary Python objects.
            data = yaml.safe_load(text)
        except yaml.YAMLError as err:
            raise ValueError(f"scenario file {path} is not valid YAML ({err})") from None
    if data is None:
        raise ValueError(f"scenario file {path} is empty; it must hold a mapping such as 'name: my-scenario'")
    return data


# -- validation ------------------------------------------------------------------------------------


def _type_error(where: str, key: str, value: Any, expected: str) -> ValueError:
    return ValueError(f"{where}: {key!r} must be {expected}, got {value!r} ({type(value).__name__})")


def _reject_unknown(where: str, what: str, given: Mapping, valid: list[str]) -> None:
    unknown = [key for key in given if key not in valid]
    if unknown:
        listed = ", ".join(str(k) for k in unknown)
        raise ValueError(f"{where}: unknown {what} {listed}; valid: {', '.join(valid) or '(none)'}")


def _string(where: str, key: str, value: Any, expected: str, allow_empty: bool = False) -> str:
    if not isinstance(value, str) or (not allow_empty and not value.strip()):
        raise _type_error(where, key, value, expected)
    return value


def _string_list(where: str, key: str, value: Any, expected: str) -> list[str]:
    if not isinstance(value, (list, tuple)) or not all(isinstance(item, str) for item in value):
        raise _type_error(where, key, value, expected)
    return list(value)


def _registered(where: str, key: str, registry: Registry, name: Any) -> str:
    """`name` as `registry` registers it (a keyword such as "auto" as it is); the registry's error, which
    lists the valid names, otherwise. Kernels and norm+quant backends are checked this one way."""
    if not isinstance(name, str):
        raise _type_error(where, key, name, f"a {registry.noun} name (string)")
    try:
        return registry.check_name(name)
    except ValueError as err:
        raise ValueError(f"{where}: {key}: {err}") from None


def _kernel(where: str, key: str, name: Any) -> type[Kernel]:
    """The kernel class for `name` (a kernel name or vLLM class name)."""
    return KERNELS.get(_registered(where, key, KERNELS, name))


def _unique(names: list[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(names))


def _priority(where: str, value: Any) -> tuple[str, ...] | None:
    if value is None:
        return None
    names = _string_list(where, "priority", value, KEYS["priority"])
    if not names:
        raise _type_error(where, "priority", value, KEYS["priority"])
    return tuple(_kernel(where, "priority", name).name for name in names)


def _disabled(where: str, value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        names = parse_disabled(value)
    else:
        names = _string_list(where, "disabled", value, KEYS["disabled"])
    return _unique([_kernel(where, "disabled", name).name for name in names])


def _overrides(where: str, value: Any) -> dict[str, str]:
    if not isinstance(value, Mapping):
        raise _type_error(where, "overrides", value, KEYS["overrides"])
    out: dict[str, str] = {}
    for layer, name in value.items():
        _string(where, "overrides", layer, "a mapping whose keys are layer names (non-empty strings)")
        out[layer] = _kernel(where, f"overrides.{layer}", name).name
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


def _matches_default_type(value: Any, default: Any) -> bool:
    """Whether `value` has the type of the parameter's default (the only type information that survives
    ``from __future__ import annotations`` without evaluating annotations). Strict about bool: the
    string "false" from a quoted YAML value would otherwise switch an option ON."""
    if default is inspect.Parameter.empty or default is None:
        return True
    if isinstance(default, bool):
        return isinstance(value, bool)
    if isinstance(default, int):
        return isinstance(value, int) and not isinstance(value, bool)
    if isinstance(default, float):
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return isinstance(value, type(default))


def _kernel_options(where: str, value: Any) -> dict[str, dict[str, Any]]:
    if not isinstance(value, Mapping):
        raise _type_error(where, "kernel_options", value, KEYS["kernel_options"])
    out: dict[str, dict[str, Any]] = {}
    for name, options in value.items():
        cls = _kernel(where, "kernel_options", name)
        key = f"kernel_options.{cls.name}"
        if not isinstance(options, Mapping):
            raise _type_error(where, key, options, "a mapping {option: value}")
        params, open_ended = kernel_option_parameters(cls)
        if not open_ended:
            _reject_unknown(where, f"option(s) of kernel {cls.name!r} in kernel_options:", options, list(params))
        for option, setting in options.items():
            param = params.get(option)
            if param is not None and not _matches_default_type(setting, param.default):
                expected = f"a {type(param.default).__name__} (like its default {param.default!r})"
                raise _type_error(where, f"{key}.{option}", setting, expected)
        merged = {**out.get(cls.name, {}), **options}  # a kernel named twice (name and vLLM class name)
        if "flavor" in merged:
            # Kernels keep the flavor name and look it up only when they quantize, i.e. mid-run.
            try:
                quant_flavor(merged["flavor"])
            except ValueError as err:
                raise ValueError(f"{where}: {key}.flavor: {err}") from None
        try:
            cls(**merged)  # the constructor's own checks (e.g. accumulation), now rather than mid-run
        except (TypeError, ValueError) as err:
            raise ValueError(f"{where}: {key}: {err}") from None
        out[cls.name] = merged
    return out


def _behaviour(where: str, value: Any) -> dict[str, Any]:
    if not isinstance(value, Mapping):
        raise _type_error(where, "behaviour", value, KEYS["behaviour"])
    _reject_unknown(where, "behaviour field(s)", value, [f.name for f in fields(ModelBehaviour)])
    for flag, setting in value.items():
        if flag == "v4_norm_quant_backend":
            _registered(where, f"behaviour.{flag}", NORM_QUANT_BACKENDS, setting)
        elif not isinstance(setting, bool):
            raise _type_error(where, f"behaviour.{flag}", setting, "a bool (true or false)")
    return dict(value)


def _tuned(where: str, value: Any, relative_to: Path | None) -> str | tuple[str, ...] | None:
    if value is None:
        return None
    if isinstance(value, str):
        items = [part for part in value.split(os.pathsep) if part]  # aiter's env-var form a.csv:b.csv
    else:
        items = _string_list(where, "tuned", value, KEYS["tuned"])
    if not items:
        raise _type_error(where, "tuned", value, KEYS["tuned"])
    folder = relative_to if relative_to is not None else Path.cwd()
    # Absolute paths, so the scenario means the same tables whatever the working directory later is.
    paths = [os.path.normpath(folder / Path(item).expanduser()) for item in items]
    try:
        TunedTable.from_csv(paths)
    except (FileNotFoundError, ValueError) as err:
        raise type(err)(f"{where}: tuned: {err}") from None
    return paths[0] if len(paths) == 1 else tuple(paths)


def _triton_configs(where: str, value: Any, relative_to: Path | None) -> str | tuple[str, ...] | None:
    if value is None:
        return None
    if isinstance(value, str):
        items = [part for part in value.split(os.pathsep) if part]
    else:
        items = _string_list(where, "triton_configs", value, KEYS["triton_configs"])
    if not items:
        raise _type_error(where, "triton_configs", value, KEYS["triton_configs"])
    folder = relative_to if relative_to is not None else Path.cwd()
    paths = [os.path.normpath(folder / Path(item).expanduser()) for item in items]
    try:
        TritonConfigTable.from_folder(paths)
    except (FileNotFoundError, ValueError) as err:
        raise type(err)(f"{where}: triton_configs: {err}") from None
    return paths[0] if len(paths) == 1 else tuple(paths)


def parse_scenario(
    cls: type,
    data: Any,
    name: str | None,
    bases: Mapping[str, Any],
    source: str | None = None,
    relative_to: str | os.PathLike | None = None,
) -> dict[str, Any]:
    """Validate a scenario mapping and return the keyword arguments of `cls` (the Scenario dataclass).

    `bases` maps the built-in names to scenarios usable as ``base``; `name` is used when the mapping
    has no ``name``; `source` names the origin in error messages; relative ``tuned`` paths are taken
    relative to `relative_to` (the file's folder), else to the working directory.
    """
    if not isinstance(data, Mapping):
        where = source or "scenario"
        raise ValueError(f"{where}: a scenario must be a mapping of keys {', '.join(KEYS)}, got {type(data).__name__}")
    given_name = data.get("name", name)
    where = source or (f"scenario {given_name!r}" if isinstance(given_name, str) else "scenario")
    _reject_unknown(where, "key(s)", data, list(KEYS))
    if given_name is None:
        raise ValueError(f"{where}: a scenario needs a name: give the key 'name' (or pass name=...)")
    out: dict[str, Any] = {"name": _string(where, "name", given_name, KEYS["name"])}

    base = None
    if "base" in data:
        base_name = _string(where, "base", data["base"], KEYS["base"])
        if base_name not in bases:
            raise ValueError(f"{where}: base {base_name!r} is not a built-in scenario; valid: {', '.join(bases)}")
        base = bases[base_name]
    for f in fields(cls):
        if f.name == "name":
            continue
        if base is not None:
            out[f.name] = getattr(base, f.name)
        elif f.default is not MISSING:
            out[f.name] = f.default
        elif f.default_factory is not MISSING:
            out[f.name] = f.default_factory()
    out.setdefault("description", "")
    # Copies: the new scenario must not share (and later mutate) a built-in's mappings.
    out["overrides"] = dict(out["overrides"])
    out["kernel_options"] = {kernel: dict(options) for kernel, options in out["kernel_options"].items()}

    if "description" in data:
        out["description"] = _string(where, "description", data["description"], KEYS["description"], True)
    if "priority" in data:
        out["priority"] = _priority(where, data["priority"])
    if "preshuffled_first" in data:
        value = data["preshuffled_first"]
        if not isinstance(value, bool):
            raise _type_error(where, "preshuffled_first", value, KEYS["preshuffled_first"])
        if out["priority"] is not None:
            origin = "the key 'priority'" if "priority" in data else f"base {data['base']!r}"
            raise ValueError(
                f"{where}: 'preshuffled_first' only shapes the platform's default order, but {origin} gives an "
                f"explicit priority {list(out['priority'])}; remove one (or set 'priority: null')"
            )
        out["preshuffled_first"] = value
    if "disabled" in data:
        out["disabled"] = _disabled(where, data["disabled"])
    if "overrides" in data:
        out["overrides"] = {**out["overrides"], **_overrides(where, data["overrides"])}
    if "kernel_options" in data:
        for kernel, options in _kernel_options(where, data["kernel_options"]).items():
            out["kernel_options"].setdefault(kernel, {}).update(options)
    if "behaviour" in data:
        out["behaviour"] = replace(out["behaviour"], **_behaviour(where, data["behaviour"]))
    if "tuned" in data:
        folder = Path(relative_to) if relative_to is not None else None
        out["tuned_path"] = _tuned(where, data["tuned"], folder)
    if "triton_configs" in data:
        folder = Path(relative_to) if relative_to is not None else None
        out["triton_configs_path"] = _triton_configs(where, data["triton_configs"], folder)
    if "upstream" in data:
        out["upstream"] = _string(where, "upstream", data["upstream"], KEYS["upstream"], True)
    if "fixed_by" in data:
        fixed_by = _string(where, "fixed_by", data["fixed_by"], KEYS["fixed_by"], True)
        if fixed_by and fixed_by not in bases:
            raise ValueError(f"{where}: fixed_by {fixed_by!r} is not a built-in scenario; valid: {', '.join(bases)}")
        out["fixed_by"] = fixed_by
    return out
