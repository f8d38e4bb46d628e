"""The one rule by which reports become JSON and come back (mla_debug/_json_records.py)."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, ClassVar, Literal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mla_debug._json_records import JsonRecord, from_json, to_json


class Colour(str, Enum):
    RED = "red"
    BLUE = "blue"


@dataclass(frozen=True)
class Inner(JsonRecord):
    name: str
    colour: Colour
    size: int | None = None


@dataclass(frozen=True)
class Outer(JsonRecord):
    tp: int
    err: float
    inners: tuple[Inner, ...]
    best: Inner | None
    shape: tuple[int, int]
    by_name: dict[str, Inner] = field(default_factory=dict)
    tags: list[str] = field(default_factory=list)
    value: bool | int | float | str = False
    verdict: Literal["ok", "diverged"] = "ok"
    floor: float | None = None


@dataclass(frozen=True)
class Grown(JsonRecord):
    tp: int
    layer: str

    _json_missing: ClassVar[dict[str, Any]] = {"layer": ""}


floats = st.floats(allow_nan=True, allow_infinity=True)
inners = st.builds(Inner, st.text(max_size=8), st.sampled_from(Colour), st.none() | st.integers(-(2**40), 2**40))
outers = st.builds(
    Outer,
    tp=st.integers(1, 64),
    err=floats,
    inners=st.lists(inners, max_size=3).map(tuple),
    best=st.none() | inners,
    shape=st.tuples(st.integers(0, 9), st.integers(0, 9)),
    by_name=st.dictionaries(st.text(max_size=4), inners, max_size=2),
    tags=st.lists(st.text(max_size=4), max_size=3),
    # A union holding str keeps a string a string, so its floats are finite (a NaN would read as 'nan').
    value=st.booleans() | st.integers(-5, 5) | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=4),
    verdict=st.sampled_from(["ok", "diverged"]),
    floor=st.none() | floats,
)


@given(outers)
def test_a_record_comes_back_from_standard_json_as_it_was_written(record):
    data = record.to_dict()
    text = json.dumps(data, allow_nan=False)  # NaN and Inf are spelled, so strict JSON holds every record
    back = Outer.from_dict(json.loads(text))
    assert back.to_dict() == data
    assert type(back.value) is type(record.value)
    assert math.isnan(back.err) if math.isnan(record.err) else back.err == record.err


def test_the_json_form_is_the_fields_in_order_with_enums_as_values():
    record = Outer(2, math.nan, (Inner("a", Colour.RED),), None, (1, 2), value="inf")
    assert record.to_dict() == {
        "tp": 2,
        "err": "nan",
        "inners": [{"name": "a", "colour": "red", "size": None}],
        "best": None,
        "shape": [1, 2],
        "by_name": {},
        "tags": [],
        "value": "inf",
        "verdict": "ok",
        "floor": None,
    }
    assert Outer.from_dict(record.to_dict()).inners[0].colour is Colour.RED


def test_missing_keys_read_as_defaults_or_the_declared_stand_in_and_otherwise_are_named():
    assert Inner.from_dict({"name": "a", "colour": "blue"}) == Inner("a", Colour.BLUE, None)
    assert Grown.from_dict({"tp": 4}) == Grown(4, "")
    with pytest.raises(ValueError, match=r"Inner: the key 'colour' is missing \(keys present: name\)"):
        Inner.from_dict({"name": "a"})


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"name": "a", "colour": "green"}, r"Inner.colour: 'green' is not one of 'red', 'blue'"),
        ({"name": 3, "colour": "red"}, r"Inner.name: 3 is not a string"),
        ({"name": "a", "colour": "red", "size": 1.5}, r"Inner.size: 1.5 is not an integer"),
        ({"name": "a", "colour": "red", "size": True}, r"Inner.size: True is not an integer"),
        (["a"], r"Inner: expected a JSON object, got list"),
    ],
)
def test_a_value_that_does_not_fit_its_field_is_named(data, message):
    with pytest.raises(ValueError, match=message):
        Inner.from_dict(data)


def test_nested_and_shaped_values_are_checked_where_they_sit():
    good = Outer(1, 0.0, (), None, (1, 2)).to_dict()
    with pytest.raises(ValueError, match=r"Outer.shape: \[1\] has 1 items, not 2"):
        Outer.from_dict({**good, "shape": [1]})
    with pytest.raises(ValueError, match=r"Outer.verdict: 'maybe' is not one of 'ok', 'diverged'"):
        Outer.from_dict({**good, "verdict": "maybe"})
    with pytest.raises(ValueError, match=r"^Outer.inners\[1\]: Inner.colour: 'pink' is not one of"):
        Outer.from_dict({**good, "inners": [{"name": "a", "colour": "red"}, {"name": "b", "colour": "pink"}]})
    with pytest.raises(ValueError, match=r"Outer.err: 'many' is not a number"):
        Outer.from_dict({**good, "err": "many"})


def test_a_float_written_as_null_reads_as_no_value():
    assert math.isnan(from_json(float, None, "x"))
    assert from_json(float | None, None, "x") is None


def test_a_union_of_plain_types_keeps_the_type_json_gave():
    assert from_json(bool | int | float | str, "nan", "x") == "nan"  # a string where a string may stand
    assert math.isinf(from_json(int | float, "inf", "x"))
    assert from_json(bool | int | float | str, 3, "x") == 3 and from_json(int | float, 3, "x") == 3
    with pytest.raises(ValueError, match=r"x: \[1\] is none of int \| float"):
        from_json(int | float, [1], "x")


def test_a_value_without_a_json_form_is_refused():
    with pytest.raises(TypeError, match="no JSON form for a set"):
        to_json({1, 2})


def _records() -> list[type]:
    """Every JsonRecord in the package (every module imported; gpu/ needs Triton and holds none)."""
    import importlib
    import pkgutil

    import mla_debug

    for info in pkgutil.walk_packages(mla_debug.__path__, "mla_debug."):
        if ".gpu" not in info.name and not info.name.startswith("mla_debug.cli.__main__"):
            importlib.import_module(info.name)
    found, todo = [], list(JsonRecord.__subclasses__())
    while todo:
        cls = todo.pop()
        found.append(cls)
        todo.extend(cls.__subclasses__())
    return [c for c in found if c.__module__.startswith("mla_debug.")]


def _readable(annotation) -> bool:
    """Whether `from_json` has a rule for every type inside `annotation`."""
    import enum
    import types
    import typing

    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if annotation in (Any, bool, int, float, str, type(None), tuple, list, dict) or origin is Literal:
        return True
    if origin in (typing.Union, types.UnionType, tuple, list, dict):
        return all(a is Ellipsis or _readable(a) for a in args)
    return isinstance(annotation, type) and (issubclass(annotation, enum.Enum) or hasattr(annotation, "from_dict"))


def test_every_record_in_the_package_can_be_read_back_by_its_annotations():
    import dataclasses
    import typing

    records = _records()
    assert len(records) >= 30, [c.__name__ for c in records]
    for cls in records:
        assert dataclasses.is_dataclass(cls), f"{cls.__name__} is a JsonRecord but no dataclass"
        hints = typing.get_type_hints(cls)  # a name imported only for type checkers fails here, not in a user's read
        unreadable = {f.name: hints[f.name] for f in dataclasses.fields(cls) if f.init and not _readable(hints[f.name])}
        assert not unreadable, f"{cls.__module__}.{cls.__name__}: no JSON rule for {unreadable}"
