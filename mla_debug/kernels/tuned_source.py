"""Where a tuned table came from, as data: embedded facts, files, aiter's env var, or an installed aiter.

A verdict about the preshuffled kernel depends on the table consulted (docs/semantics.md §7), so every report
names it. `TableSource` is that name as typed data; `describe()` is its one-line form.

Whether an installed aiter's tables are the default is decided here: only where aiter really serves
the process - a ROCm build of torch with AMD's aiter installed - because that is the only machine on
which vLLM would read them. Elsewhere an installed amd-aiter (the CPU cross-checks install one) is used
only when asked for (`TunedTable.from_installed_aiter`), so installing it never moves a verdict.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path

from .._json_records import JsonRecord
from .._str_enum import StrEnum
from .tuned_shapes import AITER_COMMIT

ENV_VAR = "AITER_CONFIG_GEMM_A8W8_BLOCKSCALE_BPRESHUFFLE"
TUNED_NAME = "a8w8_blockscale_bpreshuffle_tuned_gemm"


class TableOrigin(StrEnum):
    """The kinds of source a tuned table is read from."""

    EMBEDDED = "embedded"
    FILES = "files"
    ENV = "env"
    INSTALLED_AITER = "installed-aiter"


@dataclass(frozen=True)
class TableSource(JsonRecord):
    """One tuned table's source: its origin, the files read (in merge order) and the aiter release or
    commit the data stands for."""

    origin: TableOrigin
    files: tuple[str, ...] = ()
    aiter_version: str | None = None  # an installed aiter's distribution version
    aiter_commit: str | None = None  # the commit the embedded facts were read at

    def describe(self) -> str:
        if self.origin is TableOrigin.EMBEDDED:
            return f"embedded shapes of aiter {self.aiter_commit}"
        where = _describe_files(self.files)
        if self.origin is TableOrigin.ENV:
            return f"{ENV_VAR}: {where}"
        if self.origin is TableOrigin.INSTALLED_AITER:
            return f"installed aiter {self.aiter_version or '(version unknown)'}: {where}"
        return where

    @classmethod
    def embedded(cls) -> TableSource:
        return cls(TableOrigin.EMBEDDED, aiter_commit=AITER_COMMIT)


def _describe_files(files: tuple[str, ...]) -> str:
    if not files:
        return "no files"
    if len(files) == 1:
        return files[0]
    parent = os.path.commonpath([str(Path(f).parent) for f in files])
    return f"{len(files)} CSV files under {parent}"


@dataclass(frozen=True)
class InstalledAiter:
    """An installed aiter's configs/ folder and its distribution version (found without importing it)."""

    configs: Path
    version: str | None


def installed_aiter() -> InstalledAiter | None:
    """The configs/ folder of an installed AMD aiter (any release), or None."""
    try:
        spec = importlib.util.find_spec("aiter")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        configs = Path(location) / "configs"
        if (configs / f"{TUNED_NAME}.csv").is_file():
            try:
                version = importlib.metadata.version("amd-aiter")
            except importlib.metadata.PackageNotFoundError:
                version = None  # a source checkout on PYTHONPATH: no distribution metadata
            return InstalledAiter(configs, version)
    return None


def installed_aiter_configs() -> Path | None:
    """aiter's configs/ folder when AMD's aiter is installed (found without importing it)."""
    found = installed_aiter()
    return None if found is None else found.configs


def aiter_serves_this_process() -> bool:
    """Whether vLLM in this process would read an installed aiter's tables: a ROCm build of torch with
    AMD's aiter installed. ``import aiter`` is not attempted (on ROCm it JIT-builds HIP modules)."""
    import torch

    return bool(getattr(torch.version, "hip", None)) and installed_aiter() is not None
