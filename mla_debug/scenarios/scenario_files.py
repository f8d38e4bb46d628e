"""Scenarios as data: read a YAML / JSON scenario file and validate a scenario mapping into Scenario fields.

A scenario file is a mapping; every key is optional except ``name`` (which may also come from the
argument or the file's stem)::

    name: ignore-flags
    description: the preshuffled GEMM first, layer flags ignored (like vLLM PR #51692)
    base: vllm-baseline                 # a named scenario (built-in or engine profile) giving the defaults
    priority: [aiter-bpreshuffle, aiter-blockscale, torch-reference]   # absent: the platform default
    preshuffled_first: true             # only shapes the platform default (no explicit priority)
    disabled: AiterFp8BlockScaledMMKernel           # or a list; kernel names or vLLM class names
    overrides: {kv_b_proj: torch-reference}         # layer -> kernel
    kernel_options: {aiter-bpreshuffle: {honour_layer_flags: false}}
    behaviour: {v4_fused_norm_quant: true, load_order: remote-kv}   # ModelBehaviour fields
    tuned: ./aiter-configs                          # CSV file(s) or configs/ folder; relative to the file
    triton_configs: ./aiter-triton-gemm             # folder(s) of aiter Triton config JSON files (same rule)
    upstream: vLLM PR #51692                        # the upstream change this scenario models (words)
    fixed_by: vllm-pr56433                          # the named scenario modelling its known fix

An engine profile (``data/engines/*.yaml``) adds three keys that model a release rather than one
change: ``engine`` ({name, version}), ``settings`` (declared env vars, server arguments and facts about
the machine, `settings`) and ``rules`` (what the engine does on which platform under which settings,
`rules`); `Scenario.resolve` turns it into a plain scenario per platform. In a profile - a scenario
with an ``engine``, its own or its base's - every setting and rule cites its ``source``.

Inheritance from ``base``: scalars and lists replace the base's value; mappings (``engine``,
``overrides``, ``kernel_options`` per kernel, ``behaviour``) are merged key by key, so a file changes
only what it names; ``settings`` declares (a mapping) or sets (a scalar) by name; ``rules`` replace the
base's rule of the same id, in place, or come after the base's. Everything is validated here, eagerly -
kernel and norm+quant backend names against their registries (`implementations.Registry`: an unknown
name lists the registered ones), kernel options against the kernel class's constructor, tuned tables
and Triton config folders by reading them - so a bad file fails when it is loaded, not in the middle of a run.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from dataclasses import MISSING, fields, replace
from pathlib import Path
from typing import Any

from ..kernels import TritonConfigTable, TunedTable
from . import checks
from .citations import parse_engine
from .reachability import parse_reachability
from .rules import check_conditions, parse_rules
from .settings import parse_settings

SUFFIXES = (".yml", ".yaml", ".json")

# Every accepted key and the type it takes, in words: the error messages quote these.
KEYS: dict[str, str] = {
    "name": "a non-empty string",
    "description": "a string",
    "base": "the name of a named scenario (built-in or engine profile)",
    **checks.POLICY_KEYS,
    "tuned": "a path or a list of paths (aiter tuned CSV files or a configs/ folder)",
    "triton_configs": "a path or a list of paths (folders of aiter Triton config JSON files, or such files)",
    "upstream": "a string naming the upstream change the scenario models",
    "fixed_by": "the name of a named scenario (built-in or engine profile)",
    "engine": "a mapping {name, version}: the serving engine release a profile models",
    "settings": "a mapping {NAME: declaration {kind, default, values, says, source}, or a value}",
    "rules": "a list of rules {id, says, when, then, source}",
    "reachable": "a mapping {verdict, tp_dependent, says, evidence}: whether a hazard's release reaches it",
}
# Fields of a resolved scenario that a file never gives and a base never passes on.
_RESOLVED_ONLY = ("resolution", "origin", "resolved_on")
# Fields a file gives that a base does not pass on: a claim about the file itself.
_OWN_ONLY = ("reachable",)


# -- files -----------------------------------------------------------------------------------------


def is_scenario_file_name(text: str) -> bool:
    """Whether `text` ends like a scenario file (.yml, .yaml or .json)."""
    return str(text).lower().endswith(SUFFIXES)


def _unique_key_loader():
    """yaml's SafeLoader refusing a key given twice in one mapping: plain YAML keeps the last one silently,
    so a rule with two ``source`` keys (or a setting declared twice) would lose one without a word."""
    import yaml

    class UniqueKeyLoader(yaml.SafeLoader):
        def construct_mapping(self, node, deep=False):
            seen: dict = {}
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=deep)
                if key in seen:
                    raise yaml.constructor.ConstructorError(
                        None,
                        None,
                        f"key {key!r} appears twice in one mapping (first at line {seen[key] + 1}); YAML would keep "
                        "only the last",
                        key_node.start_mark,
                    )
                seen[key] = key_node.start_mark.line
            return super().construct_mapping(node, deep=deep)

    return UniqueKeyLoader


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
            # A SafeLoader, never yaml.load's full loader (which can construct arbitrary Python objects).
            data = yaml.load(text, Loader=_unique_key_loader())  # noqa: S506 - a SafeLoader subclass
        except yaml.YAMLError as err:
            raise ValueError(f"scenario file {path} is not valid YAML ({err})") from None
    if data is None:
        raise ValueError(f"scenario file {path} is empty; it must hold a mapping such as 'name: my-scenario'")
    return data


# -- validation ------------------------------------------------------------------------------------


def _paths(
    where: str, key: str, value: Any, relative_to: Path | None, read: Callable[[list[str]], Any]
) -> str | tuple[str, ...] | None:
    """A path or list of paths (``tuned``, ``triton_configs``), made absolute against `relative_to` (the
    file's folder, else the working directory) and checked by reading them with `read` now."""
    if value is None:
        return None
    if isinstance(value, str):
        items = [part for part in value.split(os.pathsep) if part]  # aiter's env-var form a.csv:b.csv
    else:
        items = checks.string_list(where, key, value, KEYS[key])
    if not items:
        raise checks.type_error(where, key, value, KEYS[key])
    folder = relative_to if relative_to is not None else Path.cwd()
    # Absolute paths, so the scenario means the same tables whatever the working directory later is.
    paths = [os.path.normpath(folder / Path(item).expanduser()) for item in items]
    try:
        read(paths)
    except (FileNotFoundError, ValueError) as err:
        raise type(err)(f"{where}: {key}: {err}") from None
    return paths[0] if len(paths) == 1 else tuple(paths)


def _named(where: str, key: str, name: str, lookup: Callable[[str], Any]) -> Any:
    try:
        return lookup(name)
    except ValueError as err:
        raise ValueError(f"{where}: {key}: {err}") from None


def _check_sources(where: str, out: Mapping[str, Any]) -> None:
    """A profile (a scenario with an engine) names the source of every setting and rule."""
    unsourced = [f"setting {name}" for name, s in out["settings"].items() if s.source is None]
    unsourced += [f"rule {rule.id}" for rule in out["rules"] if rule.source is None]
    if unsourced:
        raise ValueError(
            f"{where}: an engine profile cites the source of every setting and rule "
            "(source: {package, version, file, function}); without one: " + ", ".join(unsourced)
        )


def parse_scenario(
    cls: type,
    data: Any,
    name: str | None,
    lookup: Callable[[str], Any],
    source: str | None = None,
    relative_to: str | os.PathLike | None = None,
) -> dict[str, Any]:
    """Validate a scenario mapping and return the keyword arguments of `cls` (the Scenario dataclass).

    `lookup(name)` gives the named scenario usable as ``base`` (ValueError listing the valid names
    otherwise); `name` is used when the mapping has no ``name``; `source` names the origin in error
    messages; relative ``tuned`` paths are taken relative to `relative_to` (the file's folder), else to
    the working directory.
    """
    if not isinstance(data, Mapping):
        where = source or "scenario"
        raise ValueError(f"{where}: a scenario must be a mapping of keys {', '.join(KEYS)}, got {type(data).__name__}")
    given_name = data.get("name", name)
    where = source or (f"scenario {given_name!r}" if isinstance(given_name, str) else "scenario")
    checks.reject_unknown(where, "key(s)", data, list(KEYS))
    if given_name is None:
        raise ValueError(f"{where}: a scenario needs a name: give the key 'name' (or pass name=...)")
    out: dict[str, Any] = {"name": checks.string(where, "name", given_name, KEYS["name"])}

    base = None
    if "base" in data:
        base_name = checks.string(where, "base", data["base"], KEYS["base"])
        base = _named(where, "base", base_name, lookup)
    for f in fields(cls):
        if f.name == "name":
            continue
        if base is not None and f.name not in _RESOLVED_ONLY + _OWN_ONLY:
            out[f.name] = getattr(base, f.name)
        elif f.default is not MISSING:
            out[f.name] = f.default
        elif f.default_factory is not MISSING:
            out[f.name] = f.default_factory()
    out.setdefault("description", "")
    # Copies: the new scenario must not share (and later mutate) a base's mappings.
    out["overrides"] = dict(out["overrides"])
    out["kernel_options"] = {kernel: dict(options) for kernel, options in out["kernel_options"].items()}

    if "description" in data:
        out["description"] = checks.string(where, "description", data["description"], KEYS["description"], True)
    if "priority" in data:
        out["priority"] = checks.priority(where, data["priority"])
    if "preshuffled_first" in data:
        value = data["preshuffled_first"]
        if not isinstance(value, bool):
            raise checks.type_error(where, "preshuffled_first", value, KEYS["preshuffled_first"])
        if out["priority"] is not None:
            origin = "the key 'priority'" if "priority" in data else f"base {data['base']!r}"
            raise ValueError(
                f"{where}: 'preshuffled_first' only shapes the platform's default order, but {origin} gives an "
                f"explicit priority {list(out['priority'])}; remove one (or set 'priority: null')"
            )
        out["preshuffled_first"] = value
    if "disabled" in data:
        out["disabled"] = checks.disabled(where, data["disabled"])
    if "overrides" in data:
        out["overrides"] = {**out["overrides"], **checks.overrides(where, data["overrides"])}
    if "kernel_options" in data:
        for kernel, options in checks.kernel_options(where, data["kernel_options"]).items():
            out["kernel_options"].setdefault(kernel, {}).update(options)
    if "behaviour" in data:
        out["behaviour"] = replace(out["behaviour"], **checks.behaviour(where, data["behaviour"]))
    folder = Path(relative_to) if relative_to is not None else None
    if "tuned" in data:
        out["tuned_path"] = _paths(where, "tuned", data["tuned"], folder, TunedTable.from_csv)
    if "triton_configs" in data:
        out["triton_configs_path"] = _paths(
            where, "triton_configs", data["triton_configs"], folder, TritonConfigTable.from_folder
        )
    if "upstream" in data:
        out["upstream"] = checks.string(where, "upstream", data["upstream"], KEYS["upstream"], True)
    if "fixed_by" in data:
        fixed_by = checks.string(where, "fixed_by", data["fixed_by"], KEYS["fixed_by"], True)
        if fixed_by:
            _named(where, "fixed_by", fixed_by, lookup)
        out["fixed_by"] = fixed_by
    if "engine" in data:
        out["engine"] = parse_engine(where, data["engine"], out["engine"])
    if "reachable" in data:
        out["reachable"] = parse_reachability(where, data["reachable"])
    if "settings" in data:
        out["settings"], out["chosen"] = parse_settings(where, data["settings"], out["settings"], out["chosen"])
    else:
        out["settings"], out["chosen"] = dict(out["settings"]), dict(out["chosen"])
    if "rules" in data:
        out["rules"] = parse_rules(where, data["rules"], out["settings"], out["rules"])
    check_conditions(where, out["rules"], out["settings"])
    if out["engine"] is not None:
        _check_sources(where, out)
    return out
