"""Scenarios by name: the built-in seed scenarios (each models a vLLM pull request) and the engine
profiles shipped as data (each models a release: ``data/engines/NAME.yaml``).

One lookup serves ``md.scenario("vllm-0.33")``, ``--scenario vllm-0.33``, a scenario file's ``base`` and
``fixed_by``. A profile is read from its file each time it is asked for (a few milliseconds), so an
edited profile is seen at once; a profile whose ``base`` chain comes back to itself is refused.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .scenario import Scenario, register_named_lookup
from .scenario_files import is_scenario_file_name
from .seed_scenarios import SCENARIOS
from .shipped_data import ENGINES, engine_profile_files, profile_names

# The profiles being read right now, outermost first: a base chain that loops shows up here.
_reading: list[str] = []


def builtin_names() -> list[str]:
    """The built-in seed scenarios."""
    return list(SCENARIOS)


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


register_named_lookup(named_scenario)


def scenario_names() -> list[str]:
    """The names of the built-in (seed) scenarios; `profile_names` gives the engine profiles'."""
    return list(SCENARIOS)


def scenario(spec: str | os.PathLike | Mapping[str, Any] | Scenario) -> Scenario:
    """A built-in scenario or engine profile by name, a Scenario passed through, a dict
    (`Scenario.from_dict`) or a .yml/.yaml/.json file (`Scenario.from_file`); an unknown name's error
    lists the valid names. A profile comes unresolved: `Scenario.resolve` (which every run does)
    applies its rules for a platform.

    >>> md.scenario("vllm-pr51692"), md.scenario("vllm-0.33"), md.scenario("my-scenario.yaml")
    """
    if isinstance(spec, Scenario):
        return spec
    if isinstance(spec, Mapping):
        return Scenario.from_dict(spec)
    if isinstance(spec, os.PathLike):
        return Scenario.from_file(spec)
    if not isinstance(spec, str):
        raise TypeError(
            f"scenario: expected a name, a Scenario, a dict or a path to a .yml/.yaml/.json file, "
            f"got {type(spec).__name__}"
        )
    if spec in SCENARIOS:
        return SCENARIOS[spec]
    if is_scenario_file_name(spec):
        return Scenario.from_file(spec)  # FileNotFoundError names the path when it is missing
    return named_scenario(spec)  # an engine profile, or the error listing every name
