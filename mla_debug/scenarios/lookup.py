"""Scenarios by name: the built-in seed scenarios (each models a vLLM pull request) and the engine
profiles shipped as data (each models a release: ``data/engines/NAME.yaml``).

One lookup serves ``md.scenario("vllm-0.33")``, ``--scenario vllm-0.33``, a scenario file's ``base`` and
``fixed_by``. A profile is read from its file each time it is asked for (a few milliseconds), so an
edited profile is seen at once; a profile whose ``base`` chain comes back to itself is refused.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from .shipped_data import ENGINES, engine_profile_files

if TYPE_CHECKING:
    from .scenario import Scenario

# The profiles being read right now, outermost first: a base chain that loops shows up here.
_reading: list[str] = []


def builtin_names() -> list[str]:
    """The built-in seed scenarios."""
    from .seed_scenarios import SCENARIOS

    return list(SCENARIOS)


def profile_names() -> list[str]:
    """The engine profiles in the data folder (``data/engines/*.yaml``), sorted; none when there is no
    data folder or two files share a name (`md.scenario` then says why), so a help text always prints."""
    try:
        return list(engine_profile_files())
    except (FileNotFoundError, ValueError):
        return []


def named_listing() -> str:
    """Every valid name in words, for an error message."""
    profiles = profile_names()
    text = f"{', '.join(builtin_names())} (built-in)"
    if profiles:
        text += f", {', '.join(profiles)} (engine profiles in data/{ENGINES}/)"
    return text


def named_scenario(name: str) -> Scenario:
    """The built-in scenario or engine profile called `name`; ValueError listing the valid names
    (and, when the data folder is missing, where it was looked for) otherwise."""
    from .seed_scenarios import SCENARIOS

    if name in SCENARIOS:
        return SCENARIOS[name]
    try:
        files = engine_profile_files()
    except FileNotFoundError as err:
        raise ValueError(
            f"unknown scenario {name!r}; valid: {named_listing()} (or a .yml/.yaml/.json scenario file); "
            f"no engine profiles: {err}"
        ) from None
    if name not in files:
        raise ValueError(f"unknown scenario {name!r}; valid: {named_listing()} (or a .yml/.yaml/.json scenario file)")
    return read_profile(name, files[name])


def read_profile(name: str, path: Path) -> Scenario:
    """The engine profile `name` read from `path`; its name must be the file's stem."""
    from .scenario import Scenario

    if name in _reading:
        chain = " -> ".join([*_reading[_reading.index(name) :], name])
        raise ValueError(f"engine profile {name!r}: its base chain comes back to itself ({chain})")
    _reading.append(name)
    try:
        scen = Scenario.from_file(path)
    finally:
        _reading.pop()
    if scen.name != name:
        raise ValueError(
            f"engine profile {path} names itself {scen.name!r}; a profile's name is its file's stem {name!r}"
        )
    return scen
