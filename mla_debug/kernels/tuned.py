"""aiter's bpreshuffle tuned-GEMM tables: which (gfx, cu_num, M, N, K) have a tuned kernel.

Sources (`TableSource` names which one a table came from; every report prints it):
1. files given by path (`TunedTable.from_csv`): CSV files or an aiter ``configs/`` folder;
2. the env var ``AITER_CONFIG_GEMM_A8W8_BLOCKSCALE_BPRESHUFFLE`` (``:``-separated CSV paths), read by
   `TunedTable.from_env` exactly as aiter reads it;
3. an installed aiter's ``configs/a8w8_blockscale_bpreshuffle_tuned_gemm.csv`` merged with every
   ``configs/model_configs/*a8w8_blockscale_bpreshuffle_tuned_gemm*.csv`` (untuned files excluded):
   `TunedTable.from_installed_aiter`;
4. `TunedTable.embedded()`: the distinct (N, K) shapes per (gfx, cu_num) at aiter e4048607, without M.

`TunedTable.default()` is the env var when set, an installed aiter where aiter serves this process (ROCm
torch with aiter installed), else the embedded shapes - so installing amd-aiter on a CPU machine (the
cross-checks do) never changes which table a triage consults.

Several files are merged as aiter merges them (`tuned_files`): the fastest row per (M, N, K) is kept and
each dropped row is recorded in ``conflicts``. Duplicates inside one file are not deduplicated by aiter;
there the later row wins (aiter's kernel lookup is built by overwriting earlier entries) and is recorded
too. M lookups follow aiter's ``getPaddedM`` (`padded_m_candidates`).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from .tuned_files import AITER_DEDUP_KEYS, TunedRow, expand_paths, merge_files, read_csv
from .tuned_shapes import embedded_shapes
from .tuned_source import (
    ENV_VAR,
    TUNED_NAME,
    TableOrigin,
    TableSource,
    aiter_serves_this_process,
    installed_aiter,
    installed_aiter_configs,
)

if TYPE_CHECKING:
    from .platforms import Platform

__all__ = [
    "ENV_VAR",
    "TUNED_NAME",
    "TableOrigin",
    "TableSource",
    "TunedRow",
    "TunedTable",
    "installed_aiter_configs",
    "next_pow2",
    "padded_m",
    "padded_m_candidates",
]


def next_pow2(m: int) -> int:
    """aiter's ``nextPow2`` (csrc/py_itfs_cu/gemm_common.cu): 1 for m <= 1, else the smallest power of
    two >= m."""
    return 1 if m <= 1 else 1 << (m - 1).bit_length()


def padded_m(m: int, n: int, granularity: int) -> int:
    """aiter's ``getPaddedM(M, N, K, gl)`` (amd-aiter 0.1.7.post2.dev18, csrc/py_itfs_cu/gemm_common.cu).

    gl 0 (fine): M rounded up to 16 up to 256, to 32 up to 1024, to 64 up to 4096, else to 128.
    gl 1 (coarse): 8192 when M > 8192 and N > 4096 (the largest tuned M), else the next power of two.
    """
    if granularity == 0:
        step = 16 if m <= 256 else 32 if m <= 1024 else 64 if m <= 4096 else 128
        return -(-m // step) * step
    if granularity == 1:
        return 8192 if m > 8192 and n > 4096 else next_pow2(m)
    return m


def padded_m_candidates(m: int, n: int) -> list[int]:
    """The M values aiter's bpreshuffle dispatch looks up for an (M, N, K) call, in order: exact M, then
    ``getPaddedM(M, N, K, 0)``, then ``getPaddedM(M, N, K, 1)``
    (csrc/ck_gemm_a8w8_blockscale_bpreshuffle/gemm_a8w8_blockscale_bpreshuffle.cu, ``blockscale_bpreshuffle_dispatch``)."""
    out: list[int] = []
    for candidate in (m, padded_m(m, n, 0), padded_m(m, n, 1)):
        if candidate not in out:
            out.append(candidate)
    return out


class TunedTable:
    """Rows of aiter's bpreshuffle tuned tables, indexed by (gfx, cu_num, N, K) and then M.

    ``origin`` says where the rows came from (`TableSource`; None for rows built in code), ``source`` is its
    one-line description,
    ``files`` the CSV files read in merge order, ``conflicts`` every (dropped row, row kept instead).
    """

    def __init__(
        self,
        rows: Iterable[TunedRow],
        source: str | TableSource,
        conflicts: list[tuple[TunedRow, TunedRow]] | None = None,
    ):
        # A table built from rows in code has only a description (`origin` None).
        self.origin: TableSource | None = source if isinstance(source, TableSource) else None
        self.source: str = source.describe() if isinstance(source, TableSource) else str(source)
        self.files: list[Path] = [Path(f) for f in source.files] if isinstance(source, TableSource) else []
        self.conflicts = list(conflicts or [])
        self._index: dict[tuple[str, int, int, int], dict[int | None, TunedRow]] = {}
        for row in rows:
            by_m = self._index.setdefault((row.gfx, row.cu_num, row.n, row.k), {})
            if row.m in by_m and by_m[row.m] != row:
                self.conflicts.append((by_m[row.m], row))
            by_m[row.m] = row

    # -- constructors -----------------------------------------------------------------------------
    @classmethod
    def from_csv(
        cls,
        paths: str | os.PathLike | Iterable[str | os.PathLike],
        dedup_keys: Sequence[str] = AITER_DEDUP_KEYS,
        _origin: TableOrigin = TableOrigin.FILES,
        _aiter_version: str | None = None,
    ) -> TunedTable:
        """Read CSV files and merge them as aiter does (`tuned_files`: the fastest row per `dedup_keys`).

        A directory stands for its tuned file plus model_configs/ files; a string may hold several paths
        separated by ':' as aiter's env var does. ``dedup_keys=()`` keeps every row (an aiter without
        its untuned CSV); a later row of the same (gfx, cu_num, M, N, K) then replaces an earlier one.
        """
        files = expand_paths(paths)
        rows, dropped = merge_files([read_csv(path) for path in files], dedup_keys)
        source = TableSource(_origin, tuple(str(f) for f in files), aiter_version=_aiter_version)
        return cls(rows, source, conflicts=dropped)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> TunedTable:
        """The table aiter would use: the env var's files, else an installed aiter's configs."""
        environ = os.environ if environ is None else environ
        value = environ.get(ENV_VAR, "").strip()
        if value:
            return cls.from_csv(value, _origin=TableOrigin.ENV)
        return cls.from_installed_aiter()

    @classmethod
    def from_installed_aiter(cls) -> TunedTable:
        """An installed aiter's own tables (its configs/ folder), merged as aiter merges them."""
        found = installed_aiter()
        if found is None:
            raise LookupError(
                f"no tuned table: {ENV_VAR} is not set and no installed aiter with configs/ was found; "
                "pass TunedTable.from_csv(path) or use TunedTable.embedded()"
            )
        return cls.from_csv(found.configs, _origin=TableOrigin.INSTALLED_AITER, _aiter_version=found.version)

    @classmethod
    def embedded(cls) -> TunedTable:
        """The distinct (N, K) shapes per (gfx, cu_num) at aiter e4048607; rows carry no M."""
        source = TableSource.embedded()
        rows = [
            TunedRow(gfx, cu, None, n, k, source=f"embedded aiter {source.aiter_commit}")
            for (gfx, cu), shapes in embedded_shapes().items()
            for n, k in sorted(shapes)
        ]
        return cls(rows, source)

    @classmethod
    def default(cls, environ: Mapping[str, str] | None = None) -> TunedTable:
        """The env var's files when it is set; an installed aiter's tables where aiter serves this process
        (a ROCm build of torch with aiter installed); else `embedded()`.

        An amd-aiter installed on another machine (a CPU box running the cross-checks) is not picked: its
        tables are an older release's and would change verdicts silently. Ask for them with
        `from_installed_aiter()`.
        """
        environ = os.environ if environ is None else environ
        if environ.get(ENV_VAR, "").strip():
            return cls.from_env(environ)
        if aiter_serves_this_process():
            return cls.from_installed_aiter()
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
        for candidate in padded_m_candidates(m, n):
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
