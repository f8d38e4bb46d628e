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
class EngineRun:
    """One launch: its folder (layer<L>/ captures, run.json) and its record."""

    tp: int
    backend: str
    folder: Path
    record: dict

    def layer(self, layer: int) -> Path:
        return self.folder / f"layer{layer}"


def _launch(mode: str, model: Path, tp: int, backend: str, out: Path, op_checks: Path | None) -> subprocess.Popen:
    command = [str(ENGINE_PY), str(RUNNER), "--model", str(model), "--tp", str(tp), "--backend", backend,
               "--out", str(out), "--layers", *map(str, LAYERS), "--plant", PLANT]
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


def run_all(mode: str, root: Path) -> dict:
    model = BUILD / "model"
    if not model.exists():
        subprocess.run([str(ENGINE_PY), str(MODEL_SCRIPT), "--out", str(model)], cwd=ROOT, env=engine_env(mode),
                       check=True, capture_output=True)
    # Two TP2 engines side by side on 2 cores spin against each other (each rank is bound to one core and
    # busy-waits in the shared-memory all-reduce): each TP2 launch runs beside one TP1 launch instead.
    pairs = [[(2, backend), (1, backend)] for backend in BACKENDS]
    first = (1, BACKENDS[0])
    timings, failures, started_all = {}, [], time.perf_counter()
    for pair in pairs:
        waiting, running = list(pair), {}
        while waiting or running:
            while waiting and len(running) < CONCURRENT:
                key = waiting.pop(0)
                checks = root / "op-checks.safetensors" if key == first else None
                out = root / f"tp{key[0]}-{key[1]}"
                running[key] = (_launch(mode, model, key[0], key[1], out, checks), time.perf_counter())
            time.sleep(0.5)
            for key, (process, since) in list(running.items()):
                overran = time.perf_counter() - since > LAUNCH_TIMEOUT_S
                if process.poll() is None and not overran:
                    continue
                if process.poll() is None:
                    _stop(process)
                del running[key]
                timings[f"tp{key[0]}-{key[1]}"] = round(time.perf_counter() - since, 1)
                if process.returncode != 0:
                    log = root / f"tp{key[0]}-{key[1]}" / "engine.log"
                    failures.append(f"tp{key[0]} {key[1]} exited {process.returncode} (log: {log})")
    summary = {"mode": mode, "wall_s": round(time.perf_counter() - started_all, 1), "launch_s": timings, "failures": failures}
    (root / "tier.json").write_text(json.dumps(summary, indent=1) + "\n")
    return summary


