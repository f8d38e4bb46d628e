"""Dataclasses as plain JSON data by one rule, so that every report round-trips the same way.

A record writes each field under its own name, in field order: enums as their values, tuples as lists,
nested records as their own data, floats through `float_to_json` (NaN and Inf spelled out). It reads
each field back by its annotation, so the dataclass is the schema and there is no second list of keys
to keep in step with it. A key an older file lacks reads as the field's default; a record names the
keys older files may lack that have no default in `_json_missing`; a record written by hand sets
`_json_strict`, and a key that is none of its fields is refused. A value that does not fit its
annotation is a ValueError naming the record, the field and what was expected. A union of plain types
(a setting's bool | int | float | str) keeps the type JSON gave, so there a string stays a string even
where it spells a float ("nan").
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import math
import types
import typing
from typing import Any, ClassVar

from mla_debug._json_numbers import float_from_json, float_to_json


class JsonRecord:
    """Mixin for a dataclass whose JSON form is its fields (see the module docstring)."""

    # Fields without a default that files written before them lack, and the value read in their place.
    _json_missing: ClassVar[dict[str, Any]] = {}
    # True for a record people write by hand (a name map file): a key that is no field is refused, a
    # typo must not pass as a default. Reports keep False, so a newer file's extra keys still read.
    _json_strict: ClassVar[bool] = False

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON data; `from_dict` gives an equal record back."""
        return {f.name: to_json(getattr(self, f.name)) for f in dataclasses.fields(self) if f.init}

    @classmethod
    def from_dict(cls, data: Any):
        return record_from_json(cls, data)


def to_json(value: Any) -> Any:
    """`value` as plain JSON data (see the module docstring)."""
    if isinstance(value, enum.Enum):
        return value.value
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return float_to_json(value)
    if hasattr(value, "to_dict"):
        return value.to_dict()
    if isinstance(value, (list, tuple)):
        return [to_json(v) for v in value]
    if isinstance(value, dict):
        return {str(k): to_json(v) for k, v in value.items()}
    raise TypeError(f"no JSON form for a {type(value).__name__}: {value!r}")


def record_from_json(cls: type, data: Any):
    """The `cls` record `JsonRecord.to_dict` wrote as `data`."""
    name = cls.__name__
    if not isinstance(data, dict):
        raise ValueError(f"{name}: expected a JSON object, got {type(data).__name__} {data!r:.80}")
    hints = _hints(cls)
    missing_ok = getattr(cls, "_json_missing", {})
    if getattr(cls, "_json_strict", False):
        known = [f.name for f in dataclasses.fields(cls) if f.init]
        unknown = [str(k) for k in data if k not in known]
        if unknown:
            raise ValueError(f"{name}: unknown key(s) {', '.join(unknown)}; the keys are {', '.join(known)}")
    values = {}
    for f in dataclasses.fields(cls):
        if not f.init:
            continue
        if f.name in data:
            values[f.name] = from_json(hints[f.name], data[f.name], f"{name}.{f.name}")
        elif f.name in missing_ok:
            values[f.name] = missing_ok[f.name]
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise ValueError(f"{name}: the key {f.name!r} is missing (keys present: {', '.join(map(str, data)) or 'none'})")
    return cls(**values)


def from_json(annotation: Any, value: Any, where: str) -> Any:
    """`value` read as `annotation` (a type hint); ValueError naming `where` when it does not fit."""
    if annotation is Any:
        return value
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        return _from_union(args, value, where)
    if origin is typing.Literal:
        if value not in args:
            raise ValueError(f"{where}: {value!r} is not one of {', '.join(map(repr, args))}")
        return value
    if origin in (tuple, list) or annotation in (tuple, list):
        return _from_sequence(origin or annotation, args, value, where)
    if origin is dict or annotation is dict:
        if not isinstance(value, dict):
            raise ValueError(f"{where}: expected a JSON object, got {value!r:.80}")
        item = args[1] if args else Any
        return {str(k): from_json(item, v, f"{where}[{k!r}]") for k, v in value.items()}
    if annotation is float:
        number = float_from_json(value, where)
        return math.nan if number is None else number  # null is "no value": NaN, which the writer never spells null
    if annotation is bool:
        if not isinstance(value, bool):
            raise ValueError(f"{where}: {value!r} is not true or false")
        return value
    if annotation is int:
        if isinstance(value, bool) or not (isinstance(value, int) or isinstance(value, float) and value.is_integer()):
            raise ValueError(f"{where}: {value!r} is not an integer")
        return int(value)
    if annotation is str:
        if not isinstance(value, str):
            raise ValueError(f"{where}: {value!r} is not a string")
        return value
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        try:
            return annotation(value)
        except ValueError:
            allowed = ", ".join(repr(m.value) for m in annotation)
            raise ValueError(f"{where}: {value!r} is not one of {allowed}") from None
    if hasattr(annotation, "from_dict"):
        try:
            return annotation.from_dict(value)
        except ValueError as error:  # say where in the document the nested record sits
            raise ValueError(f"{where}: {error}") from None
    raise TypeError(f"{where}: no JSON rule for the annotation {annotation!r}")


def _from_union(args: tuple, value: Any, where: str) -> Any:
    if value is None and type(None) in args:
        return None
    rest = [a for a in args if a is not type(None)]
    if len(rest) == 1:
        return from_json(rest[0], value, where)
    # A union of plain types (e.g. a setting's bool | int | float | str) keeps the type JSON gave it.
    plain = [a for a in rest if a in (bool, int, float, str)]
    if any(type(value) is a for a in plain) or (float in plain and type(value) is int):
        return value
    if float in plain and value in ("nan", "inf", "-inf"):
        return from_json(float, value, where)
    for a in (a for a in rest if a not in plain):
        try:
            return from_json(a, value, where)
        except ValueError:
            continue
    raise ValueError(f"{where}: {value!r:.80} is none of {' | '.join(getattr(a, '__name__', str(a)) for a in args)}")


def _from_sequence(kind: type, args: tuple, value: Any, where: str) -> Any:
    if not isinstance(value, (list, tuple)):
        raise ValueError(f"{where}: expected a JSON array, got {value!r:.80}")
    if kind is tuple and args and args[-1] is not Ellipsis:
        if len(value) != len(args):
            raise ValueError(f"{where}: {value!r:.80} has {len(value)} items, not {len(args)}")
        return tuple(from_json(a, v, f"{where}[{i}]") for i, (a, v) in enumerate(zip(args, value)))
    item = args[0] if args else Any
    items = [from_json(item, v, f"{where}[{i}]") for i, v in enumerate(value)]
    return tuple(items) if kind is tuple else items


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    """The resolved annotations of `cls`'s fields (the modules use postponed annotations)."""
    return typing.get_type_hints(cls)
