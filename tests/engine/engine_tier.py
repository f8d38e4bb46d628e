"""The engine tier's plan and launcher (shared by tests/engine/conftest.py and its tests): see conftest.py."""

from __future__ import annotations

import json
import os
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ENGINE_PY = ROOT / os.environ.get("ENGINE_VENV", ".venv-vllm") / "bin" / "python"
BUILD = ROOT / "build" / "engine"
PLUGIN = ROOT / "tests" / "engine" / "plugin"
RUNNER = ROOT / "tests" / "engine" / "run_vllm.py"
MODEL_SCRIPT = ROOT / "data" / "checkpoints" / "make_tiny_v3_fp8.py"
BACKENDS = ("AMX_MLA", "CPU_MLA")
TP_SIZES = (1, 2)
CLEAN_LAYER, KV_B_GUARD_LAYER, O_PROJ_LAYER = 1, 2, 3
PLANT = f"kv-b-guard:{KV_B_GUARD_LAYER},o-proj-plain-read:{O_PROJ_LAYER}"
LAYERS = (CLEAN_LAYER, KV_B_GUARD_LAYER, O_PROJ_LAYER)
MODEL_LAYERS = (0, 1, 2, 3)  # the tiny model's decoder layers (data/checkpoints/make_tiny_v3_fp8.py)
# Launches run two at a time (a TP2 beside a TP1): engine start-up is mostly single-threaded Python.
CONCURRENT = 1 if os.environ.get("MLA_DEBUG_ENGINE_SERIAL") == "1" else 2
LAUNCH_TIMEOUT_S = 900


def cpu_flags() -> set[str]:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return set()
    for line in text.splitlines():
        if line.startswith("flags"):
            return set(line.split(":", 1)[1].split())
    return set()


def engine_mode() -> tuple[str | None, str]:
    """("native" | "gate" | None, why): how the tier can run on this machine."""
    if not ENGINE_PY.exists():
        return None, f"no engine environment at {ENGINE_PY.parent.parent.name} (run `make engine-env`)"
    flags = cpu_flags()
    if "amx_tile" in flags:
        return "native", "AMX tiles present"
    if os.environ.get("MLA_DEBUG_ENGINE_REQUIRE_AMX") == "1":
        return None, "CPU without AMX tiles (vLLM 0.32's CPU FP8 kernels and AMX_MLA need them; MLA_DEBUG_ENGINE_REQUIRE_AMX=1)"
    if {"avx512f", "avx512_bf16"} <= flags:
        return "gate", "no AMX tiles; AVX512-BF16 present: vLLM's AMX gate opened by the test plugin"
    return None, "CPU without AMX (vLLM 0.32's CPU FP8 kernels and AMX_MLA need AMX tiles, or AVX512-BF16 here)"


def engine_env(mode: str) -> dict[str, str]:
    env = dict(os.environ)
    for name in ("PYTHONHOME", "VIRTUAL_ENV", "MLA_DEBUG_PLANT"):
        env.pop(name, None)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(PLUGIN)])
    if mode == "gate":
        env["MLA_DEBUG_AMX_GATE"] = "1"
    return env


@dataclass(frozen=True)
class Launch:
    """One engine launch of the tier's plan: every launch also scans all decoder layers (md.scan) in the
    forward that records its captures; `decode_layers` are also captured at the first decode step."""

    tp: int
    backend: str
    plant: str = PLANT
    layers: tuple[int, ...] = LAYERS
    decode_layers: tuple[int, ...] = ()

    @property
    def name(self) -> str:
        return f"tp{self.tp}-{self.backend}" + ("" if self.plant else "-clean")


# The planted runs, (TP1, TP2) x (AMX_MLA, CPU_MLA), and one clean run: the baseline a scan of a planted run
# is compared with (and a capture of the planted layer 2 diffed with). One clean TP1 launch fits beside a
# TP2 launch, where the plan had a core idle.
PLANTED = tuple(Launch(tp, backend) for backend in BACKENDS for tp in TP_SIZES)
# The clean run also captures layer 2's first decode step: the engine's KV context, the absorbed path.
CLEAN = Launch(1, "AMX_MLA", plant="", layers=(KV_B_GUARD_LAYER,), decode_layers=(KV_B_GUARD_LAYER,))
LAUNCHES = (*PLANTED, CLEAN)


@dataclass(frozen=True)
class EngineRun:
    """One launch: its folder (layer<L>/ captures, scan/, run.json) and its record."""

    tp: int
    backend: str
    folder: Path
    record: dict

    def layer(self, layer: int) -> Path:
        return self.folder / f"layer{layer}"

    def decode(self, layer: int) -> Path:
        return self.folder / f"decode{layer}"

    @property
    def scan(self) -> Path:
        return self.folder / "scan"


def _launch(mode: str, model: Path, launch: Launch, out: Path, op_checks: Path | None) -> subprocess.Popen:
    command = [str(ENGINE_PY), str(RUNNER), "--model", str(model), "--tp", str(launch.tp), "--backend",
               launch.backend, "--out", str(out), "--layers", *map(str, launch.layers), "--plant", launch.plant, "--scan"]
    if launch.decode_layers:
        command += ["--decode-layers", *map(str, launch.decode_layers)]
    if op_checks is not None:
        command += ["--op-checks", str(op_checks)]
    out.mkdir(parents=True, exist_ok=True)
    log = open(out / "engine.log", "w")
    return subprocess.Popen(command, cwd=ROOT, env=engine_env(mode), stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)


def _stop(process: subprocess.Popen) -> None:
    """End a launch that overran, with every process it started (its own session)."""
    try:
        os.killpg(process.pid, 9)
    except ProcessLookupError:
        pass
    process.wait()


def _next(waiting: list[Launch], running: dict[Launch, tuple]) -> Launch | None:
    """The first waiting launch that may start now: two TP>1 engines side by side on 2 cores spin against
    each other (each rank is bound to one core and busy-waits in the shared-memory all-reduce), so a TP2
    launch runs beside TP1 launches only."""
    if len(running) >= CONCURRENT:
        return None
    busy = any(launch.tp > 1 for launch in running)
    return next((launch for launch in waiting if not (busy and launch.tp > 1)), None)


def run_all(mode: str, root: Path) -> dict:
    model = BUILD / "model"
    if not model.exists():
        subprocess.run([str(ENGINE_PY), str(MODEL_SCRIPT), "--out", str(model)], cwd=ROOT, env=engine_env(mode),
                       check=True, capture_output=True)
    # The TP2 launches first: each takes about twice a TP1's time, and the TP1 launches fill the other core.
    waiting = sorted(LAUNCHES, key=lambda launch: -launch.tp)
    first = Launch(1, BACKENDS[0])
    timings, failures, running, started_all = {}, [], {}, time.perf_counter()
    while waiting or running:
        launch = _next(waiting, running)
        while launch is not None:
            waiting.remove(launch)
            checks = root / "op-checks.safetensors" if launch == first else None
            running[launch] = (_launch(mode, model, launch, root / launch.name, checks), time.perf_counter())
            launch = _next(waiting, running)
        time.sleep(0.5)
        for launch, (process, since) in list(running.items()):
            overran = time.perf_counter() - since > LAUNCH_TIMEOUT_S
            if process.poll() is None and not overran:
                continue
            if process.poll() is None:
                _stop(process)
            del running[launch]
            timings[launch.name] = round(time.perf_counter() - since, 1)
            if process.returncode != 0:
                log = root / launch.name / "engine.log"
                failures.append(f"{launch.name} exited {process.returncode} (log: {log})")
    summary = {"mode": mode, "wall_s": round(time.perf_counter() - started_all, 1), "launch_s": timings, "failures": failures}
    (root / "tier.json").write_text(json.dumps(summary, indent=1) + "\n")
    return summary
