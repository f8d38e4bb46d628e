"""Finding AMD's aiter (PyPI ``amd-aiter``) on disk and refusing any release but the pinned one.

The loader reads aiter's files by path; it never imports the ``aiter`` package (its ``__init__.py``
looks for ``hipconfig`` and JIT-builds HIP modules, so it fails without ROCm). Upstream moves and
rewrites these modules between releases, so every other version is refused with the reason and the
install command: a cross-check against code we have not read proves nothing.

The PyPI package named ``aiter`` is unrelated to AMD's; it is recognised (a top-level ``aiter`` without
the ``amd-aiter`` distribution) and refused too.
"""

from __future__ import annotations

import functools
import importlib.metadata
import importlib.util
from dataclasses import dataclass
from pathlib import Path

DISTRIBUTION = "amd-aiter"
# The one release whose files the loader and the cross-checks were written against.
PINNED_VERSION = "0.1.7.post2.dev18"
INSTALL_HINT = (
    f"pip install '{DISTRIBUTION}=={PINNED_VERSION}' (or the project's extra: pip install 'mla-debug[aiter]')"
)


class AiterUnavailable(ImportError):
    """The pinned amd-aiter is not installed here (missing, another release, or not AMD's package)."""


@dataclass(frozen=True)
class AiterInstall:
    """An installed amd-aiter: its version and the folder of its ``aiter`` package."""

    version: str
    package_dir: Path

    def path(self, relative: str) -> Path:
        """A file of the aiter package (``"ops/shuffle.py"``), checked to exist."""
        found = self.package_dir / relative
        if not found.is_file():
            raise AiterUnavailable(f"amd-aiter {self.version} at {self.package_dir} has no {relative}")
        return found

    def describe(self) -> str:
        return f"amd-aiter {self.version} ({self.package_dir})"


def _package_dir(dist: importlib.metadata.Distribution) -> Path | None:
    """The folder holding the distribution's ``aiter/__init__.py`` (found from its file list, not by import)."""
    for file in dist.files or ():
        if file.as_posix() == "aiter/__init__.py":
            return Path(str(dist.locate_file(file))).parent
    return None


@functools.lru_cache(maxsize=1)
def _lookup() -> tuple[AiterInstall | None, str]:
    """(the install, "") or (None, why not). Cached: installs do not change within a process."""
    try:
        dist = importlib.metadata.distribution(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        try:
            other = importlib.util.find_spec("aiter")
        except (ImportError, ValueError):
            other = None
        if other is not None:
            return None, (
                f"a module named 'aiter' is importable ({other.origin}) but the {DISTRIBUTION} distribution is "
                f"not installed: that is the unrelated PyPI package 'aiter', not AMD's; {INSTALL_HINT}"
            )
        return None, f"{DISTRIBUTION} is not installed; {INSTALL_HINT}"
    version = dist.version
    if version != PINNED_VERSION:
        return None, (
            f"{DISTRIBUTION} {version} is installed, but mla_debug loads aiter's files only from {PINNED_VERSION}, "
            f"the release they were read and cross-checked against (upstream moves these modules between "
            f"releases); {INSTALL_HINT}"
        )
    package_dir = _package_dir(dist)
    if package_dir is None or not (package_dir / "__init__.py").is_file():
        return None, f"{DISTRIBUTION} {version} is installed but its aiter/ package folder is missing"
    return AiterInstall(version, package_dir), ""


def find_install() -> AiterInstall | None:
    """The pinned amd-aiter when installed, else None (`unavailable_reason` says why)."""
    return _lookup()[0]


def unavailable_reason() -> str | None:
    """None when the pinned amd-aiter is installed, else why not (with the install command)."""
    install, why = _lookup()
    return None if install is not None else why


def require_install() -> AiterInstall:
    """The pinned amd-aiter, or AiterUnavailable saying why not and how to install it."""
    install, why = _lookup()
    if install is None:
        raise AiterUnavailable(why)
    return install
