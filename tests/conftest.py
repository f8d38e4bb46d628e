"""Shared fixtures: seeded generators, the aiter CSV test data beside the checkout, GPU detection."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[1]
# aiter's tuned CSVs are test data kept beside the checkout (never committed into the project).
AITER_CSV_DIR = REPO.parent / "shared" / "data" / "aiter"


@pytest.fixture
def aiter_csv_dir() -> Path:
    if not AITER_CSV_DIR.is_dir() or not any(AITER_CSV_DIR.glob("*.csv")):
        pytest.skip(f"aiter tuned CSVs not found at {AITER_CSV_DIR} (test data kept beside the checkout)")
    return AITER_CSV_DIR


@pytest.fixture
def gen() -> torch.Generator:
    return torch.Generator().manual_seed(1234)


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU; run benchmarks/run_gpu_checks.sh on a GPU machine")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
