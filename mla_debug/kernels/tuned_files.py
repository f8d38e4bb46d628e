"""Reading aiter's tuned-GEMM CSVs and merging several of them the way aiter does.

Merge rule of amd-aiter 0.1.7.post2.dev18, ``aiter/jit/core.py::update_config_files`` (what
``get_config_file`` runs on the main table plus every ``configs/model_configs/*<name>*.csv``, or on the
files of the env var):

- one file is used as it is (no deduplication at all);
- several files are concatenated in order, sorted by ``us`` (pandas ``sort_values("us")``: numpy's
  quicksort, which is not stable, missing values last) and deduplicated on the columns of aiter's
  *untuned* CSV (``configs/a8w8_blockscale_bpreshuffle_untuned_gemm.csv``: ``M,N,K``), keeping the first,
  i.e. the fastest row per (M, N, K). Those columns hold neither gfx nor cu_num, so a faster row of one
  architecture removes another architecture's row of the same shape;
- without that untuned file aiter keeps every row (``dedup_keys=()`` here).

Newer aiter (ROCm/aiter 024344700d, read for comparison) adds cu_num and gfx to the keys and raises on
duplicates instead; pass ``dedup_keys=("M", "N", "K", "cu_num", "gfx")`` to model that key set.
Reading a CSV checks every row and names file and line on a bad one.
"""

from __future__ import annotations

import csv
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .tuned_source import ENV_VAR, TUNED_NAME

REQUIRED_COLUMNS = ("cu_num", "M", "N", "K")
# The header of aiter's untuned bpreshuffle CSV (amd-aiter 0.1.7.post2.dev18 and ROCm/aiter 188c1af3).
AITER_DEDUP_KEYS: tuple[str, ...] = ("M", "N", "K")
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

    def column(self, name: str) -> object:
        """The value of one of aiter's key columns (gfx, cu_num, M, N, K) for this row."""
        try:
            return {"gfx": self.gfx, "cu_num": self.cu_num, "M": self.m, "N": self.n, "K": self.k}[name]
        except KeyError:
            raise ValueError(f"dedup column {name!r} is not one the tuned table reads (gfx, cu_num, M, N, K)") from None


def path_list(paths: str | os.PathLike | Iterable[str | os.PathLike], who: str) -> list[str]:
    """`paths` one by one, as given: a string may hold several separated by ':' (os.pathsep), as aiter's
    environment variables do. None at all is refused, naming `who`."""
    if isinstance(paths, (str, os.PathLike)):
        items = [p for p in str(paths).split(os.pathsep) if p]
    else:
        items = [str(p) for p in paths]
    if not items:
        raise ValueError(f"{who}: no paths given")
    return items


def expand_paths(paths: str | os.PathLike | Iterable[str | os.PathLike]) -> list[Path]:
    """CSV files from paths (`path_list`): a directory stands for its tuned file plus model_configs/ files
    (untuned files excluded)."""
    files: list[Path] = []
    for item in path_list(paths, "TunedTable.from_csv"):
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


def read_csv(path: Path) -> list[TunedRow]:
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


def speed_order(rows: Sequence[TunedRow]) -> list[int]:
    """Row indices in the order pandas' ``sort_values("us")`` puts them: numpy's (unstable) quicksort of
    the known times, then the rows without a time in their original order."""
    known = [i for i, row in enumerate(rows) if row.us is not None and row.us == row.us]
    unknown = [i for i, row in enumerate(rows) if row.us is None or row.us != row.us]
    times = np.array([rows[i].us for i in known], dtype=np.float64)
    return [known[j] for j in np.argsort(times, kind="quicksort")] + unknown


def merge_files(
    per_file: Sequence[Sequence[TunedRow]], dedup_keys: Sequence[str] = AITER_DEDUP_KEYS
) -> tuple[list[TunedRow], list[tuple[TunedRow, TunedRow]]]:
    """aiter's merge of several files' rows: (the rows kept, [(dropped row, the row kept instead)]).

    One file, or no `dedup_keys`, keeps every row (aiter then does not deduplicate).
    """
    rows = [row for file_rows in per_file for row in file_rows]
    if len(per_file) <= 1 or not dedup_keys:
        return rows, []
    kept: dict[tuple, TunedRow] = {}
    dropped: list[tuple[TunedRow, TunedRow]] = []
    for i in speed_order(rows):
        key = tuple(rows[i].column(name) for name in dedup_keys)
        if key in kept:
            dropped.append((rows[i], kept[key]))
        else:
            kept[key] = rows[i]
    return list(kept.values()), dropped
