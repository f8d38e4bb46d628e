"""Where a profile's facts come from: the engine a profile models and the source each rule cites.

An engine profile models one release of a serving engine; every rule and setting in it names the file
and function of that release it was read from (`Source`), so a reader can check it and a test can hold
it to the released code (the cited file must exist in the wheel and name the function).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from .checks import reject_unknown, type_error


@dataclass(frozen=True)
class Source:
    """One place in a released package: ``package`` as pip names it (``vllm``), its ``version``, the
    ``file`` inside the wheel (``vllm/envs.py``) and the ``function`` (or class, or variable) there."""

    package: str
    version: str
    file: str
    function: str

    def to_dict(self) -> dict[str, str]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def __str__(self) -> str:
        return f"{self.package} {self.version} {self.file}: {self.function}"


@dataclass(frozen=True)
class Engine:
    """The serving engine release a profile models, e.g. ``Engine("vLLM", "0.33.0")``."""

    name: str
    version: str

    def to_dict(self) -> dict[str, str]:
        return {"name": self.name, "version": self.version}

    def __str__(self) -> str:
        return f"{self.name} {self.version}"


def parse_source(where: str, value: Any) -> Source:
    """A `Source` from ``{package, version, file, function}`` (all four non-empty strings)."""
    expected = "a mapping {package, version, file, function} of non-empty strings"
    if not isinstance(value, Mapping):
        raise type_error(where, "source", value, expected)
    names = [f.name for f in fields(Source)]
    reject_unknown(where, "source key(s)", value, names)
    missing = [name for name in names if name not in value]
    if missing:
        raise ValueError(f"{where}: source lacks {', '.join(missing)}; a source names {', '.join(names)}")
    for name in names:
        text = value[name]
        if not isinstance(text, str) or not text.strip():
            raise type_error(where, f"source.{name}", text, "a non-empty string")
    return Source(**{name: value[name] for name in names})


def parse_engine(where: str, value: Any, inherited: Engine | None) -> Engine:
    """An `Engine` from ``{name, version}``; keys left out keep the inherited engine's."""
    expected = "a mapping {name, version} of non-empty strings"
    if not isinstance(value, Mapping):
        raise type_error(where, "engine", value, expected)
    reject_unknown(where, "engine key(s)", value, ["name", "version"])
    merged = {**(inherited.to_dict() if inherited else {}), **value}
    for key in ("name", "version"):
        if key not in merged:
            raise ValueError(f"{where}: engine lacks {key!r}; an engine is {{name, version}}")
        text = merged[key]
        if not isinstance(text, str) or not text.strip():
            raise type_error(where, f"engine.{key}", text, "a non-empty string")
    return Engine(merged["name"], merged["version"])
