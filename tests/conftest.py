"""Shared fixtures: seeded generators, aiter's tuned CSVs shipped in data/aiter/, GPU detection, the
Triton interpreter on CPU-only machines, and a clean process for compiling kernels for a GPU."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest
import torch
from offline_compile import OfflineCompiler

# Triton decides at import time whether its own library functions (tl.cdiv, tl.sum, ...) are compiled or
# interpreted, so on a machine without a CUDA GPU the interpreter must be switched on before anything
# imports triton. The library never picks the interpreter by itself (backend="auto" means the emulation
# or torch on CPU tensors); only tests that ask for backend="triton" run it, on tiny shapes.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

# torch makes its compile cache, <TMPDIR>/torchinductor_<user>, as soon as anything imports torch._dynamo
# (transformers does), and never removes it. The suite's processes - notebook kernels and torchrun ranks
# inherit the variable - use a folder of their own instead, removed when the run ends.
_INDUCTOR_CACHE = None
if "TORCHINDUCTOR_CACHE_DIR" not in os.environ:
    _INDUCTOR_CACHE = tempfile.mkdtemp(prefix="mla-debug-test-inductor-")
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = _INDUCTOR_CACHE


def pytest_unconfigure(config):
    if _INDUCTOR_CACHE is not None:
        shutil.rmtree(_INDUCTOR_CACHE, ignore_errors=True)


REPO = Path(__file__).resolve().parents[1]
# aiter's tuned CSVs (data/README.md names their commit and license).
AITER_CSV_DIR = REPO / "data" / "aiter"


@pytest.fixture
def aiter_csv_dir() -> Path:
    return AITER_CSV_DIR


@pytest.fixture(scope="session")
def offline_compiler():
    """Compiles Triton/Gluon kernels for sm_90a outside this process (tests/offline_compile.py says why)."""
    with OfflineCompiler() as compiler:
        yield compiler


@pytest.fixture
def no_weights(monkeypatch):
    """Building or reading weights fails the test: what it checks must be rejected before that."""
    from mla_debug.model import Checkpoint

    def refuse(*args, **kwargs):
        raise AssertionError("weights were built or read before the options were checked")

    monkeypatch.setattr(Checkpoint, "synthetic", classmethod(refuse))
    monkeypatch.setattr(Checkpoint, "load", classmethod(refuse))


@pytest.fixture
def gen() -> torch.Generator:
    return torch.Generator().manual_seed(1234)


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU; run benchmarks/run_gpu_checks.sh on a GPU machine")
    for item in items:
        # The marker, not the keyword: keywords include folder names, and tests/gpu holds CPU tests too.
        if item.get_closest_marker("gpu") is not None:
            item.add_marker(skip)
