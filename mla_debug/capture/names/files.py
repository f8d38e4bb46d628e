"""Name maps as files: the shipped ones, ``data/engines/names/<key>.yaml`` (one per engine release, each
citing the source it was read from, beside that release's engine profile), and a user's own in the same
form (``names="my-fork.yaml"``). A file is YAML, read with `yaml.safe_load` and checked key by key."""

from __future__ import annotations

import functools
import os
from pathlib import Path

import yaml

from ...scenarios.shipped_data import ENGINES, data_folder
from .name_map import NameMap

NAMES = "names"  # the folder of name maps inside the data folder's engines/
SUFFIXES = (".yaml", ".yml")


def read_name_map(path: str | os.PathLike) -> NameMap:
    """The name map a YAML file holds; FileNotFoundError or ValueError naming the file and the key."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as err:
        raise FileNotFoundError(f"name map {path}: cannot be read ({err.strerror or err})") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise ValueError(f"name map {path}: not valid YAML ({err})") from None
    try:
        return NameMap.from_dict(data)
    except ValueError as err:
        raise ValueError(f"name map {path}: {err}") from None


def shipped_maps() -> dict[str, NameMap]:
    """The shipped name maps by key, in file-name order; a file whose key is not its stem is an error."""
    return dict(_read_folder(data_folder() / ENGINES / NAMES))


@functools.cache
def _read_folder(folder: Path) -> tuple[tuple[str, NameMap], ...]:
    if not folder.is_dir():
        raise FileNotFoundError(f"the name maps' folder {folder} does not exist (data/engines/names/ of the checkout)")
    maps = []
    for path in sorted(p for p in folder.iterdir() if p.suffix.lower() in SUFFIXES):
        name_map = read_name_map(path)
        if name_map.key != path.stem:
            raise ValueError(f"name map {path}: key {name_map.key!r} is not the file's name {path.stem!r}")
        maps.append((name_map.key, name_map))
    return tuple(maps)
