"""The tuned-table merge and the padded-M lookup against aiter's own functions.

- merge: ``aiter/jit/core.py::update_config_files`` (what ``get_config_file`` runs on the main table and
  the model_configs/ tables, or on the env var's files) vs `TunedTable.from_csv`, row for row, on aiter's
  shipped tables, the e4048607 tables shipped in data/aiter, and random tables with colliding keys and tied
  times;
- padded M: aiter's C++ ``getPaddedM`` (compiled here) vs `padded_m` / `padded_m_candidates`.
"""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
from aiter_ref import require_aiter
from hypothesis import given, settings
from hypothesis import strategies as st

import mla_debug as md
from mla_debug.kernels.tuned import padded_m, padded_m_candidates
from mla_debug.kernels.tuned_files import read_csv
from mla_debug.real_aiter import functions

COLUMNS = [
    "gfx",
    "cu_num",
    "M",
    "N",
    "K",
    "libtype",
    "kernelId",
    "splitK",
    "us",
    "kernelName",
    "tflops",
    "bw",
    "errRatio",
]


def row_key(row) -> tuple:
    return (row.gfx, row.cu_num, row.m, row.n, row.k, row.libtype, row.kernel_name, row.us)


def aiter_merge(paths: list[Path], tmp_path: Path) -> list[tuple]:
    merged = functions.merge_tuned_csvs(paths, tmp_path / "merged_by_aiter.csv")
    return sorted(row_key(r) for r in read_csv(merged))


def our_merge(paths: list[Path]) -> list[tuple]:
    return sorted(row_key(r) for r in md.kernels.TunedTable.from_csv(paths).rows())


def test_merge_of_aiters_own_tables_matches(tmp_path):
    """amd-aiter's configs/ main table and model_configs/ tables, in get_config_file's order."""
    install = require_aiter()
    table = md.kernels.TunedTable.from_csv(install.package_dir / "configs")
    assert len(table.files) >= 2
    assert our_merge(table.files) == aiter_merge(table.files, tmp_path)
    assert table.conflicts  # the release's own tables collide on (M, N, K)


def test_merge_of_the_e4048607_tables_matches(aiter_csv_dir, tmp_path):
    require_aiter()
    files = md.kernels.TunedTable.from_csv(aiter_csv_dir).files
    assert our_merge(files) == aiter_merge(files, tmp_path)


def test_one_file_is_not_deduplicated_by_either(aiter_csv_dir, tmp_path):
    require_aiter()
    one = [aiter_csv_dir / "a8w8_blockscale_bpreshuffle_tuned_gemm_dsv3.csv"]
    with open(one[0], newline="") as handle:
        rows = sum(1 for _ in csv.DictReader(handle))
    theirs = aiter_merge(one, tmp_path)
    assert len(theirs) == rows and our_merge(one) == theirs


def _write_table(path: Path, rows: list[dict]) -> Path:
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    return path


ROW = st.fixed_dictionaries(
    {
        "gfx": st.sampled_from(["gfx942", "gfx950"]),
        "cu_num": st.sampled_from([80, 256]),
        "M": st.sampled_from([1, 16, 32, 64]),
        "N": st.sampled_from([512, 2112]),
        "K": st.just(7168),
        # few distinct times, so rows of one key often tie
        "us": st.sampled_from(["3.5", "4.25", "7.0", "10.125"]),
    }
)


@settings(max_examples=25, deadline=None)
@given(files=st.lists(st.lists(ROW, min_size=1, max_size=12), min_size=2, max_size=4))
def test_merge_of_random_colliding_tables_matches(files, tmp_path_factory):
    require_aiter()
    folder = tmp_path_factory.mktemp("tables")
    paths = []
    for i, rows in enumerate(files):
        full = [
            {
                **r,
                "libtype": "ck",
                "kernelId": 0,
                "splitK": 0,
                "kernelName": f"f{i}r{j}",
                "tflops": 0,
                "bw": 0,
                "errRatio": 0,
            }
            for j, r in enumerate(rows)
        ]
        paths.append(_write_table(folder / f"t{i}.csv", full))
    assert our_merge(paths) == aiter_merge(paths, folder)


@settings(max_examples=300, deadline=None)
@given(m=st.integers(1, 70000), n=st.integers(1, 70000), k=st.integers(1, 70000))
def test_padded_m_is_aiters_get_padded_m(m, n, k):
    require_aiter()
    from aiter_padded_m import get_padded_m

    fine, coarse = get_padded_m(m, n, k, 0), get_padded_m(m, n, k, 1)
    assert (padded_m(m, n, 0), padded_m(m, n, 1)) == (fine, coarse)
    expected = list(dict.fromkeys([m, fine, coarse]))  # the bpreshuffle dispatch: exact, gl 0, gl 1
    assert padded_m_candidates(m, n) == expected


@pytest.mark.parametrize("m", [1, 15, 16, 17, 255, 256, 257, 1024, 1025, 4096, 4097, 8192, 8193, 16384, 65536])
@pytest.mark.parametrize("n", [4096, 4097, 7168])
def test_padded_m_at_every_boundary(m, n):
    require_aiter()
    from aiter_padded_m import get_padded_m

    assert padded_m_candidates(m, n) == list(
        dict.fromkeys([m, get_padded_m(m, n, 7168, 0), get_padded_m(m, n, 7168, 1)])
    )


def test_an_installed_aiter_does_not_move_the_default_table():
    """Installing amd-aiter (make test does) used to switch TunedTable.default() to its older tables and
    flip the README's headline verdict; off ROCm its tables are used only when asked for."""
    import torch

    install = require_aiter()
    if getattr(torch.version, "hip", None):
        pytest.skip("on ROCm an installed aiter's tables are the default, as vLLM reads them there")
    assert md.kernels.TunedTable.default({}).origin == md.kernels.TableSource.embedded()
    asked = md.kernels.TunedTable.from_installed_aiter()
    assert asked.origin.aiter_version == install.version
    assert asked.source.startswith(f"installed aiter {install.version}: ")
