"""The package version, in a module of its own so every layer can name it without importing the package
root (which imports every layer)."""

from __future__ import annotations

__version__ = "0.1.0"  # keep equal to pyproject.toml's version (tests/test_cli.py checks)


def version() -> str:
    """The installed distribution's version (pyproject.toml's), else this module's for a source tree run
    without installing."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as dist_version

    try:
        return dist_version("mla-debug")
    except PackageNotFoundError:
        return __version__
