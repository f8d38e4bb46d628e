"""One torchrun per configuration, shared by the scan and SGLang-dump tests: the tiny DeepSeek-V3 at TP2
and TP4 clean, and at TP4 with kv_b_proj shuffled in layer DEFECT_LAYER only. Each run scans the whole
model, lets SGLang's own dumper (from the released wheel) record layer DEFECT_LAYER's attention, and
md.captures that layer - all in one forward."""

from __future__ import annotations

from pathlib import Path

import engine_wheels
import pytest
import sglang_package
from scan_models import DEFECT_LAYER, TP_SCRIPT, Run, save_tiny_model
from torchrun_launch import run_torchrun


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory) -> Path:
    return save_tiny_model(tmp_path_factory.mktemp("tiny-deepseek-v3-5-layers") / "model")


@pytest.fixture(scope="session")
def sglang_root() -> Path | None:
    """SGLang's released debug_utils, or None when its wheel is not fetched (the scans still run)."""
    if engine_wheels.wheel_path("sglang") is None:
        return None
    return sglang_package.debug_utils_root()


def _run(model_dir: Path, root: Path | None, folder: Path, tp_size: int, defect: bool) -> Run:
    run = Run(folder / "scan", folder / "dump", folder / "capture")
    args = [str(model_dir), str(run.scan), "--dump-layer", str(DEFECT_LAYER), "--capture", str(run.capture)]
    if root is not None:
        args += ["--dump", str(run.dump)]
    if defect:
        args += ["--defect", str(DEFECT_LAYER)]
    run_torchrun(TP_SCRIPT, tp_size, *args, paths=(str(root),) if root else ())
    return run



@pytest.fixture(scope="session")
def tp2(model_dir, sglang_root, tmp_path_factory) -> Run:
    return _run(model_dir, sglang_root, tmp_path_factory.mktemp("tp2"), 2, defect=False)


@pytest.fixture(scope="session")
def tp4(model_dir, sglang_root, tmp_path_factory) -> Run:
    return _run(model_dir, sglang_root, tmp_path_factory.mktemp("tp4"), 4, defect=False)


@pytest.fixture(scope="session")
def tp4_planted(model_dir, sglang_root, tmp_path_factory) -> Run:
    return _run(model_dir, sglang_root, tmp_path_factory.mktemp("tp4-planted"), 4, defect=True)
