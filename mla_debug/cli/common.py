"""What the `mla-debug` subcommands share: how a command or action is registered, checks of output paths
made before any work starts, and the notice for a report that went beside a name already taken."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path


def add_command(
    sub, name: str, run: Callable[[argparse.Namespace], int] | None, summary: str, description: str
) -> argparse.ArgumentParser:
    """Register command (or action) `name` on the subparsers `sub`: `summary` is its line in the parent's
    list, `description` its own ``--help``, `run` what `mla-debug` calls with the parsed arguments (None
    for a group whose actions each bring their own)."""
    parser = sub.add_parser(name, help=summary, description=description)
    if run is not None:
        parser.set_defaults(func=run)
    return parser


def add_actions(group: argparse.ArgumentParser, default: Callable[[argparse.Namespace], int] | None = None):
    """The subparsers of a command group's actions (`mla-debug GROUP ACTION`): one must be named, unless
    `default` runs when none is."""
    if default is not None:
        group.set_defaults(func=default, action=None)
    return group.add_subparsers(dest="action", required=default is None, metavar="ACTION")


def _first_existing(path: Path) -> Path:
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def check_output_file(text: str, suffix: str, option: str, what: str) -> Path:
    """`text` as the path of a new `suffix` file: the suffix matches and the folder can hold it (an
    existing file of that name is fine - the writers then choose `name-2`). Raises ValueError."""
    path = Path(text).expanduser()
    if path.suffix.lower() != suffix:
        found = f"ends in '{path.suffix}'" if path.suffix else "has no suffix"
        raise ValueError(f"{option} {text}: {what} must be a {suffix} file (the name {found})")
    if path.is_dir():
        raise ValueError(f"{option} {text} is a folder; name the {suffix} file to write, e.g. {path / ('x' + suffix)}")
    existing = _first_existing(path.parent)
    if not existing.is_dir():
        raise ValueError(f"{option} {text}: {existing} is a file, so no folder can be made there")
    return path


def check_output_folder(text: str, option: str) -> Path:
    """`text` as a folder under which fresh run folders are made: a folder, or creatable. Raises ValueError."""
    path = Path(text).expanduser()
    existing = _first_existing(path)
    if not existing.is_dir():
        raise ValueError(f"{option} {text}: {existing} is a file, not a folder")
    return path


def written(label: str, requested: Path, path: Path) -> str:
    """`label: path`, saying so when the requested name was taken and the writer chose another."""
    if Path(path) == Path(requested):
        return f"{label}: {path}"
    return f"{label}: {requested} exists; wrote {path} instead"
