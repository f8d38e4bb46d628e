"""aiter's bpreshuffle tuned-GEMM tables: which (gfx, cu_num, M, N, K) have a tuned kernel.

Sources, in aiter's own order of precedence:
1. the env var ``AITER_CONFIG_GEMM_A8W8_BLOCKSCALE_BPRESHUFFLE`` (``:``-separated CSV paths), read by
   `TunedTable.from_env` exactly as aiter reads it;
2. an installed aiter's ``configs/a8w8_blockscale_bpreshuffle_tuned_gemm.csv`` merged with every
   ``configs/model_configs/*a8w8_blockscale_bpreshuffle_tuned_gemm*.csv`` (untuned files excluded);
3. `TunedTable.embedded()`: the distinct (N, K) shapes per (gfx, cu_num) at aiter e4048607, without M.

Merge rule: files are read in order and a later row with the same (gfx, cu_num, M, N, K) replaces an
earlier one; every such replacement is kept in ``conflicts`` so a user can see it.
"""

from __future__ import annotations

import csv
import importlib.util
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from .tuned_shapes import AITER_COMMIT, embedded_shapes

if TYPE_CHECKING:
    from .platforms import Platform

ENV_VAR = "AITER_CONFIG_GEMM_A8W8_BLOCKSCALE_BPRESHUFFLE"
TUNED_NAME = "a8w8_blockscale_bpreshuffle_tuned_gemm"
REQUIRED_COLUMNS = ("cu_num", "M", "N", "K")
# Tables written before aiter added the gfx column are keyed by cu_num alone; aiter infers the arch.
_GFX_FROM_CU = {80: "gfx942", 304: "gfx942", 256: "gfx950"}


@dataclass(frozen=True)
class TunedRow:
    gfx: str
    cu_num: int
    m: int | None
    n: int
    k: int
    libtype: str = ""
    kernel_name: str = ""
    us: float | None = None
    source: str = ""


def padded_m_candidates(m: int) -> list[int]:
    """aiter's lookup order for M: exact, padded (16 up to 256, 32 up to 1024, 64 up to 4096, else
    128), then the next power of two."""
    step = 16 if m <= 256 else 32 if m <= 1024 else 64 if m <= 4096 else 128
    padded = -(-m // step) * step
    power = 1 << max(0, (m - 1).bit_length())
    out: list[int] = []
    for candidate in (m, padded, power):
        if candidate not in out:
            out.append(candidate)
    return out


class TunedTable:
    """Rows of aiter's bpreshuffle tuned tables, indexed by (gfx, cu_num, N, K) and then M."""

    def __init__(self, rows: Iterable[TunedRow], source: str, conflicts: list[tuple[TunedRow, TunedRow]] | None = None):
        self.source = source
        self.files: list[Path] = []
        self.conflicts = list(conflicts or [])
        self._index: dict[tuple[str, int, int, int], dict[int | None, TunedRow]] = {}
        for row in rows:
            by_m = self._index.setdefault((row.gfx, row.cu_num, row.n, row.k), {})
            if row.m in by_m and by_m[row.m] != row:
                self.conflicts.append((by_m[row.m], row))
            by_m[row.m] = row

    # -- constructors -----------------------------------------------------------------------------
    @classmethod
    def from_csv(cls, paths: str | os.PathLike | Iterable[str | os.PathLike]) -> TunedTable:
        """Read and merge CSV files; a directory stands for its tuned file plus model_configs/ files;
        a string may hold several paths separated by ':' as aiter's env var does."""
        files = _expand_paths(paths)
        rows: list[TunedRow] = []
        for path in files:
            rows.extend(_read_csv(path))
        table = cls(rows, source=_describe_files(files))
        table.files = files
        return table

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> TunedTable:
        """The table aiter would use: the env var's files, else an installed aiter's configs."""
        environ = os.environ if environ is None else environ
        value = environ.get(ENV_VAR, "").strip()
        if value:
            return cls.from_csv(value)
        configs = installed_aiter_configs()
        if configs is None:
            raise LookupError(
                f"no tuned table: {ENV_VAR} is not set and no installed aiter with configs/ was found; "
                "pass TunedTable.from_csv(path) or use TunedTable.embedded()"
            )
        return cls.from_csv(configs)

    @classmethod
    def embedded(cls) -> TunedTable:
        """The distinct (N, K) shapes per (gfx, cu_num) at aiter e4048607; rows carry no M."""
        rows = [
            TunedRow(gfx, cu, None, n, k, source=f"embedded aiter {AITER_COMMIT}")
            for (gfx, cu), shapes in embedded_shapes().items()
            for n, k in sorted(shapes)
        ]
        return cls(rows, source=f"embedded shapes of aiter {AITER_COMMIT}")

    @classmethod
    def default(cls, environ: Mapping[str, str] | None = None) -> TunedTable:
        """`from_env()` when it finds a table, else `embedded()`."""
        try:
            return cls.from_env(environ)
        except LookupError:
            return cls.embedded()

    # -- queries ----------------------------------------------------------------------------------
    def __len__(self) -> int:
        return sum(len(by_m) for by_m in self._index.values())

    def __repr__(self) -> str:
        return f"<TunedTable {len(self)} rows, {len(self._index)} shapes from {self.source}>"

    @property
    def has_m(self) -> bool:
        return any(m is not None for by_m in self._index.values() for m in by_m)

    def has(self, platform: Platform | str, n: int, k: int, m: int | None = None) -> bool:
        """Whether (N, K) has a row for the platform's (gfx, cu_num); with `m`, whether aiter's M lookup
        (exact, padded, next power of two) finds one."""
        if m is None:
            return self._key(platform, n, k) in self._index
        return self.lookup(platform, m, n, k) is not None

    def lookup(self, platform: Platform | str, m: int, n: int, k: int) -> TunedRow | None:
        """The row aiter would use for an (M, N, K) call, or None (aiter then runs a default kernel)."""
        by_m = self._index.get(self._key(platform, n, k))
        if not by_m:
            return None
        if None in by_m and len(by_m) == 1:
            raise ValueError(
                f"tuned table from {self.source} holds shapes without M; it answers has(platform, n, k) "
                "but not M lookups - load the CSV files for that"
            )
        for candidate in padded_m_candidates(m):
            if candidate in by_m:
                return by_m[candidate]
        return None

    def shapes(self, gfx: str | None = None, cu_num: int | None = None) -> set[tuple[str, int, int, int]]:
        """Distinct (gfx, cu_num, N, K) keys, optionally for one gfx and/or cu_num."""
        return {key for key in self._index if (gfx is None or key[0] == gfx) and (cu_num is None or key[1] == cu_num)}

    def rows(self) -> list[TunedRow]:
        return [row for by_m in self._index.values() for row in by_m.values()]

    @staticmethod
    def _key(platform: Platform | str, n: int, k: int) -> tuple[str, int, int, int]:
        from .platforms import platform as get_platform

        plat = get_platform(platform)
        return (plat.arch, plat.cu_num, int(n), int(k))


def installed_aiter_configs() -> Path | None:
    """aiter's configs/ folder when AMD's aiter is installed (found without importing it)."""
    try:
        spec = importlib.util.find_spec("aiter")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        configs = Path(location) / "configs"
        if (configs / f"{TUNED_NAME}.csv").is_file():
            return configs
    return None


def _describe_files(files: list[Path]) -> str:
    if len(files) == 1:
        return str(files[0])
    parent = Path(os.path.commonpath([str(f.parent) for f in files]))
    return f"{len(files)} CSV files under {parent}"


def _expand_paths(paths: str | os.PathLike | Iterable[str | os.PathLike]) -> list[Path]:
    if isinstance(paths, (str, os.PathLike)):
        items = [p for p in str(paths).split(os.pathsep) if p]
    else:
        items = [str(p) for p in paths]
    if not items:
        raise ValueError("TunedTable.from_csv: no paths given")
    files: list[Path] = []
    for item in items:
        path = Path(item).expanduser()
        if path.is_dir():
            main = path / f"{TUNED_NAME}.csv"
            found = [main] if main.is_file() else []
            for folder in (path, path / "model_configs"):
                found += sorted(
                    p
                    for p in folder.glob(f"*{TUNED_NAME}*.csv")
                    if p.is_file() and "untuned" not in p.name and p != main
                )
            if not found:
                raise FileNotFoundError(f"TunedTable.from_csv: no *{TUNED_NAME}*.csv files in {path}")
            files += found
        elif path.is_file():
            files.append(path)
        else:
            raise FileNotFoundError(f"TunedTable.from_csv: {path} does not exist (from {ENV_VAR} or an argument)")
    return files


def _read_csv(path: Path) -> list[TunedRow]:
    with open(path, newline="", encoding="utf-8") as handle:
        reader = csv.DictReader(handle)
        columns = [c.strip() for c in (reader.fieldnames or [])]
        missing = [c for c in REQUIRED_COLUMNS if c not in columns]
        if missing:
            raise ValueError(f"{path}: missing columns {missing}; found {columns}")
        rows = []
        for line, record in enumerate(reader, start=2):
            record = {str(key).strip(): (value or "").strip() for key, value in record.items() if key is not None}
            try:
                cu_num = int(record["cu_num"])
                gfx = record.get("gfx") or _GFX_FROM_CU.get(cu_num)
                if not gfx:
                    raise ValueError(f"no gfx column and cu_num {cu_num} does not name an architecture")
                us = record.get("us")
                rows.append(
                    TunedRow(
                        gfx=gfx,
                        cu_num=cu_num,
                        m=int(record["M"]),
                        n=int(record["N"]),
                        k=int(record["K"]),
                        libtype=record.get("libtype", ""),
                        kernel_name=record.get("kernelName", ""),
                        us=float(us) if us else None,
                        source=f"{path.name}:{line}",
                    )
                )
            except ValueError as err:
                raise ValueError(f"{path}:{line}: bad row ({err})") from None
        return rows
