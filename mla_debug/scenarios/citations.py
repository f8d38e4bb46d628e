"""Where a profile's facts come from: the engine a profile models and the source each rule cites.

An engine profile models one release of a serving engine; every rule and setting in it names the file,
function and lines of that release it was read from (`Source`), so a reader can check it and a test can
hold it to the released code (the cited file must exist in the wheel, name the function, and the lines
must lie in that function or name it).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from .._json_records import JsonRecord
from .checks import reject_unknown, type_error

# "255", "1151, 1213-1214": line numbers and inclusive ranges, comma-separated.
_LINES = re.compile(r"^\s*\d+(\s*-\s*\d+)?(\s*,\s*\d+(\s*-\s*\d+)?)*\s*$")


def parse_lines(where: str, text: str) -> tuple[tuple[int, int], ...]:
    """``"1151, 1213-1214"`` as ((1151, 1151), (1213, 1214)); a ValueError naming `where` otherwise."""
    if not isinstance(text, str) or not _LINES.match(text):
        raise type_error(where, "source.lines", text, "line numbers or ranges, e.g. '255' or '1151, 1213-1214'")
    out = []
    for part in text.split(","):
        first, _, last = part.partition("-")
        start, end = int(first), int(last or first)
        if not 1 <= start <= end:
            raise ValueError(f"{where}: source.lines {part.strip()!r} is not a range of line numbers from 1 up")
        out.append((start, end))
    return tuple(out)


@dataclass(frozen=True)
class Source(JsonRecord):
    """One place in a released package: ``package`` as pip names it (``vllm``), its ``version``, the
    ``file`` inside the wheel (``vllm/envs.py``), the ``function`` (or class, or variable) there and the
    ``lines`` of the file that say it (``"255"``, ``"1151, 1213-1214"``; empty where not given)."""

    package: str
    version: str
    file: str
    function: str
    lines: str = ""

    def to_dict(self) -> dict[str, str]:
        out = super().to_dict()
        if not self.lines:  # a citation of a whole function or variable
            del out["lines"]
        return out

    def line_ranges(self) -> tuple[tuple[int, int], ...]:
        """The cited lines as inclusive (first, last) ranges; () when none are cited."""
        return parse_lines(str(self), self.lines) if self.lines else ()

    def __str__(self) -> str:
        at = f":{self.lines.replace(' ', '')}" if self.lines else ""
        return f"{self.package} {self.version} {self.file}{at}: {self.function}"


@dataclass(frozen=True)
class Engine(JsonRecord):
    """The serving engine release a profile models, e.g. ``Engine("vLLM", "0.33.0")``."""

    name: str
    version: str

    def __str__(self) -> str:
        return f"{self.name} {self.version}"


def parse_source(where: str, value: Any) -> Source:
    """A `Source` from ``{package, version, file, function}`` (all four non-empty strings) and, optionally,
    ``lines`` (line numbers or ranges: ``255``, ``"1151, 1213-1214"``)."""
    expected = "a mapping {package, version, file, function, lines} of non-empty strings (lines optional)"
    if not isinstance(value, Mapping):
        raise type_error(where, "source", value, expected)
    names = [f.name for f in fields(Source)]
    required = names[:4]
    reject_unknown(where, "source key(s)", value, names)
    missing = [name for name in required if name not in value]
    if missing:
        raise ValueError(
            f"{where}: source lacks {', '.join(missing)}; a source names {', '.join(required)} (and lines)"
        )
    for name in required:
        text = value[name]
        if not isinstance(text, str) or not text.strip():
            raise type_error(where, f"source.{name}", text, "a non-empty string")
    lines = value.get("lines", "")
    if isinstance(lines, int) and not isinstance(lines, bool):
        lines = str(lines)  # YAML reads `lines: 255` as a number
    if lines != "":
        parse_lines(where, lines)
    return Source(**{name: value[name] for name in required}, lines=lines)


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
