"""Module-name maps: where a module tree keeps the canonical modules and tensors of one MLA layer.

A `NameMap` is data read from an engine's released source: which attention class it recognizes, the
attribute path (relative to that attention module) of each canonical module and of each derived weight,
how the attention module is called (which argument holds the hidden states and the positions), and
whether its row-parallel output is already all-reduced when its module returns. The maps for
transformers (DeepSeek-V3 and V3.2), vLLM (0.33, and 0.32's CPU build) and SGLang 0.5.23 are files,
``data/engines/names/<key>.yaml`` (`files`); a user's own tree is described by a file of the same form
or by a plain dict (`user_map`).
"""

from __future__ import annotations

import importlib.metadata
import os

from ..canonical import DERIVED, DERIVED_SCALES, MODULES
from .files import SUFFIXES, read_name_map, shipped_maps
from .name_map import FLAG_ATTRS, LINEAR_TENSORS, Argument, DerivedName, ModuleName, NameMap

__all__ = [
    "FLAG_ATTRS",
    "LINEAR_TENSORS",
    "Argument",
    "DerivedName",
    "ModuleName",
    "NameMap",
    "builtin_maps",
    "map_for_class",
    "read_name_map",
    "resolve_map",
    "user_map",
]

def user_map(mapping: dict[str, str], *, engine: str = "user", hidden_arg: Argument | None = None,
             positions_arg: Argument | None = None, row_output_reduced: bool = True) -> NameMap:
    """A map for any module tree: {path relative to the attention module: canonical name}.

    A value is a canonical module (``"q_b_proj"``, ``"fused_qkv_a_proj"``, ``"attention"``, ...) or a
    derived tensor (``"W_UK"``, ``"W_UV"``, ``"W_UK.scale"``, ...; its heads on dim 0). The attention
    module itself is the one `capture(layer=...)` finds at ``layers.<layer>.self_attn`` unless
    `attention_attr` differs (pass ``{"@attention": "attn"}`` to name another attribute).

    >>> user_map({"q_up": "q_b_proj", "kv_up": "kv_b_proj", "out": "o_proj", "wk": "W_UK"})
    """
    if not isinstance(mapping, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in mapping.items()):
        raise TypeError(f"user_map: expected a dict of str -> str, got {mapping!r}")
    attention_attr = mapping.get("@attention", "self_attn")
    modules, derived = [], []
    for path, canonical in mapping.items():
        if path == "@attention":
            continue
        if canonical in MODULES:
            modules.append(ModuleName(path, canonical))
        elif canonical in DERIVED + DERIVED_SCALES:
            derived.append(DerivedName(path, canonical))
        else:
            raise ValueError(
                f"user_map: {path!r} -> {canonical!r} is neither a canonical module {sorted(MODULES)} "
                f"nor a derived tensor {list(DERIVED + DERIVED_SCALES)}"
            )
    return NameMap(
        key="user",
        engine=engine,
        version=None,
        source="user-supplied map",
        attention_classes=(),
        attention_attr=attention_attr,
        modules=tuple(modules),
        derived=tuple(derived),
        hidden_arg=hidden_arg or Argument("hidden_states", 0),
        positions_arg=positions_arg,
        row_output_reduced=row_output_reduced,
    )


def builtin_maps() -> dict[str, NameMap]:
    """The shipped name maps by key (``data/engines/names/``)."""
    return shipped_maps()


def _installed(distribution: str) -> bool:
    try:
        importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


def map_for_class(class_name: str) -> NameMap:
    """The built-in map that recognizes an attention module of class `class_name`. Where several builds of
    one engine share the class, a map tied to a distribution is the one when that distribution is
    installed in this process; otherwise a map tied to none (a module tree shaped like the engine's
    without the engine)."""
    found = [m for m in builtin_maps().values() if class_name in m.attention_classes]
    if found:
        installed = [m for m in found if m.distribution is not None and _installed(m.distribution)]
        untied = [m for m in found if m.distribution is None]
        return (installed or untied or found)[0]
    known = {m.key: m.attention_classes for m in builtin_maps().values()}
    raise ValueError(
        f"no built-in name map knows attention class {class_name!r} (known: {known}); pass names=<one of "
        f"{sorted(known)}> or a dict (see mla_debug.capture.user_map)"
    )


def resolve_map(names: NameMap | dict | str | os.PathLike | None, attention_class: str | None = None) -> NameMap:
    """`names` as a NameMap: a map, a built-in map's key, a map file (``*.yaml``), a user dict, or None
    (pick by class)."""
    if isinstance(names, NameMap):
        return names
    if isinstance(names, dict):
        return user_map(names)
    if isinstance(names, os.PathLike) or (isinstance(names, str) and names.lower().endswith(SUFFIXES)):
        return read_name_map(names)
    if isinstance(names, str):
        maps = builtin_maps()
        if names not in maps:
            raise ValueError(f"unknown name map {names!r}; built-in: {sorted(maps)}, or a map file (*.yaml)")
        return maps[names]
    if names is None:
        if attention_class is None:
            raise ValueError("a name map is needed: pass names=<key, map file, dict or NameMap>")
        return map_for_class(attention_class)
    raise TypeError(
        f"names must be a NameMap, a dict, a built-in map's key, a map file or None, got {type(names).__name__}"
    )
